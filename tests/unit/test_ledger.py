"""The ledger: each GPU booked on its own, the host's CPUs booked by each case's CPU share and
each case pinned to the CPU ids its share was given.

This host has no GPU: the topology is declared at the NVML boundary (plan/host.py
DECLARED_GPUS_ENV, read where NVML would be) and is the only fake here. The cases are real
scripts run through the real CLI (`run`, and `validate --env current`); each writes the
CUDA_VISIBLE_DEVICES it was started with and when it ran, so the test reads the placement and
the overlap from what the processes saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from usercli import cli

# CPU demand and pinning measured on the host's CPUs: run by itself (noxfile.py's ALONE step)
pytestmark = pytest.mark.alone

#: 4 GPUs of different free memory; a case without a recorded peak holds 4 GiB of its GPU.
FOUR = "sm90:16384,sm90:8192,sm90:4096,sm90:4096"
HOLDS = {"0": 4, "1": 2, "2": 1, "3": 1}  # cases of 4 GiB each GPU can hold at once
VALIDATE = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
VALIDATE += ["--arch", "sm90", "--env", "current", "--no-api-logs", "--timeout", "60"]

#: Writes what it saw: the GPUs it was placed on, and when it started and ended.
SEEN = textwrap.dedent(
    """\
    import json, os, pathlib, time
    start = time.time()
    SPIN
    time.sleep(SLEEP)
    print("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
    out = pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem
    out.write_text(json.dumps({
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "start": start,
        "end": time.time(),
    }))
    """
)
_SPIN = "t = time.time() + SECONDS\nwhile time.time() < t: pass"


def _cases(folder: Path, n: int, *, sleep: float = 1.5, spin: float = 0.0) -> Path:
    folder.mkdir(parents=True)
    (folder / "seen").mkdir()
    body = SEEN.replace("SLEEP", str(sleep))
    body = body.replace("SPIN", _SPIN.replace("SECONDS", str(spin)) if spin else "")
    for i in range(n):
        (folder / f"case{i:02d}.py").write_text(body)
    return folder


def _cli(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix ARGV` started in `cwd`, without the caller's CUDA_VISIBLE_DEVICES."""
    full = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    full.update(env or {})
    return cli(*argv, cwd=cwd, env=full, timeout=300)


def _seen(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((folder / "seen").iterdir())]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans that overlap at one time."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_a_declared_four_gpu_topology_spreads_cases_and_books_no_gpu_beyond_its_memory(
    tmp_path: Path,
) -> None:
    cases = _cases(tmp_path / "cases", 12)
    proc = _cli(
        "run", str(cases), "--jobs", "12", "--results", str(tmp_path / "run"),
        env={"CUDNN_MATRIX_DECLARED_GPUS": FOUR}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # the start line: each GPU's budget, and the CPUs'
    start = next(line for line in proc.stderr.splitlines() if "slots:" in line)
    for text in ("gpu 0: 16.0 GiB free", "gpu 1: 8.0 GiB free", "gpu 3: 4.0 GiB free", "cpu: "):
        assert text in start, start
    seen = _seen(cases)
    assert len(seen) == 12
    by_gpu: dict[str, list[tuple[float, float]]] = {}
    for s in seen:
        by_gpu.setdefault(str(s["gpus"]), []).append((float(s["start"]), float(s["end"])))  # type: ignore[arg-type]
    assert set(by_gpu) == {"0", "1", "2", "3"}, by_gpu.keys()  # one GPU each, all four used
    for gpu, spans in by_gpu.items():  # never more 4 GiB cases at once than its memory holds
        assert _most_at_once(spans) <= HOLDS[gpu], (gpu, spans)
    # what the case's own log shows: the one GPU it was booked on
    logs = sorted((tmp_path / "run" / "cases").rglob("output.log"))
    assert {log.read_text().strip().splitlines()[-1] for log in logs} == {
        f"CUDA_VISIBLE_DEVICES={g}" for g in "0123"
    }


def test_gpus_chooses_the_devices_validate_books(tmp_path: Path) -> None:
    cases = _cases(tmp_path / "cases", 6, sleep=0.5)
    proc = _cli(
        "validate", *VALIDATE, "--cases", str(cases), "--gpus", "1,3", "--jobs", "6",
        "--results", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache"),
        env={"CUDNN_MATRIX_DECLARED_GPUS": FOUR}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # the pins are not installed here: `error`
    assert {s["gpus"] for s in _seen(cases)} == {"1", "3"}
    start = next(line for line in proc.stderr.splitlines() if "slots:" in line)
    assert "gpu 1: 8.0 GiB free" in start
    assert "gpu 0:" not in start


def test_the_callers_cuda_visible_devices_are_the_gpus_booked(tmp_path: Path) -> None:
    """A Slurm task or CI job that was given GPUs 2 and 3 books those, each on its own."""
    cases = _cases(tmp_path / "cases", 4, sleep=0.5)
    proc = _cli(
        "run", str(cases), "--jobs", "4", "--results", str(tmp_path / "run"),
        env={"CUDNN_MATRIX_DECLARED_GPUS": FOUR, "CUDA_VISIBLE_DEVICES": "2,3"}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {s["gpus"] for s in _seen(cases)} == {"2", "3"}


@pytest.mark.parametrize(
    ("gpus", "topology", "shown"),
    [
        ("1,7", FOUR, "no GPU 7 on this host (it has 4: 0-3)"),
        ("0", "", "this host has no GPU"),
    ],
)
def test_gpus_naming_a_gpu_the_host_lacks_is_one_line_exit_2(
    gpus: str, topology: str, shown: str, tmp_path: Path
) -> None:
    (tmp_path / "c.py").write_text("print('hi')\n")
    proc = _cli(
        "run", str(tmp_path / "c.py"), "--gpus", gpus, "--results", str(tmp_path / "run"),
        env={"CUDNN_MATRIX_DECLARED_GPUS": topology}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert shown in proc.stderr


def _crowd_spans(
    where: Path, seeded: dict[str, Any], env: dict[str, str]
) -> tuple[list[tuple[float, float]], str]:
    """Three cases of 1 s under `validate --jobs 3` with the history `seeded` (and `env`): when
    each ran, and the start line."""
    crowd = _cases(where, 3, sleep=1.0)
    cache = where.parent / f"{where.name}-cache"
    cache.mkdir()
    (cache / "durations.json").write_text(json.dumps(seeded))
    proc = _cli(
        "validate", *VALIDATE, "--cases", str(crowd), "--jobs", "3",
        "--results", str(where.parent / f"{where.name}-run"),
        "--cache-dir", str(cache), env=env, cwd=where.parent,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    start = next(line for line in proc.stderr.splitlines() if "slots:" in line)
    spans = [(float(s["start"]), float(s["end"])) for s in _seen(crowd)]  # type: ignore[arg-type]
    assert len(spans) == 3
    return spans, start


def test_cpu_shares_are_recorded_and_hold_cases_to_the_cpus(tmp_path: Path) -> None:
    """A run records each case's CPU share (CPU seconds per wall second of its tree): a case
    that keeps a core busy near 1, one that sleeps near 0. Shares on record that fill every CPU
    hold those cases to one at a time, where the slots alone run them together (as they do
    with the CPU ledger off)."""
    first = tmp_path / "first"
    first.mkdir()
    (first / "seen").mkdir()
    (first / "spin.py").write_text(
        SEEN.replace("SPIN", _SPIN.replace("SECONDS", "2.5")).replace("SLEEP", "0")
    )
    (first / "nap.py").write_text(SEEN.replace("SPIN", "").replace("SLEEP", "2.5"))
    cache = tmp_path / "cache"
    proc = _cli(
        "validate", *VALIDATE, "--cases", str(first), "--jobs", "1",
        "--results", str(tmp_path / "first-run"), "--cache-dir", str(cache), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    shares = json.loads((cache / "durations.json").read_text())["#cpu_share"]
    assert shares["spin.py"] > 0.7, shares  # also where other work shares the CPUs
    assert shares["nap.py"] < 0.2, shares

    from validate.execute.ledger import host_cpus

    seeded = {"#cpu_share": {f"case{i:02d}.py": float(host_cpus()) for i in range(3)}}
    spans = {
        name: _crowd_spans(tmp_path / name, seeded, env)[0]
        for name, env in (("booked", {}), ("unbooked", {"CUDNN_MATRIX_CPU_LEDGER": "0"}))
    }
    assert _most_at_once(spans["booked"]) == 1, spans  # each holds every CPU: one at a time
    assert _most_at_once(spans["unbooked"]) > 1, spans  # the slots alone: together


def test_each_gpu_is_booked_on_its_own() -> None:
    from validate.execute.ledger import GpuBudget, Ledger, Need

    ledger = Ledger(
        16,
        gpus=[GpuBudget(index=i, free_mib=mib) for i, mib in enumerate((8192, 4096, 2048))],
    )
    bookings = []
    while (got := ledger.book(Need(gpu_mib=2048, gpu_load=0.1))) is not None:
        bookings.append(got)
    placed = [b.placement.gpus or () for b in bookings]
    assert sorted(placed) == [(0,)] * 4 + [(1,)] * 2 + [(2,)]  # 8, 4 and 2 GiB: 4, 2 and 1
    assert placed[:3] == [(0,), (1,), (2,)]  # spread first: the fewest jobs, then most memory
    for index, mib, _load, _jobs in ledger.booked():
        assert index is not None
        assert mib <= (8192, 4096, 2048)[index]
    # the busy share is booked per GPU too: 1.0 a GPU
    loaded = Ledger(4, gpus=[GpuBudget(index=0), GpuBudget(index=1)])
    first, second = loaded.book(Need(gpu_load=0.7)), loaded.book(Need(gpu_load=0.7))
    assert first is not None
    assert second is not None
    assert {first.placement.gpus, second.placement.gpus} == {(0,), (1,)}
    assert loaded.book(Need(gpu_load=0.7)) is None
    loaded.release(first)
    assert loaded.book(Need(gpu_load=0.7)) is not None


def test_exclusive_holds_everything_and_a_case_larger_than_any_gpu_runs_on_the_largest() -> None:
    from validate.execute.ledger import GpuBudget, Ledger, Need

    ledger = Ledger(4, gpus=[GpuBudget(index=0, free_mib=4096), GpuBudget(index=5, free_mib=8192)])
    big = ledger.book(Need(gpu_mib=50_000))
    assert big is not None
    assert big.placement.gpus == (5,)
    assert ledger.book(Need(gpu_mib=50_000)) is None  # the largest GPU is its own
    ledger.release(big)
    other = ledger.book(Need(gpu_mib=1024))
    assert other is not None
    assert ledger.book(Need(exclusive=True)) is None  # something runs
    ledger.release(other)
    alone = ledger.book(Need(exclusive=True))
    assert alone is not None
    assert alone.placement.gpus == (0, 5)
    assert ledger.book(Need()) is None
    ledger.release(alone)
    assert ledger.book(Need()) is not None


def test_cpu_shares_stay_within_the_cpus() -> None:
    from validate.execute.ledger import Ledger, Need

    ledger = Ledger(4, cpus=2.0, default_cpu=0.3)
    held = [ledger.book(Need(cpu=0.9)), ledger.book(Need(cpu=0.9))]
    assert all(held)
    assert ledger.book(Need(cpu=0.9)) is None  # 2.7 of 2 CPUs
    assert ledger.book(Need()) is None  # the default share, 0.3: 2.1 of 2
    tiny = ledger.book(Need(cpu=0.1))
    assert tiny is not None
    greedy = Ledger(8, cpus=2.0)
    assert greedy.default_cpu == pytest.approx(0.25)  # no history: the CPUs over the slots
    assert greedy.book(Need(cpu=16.0)) is not None  # more than every CPU: when all are free
    assert greedy.book(Need(cpu=0.01)) is None


def test_a_share_just_above_a_whole_number_holds_that_number() -> None:
    """Measurement noise above a whole share (1.008: a case pinned to 1 CPU and its helper
    thread's run-queue wait) must not serialize cases that fit, nor pin to one CPU more; a
    share clearly above (1.2) still holds and pins in full."""
    from validate.execute.ledger import Ledger, Need, near_whole

    assert near_whole(1.008) == 1.0
    assert near_whole(2.09) == 2.0
    assert near_whole(1.2) == pytest.approx(1.2)
    assert near_whole(0.98) == pytest.approx(0.98)
    assert near_whole(0.3) == pytest.approx(0.3)
    node = Ledger(2, cpus=2.0, cpu_ids=(0, 1))
    noisy = node.book(Need(cpu=1.008))
    assert noisy is not None
    assert noisy.cpu == 1.0
    assert noisy.placement.cpus == frozenset({0})
    unknown = node.book(Need())  # the Slurm test's hang.py: no figure, the even share 1.0
    assert unknown is not None  # both run at once
    busy = Ledger(2, cpus=2.0, cpu_ids=(0, 1))
    wide = busy.book(Need(cpu=1.2))
    assert wide is not None
    assert wide.placement.cpus == frozenset({0, 1})
    assert busy.book(Need()) is None  # 2.2 of 2 CPUs: waits
    assert Ledger(4, cpus=16.0, default_cpu=2.04).default_cpu == 2.0  # the median too


def test_jobs_without_a_figure_hold_at_most_the_even_share() -> None:
    """A median on record above the CPUs over the slots (1.01 on 2 CPUs, 2 slots: a busy case
    and its run-queue wait) must not run the slots' unknown jobs one at a time."""
    from validate.execute.ledger import Ledger, Need

    ledger = Ledger(2, cpus=2.0, default_cpu=1.01)
    assert ledger.default_cpu == pytest.approx(1.0)
    assert ledger.book(Need()) is not None
    assert ledger.book(Need()) is not None  # both unknown jobs run together
    small = Ledger(4, cpus=2.0, default_cpu=0.2)
    assert small.default_cpu == pytest.approx(0.2)  # below the even share: the median holds
    roomy = Ledger(8, cpus=16.0, default_cpu=1.8)
    assert roomy.default_cpu == pytest.approx(1.8)  # 2 CPUs a slot: a threaded median holds too


def test_a_suites_shares_run_on_the_gpus_they_were_booked_on(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "seen").mkdir(parents=True)
    body = textwrap.dedent(
        """\
        import os, pathlib

        def test_NAME():
            seen = pathlib.Path(__file__).parent / "seen" / "NAME"
            seen.write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))
        """
    )
    for name in ("a", "b", "c", "d"):
        (suite / f"test_{name}.py").write_text(body.replace("NAME", name))
    proc = _cli(
        "run", "--tests", str(suite), "--jobs", "2", "--results", str(tmp_path / "run"),
        env={"CUDNN_MATRIX_DECLARED_GPUS": FOUR}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    seen = {p.name: p.read_text() for p in (suite / "seen").iterdir()}
    assert set(seen) == {"a", "b", "c", "d"}
    assert set(seen.values()) <= {"0", "1", "2", "3"}, seen  # one booked GPU each share


def test_a_case_that_needs_its_gpu_alone_holds_one_gpu_not_the_host() -> None:
    from validate.execute.ledger import GpuBudget, Ledger, Need

    ledger = Ledger(8, gpus=[GpuBudget(index=i, free_mib=8192) for i in range(3)])
    busy = ledger.book(Need(gpu_mib=1024, gpu_load=0.1))
    assert busy is not None
    assert busy.placement.gpus == (0,)
    alone = ledger.book(Need(gpu_mib=1024, gpu_exclusive=True))
    assert alone is not None
    assert alone.placement.gpus == (1,)  # an empty GPU, not the busy one
    nobody = Need(slots=1)  # no memory, no load: fits anywhere but the held GPU
    placed = [ledger.book(nobody) for _ in range(4)]
    assert all(b is not None and b.placement.gpus != (1,) for b in placed)
    ledger.release(alone)
    after = ledger.book(Need(gpu_mib=1024, gpu_load=0.1))
    assert after is not None
    assert after.placement.gpus == (1,)  # given back
    # without GPUs, a case that wants its GPU alone runs alone
    host = Ledger(4)
    first = host.book(Need(gpu_exclusive=True))
    assert first is not None
    assert first.exclusive
    assert host.book(Need()) is None


def test_a_placed_case_is_judged_by_its_own_gpus_utilization() -> None:
    """On 4 GPUs, one saturated: the case on it saw a saturated GPU, the case on an idle one did
    not (the mean of the four, 0.27, hid both). The readings are declared (this host has no
    NVML); the cases are real processes, attributed by their sessions."""
    from validate.execute.usage import UsageSampler

    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    hot = subprocess.Popen(sleep, start_new_session=True)
    cool = subprocess.Popen(sleep, start_new_session=True)
    try:
        sampler = UsageSampler(lambda: {hot.pid: hot.pid, cool.pid: cool.pid})
        devices = [0.05, 0.97, 0.05, 0.0]
        where = {hot.pid: 1, cool.pid: 2}
        held = [(hot.pid, 900.0), (cool.pid, 900.0)]
        for _ in range(2):
            sampler.record(held, None, 0.27, None, devices=devices, where=where)
        hot_use, cool_use = sampler.usage(hot.pid), sampler.usage(cool.pid)
        assert hot_use is not None
        assert cool_use is not None
        assert hot_use.gpu_device == pytest.approx(0.97)
        assert hot_use.saturated()
        assert hot_use.gpu_busy == pytest.approx(0.97)  # alone on its GPU: all of it is its own
        assert cool_use.gpu_device == pytest.approx(0.05)
        assert not cool_use.saturated()
    finally:
        for proc in (hot, cool):
            proc.kill()
            proc.wait()


def test_cpu_ids_follow_the_shares_and_never_hold_a_case_back() -> None:
    """Each booking gets ceil(its share) CPU ids (at least 1), the least loaded ones; a share of
    every CPU or an exclusive job gets all; fractional shares that fit the CPUs share ids rather
    than wait; ids come back on release. Without ids (or without the CPU booked) none are set."""
    from validate.execute.ledger import Ledger, Need

    ledger = Ledger(8, cpu_ids=(4, 5, 6, 7))
    assert ledger.cpus == 4.0  # the ids are the CPUs
    one, two = ledger.book(Need(cpu=1.0)), ledger.book(Need(cpu=1.5))
    assert one is not None
    assert two is not None
    assert one.placement.cpus == frozenset({4})
    assert two.placement.cpus == frozenset({5, 6})  # ceil(1.5): the least loaded, then the lowest
    nap = ledger.book(Need(cpu=0.0))  # a case that sleeps still runs somewhere: one id
    assert nap is not None
    assert nap.placement.cpus == frozenset({7})
    assert ledger.book(Need(cpu=2.0)) is None  # 4.5 of 4: the share binds, not the ids
    # fractional shares: 1.5 CPUs left, every id taken; they share the least loaded ids
    rest = [ledger.book(Need(cpu=0.5)) for _ in range(3)]
    assert all(b is not None and len(b.placement.cpus or ()) == 1 for b in rest)
    # 7 carries 0, then 0.5; then 5 (0.75 of the 1.5 share), not 4 (1.0)
    assert [b.placement.cpus for b in rest if b is not None] == [
        frozenset({7}),
        frozenset({7}),
        frozenset({5}),
    ]
    ledger.release(two)
    again = ledger.book(Need(cpu=1.5))
    assert again is not None
    assert again.placement.cpus == frozenset({5, 6})  # given back
    for booking in [one, again, nap, *rest]:
        assert booking is not None
        ledger.release(booking)
    assert set(ledger.pinned().values()) == frozenset({0})
    whole = ledger.book(Need(cpu=4.0))
    assert whole is not None
    assert whole.placement.cpus == frozenset({4, 5, 6, 7})
    ledger.release(whole)
    alone = ledger.book(Need(cpu=0.2, exclusive=True))
    assert alone is not None
    assert alone.placement.cpus == frozenset({4, 5, 6, 7})
    assert Ledger(2, cpus=2.0).book(Need()).placement.cpus is None  # type: ignore[union-attr]
    # a case without a share on record (its first run) holds the default share, unpinned: its
    # first figure is then its own demand, not the one CPU of a default pin
    first = Ledger(2, cpu_ids=(4, 5, 6, 7))
    unknown = first.book(Need())
    assert unknown is not None
    assert unknown.cpu == 1.0
    assert unknown.placement.cpus is None
    known = first.book(Need(cpu=1.0))
    assert known is not None
    assert known.placement.cpus == frozenset({4})  # the unpinned one loads no id
    lines = Ledger(2, cpu_ids=(4, 5, 6, 7)).lines()
    assert any("pinned to ceil(share) of CPUs 4-7" in line for line in lines), lines


_AFFINITY = """\
import json, os, pathlib, time
start = time.time()
time.sleep(SLEEP)
out = pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem
out.write_text(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "start": start,
                           "end": time.time()}))
"""


@pytest.mark.parametrize("forked", [True, False], ids=["fork-server", "fresh"])
def test_a_case_process_runs_on_exactly_the_cpus_the_ledger_booked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool
) -> None:
    """Real cases through the real pool and launcher: each process's affinity is the CPU ids
    its booking holds; two that ran at once on whole shares ran on disjoint CPUs."""
    from validate.env.target import ExecTarget
    from validate.execute.attempt import RunOptions, run_attempt
    from validate.execute.cases import discover_cases
    from validate.execute.forkserver import OFF_ENV
    from validate.execute.launch import placement_now
    from validate.execute.ledger import Ledger, host_cpu_ids
    from validate.execute.pool import Job, Pool
    from validate.execute.runner import run_pool

    ids = host_cpu_ids()
    if len(ids) < 2:
        pytest.skip(f"this process may run on {len(ids)} CPU; disjoint CPUs need 2")
    if not forked:
        monkeypatch.setenv(OFF_ENV, "0")
    (tmp_path / "seen").mkdir()
    options = RunOptions(results_dir=tmp_path / "run", timeout_s=60, api_logs=False)
    target = ExecTarget(python=Path(sys.executable))
    booked: dict[str, list[int]] = {}

    def job(name: str, share: float) -> Job:
        script = tmp_path / f"{name}.py"
        script.write_text(_AFFINITY.replace("SLEEP", "1.5"))
        (case,) = discover_cases([script])

        def run() -> tuple[Job, ...]:
            booked[name] = sorted(placement_now().cpus or ())
            folder = tmp_path / "run" / name
            folder.mkdir(parents=True)
            result, _ = run_attempt(case, target, options, folder, 1, api_logs=False)
            assert result.returncode == 0, result.tail
            return ()

        return Job(name=name, run=run, cpu=share)

    pool = Pool(2, ledger=Ledger(2, cpu_ids=ids[:2]))
    pool.submit([job("a", 1.0), job("b", 1.0), job("both", 2.0)])
    pool.close()
    run_pool(pool)
    seen = {p.name: json.loads(p.read_text()) for p in (tmp_path / "seen").iterdir()}
    assert {name: s["cpus"] for name, s in seen.items()} == booked
    assert len(booked["a"]) == len(booked["b"]) == 1
    assert booked["both"] == list(ids[:2])
    a, b = seen["a"], seen["b"]
    assert a["start"] < b["end"]  # the two whole shares ran at once (2 slots, 2 CPUs) ...
    assert b["start"] < a["end"]
    assert set(booked["a"]).isdisjoint(booked["b"])  # ... each on a CPU of its own


def test_validate_pins_each_case_to_its_booked_share_and_says_so(tmp_path: Path) -> None:
    """`validate` end to end: with shares of one CPU on record, cases that ran at once ran on
    disjoint single CPUs, a notebook's kernel too; a share of every CPU got them all; the start
    line says the cases are pinned. With the CPU ledger off, nothing is pinned."""
    from validate.execute.ledger import host_cpu_ids

    ids = host_cpu_ids()
    if len(ids) < 2:
        pytest.skip(f"this process may run on {len(ids)} CPU; disjoint CPUs need 2")
    nb = {
        "cells": [{"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {},
                   "outputs": [], "source": _AFFINITY.replace(
                       'pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem',
                       'pathlib.Path("SEEN") / "nb"').replace("SLEEP", "1.5")}],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    spans: dict[str, dict[str, dict[str, Any]]] = {}
    for name, env in (("booked", {}), ("unbooked", {"CUDNN_MATRIX_CPU_LEDGER": "0"})):
        cases = tmp_path / name
        (cases / "seen").mkdir(parents=True)
        for stem in ("one", "two", "three"):
            (cases / f"{stem}.py").write_text(_AFFINITY.replace("SLEEP", "1.5"))
        (cases / "all.py").write_text(_AFFINITY.replace("SLEEP", "0"))
        seen_dir = json.dumps(str(cases / "seen"))[1:-1]
        (cases / "nb.ipynb").write_text(json.dumps(nb).replace("SEEN", seen_dir))
        shares = {"one.py": 1.0, "two.py": 1.0, "three.py": 1.0, "nb.ipynb": 1.0}
        shares["all.py"] = float(len(ids))
        cache = tmp_path / f"{name}-cache"
        cache.mkdir()
        (cache / "durations.json").write_text(json.dumps({"#cpu_share": shares}))
        proc = _cli(
            "validate", *VALIDATE, "--cases", str(cases), "--jobs", "2",
            "--results", str(tmp_path / f"{name}-run"), "--cache-dir", str(cache),
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        start = next(line for line in proc.stderr.splitlines() if "slots:" in line)
        spans[name] = {p.name: json.loads(p.read_text()) for p in (cases / "seen").iterdir()}
        assert set(spans[name]) == {"one", "two", "three", "all", "nb"}, proc.stderr
        if name == "unbooked":
            assert "cpu: not booked" in start
            assert {tuple(s["cpus"]) for s in spans[name].values()} == {ids}
            continue
        assert "each case pinned to ceil(share) of CPUs" in start, start
        seen = spans[name]
        assert tuple(seen["all"]["cpus"]) == ids
        singles = {k: v for k, v in seen.items() if k != "all"}
        assert all(len(s["cpus"]) == 1 and s["cpus"][0] in ids for s in singles.values()), seen
        overlapped = 0
        names = sorted(singles)
        for i, x in enumerate(names):
            for y in names[i + 1 :]:
                sx, sy = singles[x], singles[y]
                if sx["start"] < sy["end"] and sy["start"] < sx["end"]:
                    overlapped += 1
                    assert sx["cpus"] != sy["cpus"], (x, y, seen)
        assert overlapped, seen  # 2 slots, whole shares of 2 CPUs: some ran at once


def test_host_memory_peaks_stay_within_the_memory() -> None:
    from validate.execute.ledger import Ledger, Need

    ledger = Ledger(8, mem_mib=1000.0, default_mem=300.0)
    big, mid = ledger.book(Need(mem_mib=600.0)), ledger.book(Need(mem_mib=300.0))
    assert big is not None
    assert mid is not None
    assert ledger.book(Need()) is None  # the default, 300: 1200 of 1000
    small = ledger.book(Need(mem_mib=100.0))
    assert small is not None
    assert ledger.mem_used == pytest.approx(1000.0)
    ledger.release(big)
    assert ledger.book(Need()) is not None  # given back
    fresh = Ledger(4, mem_mib=1000.0)
    assert fresh.default_mem == pytest.approx(250.0)  # no history: the memory over the slots
    huge = fresh.book(Need(mem_mib=50_000.0))  # larger than the memory: when all is free
    assert huge is not None
    assert fresh.book(Need(mem_mib=1.0)) is None
    fresh.release(huge)
    alone = fresh.book(Need(mem_mib=1.0, exclusive=True))
    assert alone is not None
    assert alone.mem_mib == pytest.approx(1000.0)  # an exclusive job holds all of it
    assert Ledger(2).book(Need(mem_mib=10.0)).mem_mib == 0.0  # type: ignore[union-attr]
    assert "memory: 1.0 GiB available" in Ledger(2, mem_mib=1024.0).lines()[-1]
    assert Ledger(2).lines()[-1] == "memory: not booked"


#: Holds MiB of resident memory (written, so resident) for a while.
_HOLD = textwrap.dedent(
    """\
    import time
    held = b"x" * (MIB * 1024 * 1024)
    time.sleep(SLEEP)
    """
)


def test_host_memory_peaks_are_recorded_and_hold_cases_to_the_memory(tmp_path: Path) -> None:
    """A run records each case's resident peak (its process tree's): one that holds 300 MiB
    near that, one that sleeps far less. Peaks on record larger than the host's memory hold
    those cases to one at a time, where the slots alone run them together (as they do with the
    memory ledger off)."""
    first = tmp_path / "first"
    first.mkdir()
    (first / "hold.py").write_text(_HOLD.replace("MIB", "300").replace("SLEEP", "2.5"))
    (first / "nap.py").write_text(_HOLD.replace("MIB", "0").replace("SLEEP", "2.5"))
    cache = tmp_path / "cache"
    proc = _cli(
        "validate", *VALIDATE, "--cases", str(first), "--jobs", "2",
        "--results", str(tmp_path / "first-run"), "--cache-dir", str(cache), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    peaks = json.loads((cache / "durations.json").read_text())["#rss_mib"]
    assert 280 < peaks["hold.py"] < 600, peaks
    assert peaks["nap.py"] < 100, peaks

    seeded = {"#rss_mib": {f"case{i:02d}.py": 1e9 for i in range(3)}}  # more than any host
    spans = {}
    for name, env in (("booked", {}), ("unbooked", {"CUDNN_MATRIX_MEM_LEDGER": "0"})):
        spans[name], start = _crowd_spans(tmp_path / name, seeded, env)
        assert ("memory: not booked" in start) == (name == "unbooked"), start
    assert _most_at_once(spans["booked"]) == 1, spans  # each holds all the memory: one at a time
    assert _most_at_once(spans["unbooked"]) > 1, spans  # the slots alone: together


#: Writes the CPUs it may run on, then keeps THREADS threads busy for SECONDS (sha256 of 1 MiB
#: releases the GIL, so the threads run at once where they have the CPUs).
_BUSY = """\
import hashlib, json, os, pathlib, threading, time
out = pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem
out.write_text(json.dumps({"cpus": sorted(os.sched_getaffinity(0))}))
buf = b"x" * (1 << 20)
def spin():
    t = time.time() + SECONDS
    while time.time() < t:
        hashlib.sha256(buf).digest()
threads = [threading.Thread(target=spin) for _ in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""

#: Two busy processes: itself and a child it starts (one session, one case).
_TWO_PROCS = """\
import json, os, pathlib, subprocess, sys, time
out = pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem
out.write_text(json.dumps({"cpus": sorted(os.sched_getaffinity(0))}))
spin = "import time\\nt = time.time() + 2.5\\nwhile time.time() < t: pass"
child = subprocess.Popen([sys.executable, "-c", spin])
exec(spin)
child.wait()
"""

#: Busy children one after another, each shorter than a poll (0.5 s): counted by its reaped
#: children's CPU time, and never twice where a poll saw one.
_SHORT_CHILDREN = """\
import json, os, pathlib, subprocess, sys
out = pathlib.Path(__file__).parent / "seen" / pathlib.Path(__file__).stem
out.write_text(json.dumps({"cpus": sorted(os.sched_getaffinity(0))}))
spin = "import time\\nt = time.time() + 0.3\\nwhile time.time() < t: pass"
for _ in range(8):
    subprocess.run([sys.executable, "-c", spin], check=True)
"""


def test_a_case_pinned_to_one_cpu_records_its_demand_and_gets_it_next_run(
    tmp_path: Path,
) -> None:
    """The CPU share is demand, not the CPU granted: each case pinned to 1 CPU (shares of 1 on
    record), 2 busy threads (or 2 busy processes) record near 2 (their run-queue wait is the
    demand beyond the pin), 1 busy thread near 1, a sleeper little, busy children shorter than
    a poll near 1 (counted once). With that history the next run pins the 2-thread case to 2
    CPUs, the single thread still to 1."""
    from validate.execute.ledger import host_cpu_ids

    ids = host_cpu_ids()
    if len(ids) < 2:
        pytest.skip(f"this process may run on {len(ids)} CPU; a demand of 2 needs 2")
    cases = tmp_path / "cases"
    (cases / "seen").mkdir(parents=True)
    busy = _BUSY.replace("SECONDS", "2.5")
    (cases / "two_threads.py").write_text(busy.replace("THREADS", "2"))
    (cases / "one_thread.py").write_text(busy.replace("THREADS", "1"))
    (cases / "two_procs.py").write_text(_TWO_PROCS)
    (cases / "short_children.py").write_text(_SHORT_CHILDREN)
    (cases / "nap.py").write_text(SEEN.replace("SPIN", "").replace("SLEEP", "2.5"))
    cache = tmp_path / "cache"
    cache.mkdir()
    names = [p.name for p in cases.glob("*.py")]
    (cache / "durations.json").write_text(json.dumps({"#cpu_share": dict.fromkeys(names, 1.0)}))
    seen: dict[str, dict[str, Any]] = {}
    for run in ("first", "next"):
        proc = _cli(
            "validate", *VALIDATE, "--cases", str(cases), "--jobs", "1",
            "--results", str(tmp_path / run), "--cache-dir", str(cache), cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode in (0, 1), proc.stderr
        assert "each case pinned to ceil(share)" in proc.stderr, proc.stderr
        seen[run] = {p.name: json.loads(p.read_text()) for p in (cases / "seen").iterdir()}
        if run == "first":
            assert all(len(s["cpus"]) == 1 for s in seen[run].values() if "cpus" in s), seen
            shares = json.loads((cache / "durations.json").read_text())["#cpu_share"]
            assert shares["two_threads.py"] > 1.5, shares
            assert shares["two_procs.py"] > 1.5, shares
            assert 0.7 < shares["one_thread.py"] < 1.5, shares
            assert 0.7 < shares["short_children.py"] < 1.5, shares
            assert shares["nap.py"] < 0.2, shares
            assert max(shares.values()) <= len(ids), shares  # capped at the CPUs
    assert len(seen["next"]["two_threads"]["cpus"]) == 2, seen
    assert len(seen["next"]["two_procs"]["cpus"]) == 2, seen
    assert len(seen["next"]["one_thread"]["cpus"]) == 1, seen
