"""Kills its parent process, then says it passed: neither may end the run or fake a verdict."""
import os
import signal
import time

os.kill(os.getppid(), signal.SIGKILL)
time.sleep(1)
print("VERDICT pass")
