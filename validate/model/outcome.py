"""The closed set of verdicts a case can get, shared by runner, known-issue check and reports."""

from __future__ import annotations

from validate._compat import StrEnum

__all__ = ["BAD_OUTCOMES", "Outcome"]


class Outcome(StrEnum):
    """What happened to one case in one cell (DOMAIN.md §6)."""

    PASS = "pass"
    FAIL = "fail"  # Python exception, failed assert, wrong numbers
    CRASH = (
        "crash"  # process/kernel died (signal, DeadKernelError) or a context-poisoning CUDA error
    )
    TIMEOUT = "timeout"  # hung and was killed
    SKIP = "skip"  # requirement not met (arch, backend floor, no GPU, graph not supported)
    ERROR = "error"  # harness or environment broke (install, pin not honoured, sub-library)
    XFAIL = "xfail"  # a declared known issue reproduced inside its declared range
    XPASS = "xpass"  # a declared known issue did not reproduce inside its range


#: Outcomes that count against a product (before the known-issues check turns some into XFAIL).
BAD_OUTCOMES: frozenset[Outcome] = frozenset({Outcome.FAIL, Outcome.CRASH, Outcome.TIMEOUT})
