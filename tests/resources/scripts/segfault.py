"""NULL read: crash with SIGSEGV."""
import ctypes

ctypes.string_at(0)
