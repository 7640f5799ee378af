"""Issue #39 item 4's figures from a committed report folder (bench/gpu_cpp.sh's cpp.tgz):
the tool's C++ results against the built binaries run directly, TEST_CASE by TEST_CASE, per cell
and target, and the wall-time ratios.

    python bench/gpu_cpp_figures.py reports/gpu/<folder>

The tool names a result `FILE::NAME` (FILE: the TEST_CASE's source, relative to the project) and
records the binary it ran (`case_path`); the binary's JUnit names it NAME. Outcomes are compared
as pass / fail / skip: the tool's `xpass` (a known issue's test that passed) counts as a pass, its
`xfail`, `crash`, `timeout` and `error` as not passed, like JUnit's <failure> and <error>.
Two layouts: direct/CELL/TARGET/{junit.xml,wall_s,rc} (every cell and target), and the first
run's direct/junit.xml (one binary, `samples`, of the run's only cell). Since stop 48 the binary
also writes Catch2's XML reporter to stream.xml beside its JUnit: Catch2 writes the JUnit only when
the run ends, the XML as each TEST_CASE ends, so a binary that its `timeout` ended still gives
the agreement of the TEST_CASEs it finished (and no ratio). A whole run's JUnit also leaves out
each TEST_CASE that made no assertion and wrote no output (Catch2 3.3.2's JUnit reporter writes a
<testcase> only for a section with one of them: the frontend's two causal_conv1d samples when they
pass, 2026-12-08); those are taken from stream.xml, and the script says so. Exit 2 where the folder
lacks what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

Key = tuple[str, str]  # (cell's cudnn, target)
#: what Catch2 reports for the TEST_CASE that was running when the binary got SIGTERM (its fatal
#: signal handler, catch_fatal_condition_handler.cpp): `timeout` sends it, the handler marks that
#: TEST_CASE failed and then writes both reports whole. Such a TEST_CASE did not fail by itself:
#: its class is `sigterm`, compared with nothing.
SIGTERM = "SIGTERM - Termination request signal"


def _tool(results: Path) -> dict[Key, dict[str, tuple[str, str]]]:
    """(cell, target) -> TEST_CASE name -> (outcome class, the tool's outcome)."""
    found: dict[Key, dict[str, tuple[str, str]]] = {}
    for line in results.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        case = str(row.get("case", ""))
        if "::" not in case or not case.split("::", 1)[0].endswith((".cpp", ".cu", ".cc")):
            continue  # the run's shipped cases (pin check, repro), not a TEST_CASE
        outcome = str(row["outcome"])
        klass = "pass" if outcome in ("pass", "xpass") else "skip" if outcome == "skip" else "fail"
        key = (str(row["cell"]["cudnn"]), Path(str(row.get("case_path", "samples"))).name)
        found.setdefault(key, {})[case.split("::", 1)[1]] = (klass, outcome)
    return found


def _junit(path: Path) -> dict[str, str]:
    """TEST_CASE name -> pass / fail / skip / sigterm, from Catch2's JUnit reporter."""
    found: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        bad = [*case.iter("failure"), *case.iter("error")]
        if any(SIGTERM in (e.text or "") for e in bad):
            found[name] = "sigterm"
        elif bad:
            found[name] = "fail"
        elif case.find("skipped") is not None:
            found[name] = "skip"
        else:
            found.setdefault(name, "pass")
    return found


def _stream(path: Path) -> tuple[dict[str, str], str | None]:
    """TEST_CASE name -> pass / fail / skip for each TEST_CASE that Catch2's XML reporter closed,
    and the one it had opened and not closed (None: none). The reporter writes and flushes each
    element as it goes, so a binary that was ended leaves a prefix of the document."""
    parser: ET.XMLPullParser[ET.Element] = ET.XMLPullParser(events=("start", "end"))
    found: dict[str, str] = {}
    running: str | None = None
    with contextlib.suppress(ET.ParseError):  # bytes that are not XML: the events before stand
        parser.feed(path.read_bytes())  # (a prefix is not an error: the parser waits for more)
    for item in parser.read_events():  # ("start" | "end", the element)
        event, elem = item[0], item[-1]
        if not isinstance(elem, ET.Element) or elem.tag != "TestCase":
            continue
        name = elem.get("name", "")
        if event == "start":
            running = name
            continue
        running = None
        result = elem.find("OverallResult")
        if any(SIGTERM in (e.text or "") for e in elem.iter("FatalErrorCondition")):
            found[name] = "sigterm"
        elif result is None or result.get("success") != "true":
            found[name] = "fail"
        elif result.get("skips", "0") != "0":
            found[name] = "skip"
        else:
            found[name] = "pass"
    return found, running


def _agreement(tool: dict[str, tuple[str, str]], direct: dict[str, str], cut: bool) -> None:
    """Each TEST_CASE the binary reported against the tool's. Where the binary was ended early
    (cut), the tool's TEST_CASEs it never reached are counted, not compared; where it ran to its
    end, a TEST_CASE only one side has differs."""
    for n in sorted(n for n, klass in direct.items() if klass == "sigterm"):
        print(f"  {n!r} was running when the binary got SIGTERM (Catch2's error): not compared")
    names = sorted(n for n, klass in direct.items() if klass != "sigterm")
    if not cut:
        names = sorted(set(names) | set(tool))
    agree = [n for n in names if n in tool and n in direct and tool[n][0] == direct[n]]
    print(f"  tool outcomes: {dict(sorted(Counter(o for _, o in tool.values()).items()))}")
    print(f"  binary outcomes: {dict(sorted(Counter(direct.values()).items()))}")
    print(f"  agree (pass/fail/skip): {len(agree)} of {len(names)}")
    for n in names:
        if n not in agree:
            print(
                f"    differ: {n!r}: tool {tool.get(n, ('-', '-'))[1]}, binary {direct.get(n, '-')}"
            )
    if cut and (lacking := set(tool) - set(direct)):
        print(f"  not reached by the binary: {len(lacking)} of the tool's TEST_CASEs")


def _partial(tool: dict[str, tuple[str, str]], stream: Path) -> None:
    """The agreement of the TEST_CASEs a binary finished before it was ended (its stream.xml)."""
    done, running = _stream(stream)
    now = f"; {running!r} had started" if running is not None else ""
    print(f"  its streamed XML: {len(done)} TEST_CASEs finished{now}")
    _agreement(tool, done, cut=True)


def _read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8").strip() if path.is_file() else None


def _directs(w: Path, tool: dict[Key, dict[str, tuple[str, str]]]) -> dict[Key, Path]:
    if (w / "direct/junit.xml").is_file():  # the first run's layout: one binary, one cell
        cells = sorted({cell for cell, _ in tool})
        return {(cells[0], "samples"): w / "direct"} if len(cells) == 1 else {}
    return {(d.parent.name, d.name): d for d in sorted((w / "direct").glob("*/*")) if d.is_dir()}


def _compare(key: Key, tool: dict[str, tuple[str, str]], folder: Path) -> float | None:
    """Print one binary's agreement; return its wall seconds (None: not known)."""
    cell, target = key
    junit = folder / "junit.xml"
    wall = _read(folder / "wall_s")
    rc = _read(folder / "rc")
    print(f"\n== {cell} {target}: binary rc {rc if rc is not None else '?'}, wall {wall} s")
    stream = folder / "stream.xml"
    if not junit.is_file():
        print("  the binary wrote no JUnit (it died before its run ended)")
        if stream.is_file():
            _partial(tool, stream)
        return None
    try:
        direct = _junit(junit)
    except ET.ParseError as exc:  # Catch2 writes its JUnit at the end: a binary ended early leaves
        # only the header (stop 47: `timeout 45` ended `samples` after its XML declaration)
        why = " (rc 124: its `timeout` ended it)" if rc == "124" else ""
        print(f"  the binary's JUnit is incomplete{why}: {exc}")
        if stream.is_file():
            _partial(tool, stream)
        return None
    if stream.is_file():  # JUnit leaves out what its XML stream has: say so, and use the stream
        done, _ = _stream(stream)
        if left := sorted(set(done) - set(direct)):
            print(
                f"  its JUnit left out {len(left)} TEST_CASEs that its streamed XML reports"
                " (Catch2's JUnit reporter writes a <testcase> only for a section with an assertion"
                " or output); taken from the stream: " + ", ".join(map(repr, left))
            )
            direct.update({n: done[n] for n in left})
    print(
        f"  TEST_CASEs: tool {len(tool)}, binary {len(direct)}, both {len(set(tool) & set(direct))}"
    )
    cut = rc == "124" or "sigterm" in direct.values()  # its `timeout` (SIGTERM) ended it
    _agreement(tool, direct, cut)
    if cut:
        print("  the binary was ended early: its wall time is not the run's")
        return None
    if set(tool) - set(direct):
        print(f"  the binary ran {len(set(tool) - set(direct))} fewer TEST_CASEs than the tool")
        return None
    if wall is None:  # the first run: the driver's timeout ended the wrapper before it wrote wall_s
        suite = ET.parse(junit).getroot().find("testsuite")
        print("  no wall_s: the binary's own JUnit time is used (its start-up not counted)")
        return float(suite.get("time", "nan")) if suite is not None else None
    return float(wall)


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
        runs = [s for s in ("warm", "cold") if (w / s / "run/results.jsonl").is_file()]
        if not runs:
            print(f"gpu_cpp_figures: {archive} holds no tool results", file=sys.stderr)
            return 2
        print(f"tool results compared: {runs[0]} run")
        tool = _tool(w / runs[0] / "run/results.jsonl")
        directs = _directs(w, tool)
        if not directs:
            print(f"gpu_cpp_figures: {archive} holds no direct run", file=sys.stderr)
            return 2
        walls = {key: _compare(key, tool.get(key, {}), folder) for key, folder in directs.items()}
        missing = sorted(set(tool) - set(directs))
        print()
        for key in missing:
            print(f"not run directly: {key[0]} {key[1]} ({len(tool[key])} TEST_CASEs)")
        steps = {s: _read(w / s / "wall_s") for s in ("cold", "warm")}
        print("tool wall s: " + ", ".join(f"{s} {v}" for s, v in steps.items() if v))
        known = [v for v in walls.values() if v is not None]
        if missing or len(known) < len(walls):
            print("no ratio: not every cell and target the tool ran has a whole direct run")
            return 0
        total = sum(known)
        print(f"direct binaries, one after another: {total:.1f} s")
        for step, value in steps.items():
            if value:
                print(f"{step} tool / direct binaries: {float(value) / total:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
