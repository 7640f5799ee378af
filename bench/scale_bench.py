"""Scale: a run of 1,000,000 stored results (40,000 pytest ids x 25 cells, issue #27).

Writes a run folder through the real store (`ResultStore.append_many`, one fsync per batch of a
pytest process), then times, each in its own process where the tool runs one:
  - `python -m validate report` in every format (the CLI, as a subprocess),
  - resume's read (`ResultStore.done_keys`),
  - the merge of two shards (`report --results A --results B`, half the cells each),
  - known-issue matching (`apply_known_issues` with node-id globs) over every result.

The goal (issue #27 item 5): `report` over 1,000,000 results in <= 30 s on the 2-core machine.
Prints figures; asserts none. `--keep DIR` reuses (or keeps) the generated folders.

    python bench/scale_bench.py                 # 40,000 x 25
    python bench/scale_bench.py --tests 4000    # a quick look
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validate.judge.known_issues import apply_known_issues, load_known_issues
from validate.model.matrix import Cell
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, RunKey, iter_results

_BATCH = 500  # tests per pytest process: one fsync each
_SKIPS = [
    "requires cudnn >= 9.25",
    "not supported on sm90",
    "fp8 needs sm100",
    "test needs 2 GPUs",
    "requires torch >= 2.8",
]
_KI_DB = """
[[issue]]
id = "KI-T1"
title = "mha fp8 backward mismatch on one backend"
backend = ">=9.24,<9.25"
cases = ["test/python/test_f01*.py::test_mha*"]
symptom = { outcomes = ["fail"], match = "mismatch" }

