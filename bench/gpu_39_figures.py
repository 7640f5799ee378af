"""Issue #39's figures for items 2 and 3 from committed GPU result files (item 1's are
bench/gpu_contention_figures.py's).

    python bench/gpu_39_figures.py REPORT_DIR [--json FILE]

Finds under REPORT_DIR, or in the `<phase>.tgz` archives at its top (any depth; a run's `cases/`, `speed/` and `probes/` are not searched):

Item 2, the L0 suite through the tool beside plain pytest-xdist:
- every tool run folder: a `results.jsonl` (or a `validate.tgz` holding one); its backend(s), its
  outcomes, distinct ids and duplicates, and its wall time: `wall_s` beside the folder (as
  bench/gpu_suite.sh writes it) or a `wall_s N` line in a `run.txt` beside it;
- every pytest side: a `junit.xml` (pytest -n N's own report; outcome per id) with its `wall_s`
  and the backend in its folder's name (`pytest-<backend>`), or a `collect.txt` (`pytest
  --collect-only -q`: ids only), or, in a `pytest-<backend>` folder without either, the
  `pytest.txt` of a run stopped before it wrote its report: its progress marks (one per id, no
  ids) and how long it had run when stopped (pytest.txt's last write after provenance.txt's, the
  files' own times), which bound the ratio from above and no more;
- agreement id by id between each pytest side and the tool run of the same backend and folder
  tree: the same outcome class (pass, skip, fail, error; the tool's crash and timeout count as
  fail, pytest's xfail as skip, xpass as pass), ids on one side only; and the wall-time ratio
  tool / pytest (goal <= 1.0).
Item 3:
- a speed bisect (`bisect.json` with a `unit`): each probed release's unit times over its repeats
  (minimum, median), its ratio of minima to the good end, its verdict, and the boundary;
- alone runs of one notebook (folders `<backend>-r<N>/validate`, bench/gpu_39.sh's backward
  phase): each timed cell's minimum and median per backend, and each backend's ratio of minima to
  the fastest backend's.
A figure whose parts are missing is reported as not measured, never filled in. Asserts nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

SKIP_DIRS = {"cases", "speed", "probes"}
FAIL = {"fail", "crash", "timeout"}


def _parse_lines(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(row, dict) and "outcome" in row and "case" in row:
            rows.append(row)
    return rows


def _walk(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and path.name not in SKIP_DIRS:
            out.append(path)
            out += _walk(path)
    return out


def _tool_runs(root: Path) -> list[tuple[Path, list[dict[str, Any]]]]:
    runs: list[tuple[Path, list[dict[str, Any]]]] = []
    for folder in [root, *_walk(root)]:
        if (folder / "results.jsonl").is_file() and not (folder / "bisect.json").exists():
            text = (folder / "results.jsonl").read_text(encoding="utf-8", errors="replace")
            runs.append((folder, _parse_lines(text)))
        if (folder / "validate.tgz").is_file():
            with tarfile.open(folder / "validate.tgz") as tar:
                member = next(
                    (m for m in tar.getmembers() if m.name.endswith("results.jsonl")), None
                )
                fh = tar.extractfile(member) if member is not None else None
                if fh is not None:
                    text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace").read()
                    runs.append((folder / "validate.tgz", _parse_lines(text)))
    return runs


def _wall(run: Path) -> float | None:
    """bench/gpu_suite.sh's `wall_s` beside the run folder, or `wall_s N` in a run.txt there."""
    for folder in (run.parent, run):
        if (folder / "wall_s").is_file():
            return float((folder / "wall_s").read_text().split()[0])
        if (folder / "run.txt").is_file():
            m = re.search(r"wall_s\s+([0-9.]+)", (folder / "run.txt").read_text())
            if m:
                return float(m.group(1))
    return None


