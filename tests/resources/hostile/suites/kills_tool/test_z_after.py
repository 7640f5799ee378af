import pytest


@pytest.mark.parametrize("n", range(6))
def test_after(n):
    assert n >= 0
