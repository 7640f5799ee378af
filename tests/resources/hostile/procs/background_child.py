"""Passes, leaving a plain background child running."""
import subprocess
import sys

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "background_child"])
print("VERDICT pass")
