import pytest


@pytest.mark.parametrize("n", range(7))
def test_after(n):
    assert n >= 0
