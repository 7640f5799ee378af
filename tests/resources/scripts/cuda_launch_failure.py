"""A context-poisoning CUDA error raised as a Python exception: crash."""
raise RuntimeError("CUDA error: unspecified launch failure")
