"""Slots from resources, the duration history with GPU peaks, and a store shared by threads."""

from __future__ import annotations

import json
import threading
from pathlib import Path  # noqa: TC003 - pytest's tmp_path annotations

import pytest  # noqa: TC002 - pytest's fixture annotations

from validate.execute import slots
from validate.execute.history import GPU_KEY, History
from validate.execute.slots import (
    GPU_PER_CASE_MIB,
    Resources,
    choose_slots,
    host_memory_mib,
    plan_ledger,
)
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, read_results
from validate.plan.host import GpuInfo, HostFacts
from validate.plan.shard import read_durations

H200 = GpuInfo(name="NVIDIA H200", sm="sm90", memory_mib=143771)
GPU_HOST = HostFacts(gpus=(H200,), driver_version="580.1")


def test_cpu_host_is_bounded_by_cores_and_memory() -> None:
    many_cores = choose_slots(
        HostFacts(), resources=Resources(cores=64, mem_mib=20 * 1024, gpu_free_mib=None)
    )
    assert many_cores.slots == 10
    assert many_cores.line() == "slots: 10 (cpu 64x1=64, mem 20GiB/2GiB=10)"
    few_cores = choose_slots(
        HostFacts(), resources=Resources(cores=2, mem_mib=64 * 1024, gpu_free_mib=None)
    )
    assert few_cores.slots == 2
    unknown_memory = choose_slots(
        HostFacts(), resources=Resources(cores=3, mem_mib=None, gpu_free_mib=None)
    )
    assert unknown_memory.slots == 3
    assert unknown_memory.why == "cpu 3x1=3"


def test_gpu_host_is_bounded_by_free_gpu_memory_per_case() -> None:
    have = Resources(cores=16, mem_mib=250 * 1024, gpu_free_mib=(40 * 1024,))
    default = choose_slots(GPU_HOST, resources=have)
    assert default.slots == 40 * 1024 // GPU_PER_CASE_MIB == 10
    assert "gpu 40GiB/4.0GiB default=10" in default.why
    assert "cpu 16x2=32" in default.why
    measured = choose_slots(GPU_HOST, resources=have, gpu_peak_mib=8 * 1024)
    assert measured.slots == 5
    assert "8.0GiB median peak=5" in measured.why
    roomy = choose_slots(
        GPU_HOST, resources=Resources(cores=16, mem_mib=250 * 1024, gpu_free_mib=(139 * 1024,))
    )
    assert roomy.slots == 32  # the cores bind first
    no_free_figure = choose_slots(
        GPU_HOST, resources=Resources(cores=64, mem_mib=None, gpu_free_mib=None)
    )
    assert no_free_figure.slots == 143771 // GPU_PER_CASE_MIB  # the total memory HostFacts read


def test_jobs_overrides_and_this_host_is_read() -> None:
    assert choose_slots(GPU_HOST, jobs=3).line() == "slots: 3 (--jobs)"
    two = HostFacts(gpus=(H200, H200), driver_version="580.1")
    have = Resources(cores=2, mem_mib=None, gpu_free_mib=(1000, 2000))
    bound, ledger = plan_ledger(two, jobs=3, resources=have)
    assert bound.slots == 3
    # each GPU's own free memory is its budget (once the free memory of both was one budget)
    assert [(i, mib) for i, mib, _, _ in ledger.booked()] == [(0, 0.0), (1, 0.0)]
    assert [g.free_mib for g in ledger.gpus] == [1000.0, 2000.0]
    assert plan_ledger(HostFacts(), jobs=3, resources=have)[1].gpus == []  # no GPU: none
    here = choose_slots(HostFacts())
    assert here.slots >= 1
    assert here.why.startswith("cpu ")
    assert host_memory_mib() is None or host_memory_mib() > 0  # type: ignore[operator]


