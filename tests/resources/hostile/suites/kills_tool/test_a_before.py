import pytest


@pytest.mark.parametrize("n", range(6))
def test_before(n):
    assert n >= 0
