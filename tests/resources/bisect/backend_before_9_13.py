"""Bisect test case over backends: passes with a cuDNN backend older than 9.13, fails from 9.13
on (no GPU needed: backend_version() only reads the loaded library)."""

import cudnn

version = cudnn.backend_version()
verdict = "pass" if version < 91300 else "fail"
print(f"VERDICT {verdict}: backend {version}")
