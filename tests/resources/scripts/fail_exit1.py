"""Exit 1 without an exception: fail."""
import sys

print("numbers off by 3%")
sys.exit(1)
