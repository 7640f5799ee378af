"""Every time limit of a case, derived here and nowhere else.

- `--timeout` (default DEFAULT_TIMEOUT_S, config.py) is the case's limit;
- a case the duration history knows never gets less than TIMEOUT_FLOOR times the duration of
  its last run that ended on its own (`case_timeout`; a timed-out run's duration is its limit,
  not its need);
- its process gets its kind's start-up grace on top (`process_limit`: a notebook's kernel
  start);
- a pytest suite's start-up (imports and the collection of the whole selection) gets
  TIMEOUT_FLOOR times `--timeout`, at least STARTUP_S (`case_timeout(startup=True)`): a per-test
  limit says nothing about how long 40,000 ids take to collect, and a hung collection still ends
  at a limit the user set (1,800 s at the default); `--tests-startup-timeout S` overrides it
  (`startup_limit`);
- a docker cell's container gets every case's limit, times its attempts, plus CONTAINER_GRACE_S
  (`container_limit`).
"""

from __future__ import annotations

import math
from typing import Final

from validate.config import DEFAULT_TIMEOUT_S
from validate.execute.cases.kinds import KINDS

__all__ = [
    "CONTAINER_GRACE_S",
    "DEFAULT_TIMEOUT_S",
    "STARTUP_S",
    "TIMEOUT_FLOOR",
    "case_timeout",
    "container_limit",
    "process_limit",
    "startup_limit",
]

#: A case with a recorded duration never gets a timeout below this multiple of it (`--timeout`).
TIMEOUT_FLOOR: Final = 3.0
#: A pytest suite's start-up (its imports and collection) gets at least this long.
STARTUP_S: Final = 60.0
#: Container start and the runner's own start-up, on top of the cases.
CONTAINER_GRACE_S: Final = 300.0


def case_timeout(timeout_s: float, finished_s: float | None, *, startup: bool = False) -> float:
    """The case's (or the test's) limit: `timeout_s` (--timeout), raised to TIMEOUT_FLOOR times
    `finished_s` (its last run that ended on its own; None: none on record). `startup`: a
    suite's start-up, TIMEOUT_FLOOR times `timeout_s`, at least STARTUP_S."""
    if startup:
        return max(timeout_s * TIMEOUT_FLOOR, STARTUP_S)
    if finished_s is not None and finished_s * TIMEOUT_FLOOR > timeout_s:
        return float(math.ceil(finished_s * TIMEOUT_FLOOR))
    return timeout_s


def startup_limit(timeout_s: float, given_s: float | None = None) -> float:
    """A pytest suite's start-up limit: `given_s` (--tests-startup-timeout) where given, else
    `case_timeout(timeout_s, None, startup=True)`."""
    return given_s if given_s is not None else case_timeout(timeout_s, None, startup=True)


def process_limit(timeout_s: float, kind: str) -> float:
    """The wall limit of a case's process: its timeout plus its kind's start-up grace."""
    return timeout_s + KINDS[kind].grace_s


def container_limit(timeout_s: float, cases: int, reruns: int) -> float:
    """The wall limit of a docker cell's container: each case's limit for each of its attempts,
    one after another, plus the container's start-up."""
    return timeout_s * max(1, cases) * (reruns + 1) + CONTAINER_GRACE_S


# --- a C++ build (--cpp): one cell's configure and compile, not a case -------------------------

#: A C++ build's limit: CPP_BUILD_FACTOR times --timeout, at least CPP_BUILD_FLOOR_S (the
#: frontend's samples are about 70 sources built with -Werror: minutes on a few cores, far more
#: on a crowded host), so a hung configure or compiler still ends at a limit the user set;
#: `--cpp-build-timeout S` overrides both.
CPP_BUILD_FLOOR_S: Final = 3600.0
CPP_BUILD_FACTOR: Final = 6.0


def cpp_build_limit(timeout_s: float, given_s: float | None = None) -> float:
    """The wall limit of one cell's C++ build (configure and compile together): `given_s`
    (--cpp-build-timeout) where given, else max(CPP_BUILD_FLOOR_S, CPP_BUILD_FACTOR x
    `timeout_s` (--timeout))."""
    if given_s is not None:
        return float(given_s)
    return max(CPP_BUILD_FLOOR_S, CPP_BUILD_FACTOR * timeout_s)


__all__ += ["CPP_BUILD_FACTOR", "CPP_BUILD_FLOOR_S", "cpp_build_limit"]
