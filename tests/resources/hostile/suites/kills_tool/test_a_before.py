import pytest


@pytest.mark.parametrize("n", range(5))
def test_before(n):
    assert n >= 0