def _backends(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({str((r.get("cell") or {}).get("cudnn", "?")) for r in rows})


def _cls(outcome: str) -> str:
    return "fail" if outcome in FAIL else {"xfail": "skip", "xpass": "pass"}.get(outcome, outcome)


def _junit_id(classname: str, name: str) -> str:
    """pytest's node id back from JUnit's (classname, name): classname is the module path with
    '/' -> '.' and '.py' dropped, then the classes; a collection error has no classname."""
    if not classname:
        return name
    return f"{classname}::{name}"


def _tool_junit_key(case: str) -> str:
    """A tool result's id in the form _junit_id gives: pytest's own mangling of the node id."""
    head, bracket, params = case.partition("[")  # a parameter may hold '::' itself
    parts = head.split("::")
    path = parts[0].removesuffix(".py").replace("/", ".")
    if len(parts) == 1:  # a module that failed to collect
        return path
    return "::".join([".".join([path, *parts[1:-1]]), parts[-1] + bracket + params])


def _head(text: object) -> str:
    """A reason's first 60 characters, one line, without pytest's 'Skipped: ' prefix."""
    line = " ".join(str(text or "").split())
    return line.removeprefix("Skipped: ")[:60]


def _junit(path: Path, why: dict[str, str] | None = None) -> dict[str, str]:
    """Outcome per id; `why` (given): each id's skip, failure or error message, its head."""
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if not case.get("name"):  # an interrupted worker's test in flight: no id, no outcome
            continue
        key = _junit_id(case.get("classname", ""), case.get("name", ""))
        children = {child.tag: child for child in case}
        if "failure" in children:
            got = "fail"
        elif "error" in children:
            got = "error"
        elif "skipped" in children:
            kind = children["skipped"].get("type", "")
            got = "skip" if kind != "pytest.xpass" else "pass"
        else:
            got = "pass"
        # a test with an error in teardown appears twice: keep the worse
        order = ["pass", "skip", "fail", "error"]
        if key not in out or order.index(got) > order.index(out[key]):
            out[key] = got
            if why is not None:
                told = [c.get("message") for c in children.values() if c.get("message")]
                why[key] = _head(told[0] if told else "")
    return out


def _workers(folder: Path) -> int | None:
    """pytest-xdist's worker count, from the `-n N` of provenance.txt's pytest line."""
    prov = folder / "provenance.txt"
    m = (
        re.search(r"^pytest:.* -n (\d+) ", prov.read_text(), re.MULTILINE)
        if prov.is_file()
        else None
    )
    return int(m.group(1)) if m else None


def _rest_estimate(
    left: list[dict[str, Any]], wall_s: float | None, workers: int | None
) -> dict[str, Any] | None:
    """For a pytest side cut short: the tool's own test time of the ids it did not finish (their
    tool results, `left`), spread evenly over its workers, added to the time it ran. An estimate,
    never a measurement: it assumes those ids take in pytest what they took in the tool, and a
    perfect balance."""
    if not wall_s or not workers:
        return None
    left_s = sum(float(r.get("duration_s") or 0.0) for r in left)
    return {"ids": len(left), "test_s": round(left_s, 1), "workers": workers,
            "pytest_s": round(wall_s + left_s / workers, 1)}  # fmt: skip


def _collect_ids(path: Path) -> set[str]:
    return {
        ln.strip() for ln in path.read_text().splitlines() if "::" in ln and " " not in ln.strip()
    }


def _pytest_sides(root: Path) -> list[dict[str, Any]]:
    sides: list[dict[str, Any]] = []
    for folder in [root, *_walk(root)]:
        junit, collect = folder / "junit.xml", folder / "collect.txt"
        if junit.is_file():
            m = re.search(r"(\d+\.\d+\.\d+\.\d+)", folder.name)
            wall = float((folder / "wall_s").read_text()) if (folder / "wall_s").is_file() else None
            log = folder / "pytest.txt"
            # interrupted (gpu_39.sh stop): the JUnit holds only the ids it finished, and its
            # wall time is a lower bound of the whole run's
            cut = log.is_file() and "KeyboardInterrupt" in log.read_text(errors="replace")
            why: dict[str, str] = {}
            sides.append({"folder": folder, "kind": "junit", "backend": m.group(1) if m else None,
                          "outcomes": _junit(junit, why), "why": why, "wall_s": wall,
                          "interrupted": cut, "workers": _workers(folder)})  # fmt: skip
        elif collect.is_file():
            sides.append({"folder": folder, "kind": "collect", "backend": None,
                          "ids": _collect_ids(collect), "wall_s": None})  # fmt: skip
        elif folder.name.startswith("pytest-") and (folder / "pytest.txt").is_file():
            m = re.search(r"(\d+\.\d+\.\d+\.\d+)", folder.name)
            started = folder / "provenance.txt"
            # gpu_suite.sh's last write to provenance.txt comes right before pytest starts; a
            # tar keeps whole seconds, so 1 s less is what the run surely lasted
            ran = (
                round((folder / "pytest.txt").stat().st_mtime - started.stat().st_mtime - 1, 1)
                if started.is_file()
                else None
            )
            sides.append({"folder": folder, "kind": "cut", "backend": m.group(1) if m else None,
                          "marks": _marks((folder / "pytest.txt").read_text(errors="replace")),
                          "ran_s": ran, "wall_s": None})  # fmt: skip
    return sides


#: pytest -q's progress: one mark per finished id, a line of them ended by ` [ NN%]` (the last line
#: of a stopped run has no percentage)
_PROGRESS = re.compile(r"^([.sxXFE]+)(\s+\[\s*\d+%\])?$")
_MARK = {".": "pass", "s": "skip", "x": "skip", "X": "pass", "F": "fail", "E": "error"}


def _marks(text: str) -> dict[str, int]:
    seen: Counter[str] = Counter()
    for line in text.splitlines():
        m = _PROGRESS.match(line.strip())
        if m:
            seen.update(_MARK[c] for c in m.group(1))
    return dict(seen.most_common())


def _ratio(tool_s: float | None, pytest_s: float | None) -> float | None:
    return round(tool_s / pytest_s, 3) if tool_s and pytest_s else None


def item2(root: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for folder, rows in _tool_runs(root):
        if rows and all(str(r["case"]).endswith(".ipynb") for r in rows):
            continue  # a notebook run (item 3's), not a suite's
        ids = [r["case"] for r in rows]
        keys = [(str((r.get("cell") or {}).get("cudnn")), r["case"]) for r in rows]
        runs.append({
            "run": str(folder.relative_to(root)) if folder != root else ".",
            "backends": _backends(rows),
            "results": len(rows),
            "distinct_ids": len(set(ids)),
            "duplicates": len(keys) - len(set(keys)),  # per backend and id
            "outcomes": dict(Counter(r["outcome"] for r in rows).most_common()),
            "wall_s": _wall(folder),
            "_rows": rows,
        })  # fmt: skip
    comparisons = []
    for side in _pytest_sides(root):
        # the tool run of the same backend nearest the pytest side (same parent tree)
        cands = [r for r in runs if side["backend"] is None or r["backends"] == [side["backend"]]]
        cands.sort(
            key=lambda r: (
                not str(root / r["run"]).startswith(str(side["folder"].parent)),
                r["run"],
            )
        )
        if not cands:
            comparisons.append({"pytest": str(side["folder"].relative_to(root)), "tool": None})
            continue
        run = cands[0]
        # each tool result by its JUnit key, computed once per row
        keyed = {_tool_junit_key(r["case"]): r for r in run["_rows"]}
        tool = {k: _cls(r["outcome"]) for k, r in keyed.items()}
        node = {k: r["case"] for k, r in keyed.items()}
        entry: dict[str, Any] = {
            "pytest": str(side["folder"].relative_to(root)) if side["folder"] != root else ".",
            "kind": side["kind"],
            "tool": run["run"],
            "backend": run["backends"],
        }
        if side["kind"] == "cut":
            done = sum(side["marks"].values())
            entry.update(
                pytest_marks=side["marks"],
                pytest_done=done,
                tool_ids=len(tool),
                pytest_ran_s=side["ran_s"],
                tool_wall_s=run["wall_s"],
                # pytest's whole run took at least ran_s, so tool / pytest is at most this
                ratio_at_most=_ratio(run["wall_s"], side["ran_s"]),
            )
        elif side["kind"] == "junit":
            theirs = side["outcomes"]
            both = tool.keys() & theirs.keys()
            differ = sorted(k for k in both if tool[k] != theirs[k])
            left = tool.keys() - theirs.keys()  # the ids only the tool has
            groups = Counter(
                f"{node[k].split('[')[0]}: tool {tool[k]}, pytest {theirs[k]}" for k in differ
            )
            # where one side skipped: why it did (the skip's own words, either side)
            skipped = Counter(
                _head(keyed[k].get("reason")) if tool[k] == "skip" else side["why"].get(k, "")
                for k in differ
                if "skip" in (tool[k], theirs[k])
            )
            entry.update(
                pytest_ids=len(theirs),
                pytest_outcomes=dict(Counter(theirs.values()).most_common()),
                tool_ids=len(tool),
                same_outcome=len(both) - len(differ),
                different_outcome=len(differ),
                differ=[f"{node[k]}: tool {tool[k]}, pytest {theirs[k]}" for k in differ[:20]],
                differ_by_test=dict(groups.most_common()),
                skip_reasons=dict(skipped.most_common()),
                tool_only=sorted(node[k] for k in left)[:20],
                tool_only_count=len(left),
                pytest_only=sorted(theirs.keys() - tool.keys())[:20],
                pytest_only_count=len(theirs.keys() - tool.keys()),
                pytest_wall_s=side["wall_s"],
                tool_wall_s=run["wall_s"],
                interrupted=side["interrupted"],
            )
            if side["interrupted"]:  # pytest's whole run took longer: the ratio is a bound
                entry["ratio_at_most"] = _ratio(run["wall_s"], side["wall_s"])
                rest = _rest_estimate([keyed[k] for k in left], side["wall_s"], side["workers"])
                if rest is not None:
                    rest["ratio"] = _ratio(run["wall_s"], rest["pytest_s"])
                entry["estimate"] = rest
            else:
                entry["ratio_tool_to_pytest"] = _ratio(run["wall_s"], side["wall_s"])
        else:  # ids only
            tool_ids = {str(r["case"]) for r in run["_rows"]}
            collected: set[str] = side["ids"]
            entry.update(
                collected=len(collected),
                tool_ids=len(tool_ids),
                in_both=len(tool_ids & collected),
                tool_only=sorted(tool_ids - collected)[:20],
                tool_only_count=len(tool_ids - collected),
                collected_only=sorted(collected - tool_ids)[:20],
                collected_only_count=len(collected - tool_ids),
            )
        comparisons.append(entry)
    for run in runs:
        del run["_rows"]
    return {"tool_runs": runs, "comparisons": comparisons}


def _units(folder: Path, unit: str) -> list[float]:
    got = []
    for path in sorted(folder.rglob("results.jsonl")):
        if "cases" in path.relative_to(folder).parts:
            continue
        for row in _parse_lines(path.read_text(encoding="utf-8", errors="replace")):
            value = (row.get("units") or {}).get(unit)
            if row["outcome"] == "pass" and value is not None:
                got.append(float(value))
    return got


def _stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "min_s": None, "median_s": None}
    return {"n": len(values), "min_s": round(min(values), 4),
            "median_s": round(statistics.median(values), 4), "all_s": values}  # fmt: skip


def _slug(text: str) -> str:  # validate/cli/bisect.py's
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "bisect"


def item3_bisect(root: Path) -> list[dict[str, Any]]:
    out = []
    for state_path in sorted(root.rglob("bisect.json")):
        state = json.loads(state_path.read_text())
        unit = state.get("unit")
        folder = state_path.parent
        result = state.get("result") or {}
        probes = {p["candidate"]: p for p in state.get("probes", [])}
        good = state.get("good")
        rows = []
        good_min = None
        if unit and good:
            good_min = _stats(_units(folder / "probes" / _slug(good), unit))["min_s"]
        for cand in state.get("candidates", []):
            probe = probes.get(cand)
            st = _stats(_units(folder / "probes" / _slug(cand), unit)) if unit else {}
            obs = (probe or {}).get("observations") or [{}]
            rows.append({
                "release": cand,
                "probed": probe is not None,
                "verdict": (probe or {}).get("verdict"),
                "outcome": obs[0].get("outcome"),
                "reason": obs[0].get("reason"),
                **st,
                "ratio_min_to_good": (
                    round(st["min_s"] / good_min, 2) if st.get("min_s") and good_min else None
                ),
            })  # fmt: skip
        out.append({
            "bisect": str(state_path.relative_to(root)),
            "case": state.get("case"), "unit": unit, "slower_than": state.get("slower_than"),
            "slower_min_s": state.get("slower_min_s"), "speed_repeats": state.get("speed_repeats"),
            "good": good, "bad": state.get("bad"),
            "last_good": result.get("last_good"), "first_bad": result.get("first_bad"),
            "unresolved": result.get("unresolved"), "finished": bool(result),
            "releases": rows,
        })  # fmt: skip
    return out


def item3_alone(root: Path) -> list[dict[str, Any]]:
    """Folders `<backend>-r<N>/validate` of one notebook run alone, grouped by their parent."""
    groups: dict[Path, dict[str, list[Path]]] = {}
    for folder in _walk(root):
        m = re.fullmatch(r"(\d+\.\d+\.\d+\.\d+)-r\d+", folder.name)
        if m and (folder / "validate" / "results.jsonl").is_file():
            groups.setdefault(folder.parent, {}).setdefault(m.group(1), []).append(folder)
    out = []
    for parent, by_backend in sorted(groups.items()):
        per: dict[str, dict[str, list[float]]] = {}
        cases = set()
        for backend, folders in by_backend.items():
            for folder in folders:
                text = (folder / "validate" / "results.jsonl").read_text()
                for row in _parse_lines(text):
                    cases.add(row["case"])
                    if row["outcome"] != "pass":
                        continue
                    units = {**(row.get("units") or {}), "whole case": row.get("duration_s")}
                    for unit, value in units.items():
                        if value is not None:
                            per.setdefault(unit, {}).setdefault(backend, []).append(float(value))
        units_out = {}
        for unit, by in per.items():
            stats = {b: _stats(v) for b, v in sorted(by.items())}
            fastest = min((s["min_s"] for s in stats.values() if s["min_s"]), default=None)
            for s in stats.values():
                s["ratio_min_to_fastest"] = (
                    round(s["min_s"] / fastest, 2) if s["min_s"] and fastest else None
                )
            units_out[unit] = stats
        out.append({"folder": str(parent.relative_to(root)), "cases": sorted(cases),
                    "runs": {b: len(f) for b, f in sorted(by_backend.items())},
                    "units": units_out})  # fmt: skip
    return out


def _print(fig: dict[str, Any]) -> None:
    print("## item 2: the L0 suite through the tool, beside pytest")
    for run in fig["item2"]["tool_runs"]:
        wall = f"{run['wall_s']} s" if run["wall_s"] is not None else "wall not measured"
        print(f"- tool run {run['run']}: backend {', '.join(run['backends'])}, {run['results']} "
              f"results, {run['distinct_ids']} ids, {run['duplicates']} duplicates, {wall}; "
              f"{run['outcomes']}")  # fmt: skip
    for c in fig["item2"]["comparisons"]:
        if c.get("tool") is None:
            print(f"- pytest {c['pytest']}: no tool run of its backend found")
        elif c["kind"] == "cut":
            share = f"{100 * c['pytest_done'] / c['tool_ids']:.1f} %" if c["tool_ids"] else "?"
            print(f"- pytest {c['pytest']} against tool {c['tool']} ({', '.join(c['backend'])}): "
                  f"STOPPED before its report: {c['pytest_done']} progress marks ({share} of the "
                  f"tool's {c['tool_ids']} ids) {c['pytest_marks']} after {c['pytest_ran_s']} s; "
                  "no ids, so no agreement id by id")  # fmt: skip
            bound = c["ratio_at_most"]
            print(f"  wall: tool {c['tool_wall_s']} s, pytest more than {c['pytest_ran_s']} s; "
                  f"ratio tool / pytest not measured, at most {bound if bound else '?'} "
                  "(goal <= 1.0)")  # fmt: skip
        elif c["kind"] == "junit":
            cut = c.get("interrupted", False)
            note = "INTERRUPTED, its JUnit holds the ids it finished: " if cut else ""
            print(f"- pytest {c['pytest']} against tool {c['tool']} ({', '.join(c['backend'])}): "
                  f"{note}{c['same_outcome']} ids agree, {c['different_outcome']} differ, "
                  f"{c['tool_only_count']} tool only, {c['pytest_only_count']} pytest only; "
                  f"pytest {c['pytest_outcomes']}")  # fmt: skip
            for what, count in list(c.get("differ_by_test", {}).items())[:8]:
                print(f"    differ, by test: {count} {what}")
            for why, count in list(c.get("skip_reasons", {}).items())[:8]:
                print(f"    where one side skipped, its reason: {count} {why}")
            for line in c["differ"]:
                print(f"    differs: {line}")
            for key in c["tool_only"][:5]:
                print(f"    tool only: {key}")
            for key in c["pytest_only"][:5]:
                print(f"    pytest only: {key}")
            if cut:
                bound = c["ratio_at_most"]
                print(f"  wall: tool {c['tool_wall_s']} s, pytest more than {c['pytest_wall_s']} s; "
                      f"ratio tool / pytest not measured, at most {bound if bound else '?'} "
                      "(goal <= 1.0)")  # fmt: skip
                rest = c.get("estimate")
                if rest:
                    print(f"  estimate, not a measurement: the {rest['ids']} ids pytest did not "
                          f"finish took {rest['test_s']} s of test time in the tool; spread over "
                          f"its {rest['workers']} workers, pytest about {rest['pytest_s']} s, tool "
                          f"/ pytest about {rest['ratio'] or '? (no tool wall time)'}")  # fmt: skip
            else:
                ratio = c["ratio_tool_to_pytest"]
                print(f"  wall: tool {c['tool_wall_s']} s, pytest {c['pytest_wall_s']} s; ratio tool"
                      f" / pytest {ratio if ratio is not None else 'not measured'} (goal <= 1.0)")  # fmt: skip
        else:
            print(f"- collect.txt {c['pytest']} against tool {c['tool']}: {c['collected']} "
                  f"collected, {c['tool_ids']} tool ids, {c['in_both']} in both, "
                  f"{c['tool_only_count']} tool only {c['tool_only'][:3]}, "
                  f"{c['collected_only_count']} collected only; no outcomes, no wall time")  # fmt: skip
    print("## item 3: the speed bisect")
    if not fig["item3"]["bisects"]:
        print("- no bisect.json: not measured")
    for b in fig["item3"]["bisects"]:
        state = "finished" if b["finished"] else "NOT finished"
        print(f"- {b['bisect']}: {b['case']} {b['unit']}, --slower-than {b['slower_than']} "
              f"(and {b['slower_min_s']} s), {b['speed_repeats']} repeats alone per probe; {state}: "
              f"last good {b['last_good']}, first bad {b['first_bad']}"
              f"{', unresolved ' + str(b['unresolved']) if b['unresolved'] else ''}")  # fmt: skip
        for r in b["releases"]:
            if not r["probed"]:
                print(f"    {r['release']}: not probed")
                continue
            print(f"    {r['release']}: {r['verdict']} ({r['outcome']}), min {r['min_s']} s, "
                  f"median {r['median_s']} s over {r['n']}, {r['ratio_min_to_good']}x the good "
                  "end's minimum")  # fmt: skip
    print("## item 3: notebooks re-measured alone")
    if not fig["item3"]["alone"]:
        print("- no <backend>-r<N> folders: not measured")
    for a in fig["item3"]["alone"]:
        print(f"- {a['folder']}: {', '.join(a['cases'])}; runs {a['runs']}")
        for unit, stats in sorted(
            a["units"].items(), key=lambda kv: (kv[0] != "whole case", kv[0])
        ):
            if unit != "whole case" and max((s["min_s"] or 0) for s in stats.values()) < 1.0:
                continue  # cells under a second on every backend: noise beside the finding
            parts = [f"{b} min {s['min_s']} / median {s['median_s']} s ({s['ratio_min_to_fastest']}x)"
                     for b, s in stats.items()]  # fmt: skip
            print(f"    {unit}: " + "; ".join(parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    root = args.report.resolve()
    if not root.is_dir():
        print(f"{args.report}: no such folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as unpacked:
        # bench/gpu_39.sh packs a phase as REPORT_DIR/<phase>.tgz: read them as folders
        for packed in sorted(root.glob("*.tgz")):
            with tarfile.open(packed) as tar:
                tar.extractall(unpacked, filter="data")
        where = Path(unpacked) if any(root.glob("*.tgz")) else root
        fig = {
            "item2": item2(where),
            "item3": {"bisects": item3_bisect(where), "alone": item3_alone(where)},
        }
    _print(fig)
    if args.json is not None:
        args.json.write_text(json.dumps(fig, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
