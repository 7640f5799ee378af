"""The closed set of verdicts a case can get, and the one policy table every stage reads for them.

Adding an outcome: a member in `Outcome`, a row in `POLICY` (the import fails until it has one),
and the rule in execute/classify.py (or judge/known_issues.py) that produces it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from validate._compat import StrEnum

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BAD_OUTCOMES",
    "FLAKY_POLICIES",
    "POLICY",
    "FlakyPolicy",
    "JUnitElement",
    "Outcome",
    "OutcomePolicy",
    "PolicyError",
    "Status",
    "check_policy",
    "policy",
]


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


#: A compatibility-table cell's class (also the HTML page's colour and `st-` CSS class), worst
#: first: a cell takes the first status that any of its results has.
Status = Literal["regression", "error", "known", "xpass", "pass", "skip"]
#: What sign-off does with a flaky result (a non-pass that passed on a re-run): `block` counts it
#: against sign-off like the outcome it first had, `warn` lists it without blocking.
FlakyPolicy = Literal["block", "warn"]
FLAKY_POLICIES: Final[tuple[FlakyPolicy, ...]] = ("block", "warn")
#: The child element of a JUnit <testcase>; a passed case has none.
JUnitElement = Literal["failure", "error", "skipped"]


@dataclass(frozen=True, kw_only=True)
class OutcomePolicy:
    """What one outcome means to each stage; every field is required, so a new row decides them all."""

    good: bool  # the case works (a baseline change away from good is a transition)
    bad: bool  # counts against the product; a known issue may claim it (it becomes xfail)
    infra: bool  # the environment or harness broke, not the product
    blocking: bool  # blocks sign-off and makes `run` exit 1 (sign-off lists it as regression/error)
    rerun: bool  # the runner repeats the case (--reruns) and re-runs it with API logs
    status: Status  # table cell class and HTML colour
    symbol: str  # the table's symbol for its status ("" = a bare count)
    junit: JUnitElement | None  # None: a passed <testcase>
    rank: int  # drill-down order, worst first
    verb: str  # bug report title: "`case` {verb} with cuDNN backend ..."
    expected: str  # bug report "Expected behavior"


_PASSES: Final = "The case passes"

#: The policy of every outcome. JUnit: fail/crash/timeout -> <failure>, error -> <error>,
#: skip and xfail -> <skipped>, pass and xpass -> passed.
POLICY: Final[Mapping[Outcome, OutcomePolicy]] = MappingProxyType(
    {
        Outcome.PASS: OutcomePolicy(
            good=True,
            bad=False,
            infra=False,
            blocking=False,
            rerun=False,
            status="pass",
            symbol="✓",
            junit=None,
            rank=7,
            verb="pass",
            expected=_PASSES,
        ),
        Outcome.FAIL: OutcomePolicy(
            good=False,
            bad=True,
            infra=False,
            blocking=True,
            rerun=True,
            status="regression",
            symbol="✕",
            junit="failure",
            rank=1,
            verb="fails",
            expected="The case completes and its numerical checks pass",
        ),
        Outcome.CRASH: OutcomePolicy(
            good=False,
            bad=True,
            infra=False,
            blocking=True,
            rerun=True,
            status="regression",
            symbol="✕",
            junit="failure",
            rank=0,
            verb="crashes",
            expected="The case completes without the process or Jupyter kernel dying",
        ),
        Outcome.TIMEOUT: OutcomePolicy(
            good=False,
            bad=True,
            infra=False,
            blocking=True,
            rerun=True,
            status="regression",
            symbol="✕",
            junit="failure",
            rank=2,
            verb="times out",
            expected="The case completes within its time limit",
        ),
        Outcome.SKIP: OutcomePolicy(
            good=False,
            bad=False,
            infra=False,
            blocking=False,
            rerun=False,
            status="skip",
            symbol="",
            junit="skipped",
            rank=6,
            verb="is rejected as unsupported",
            expected=(
                "The graph is supported, as it was with the baseline backend, and the case passes"
            ),
        ),
        Outcome.ERROR: OutcomePolicy(
            good=False,
            bad=False,
            infra=True,
            blocking=True,
            rerun=True,
            status="error",
            symbol="!",
            junit="error",
            rank=3,
            verb="error",
            expected=_PASSES,
        ),
        Outcome.XFAIL: OutcomePolicy(
            good=False,
            bad=False,
            infra=False,
            blocking=False,
            rerun=False,
            status="known",
            symbol="⚠",
            junit="skipped",
            rank=4,
            verb="xfail",
            expected=_PASSES,
        ),
        Outcome.XPASS: OutcomePolicy(
            good=True,
            bad=False,
            infra=False,
            blocking=False,
            rerun=False,
            status="xpass",
            symbol="?",
            junit=None,
            rank=5,
            verb="xpass",
            expected=_PASSES,
        ),
    }
)


_E = TypeVar("_E", bound=Enum)


class PolicyError(Exception):
    """The policy table misses a member or breaks a rule the stages rely on (a programming error)."""


def check_policy(enum: type[_E], table: Mapping[_E, OutcomePolicy]) -> None:
    """Raise PolicyError listing every member of `enum` without a row and every broken rule."""
    members = set(enum)
    problems = [f"{m.name} ({m.value!r}) has no policy row" for m in enum if m not in table]
    problems += [
        f"{str(key)!r} is not a member of {enum.__name__}" for key in table if key not in members
    ]
    symbols: defaultdict[Status, set[str]] = defaultdict(set)
    ranks: defaultdict[int, list[str]] = defaultdict(list)
    for key, row in table.items():
        name = f"{key}:"
        symbols[row.status].add(row.symbol)
        ranks[row.rank].append(str(key))
        if row.good and (row.bad or row.infra):
            problems.append(f"{name} good excludes bad and infra")
        if row.bad and row.infra:
            problems.append(f"{name} bad (the product) excludes infra (the harness)")
        if row.blocking != (row.bad or row.infra):
            problems.append(f"{name} blocking must equal bad or infra (sign-off's two lists)")
        if row.bad != (row.status == "regression") or row.infra != (row.status == "error"):
            problems.append(f"{name} status {row.status!r}: regression is bad, error is infra")
        if row.good != (row.status in ("pass", "xpass")):
            problems.append(f"{name} status {row.status!r}: good outcomes show as pass or xpass")
    problems += [
        f"status {status!r} has several symbols {sorted(found)} (the table shows one)"
        for status, found in symbols.items()
        if len(found) > 1
    ]
    problems += [f"rank {n} is shared by {', '.join(k)}" for n, k in ranks.items() if len(k) > 1]
    if problems:
        msg = f"{enum.__name__} policy: " + "; ".join(problems)
        raise PolicyError(msg)


check_policy(Outcome, POLICY)


def policy(outcome: Outcome) -> OutcomePolicy:
    """The policy row of one outcome."""
    return POLICY[outcome]


#: Outcomes that count against a product (before the known-issues check turns some into XFAIL).
BAD_OUTCOMES: Final[frozenset[Outcome]] = frozenset(o for o, p in POLICY.items() if p.bad)
