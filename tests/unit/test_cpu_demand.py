"""What a case's CPU demand counts (execute/cpu_demand.py), folded from polls written here: the
arithmetic alone (tests/unit/test_ledger.py measures real processes pinned to one CPU)."""

from __future__ import annotations

import pytest

from validate.execute.cpu_demand import _CLK_TCK, CpuDemand, ProcSample

S = 1_000_000_000  # ns
T = _CLK_TCK  # ticks a second


def _proc(
    pid: int, ppid: int, cpu: float, reaped: float = 0.0, **threads: tuple[float, float]
) -> ProcSample:
    """Process `pid` at a poll, times in seconds; `threads`: t<tid>=(ran, waited)."""
    return ProcSample(
        pid=pid, session=1, ppid=ppid, cpu_ns=int(cpu * S), reaped_ns=int(reaped * S), born=0,
        rss_mib=1.0, threads={int(k[1:]): (int(r * S), int(w * S)) for k, (r, w) in threads.items()},
    )  # fmt: skip


def test_threads_count_their_wait_and_ended_threads_their_cpu_time() -> None:
    demand = CpuDemand()
    # 2 s in: two threads on one CPU, each ran 1 s and waited 1 s
    demand.add(2 * T, [_proc(10, 1, 2.0, t10=(1.0, 1.0), t11=(1.0, 1.0))])
    assert demand.share(8.0) == pytest.approx(2.0)
    # 4 s in: thread 11 ended after running 0.5 s more (CPU time only); thread 10 ran on
    demand.add(4 * T, [_proc(10, 1, 3.5, t10=(2.0, 2.0))])
    assert demand.demand_ns(4 * S) == pytest.approx((4.0 + 2.0 + 0.5) * S)
    assert demand.share(1.5) == pytest.approx(1.5)  # capped at the CPUs


def test_without_schedstat_a_process_counts_its_cpu_time() -> None:
    demand = CpuDemand()
    demand.add(2 * T, [_proc(10, 1, 1.0)])
    assert demand.share(8.0) == pytest.approx(0.5)


def test_a_reaped_child_counts_once() -> None:
    demand = CpuDemand()
    demand.add(1 * T, [_proc(10, 1, 0.0, t10=(0.0, 0.0)), _proc(11, 10, 0.5, t11=(0.5, 0.0))])
    # the child ended (0.8 s in all) and was reaped; another lived between two polls (0.6 s)
    demand.add(2 * T, [_proc(10, 1, 0.0, reaped=1.4, t10=(0.0, 0.0))])
    assert demand.demand_ns(2 * S) == pytest.approx((0.5 + 0.3 + 0.6) * S)


def test_a_pid_used_again_keeps_the_ended_process_counted() -> None:
    demand = CpuDemand()
    demand.add(1 * T, [_proc(10, 1, 0.0, t10=(0.0, 0.0)), _proc(11, 10, 0.5, t11=(0.5, 0.0))])
    demand.add(2 * T, [_proc(10, 1, 0.0, reaped=0.5, t10=(0.0, 0.0))])
    demand.add(
        3 * T, [_proc(10, 1, 0.0, reaped=0.5, t10=(0.0, 0.0)), _proc(11, 10, 0.2, t11=(0.2, 0.0))]
    )
    assert demand.demand_ns(3 * S) == pytest.approx((0.5 + 0.2) * S)
