"""The CUDA errors that poison a process's context, in one place. Stdlib only.

After one of these every later CUDA call in the process fails (DOMAIN.md §6): the case is a
`crash`, and a long-lived test process must be replaced before its next test. Read by
execute/classify.py and by the pytest plugin (run_pytest.py, which loads it
by its path inside the suite's environment).
"""

from __future__ import annotations

import re

__all__ = ["POISON"]

#: A line naming a context-poisoning CUDA error (runtime, driver and printed-number forms).
POISON = re.compile(
    r"illegal memory access|unspecified launch failure|misaligned address"
    r"|cudaErrorIllegalAddress|cudaErrorLaunchFailure|cudaErrorMisalignedAddress"
    r"|CUDA_ERROR_ILLEGAL_ADDRESS|CUDA_ERROR_LAUNCH_FAILED|CUDA_ERROR_MISALIGNED_ADDRESS"
    r"|CUDA error:? ?\(?(?:700|719|716)\b",
    re.IGNORECASE,
)
