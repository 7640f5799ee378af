"""os.abort(): crash with SIGABRT."""
import os

os.abort()
