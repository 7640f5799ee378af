"""The contention issue's (#25) GPU figures from `bench/gpu_contention.sh` parts loop, m1 and m2.

    python bench/gpu_contention_figures.py OUT_DIR [REFERENCE_RESULTS_DIR]

Reads OUT_DIR/loop/loop.json and OUT_DIR/{m1,m2}/ (validate, resume, smi.csv), and optionally an
earlier whole-matrix run's results folder to compare outcomes with. Prints and writes
OUT_DIR/figures.json and OUT_DIR/figures.md:
- each run's wall time (validate, plus resume where a device call's guard cut it) against 15 x the
  loop over one cell (the loop was run for one cell: that product is an estimate);
- its outcomes, timeouts, flaky verdicts, errors and contention notes (alone re-runs);
- its verdicts on the loop's cell (backend 9.24.0.43, frontend 1.27.0) against the loop's, and
  every timeout or flaky verdict of the run that the loop does not also show;
- the GPU utilization nvidia-smi saw each second while it ran (smi.csv), beside the tool's own
  NVML line;
- outcome agreement with the reference run, per (backend, frontend, case).
A figure whose parts are missing is reported as not measured, never filled in.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

LOOP_CELL = ("9.24.0.43", "1.27.0")


def _rows(folder: Path) -> list[dict[str, Any]]:
    path = folder / "results.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "outcome" in row:
            rows.append(row)
    return rows


def _seconds(path: Path) -> float | None:
    return float(path.read_text()) if path.is_file() else None


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    cell = row.get("cell") or {}
    return str(cell.get("cudnn")), str(cell.get("frontend")), str(row["case"])


def _per_second(path: Path, busy_key: str, busy_pct: float) -> dict[str, float] | None:
    """A share in percent sampled each second, the second column of a CSV (nvidia-smi's
    ``utilization.gpu`` "7 %", or bench/cpu_sample.py's busy share): mean, p95, max, and the
    seconds at or above busy_pct (named busy_key)."""
    if not path.is_file():
        return None
    values = []
    for line in path.read_text().splitlines():
        parts = line.split(",")
        try:
            values.append(float(parts[1].split()[0]))
        except (IndexError, ValueError):
            continue
    if not values:
        return None
    ordered = sorted(values)
    return {
        "seconds": len(values),
        "mean_pct": round(sum(values) / len(values), 1),
        "p95_pct": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "max_pct": ordered[-1],
        busy_key: sum(v >= busy_pct for v in values),
    }


def _smi(path: Path) -> dict[str, float] | None:
    return _per_second(path, "busy_seconds_ge_50pct", 50)


def _cpu(path: Path) -> dict[str, float] | None:
    return _per_second(path, "seconds_ge_90pct", 90)


def _cases_phase_s(run_dir: Path, rows: list[dict[str, Any]]) -> float | None:
    """Seconds from the run's start to the end of its last stored case (the speed stage that
    follows, re-measuring candidates alone, stores no case result)."""
    try:
        started = json.loads((run_dir / "run.json").read_text())["started_at"]
        ends = [
            datetime.fromisoformat(r["started_at"]) + timedelta(seconds=r.get("duration_s") or 0)
            for r in rows
        ]
        return round((max(ends) - datetime.fromisoformat(started)).total_seconds(), 1)
    except (OSError, ValueError, KeyError):
        return None


def _tool_lines(run: Path) -> list[str]:
    lines = []
    for name in ("validate.err", "resume.err"):
        path = run / name
        if path.is_file():
            lines += [
                f"{name}: {line}"
                for line in path.read_text().splitlines()
                if line.startswith(("slots:", "gpu utilization", "gpu ", "cpu "))
            ]
    return lines


def _run_figures(
    run: Path, loop: dict[str, Any] | None, reference: dict[tuple[str, str, str], str]
) -> dict[str, Any]:
    rows = _rows(run / "validate")
    wall = _seconds(run / "validate_wall_s")
    resumed = _seconds(run / "resume_wall_s")
    total = None if wall is None else round(wall + (resumed or 0.0), 1)
    fig: dict[str, Any] = {
        "results": len(rows),
        "cells": len({_key(r)[:2] for r in rows}),
        "wall_s": total,
        "wall_parts_s": {"validate": wall, "resume": resumed},
        "outcomes": dict(Counter(r["outcome"] for r in rows)),
        "timeouts": [list(_key(r)) for r in rows if r["outcome"] == "timeout"],
        "flaky": [
            {"key": list(_key(r)), "attempts": r.get("attempts")} for r in rows if r.get("flaky")
        ],
        "errors": [
            {"key": list(_key(r)), "reason": r["reason"][:200]}
            for r in rows
            if r["outcome"] == "error"
        ],
        "contention": [
            {"key": list(_key(r)), "outcome": r["outcome"], "note": r["contention"]}
            for r in rows
            if r.get("contention")
        ],
        "gpu_utilization_smi": _smi(run / "smi.csv"),
        "cpu_busy": _cpu(run / "cpu.csv"),
        "tool_lines": _tool_lines(run),
    }
    fig["cases_phase_s"] = _cases_phase_s(run / "validate", rows)
    if loop is not None and total is not None:
        estimate = round(loop["total_s"] * fig["cells"], 1)
        fig["loop_estimate_s"] = estimate
        fig["ratio"] = round(total / estimate, 3)
        if fig["cases_phase_s"] is not None:
            fig["cases_phase_ratio"] = round(fig["cases_phase_s"] / estimate, 3)
    if loop is not None:
        mine = {r["case"]: r for r in rows if _key(r)[:2] == LOOP_CELL}
        compare = []
        for nb in loop["rows"]:
            row = mine.get(nb["notebook"])
            loop_ok = nb["rc"] == 0
            tool = None if row is None else row["outcome"]
            compare.append(
                {
                    "notebook": nb["notebook"],
                    "loop": "ok" if loop_ok else "failed",
                    "tool": tool,
                    "agree": tool is not None and (tool == "pass") == loop_ok,
                }
            )
        fig["loop_cell"] = {
            "agree": sum(c["agree"] for c in compare),
            "of": len(compare),
            "disagree": [c for c in compare if not c["agree"]],
        }
    if reference:
        both = [(k, r["outcome"]) for r in rows if (k := _key(r)) in reference]
        same = [k for k, outcome in both if reference[k] == outcome]
        fig["reference"] = {
            "comparable": len(both),
            "same": len(same),
            "differ": [
                {"key": list(k), "reference": reference[k], "now": outcome}
                for k, outcome in both
                if reference[k] != outcome
            ],
        }
    return fig


def _pair(use: dict[str, float] | None) -> str:
    return "not measured" if use is None else f"{use['mean_pct']} % / {use['p95_pct']} %"


def main(out: Path, reference_dir: Path | None) -> int:
    loop_path = out / "loop" / "loop.json"
    loop = json.loads(loop_path.read_text()) if loop_path.is_file() else None
    reference = {_key(r): r["outcome"] for r in _rows(reference_dir)} if reference_dir else {}
    figures: dict[str, Any] = {
        "loop": None
        if loop is None
        else {k: loop[k] for k in ("total_s", "notebooks", "ok", "set_e_would_stop_at")},
        "reference": str(reference_dir) if reference_dir else None,
    }
    loop_cpu = _cpu(out / "loop" / "cpu.csv")
    if loop is not None and loop_cpu is not None:
        cpus = int((out / "loop" / "cpu.csv").read_text().splitlines()[0].split(",")[2])
        cpu_s = loop_cpu["mean_pct"] / 100 * cpus * loop_cpu["seconds"]
        # every cell's loop on every CPU at once: the least wall the matrix's CPU work allows
        figures["loop_cpu_s"] = round(cpu_s, 1)
        figures["cpu_floor_ratio"] = round(cpu_s / cpus / loop["total_s"], 3)
    head = "run|wall|cases phase (ratio)|15 x loop (est.)|ratio|timeouts|flaky|errors|alone re-runs|CPU busy mean/p95"
    md = [f"| {' | '.join(head.split('|'))} | GPU busy mean/p95 |"]
    md.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("m1", "m2"):
        if not (out / name / "validate").is_dir():
            figures[name] = "not measured"
            md.append(f"| {name} | not measured | | | | | | | | | |")
            continue
        fig = _run_figures(out / name, loop, reference)
        figures[name] = fig
        passed_alone = sum(c["outcome"] == "pass" for c in fig["contention"])
        md.append(
            f"| {name} | {fig['wall_s']} s | {fig['cases_phase_s']} s ({fig.get('cases_phase_ratio')})"
            f" | {fig.get('loop_estimate_s', '—')} s |"
            f" {fig.get('ratio', '—')} | {len(fig['timeouts'])} | {len(fig['flaky'])} |"
            f" {len(fig['errors'])} | {len(fig['contention'])} ({passed_alone} passed alone) |"
            f" {_pair(fig['cpu_busy'])} | {_pair(fig['gpu_utilization_smi'])} |"
        )
    (out / "figures.json").write_text(json.dumps(figures, indent=1) + "\n")
    if "cpu_floor_ratio" in figures:
        md.append(
            f"\nloop: {figures['loop_cpu_s']} CPU-s per cell; the CPU floor (every cell's loop CPU"
            f" time spread over every CPU) is {figures['cpu_floor_ratio']} of 15 x the loop"
        )
    (out / "figures.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None))
