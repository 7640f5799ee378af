"""GPU compute as a resource of the pool: busy shares in the history, the load bound, exclusive
jobs, what ran beside a job, and the contention rule's reading of what a case shared."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from validate.execute.history import BUSY_KEY, History
from validate.execute.pool import Beside, Job, Pool, beside, watch
from validate.execute.reruns import _contention
from validate.execute.runner import default_gpu_load
from validate.execute.slots import (
    DEFAULT_GPU_LOAD,
    CaseUsage,
    Resources,
    UsageSampler,
    plan_ledger,
)
from validate.plan.host import GpuInfo, HostFacts
from validate.plan.shard import read_durations

if TYPE_CHECKING:
    from pathlib import Path

GPU_HOST = HostFacts(gpus=(GpuInfo(name="NVIDIA H200", sm="sm90", memory_mib=143771),))


def test_busy_shares_are_kept_and_a_saturated_measure_never_lowers_one(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    history = History.load(path)
    assert history.typical_gpu_busy() is None
    assert default_gpu_load(history) == DEFAULT_GPU_LOAD
    history.record("heavy.ipynb", 99.0, 2000.0, gpu_busy=0.6)
    history.record("light.ipynb", 5.0, gpu_busy=0.05)
    history.save()
    assert json.loads(path.read_text())[BUSY_KEY] == {"heavy.ipynb": 0.6, "light.ipynb": 0.05}
    assert read_durations(path) == {"heavy.ipynb": 99.0, "light.ipynb": 5.0}  # shards skip it

    again = History.load(path)
    assert again.busy_estimate("heavy.ipynb") == 0.6
    assert again.typical_gpu_busy() == (0.6 + 0.05) / 2
    # beside 17 others on a full GPU it got a slice only: a lower bound, kept below what is known
    again.record("heavy.ipynb", 318.0, gpu_busy=0.07, saturated=True)
    # measured on a GPU with room: what it needs now
    again.record("light.ipynb", 5.0, gpu_busy=0.02)
    again.save()
    third = History.load(path)
    assert third.busy_estimate("heavy.ipynb") == 0.6
    assert third.busy_estimate("light.ipynb") == 0.02
    assert third.estimate("heavy.ipynb") == 318.0
    third.record("heavy.ipynb", 97.0, gpu_busy=0.4)  # alone: clean, replaces
    third.save()
    assert History.load(path).busy_estimate("heavy.ipynb") == 0.4


def test_the_start_line_states_each_gpus_budget_and_the_cpus() -> None:
    have = Resources(cores=16, mem_mib=128 * 1024, gpu_free_mib=(140000,))
    host = HostFacts(gpus=GPU_HOST.gpus, driver_version="580.65.06")
    bound, ledger = plan_ledger(host, resources=have)
    assert [g.load for g in ledger.gpus] == [1.0]  # one GPU's busy share, its own
    assert ledger.lines()[0] == "gpu 0: 136.7 GiB free, busy share 1"
    assert ledger.lines()[1].startswith("cpu: ")
    _, none = plan_ledger(HostFacts(), resources=have)
    assert none.lines()[0].startswith("cpu: ")  # no GPU: no GPU line
    assert bound.slots >= 1


def _concurrency_probe(pool: Pool, jobs: list[Job]) -> dict[str, set[str]]:
    """Run `jobs` (each sleeps a little) in `pool`; returns which jobs each saw running beside."""
    live: set[str] = set()
    seen: dict[str, set[str]] = {}
    lock = threading.Lock()

    def body(name: str) -> tuple[Job, ...]:
        with lock:
            seen[name] = set(live)
            for other in live:
                seen[other].add(name)
            live.add(name)
        time.sleep(0.15)
        with lock:
            live.discard(name)
        return ()

    for job in jobs:
        job.run = lambda name=job.name: body(name)  # type: ignore[misc]
    pool.submit(jobs)
    pool.close()
    pool.run()
    return seen


def test_the_summed_gpu_load_of_running_jobs_stays_within_the_bound() -> None:
    pool = Pool(8, gpu_load=1.0)
    jobs = [Job(name=f"heavy{i}", run=tuple, estimate_s=10.0 - i, gpu_load=0.6) for i in range(3)]
    jobs += [Job(name=f"light{i}", run=tuple, estimate_s=1.0, gpu_load=0.1) for i in range(4)]
    seen = _concurrency_probe(pool, jobs)
    for i in range(3):  # two heavy ones (1.2) never ran together
        assert not {f"heavy{j}" for j in range(3) if j != i} & seen[f"heavy{i}"]
    assert seen["light0"] & {"light1", "light2", "light3"}  # light ones still share
    # a job heavier than the whole bound runs when the GPU is all its own
    alone = _concurrency_probe(Pool(4, gpu_load=1.0), [Job(name="x", run=tuple, gpu_load=3.0)])
    assert alone == {"x": set()}


def test_without_a_gpu_bound_the_load_is_not_accounted() -> None:
    jobs = [Job(name=f"h{i}", run=tuple, estimate_s=1.0, gpu_load=0.9) for i in range(3)]
    seen = _concurrency_probe(Pool(3), jobs)
    assert seen["h0"] == {"h1", "h2"}


def test_an_exclusive_job_runs_with_nothing_beside_it_after_the_others() -> None:
    pool = Pool(4, gpu_load=1.0)
    jobs = [
        Job(name="solo", run=tuple, estimate_s=100.0, exclusive=True),
        *(Job(name=f"n{i}", run=tuple, estimate_s=1.0, gpu_load=0.1) for i in range(5)),
    ]
    seen = _concurrency_probe(pool, jobs)
    assert seen["solo"] == set()
    assert seen["n0"] & {"n1", "n2", "n3"}


def test_beside_reports_the_most_jobs_and_load_that_ran_beside_a_job() -> None:
    got: dict[str, Beside] = {}
    release = threading.Event()

    def long() -> tuple[Job, ...]:
        release.wait(5)
        got["long"] = beside()
        return ()

    def short(name: str) -> tuple[Job, ...]:
        time.sleep(0.1)
        got[name] = beside()
        if name == "s2":
            release.set()
        return ()

    pool = Pool(3, gpu_load=1.0)
    pool.submit(
        [
            Job(name="long", run=long, estimate_s=9.0, gpu_load=0.5),
            Job(name="s1", run=lambda: short("s1"), estimate_s=2.0, gpu_load=0.2),
            Job(name="s2", run=lambda: short("s2"), estimate_s=1.0, gpu_load=0.3),
        ]
    )
    pool.close()
    pool.run()
    assert got["long"].others == 2
    assert abs(got["long"].others_load - 0.5) < 1e-9
    assert got["long"].capacity == 1.0
    assert beside() == Beside()  # this thread is no pool job


def test_contention_names_what_was_shared_and_only_that() -> None:
    crowd = Beside(others=17, others_load=0.5, capacity=1.0)
    full = CaseUsage(gpu_busy=0.05, gpu_device=0.98, cpu_host=0.4, polls=9)
    for timed_out in (True, False):
        assert _contention(crowd, full, 0.1, timed_out=timed_out) == "17 other cases (GPU 98% busy)"
    others = CaseUsage(gpu_busy=0.1, gpu_device=0.7, cpu_host=0.2, polls=9)  # 60% theirs
    assert _contention(crowd, others, 0.1, timed_out=False) == "17 other cases (GPU 70% busy)"
    cpu = CaseUsage(gpu_device=0.02, cpu_host=0.93, polls=4)
    assert _contention(Beside(others=1), cpu, 0.0, timed_out=True) == "1 other case (CPU 93% busy)"
    # busy cores slow a case down; they do not make its numbers wrong: a failure is judged as is
    assert _contention(Beside(others=1), cpu, 0.0, timed_out=False) is None
    roomy = CaseUsage(gpu_busy=0.2, gpu_device=0.45, cpu_host=0.3, polls=9)
    assert _contention(crowd, roomy, 0.1, timed_out=True) is None  # room on the GPU and CPUs
    assert _contention(Beside(), full, 0.1, timed_out=True) is None  # nothing beside it
    assert _contention(crowd, None, 0.1, timed_out=True) is None  # no poll saw it
    over = Beside(others=3, others_load=0.95, capacity=1.0)
    expected = "3 other cases (expected GPU load 1.15 of 1)"
    assert _contention(over, roomy, 0.2, timed_out=False) == expected


def test_the_sampler_averages_what_each_case_used() -> None:
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    a = subprocess.Popen(sleep, start_new_session=True)
    b = subprocess.Popen(sleep, start_new_session=True)
    try:
        sampler = UsageSampler(lambda: {a.pid: a.pid, b.pid: b.pid})
        sampler.record([(a.pid, 500.0)], [(a.pid, 0.6), (b.pid, 0.1)], device=0.6, cpu=0.5)
        sampler.record([(a.pid, 700.0)], [(a.pid, 0.2)], device=1.0, cpu=0.9)
        used = sampler.usage(a.pid)
        assert used is not None
        assert used.peak_mib == 700.0
        assert (used.gpu_busy, used.gpu_device, used.cpu_host) == pytest.approx((0.4, 0.8, 0.7))
        assert used.polls == 2
        assert not used.saturated()
        assert sampler.usage(a.pid) is None  # forgotten once read
        other = sampler.usage(b.pid)
        assert other is not None
        assert other.gpu_busy == pytest.approx(0.05)
        # no per-process figure (some drivers): the device's utilization split among holders
        sampler.record([(a.pid, 100.0), (b.pid, 100.0)], None, device=0.96, cpu=None)
        split = sampler.usage(a.pid)
        assert split is not None
        assert split.gpu_busy == pytest.approx(0.48)
        assert split.saturated()
        assert split.cpu_host is None
        figures = sampler.figures()
        assert figures is not None
        assert figures["max"] == 1.0
        assert figures["polls"] == 3
    finally:
        for proc in (a, b):
            proc.kill()
            proc.wait()


def test_the_sampler_reads_the_host_cpus_without_a_gpu() -> None:
    """On a host without a GPU the sampler still runs and reads /proc/stat: a case that keeps a
    core busy shows a busy host."""
    spin = [sys.executable, "-c", "import time\nt=time.time()+3\nwhile time.time()<t: pass"]
    procs = [subprocess.Popen(spin, start_new_session=True) for _ in range(os.cpu_count() or 1)]
    try:
        live = {p.pid: procs[0].pid for p in procs}
        sampler = UsageSampler(lambda: live, interval_s=0.2, gpu=False).start()
        assert sampler.active
        assert not sampler.measures_gpu
        time.sleep(1.5)
        sampler.stop()
        used = sampler.usage(procs[0].pid)
        assert used is not None
        assert used.polls >= 3
        assert used.gpu_device is None
        assert used.cpu_host is not None
        assert used.cpu_host > 0.5
        assert sampler.figures() is None  # no GPU sampled
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_running_job_counts_as_its_measured_load_when_that_is_more() -> None:
    """A job the history did not know (a small expected load) stops the next ones once its
    kernels are measured to fill the GPU; a measure below its expected load changes nothing."""

    def order(measure: float) -> list[str]:
        events: list[str] = []
        measured = threading.Event()

        def unknown_heavy() -> tuple[Job, ...]:
            watch(lambda: measure if measured.is_set() else None)
            events.append("heavy")
            measured.set()
            time.sleep(0.5)
            events.append("heavy ended")
            return ()

        def light() -> tuple[Job, ...]:
            events.append("light")
            return ()

        pool = Pool(4, gpu_load=1.0)
        pool.submit([Job(name="heavy", run=unknown_heavy, estimate_s=50.0, gpu_load=0.05)])
        runner = threading.Thread(target=pool.run)
        runner.start()
        measured.wait(5)
        pool.submit([Job(name="light", run=light, estimate_s=1.0, gpu_load=0.1)])
        pool.close()
        runner.join()
        return events

    assert order(0.95) == ["heavy", "heavy ended", "light"]  # 0.95 + 0.1 > 1: it waited
    assert order(0.01) == ["heavy", "light", "heavy ended"]  # 0.05 + 0.1: it ran beside


def test_deferred_jobs_wait_for_the_exclusive_ones_which_run_back_to_back() -> None:
    """The re-runs of a case judged alone queue after every alone re-run: else each exclusive
    job would wait for the re-run before it to end, one after another."""
    order: list[str] = []
    pool = Pool(4, gpu_load=1.0)

    def body(name: str, follow: tuple[Job, ...] = ()) -> tuple[Job, ...]:
        order.append(name)
        time.sleep(0.02)
        return follow

    def alone(i: int) -> tuple[Job, ...]:
        rerun = Job(name=f"rerun{i}", run=lambda: body(f"rerun{i}"), estimate_s=5.0, defer=True)
        return body(f"alone{i}", (rerun,))

    jobs = [
        Job(name=f"alone{i}", run=functools.partial(alone, i), estimate_s=5.0, exclusive=True)
        for i in range(3)
    ]
    pool.submit([*jobs, Job(name="normal", run=lambda: body("normal"), estimate_s=1.0)])
    pool.close()
    pool.run()
    assert order[0] == "normal"
    assert order[1:4] == ["alone0", "alone1", "alone2"]
    assert sorted(order[4:]) == ["rerun0", "rerun1", "rerun2"]
