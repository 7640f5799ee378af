"""Crashes (SIGABRT) with a setsid child still running."""
import os
import subprocess
import sys

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "crash_with_daemon"], start_new_session=True)
os.abort()
