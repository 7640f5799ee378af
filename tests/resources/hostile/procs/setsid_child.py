"""Fails after starting a child in a session of its own (it escapes the process group)."""
import subprocess
import sys

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "setsid_child"], start_new_session=True)
sys.exit(1)
