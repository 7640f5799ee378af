"""os._exit(3) is outside the contract: error."""
import os

os._exit(3)
