"""A module that fails to collect: one `error` naming it; the rest of the suite runs."""

import synthetic_suite_module_that_does_not_exist  # noqa: F401


def test_never_collected():
    assert True
