"""Issue #39 item 4's figures from a committed report folder (bench/gpu_cpp.sh's cpp.tgz):
the tool's C++ results against the built `samples` binary run directly, TEST_CASE by TEST_CASE,
and the wall-time ratios.

    python bench/gpu_cpp_figures.py reports/gpu/<folder>

The tool names a result `FILE::NAME` (FILE: the TEST_CASE's source, relative to the project); the
binary's JUnit names it NAME. Outcomes are compared as pass / fail / skip: the tool's `crash`,
`timeout` and `error` count as not passed, like JUnit's <failure> and <error>. Exit 2 where the
folder lacks what it needs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def _tool(results: Path) -> dict[str, tuple[str, str]]:
    """TEST_CASE name -> (outcome class, the tool's outcome) of the run's C++ results."""
    found: dict[str, tuple[str, str]] = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        case = str(row.get("case", ""))
        if "::" not in case or not case.split("::", 1)[0].endswith((".cpp", ".cu", ".cc")):
            continue  # the run's shipped cases (pin check, repro), not a TEST_CASE
        outcome = str(row["outcome"])
        klass = "pass" if outcome == "pass" else "skip" if outcome == "skip" else "fail"
        found[case.split("::", 1)[1]] = (klass, outcome)
    return found


def _junit(path: Path) -> dict[str, str]:
    """TEST_CASE name -> pass / fail / skip, from Catch2's JUnit reporter."""
    found: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            found[name] = "fail"
        elif case.find("skipped") is not None:
            found[name] = "skip"
        else:
            found.setdefault(name, "pass")
    return found


def _wall(folder: Path) -> float:
    return float((folder / "wall_s").read_text(encoding="utf-8").strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    archive = args.folder / "cpp.tgz"
    if not archive.is_file():
        print(f"gpu_cpp_figures: {archive}: no such file", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        w = Path(tmp)
        needed = [w / "warm/run/results.jsonl", w / "direct/junit.xml"]
        if missing := [str(p.relative_to(w)) for p in needed if not p.is_file()]:
            print(f"gpu_cpp_figures: {archive} lacks {', '.join(missing)}", file=sys.stderr)
            return 2
        tool = _tool(w / "warm/run/results.jsonl")
        direct = _junit(w / "direct/junit.xml")
        names = sorted(set(tool) | set(direct))
        agree = [n for n in names if n in tool and n in direct and tool[n][0] == direct[n]]
        print(
            f"TEST_CASEs: tool {len(tool)}, binary {len(direct)}, both {len(set(tool) & set(direct))}"
        )
        print(f"tool outcomes: {dict(Counter(o for _, o in tool.values()))}")
        print(f"binary outcomes: {dict(Counter(direct.values()))}")
        print(f"agree (pass/fail/skip): {len(agree)} of {len(names)}")
        for n in names:
            if n not in agree:
                print(
                    f"  differ: {n!r}: tool {tool.get(n, ('-', '-'))[1]}, binary {direct.get(n, '-')}"
                )
        walls = {
            s: _wall(w / s) for s in ("cold", "warm", "direct") if (w / s / "wall_s").is_file()
        }
        if "direct" not in walls:  # the driver's timeout ended its wrapper before it wrote wall_s
            suite = ET.parse(w / "direct/junit.xml").getroot().find("testsuite")
            walls["direct"] = float(suite.get("time", "nan")) if suite is not None else float("nan")
            print(
                "direct: no wall_s; the binary's own JUnit time is used (its start-up not counted)"
            )
        print("wall s: " + ", ".join(f"{s} {v}" for s, v in walls.items()))
        if "warm" in walls:
            print(f"warm tool / direct binary: {walls['warm'] / walls['direct']:.2f}x")
        if "cold" in walls:
            print(
                f"cold tool (build included) / direct binary: {walls['cold'] / walls['direct']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
