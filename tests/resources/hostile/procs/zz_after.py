"""Runs after the hostile ones: it must still get its verdict."""
print("VERDICT pass")
