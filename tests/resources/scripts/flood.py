"""100 MB on stdout: must land on disk, only a tail in the result."""
import sys

line = "y" * 1023 + "\n"
for _ in range(100 * 1024):
    sys.stdout.write(line)
print("flood done")
