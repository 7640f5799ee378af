"""Every time limit of a case is derived in execute/limits.py and nowhere else (issue 37: it was
seven places: a 600 s default in three files, the 3x history floor twice, the attempt's grace,
docker's cases x reruns)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "validate"


@pytest.mark.parametrize(
    ("timeout", "finished", "startup", "limit"),
    [
        (600.0, None, False, 600.0),  # nothing on record: --timeout
        (10.0, 2.0, False, 10.0),  # 3x its last run is below --timeout
        (10.0, 4.1, False, 13.0),  # 3x its last run, rounded up
        (10.0, None, True, 60.0),  # a suite's start-up: at least STARTUP_S
        (1000.0, None, True, 3000.0),  # ... else TIMEOUT_FLOOR x --timeout
    ],
)
def test_case_timeout(timeout: float, finished: float | None, startup: bool, limit: float) -> None:
    from validate.execute.limits import case_timeout

    assert case_timeout(timeout, finished, startup=startup) == limit


def test_a_suites_start_up_limit_is_the_flag_else_the_floor() -> None:
    from validate.execute.limits import startup_limit

    assert startup_limit(2.0) == 60.0  # no --tests-startup-timeout: at least STARTUP_S
    assert startup_limit(2.0, None) == 60.0
    assert startup_limit(2.0, 5.0) == 5.0  # --tests-startup-timeout 5
    assert startup_limit(1000.0, 5.0) == 5.0  # the flag wins over 3 x --timeout too


def test_process_and_container_limits() -> None:
    from validate.execute.limits import CONTAINER_GRACE_S, container_limit, process_limit

    assert process_limit(60.0, "notebook") == 90.0  # the kernel's start-up on top
    assert process_limit(60.0, "script") == 60.0
    assert container_limit(60.0, 3, 1) == 60.0 * 3 * 2 + CONTAINER_GRACE_S
    assert container_limit(60.0, 0, 0) == 60.0 + CONTAINER_GRACE_S


def _is_600(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in (600, 600.0)


def _offences(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a module derives a limit itself: reads a kind's `grace_s`, uses the floor or a
    grace of its own, or gives a timeout (or a `default=`) 600 seconds."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "grace_s"
            and isinstance(node.ctx, ast.Load)
        ):
            found.append((node.lineno, "reads grace_s"))
        if isinstance(node, ast.Name) and node.id in {"TIMEOUT_FLOOR", "_GRACE_S", "_STARTUP_S"}:
            found.append((node.lineno, node.id))
        if isinstance(node, ast.AnnAssign | ast.Assign) and _is_600(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("timeout" in ast.unparse(t).lower() for t in targets):
                found.append((node.lineno, "600"))
        if isinstance(node, ast.keyword) and _is_600(node.value):
            name = node.arg or ""
            found += [(node.value.lineno, "600")] if "timeout" in name or name == "default" else []
    return found


def test_no_module_but_limits_derives_a_case_limit() -> None:
    allowed = {PACKAGE / "execute" / "limits.py", PACKAGE / "config.py"}
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed or "resources" in path.parts:
            continue
        for line, what in _offences(ast.parse(path.read_text(encoding="utf-8"))):
            offences.append(f"{path.relative_to(PACKAGE)}:{line}: {what}")
    assert offences == []


def test_the_scan_finds_a_planted_limit() -> None:
    planted = (
        "limit = options.timeout_s + kind.grace_s\nx = took * TIMEOUT_FLOOR\ntimeout_s = 600\n"
    )
    assert sorted(what for _, what in _offences(ast.parse(planted))) == [
        "600",
        "TIMEOUT_FLOOR",
        "reads grace_s",
    ]


@pytest.mark.parametrize(
    ("timeout", "given", "limit"),
    [
        (600.0, None, 3600.0),  # the default --timeout: the one-hour floor
        (1000.0, None, 6000.0),  # 6 x --timeout above it
        (600.0, 90.0, 90.0),  # --cpp-build-timeout wins, below the floor too
        (600.0, 7200.0, 7200.0),
    ],
)
def test_cpp_build_limit(timeout: float, given: float | None, limit: float) -> None:
    from validate.execute.limits import cpp_build_limit

    assert cpp_build_limit(timeout, given) == limit
