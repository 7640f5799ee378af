"""Hangs past its timeout with a setsid child running."""
import subprocess
import sys
import time

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "hang_with_daemon"], start_new_session=True)
time.sleep(600)
