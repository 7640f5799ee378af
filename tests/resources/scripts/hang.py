"""Sleeps far past any timeout, in a child too: the whole group must die."""
import subprocess
import sys
import time

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
time.sleep(3600)
