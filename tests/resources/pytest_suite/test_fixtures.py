"""Setup and teardown failures are `error`, not `fail`."""


def test_setup_error(broken_setup):
    assert broken_setup


def test_teardown_error(broken_teardown):
    assert broken_teardown == 1


def test_plain_failure():
    assert 1 + 1 == 3, "arithmetic is broken"
