"""Passes after starting a classic double-forked daemon (its parent exits at once)."""
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.wait()
print("VERDICT pass")