def test_history_keeps_peaks_beside_durations_that_shards_still_read(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"old.py": 7.0}))
    history = History.load(path)
    assert history.estimate("old.py") == 7.0
    assert history.typical_gpu_mib() is None
    history.record("a.ipynb", 12.345, gpu_mib=3000.04)
    history.record("b.py", 1.0)
    path.write_text(json.dumps({"old.py": 7.0, "other-run.py": 2.0}))  # another run wrote meanwhile
    history.save()
    data = json.loads(path.read_text())
    assert data[GPU_KEY] == {"a.ipynb": 3000.0}
    assert read_durations(path) == {
        "a.ipynb": 12.35,
        "b.py": 1.0,
        "old.py": 7.0,
        "other-run.py": 2.0,
    }
    again = History.load(path)
    assert again.typical_gpu_mib() == 3000.0
    assert again.gpu_estimate("a.ipynb", 4096) == 3000.0
    assert again.gpu_estimate("b.py", 4096) == 4096  # no peak recorded for it
    again.gpu_mib.update({"x": 1000.0, "y": 9000.0})
    assert again.typical_gpu_mib() == 3000.0  # the median of 1000, 3000, 9000
    assert again.estimate("b.py") == 1.0
    path.write_text("not json")
    assert History.load(path).durations == {}


def test_store_appends_from_many_threads_stay_whole_lines(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    per_thread, threads = 40, 8
    tail = "x" * 20000  # long lines: more than one write each without the store's lock

    def append(t: int) -> None:
        for i in range(per_thread):
            store.append(CaseResult(case=f"t{t}-{i}", outcome=Outcome.PASS, cell_id="c", tail=tail))

    workers = [threading.Thread(target=append, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    read = read_results(store.path, store.key)
    assert read.skipped == []
    assert len(read.results) == per_thread * threads
    assert len({r.case for r in read.results}) == per_thread * threads


def test_an_append_waits_for_the_one_in_progress(tmp_path: Path) -> None:
    """Appends are serialised by the store's lock (the pool's workers share one store)."""
    store = ResultStore(tmp_path / "results.jsonl")
    result = CaseResult(case="a.py", outcome=Outcome.PASS, cell_id="c")
    with store._lock:  # another thread's append is in progress
        waiting = threading.Thread(target=store.append, args=(result,))
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive()
        assert not store.path.exists() or store.path.read_text() == ""
    waiting.join()
    assert [r.case for r in store] == ["a.py"]


def test_gpu_sampler_attributes_memory_to_the_case_by_session() -> None:
    """Memory of a case's processes (its own session, or its kernel's) counts for that case; a
    process of another session does not; the peak is the largest sum seen."""
    import subprocess
    import sys

    from validate.execute.slots import UsageSampler

    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    case = subprocess.Popen(sleep, start_new_session=True)
    kernel = subprocess.Popen(sleep, start_new_session=True)
    stranger = subprocess.Popen(sleep)  # this test's own session
    try:
        sampler = UsageSampler(lambda: {case.pid: case.pid, kernel.pid: case.pid})
        # two polls' (pid, MiB), as NVML or nvidia-smi report them (no GPU here)
        sampler.record([(case.pid, 100.0), (kernel.pid, 50.0), (stranger.pid, 1.0), (1 << 30, 9.0)])
        sampler.record([(case.pid, 20.0)])
        assert sampler.peak(case.pid) == 150.0
        assert sampler.peak(case.pid) is None  # forgotten once read
        assert sampler.peak(stranger.pid) is None
    finally:
        for proc in (case, kernel, stranger):
            proc.kill()
            proc.wait()


def _fake_smi(folder: Path, body: str) -> None:
    """An `nvidia-smi` on PATH that answers as this shell body does (no GPU here)."""
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    smi.chmod(0o755)


def test_free_gpu_memory_from_nvidia_smi_where_nvml_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slots, "_nvml", lambda: None)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    _fake_smi(tmp_path, 'printf "81000\\n140000\\n"')
    assert slots.free_gpu_mib() == [81000, 140000]
    _fake_smi(tmp_path, "echo 'NVIDIA-SMI has failed'; exit 9")
    assert slots.free_gpu_mib() is None
    _fake_smi(tmp_path, "echo 'N/A'")
    assert slots.free_gpu_mib() is None