[[issue]]
id = "KI-T2"
title = "conv fuzzer crash"
backend = ""
cases = ["test_f002.py::test_case_7[*]"]
symptom = { outcomes = ["crash"] }
"""


def _cells(count: int) -> list[Cell]:
    backends = ["9.20.0.48", "9.21.1.3", "9.22.0.52", "9.23.2.1", "9.24.0.43", "9.25.1.1"]
    combos = [
        Cell(cudnn=b, frontend=f, cuda=c, driver="580", arch=a)
        for b in backends
        for f in ("1.26.0", "1.27.0")
        for c in ("12.9", "13.0")
        for a in ("sm90", "sm100")
    ]
    return combos[:count]


def _tests(count: int) -> list[str]:
    per_file = 200
    out = []
    for i in range(count):
        file, rest = divmod(i, per_file)
        name = "test_mha" if rest < 50 else f"test_case_{rest % 10}"
        out.append(f"test/python/test_f{file:03d}.py::{name}[param-{rest}]")
    return out


def _outcome(rng: random.Random) -> Outcome:
    x = rng.random()
    if x < 0.60:
        return Outcome.SKIP
    if x < 0.985:
        return Outcome.PASS
    if x < 0.993:
        return Outcome.FAIL
    if x < 0.996:
        return Outcome.CRASH
    if x < 0.998:
        return Outcome.ERROR
    if x < 0.999:
        return Outcome.TIMEOUT
    return Outcome.XFAIL


def _result(cell: Cell, test: str, run: Path, rng: random.Random) -> CaseResult:
    outcome = _outcome(rng)
    base: dict[str, Any] = {
        "case": test,
        "outcome": outcome,
        "duration_s": round(rng.random() * 2, 3),
        "cell_id": cell.id,
        "cell": cell.pins(),
        "case_path": test.split("::", 1)[0],
        "started_at": "2026-12-04T11:00:00+00:00",
        "run_id": "scale",
        "content_key": hashlib.sha256(test.encode()).hexdigest()[:16],
    }
    match outcome:
        case Outcome.PASS:
            return CaseResult(**base)
        case Outcome.SKIP:
            return CaseResult(**base, reason=rng.choice(_SKIPS))
    folder = run / "cases" / cell.id / hashlib.sha256(test.encode()).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "output.log"
    log.write_text(f"{test}\nE   AssertionError: mismatch\n", encoding="utf-8")
    tail = "".join(f"E   line {i} of the failure of {test}\n" for i in range(8))
    signal = "SIGSEGV" if outcome is Outcome.CRASH else None
    reason = {
        Outcome.FAIL: "AssertionError: mismatch 3 of 4096",
        Outcome.CRASH: "killed by SIGSEGV",
        Outcome.ERROR: "fixture 'cudnn_handle' failed: RuntimeError",
        Outcome.TIMEOUT: "timed out after 300 s",
        Outcome.XFAIL: "KI-T1 (declared)",
    }[outcome]
    return CaseResult(
        **base, reason=reason, tail=tail, signal=signal, log_path=str(log), attempts=(str(outcome),)
    )


def generate(run: Path, tests: list[str], cells: list[Cell]) -> float:
    """Write len(tests) x len(cells) results through the store, a batch at a time; seconds."""
    rng = random.Random(27)
    started = time.perf_counter()
    store = ResultStore(run / "results.jsonl")
    for cell in cells:
        for at in range(0, len(tests), _BATCH):
            store.append_many(_result(cell, t, run, rng) for t in tests[at : at + _BATCH])
    store.seal()
    return time.perf_counter() - started


def split(run: Path, cells: list[Cell], out: Path) -> tuple[Path, Path]:
    """Two shard folders, each holding the lines of half the cells (lines and key as written)."""
    first_half = {c.id for c in cells[: len(cells) // 2]}
    shards = (out / "shard-a", out / "shard-b")
    files = []
    for shard in shards:
        shard.mkdir(parents=True, exist_ok=True)
        shutil.copy(run / "results.key", shard / "results.key")
        files.append((shard / "results.jsonl").open("wb"))
    with (run / "results.jsonl").open("rb") as src:
        for line in src:
            at = line.index(b'"cell_id":"') + len(b'"cell_id":"')
            cell_id = line[at : line.index(b'"', at)].decode()
            files[0 if cell_id in first_half else 1].write(line)
    for f in files:
        f.close()
    return shards


def _timed_cli(*args: str) -> tuple[float, float, float, int, str]:
    """Wall and CPU seconds of `validate report ARGS`, its peak resident GB (its own, or a
    process it started), its exit code, its stderr's end."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "validate", "report", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this process's own figures, not a running sum
        took = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace").strip()[-300:]
    cpu = usage.ru_utime + usage.ru_stime
    return took, cpu, usage.ru_maxrss / 1e6, proc.returncode, tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=40_000)
    parser.add_argument("--cells", type=int, default=25)
    parser.add_argument("--keep", type=Path, help="folder to generate into (reused when filled)")
    parser.add_argument("--formats", default="md,rst,json,junit,html")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="scale-bench-"))
    run = work / "run"
    tests, cells = _tests(args.tests), _cells(args.cells)
    total = len(tests) * len(cells)
    if not (run / "results.key").is_file():
        took = generate(run, tests, cells)
        print(f"generate: {total:,} results through ResultStore.append_many in {took:.1f} s")
    shards = (
        split(run, cells, work)
        if not (work / "shard-b").is_dir()
        else (
            work / "shard-a",
            work / "shard-b",
        )
    )
    size = (run / "results.jsonl").stat().st_size
    print(f"run folder: {run} ({total:,} results, {size / 1e6:.0f} MB)")

    started = time.perf_counter()
    done = ResultStore(run / "results.jsonl", RunKey.for_run(run)).done_keys()
    print(f"resume read (done_keys): {len(done):,} keys in {time.perf_counter() - started:.1f} s")

    ki_file = work / "known_issues.toml"
    ki_file.write_text(_KI_DB, encoding="utf-8")
    issues = load_known_issues(ki_file)
    results = list(iter_results(run / "results.jsonl"))
    started = time.perf_counter()
    judged = apply_known_issues(results, issues)
    took = time.perf_counter() - started
    xfail = sum(1 for r in judged if r.known_issue)
    print(
        f"known-issue matching: {len(results):,} results x {len(issues)} issues in {took:.1f} s ({xfail:,} matched)"
    )
    del results, judged

    out = work / "out"
    out.mkdir(exist_ok=True)
    for fmt in args.formats.split(","):
        file = out / f"report.{fmt}"
        took, cpu, rss, rc, err = _timed_cli(
            "--results",
            str(run),
            "--format",
            fmt,
            "--out",
            str(file),
            "--known-issues",
            str(ki_file),
        )
        mb = file.stat().st_size / 1e6 if file.is_file() else 0
        note = f" ({err})" if rc not in (0, 1) else ""
        print(
            f"report --format {fmt}: {took:.1f} s wall, {cpu:.1f} s cpu over {total:,} results, "
            f"exit {rc}, {mb:.1f} MB, peak {rss:.2f} GB resident{note}"
        )
    took, cpu, rss, rc, err = _timed_cli(
        "--results",
        str(shards[0]),
        "--results",
        str(shards[1]),
        "--format",
        "json",
        "--out",
        str(out / "merged.json"),
        "--known-issues",
        str(ki_file),
    )
    note = f" ({err})" if rc not in (0, 1) else ""
    print(
        f"merge of two shards (report --results A --results B, json): {took:.1f} s wall, "
        f"{cpu:.1f} s cpu, exit {rc}, peak {rss:.2f} GB resident{note}"
    )
    print(f"goal: report over 1,000,000 results <= 30 s (this run: {total:,})")


if __name__ == "__main__":
    main()
