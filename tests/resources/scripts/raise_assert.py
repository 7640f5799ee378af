"""An uncaught AssertionError: fail with the exception kept."""
assert 2 + 2 == 5, "wrong numbers"
