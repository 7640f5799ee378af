"""2,000 quick parametrized tests."""

import pytest


@pytest.mark.quick
@pytest.mark.parametrize("n", range(2000))
def test_quick(n):
    assert n * n >= 0
