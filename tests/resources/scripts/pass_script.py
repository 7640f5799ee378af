"""Exit 0: pass."""
import sys

print("argv0 is", sys.argv[0])
print(__name__)
