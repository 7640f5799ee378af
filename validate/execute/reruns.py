"""The re-run policy: one case's attempts as pool jobs, and which attempt its verdict stands on.

A failure or timeout that shared a saturated GPU (or busy CPUs) runs again alone before it is
judged (the contention re-run); a bad outcome runs again with the API logs on and then
`--reruns` times, and differing outcomes make the result flaky. `run_case` runs one case's
attempts one after another in this thread.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from validate.execute.attempt import (
    RunOptions,
    captured,
    case_dir,
    exception_of,
    run_attempt,
    verdict,
)
from validate.execute.classify import ExecResult, signal_name
from validate.execute.pool import Beside, Job, beside
from validate.execute.units import units_of
from validate.model.outcome import Outcome, policy
from validate.model.results import CaseResult, ResultStore
from validate.plan.requirements import check, missing_modules

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from validate.env.target import ExecTarget
    from validate.execute.cases import Case
    from validate.execute.slots import CaseUsage, UsageSampler

__all__ = ["CaseRun", "run_case"]

#: Outcomes that contention can cause: an attempt with one of them that shared its GPU (or the
#: host's CPUs) beyond what it needs runs once more alone before it is judged.
_CONTENDABLE: Final = frozenset({Outcome.FAIL, Outcome.TIMEOUT})
#: The other cases' kernels kept the GPU at least this busy on average: the case shared it.
_GPU_OTHERS_BUSY: Final = 0.5
#: The host's CPUs were at least this busy on average while the case ran: it shared them.
_CPU_SATURATED: Final = 0.85


def _skip_result(case: Case, target: ExecTarget, options: RunOptions, reason: str) -> CaseResult:
    return CaseResult(
        case=case.name,
        outcome=Outcome.SKIP,
        reason=reason,
        cell_id=target.cell_id,
        cell=dict(target.cell),
        case_path=str(case.path),
        run_id=options.run_id,
        started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        content_key=case.content_key(target.cell),
    )


def _requirement_skip(case: Case, target: ExecTarget) -> str | None:
    req = case.requirements
    missing = missing_modules(target.python, req.imports) if req.imports else frozenset()
    return check(
        req,
        has_gpu=target.has_gpu,
        host_arch=target.host_arch,
        backend_version=target.backend_version,
        missing=missing,
    )


class CaseRun:
    """One case in the pool: the first attempt is a job, each re-run (the alone re-run, the
    API-log one, then --reruns) a follow-up job; the result is built and handed to `finish`
    when the last ends.

    No verdict from contention: a first attempt that failed or timed out while it shared its GPU
    (or the host's CPUs) beyond what it needs (`_contention`) runs once more alone (an exclusive
    pool job) before it is judged. Passing alone, it is a pass with a note that names the
    contention (not flaky); failing alone too, the alone attempt is the one judged (and re-run
    as any failure is). The contended attempt stays on disk (output.log, report.json).

    With `store`, no attempt starts once the results folder broke (disk full, deleted):
    `ResultsLost` ends the run like Ctrl-C; a case file another case deleted is this case's
    `error`; a bad outcome while the folder is in trouble is `error` (no product failure)."""

    def __init__(
        self,
        case: Case,
        target: ExecTarget,
        options: RunOptions,
        finish: Callable[[CaseResult, CaseUsage | None, bool], None],
        sampler: UsageSampler | None = None,
        store: ResultStore | None = None,
    ) -> None:
        self.case, self.target, self.options = case, target, options
        self._store = store
        self._finish = finish
        self._sampler = sampler
        self._lock = threading.Lock()
        self._outcomes: dict[int, str] = {}
        self._api_logs: dict[str, str] = {}
        self._left = 0
        self._peak: float | None = None
        self._usage: dict[int, CaseUsage | None] = {}
        self._gpu_mib = 0.0
        self._gpu_load = 0.0
        self._cpu: float | None = None
        self._mem: float | None = None
        self._judged = 1  # the attempt judged first: 2 once a contended first one ran again alone
        self._note = ""  # the contention the first attempt met, when it ran again alone

    def job(
        self,
        estimate_s: float | None,
        gpu_mib: float = 0.0,
        gpu_load: float = 0.0,
        cpu: float | None = None,
        mem_mib: float | None = None,
    ) -> Job:
        self._gpu_mib, self._gpu_load, self._cpu = gpu_mib, gpu_load, cpu  # its re-runs too
        self._mem = mem_mib
        return Job(
            name=self.case.name,
            run=self.first,
            estimate_s=estimate_s,
            gpu_mib=gpu_mib,
            gpu_load=gpu_load,
            cpu=cpu,
            mem_mib=mem_mib,
            gpu_exclusive=self.case.requirements.exclusive,  # its GPU to itself (no GPU: alone)
        )

    def _attempt(self, n: int, *, api_logs: bool) -> ExecResult:
        if self._store is not None and n > 1:
            self._store.check()  # ResultsLost: the run stops before this re-run (first: first())
        try:
            run, usage = run_attempt(
                self.case,
                self.target,
                self.options,
                self.folder,
                n,
                api_logs=api_logs,
                sampler=self._sampler,
            )
        except OSError:
            if self._store is not None:
                self._store.check()  # the folder broke under the case: that is the cause
            raise
        with self._lock:
            self._usage[n] = usage
            if usage is not None and usage.peak_mib is not None:
                self._peak = max(self._peak or 0.0, usage.peak_mib)
        return run

    def first(self) -> Sequence[Job]:
        reason = _requirement_skip(self.case, self.target)
        if reason:
            self._finish(_skip_result(self.case, self.target, self.options, reason), None, False)
            return ()
        if self._store is not None:
            self._store.check()
            if not self.case.path.is_file():
                why = "case file vanished before it ran"
                vanished = _skip_result(self.case, self.target, self.options, why)
                self._finish(vanished.with_(outcome=Outcome.ERROR), None, False)
                return ()
        self.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.folder = case_dir(self.case, self.target, self.options)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            if self._store is not None:
                self._store.check()
            raise
        self.run1 = self._attempt(1, api_logs=False)
        self.outcome, self.reason = verdict(self.run1, self.target)
        self._outcomes[1] = str(self.outcome)
        if self.outcome in _CONTENDABLE and not self.case.requirements.exclusive:
            timed_out = self.outcome is Outcome.TIMEOUT
            shared = _contention(beside(), self._usage.get(1), self._gpu_load, timed_out=timed_out)
            if shared is not None:
                took = "timed out" if self.outcome is Outcome.TIMEOUT else "failed"
                self._note = f"{took} at {self.run1.duration_s:.0f} s beside {shared}"
                return [
                    Job(
                        name=f"{self.case.name} alone",
                        run=self.alone,
                        estimate_s=self.run1.duration_s,
                        cases=0,
                        gpu_mib=self._gpu_mib,
                        gpu_load=self._gpu_load,
                        exclusive=True,
                    )
                ]
        return self._judge()

    def alone(self) -> Sequence[Job]:
        """The contended first attempt again, with nothing else on the GPU or the host's slots."""
        run = self._attempt(2, api_logs=False)
        outcome, reason = verdict(run, self.target)
        self._judged = 2
        self._outcomes = {2: str(outcome)}
        self.run1, self.outcome, self.reason = run, outcome, reason
        if outcome is Outcome.PASS:
            self._note += f"; passed alone in {run.duration_s:.0f} s"
            self.reason = self._note
        else:
            self._note += f"; {outcome} alone too ({run.duration_s:.0f} s)"
        return self._judge(defer=True)

    def _judge(self, *, defer: bool = False) -> Sequence[Job]:
        """The judged first attempt's re-runs (the API-log one, then --reruns) as follow-up jobs,
        or the result now. `defer`: after the alone re-run, they queue after the other cases'
        alone re-runs (each exclusive one would otherwise wait for them to end)."""
        extra = 0
        if policy(self.outcome).rerun:
            extra = self.options.reruns + (1 if self.options.api_logs else 0)
        if not extra:
            self._done()
            return ()
        self._left = extra
        base = self._judged
        return [
            Job(
                name=f"{self.case.name} #{n}",
                run=functools.partial(self.again, n),
                estimate_s=self.run1.duration_s,
                cases=0,
                gpu_mib=self._gpu_mib,
                gpu_load=self._gpu_load,
                cpu=self._cpu,
                mem_mib=self._mem,
                defer=defer,
            )
            for n in range(base + 1, base + 1 + extra)
        ]

    def again(self, n: int) -> Sequence[Job]:
        with_logs = self.options.api_logs and n == self._judged + 1
        run = self._attempt(n, api_logs=with_logs)
        outcome = str(verdict(run, self.target)[0])
        with self._lock:
            self._outcomes[n] = outcome
            if with_logs:
                logs = {"frontend": self.folder / "fe.log", "backend": self.folder / "be.log"}
                self._api_logs = {k: str(v) for k, v in logs.items() if v.exists()}
            self._left -= 1
            last = self._left == 0
        if last:
            self._done()
        return ()

    def _done(self) -> None:
        first = self.run1
        outcomes = [self._outcomes[n] for n in sorted(self._outcomes)]
        kernel_sig = (first.report or {}).get("kernel_signal")
        kernel_code = (first.report or {}).get("kernel_exit_code")
        result = CaseResult(
            case=self.case.name,
            outcome=self.outcome,
            reason=self.reason,
            duration_s=round(first.duration_s, 3),
            cell_id=self.target.cell_id,
            cell=dict(self.target.cell),
            case_path=str(self.case.path),
            exit_code=kernel_code if kernel_code is not None else first.returncode,
            signal=kernel_sig or signal_name(first.returncode),
            exception=exception_of(first),
            tail=first.tail,
            log_path=str(first.log_path),
            api_logs=self._api_logs,
            env=captured(first),
            attempts=tuple(outcomes),
            flaky=len(set(outcomes)) > 1,
            started_at=self.started,
            run_id=self.options.run_id,
            content_key=self.case.content_key(self.target.cell),
            contention=self._note,
            units=units_of(first),
        )
        trouble = self._store.problem() if self._store is not None else None
        if trouble is not None and policy(result.outcome).bad:  # e.g. it died of a full disk
            reason = f"while it ran: {trouble}; it ended {result.outcome}: {result.reason}"
            result = result.with_(outcome=Outcome.ERROR, reason=reason)
        with suppress(OSError):  # a copy of the results line: a full disk must not lose the line
            (self.folder / "result.json").write_text(
                json.dumps(result.to_dict(), indent=2, default=str), encoding="utf-8"
            )
        judged = self._usage.get(self._judged)
        usage = judged if judged is None else replace(judged, peak_mib=self._peak)
        self._finish(result, usage, self._judged > 1 or self.case.requirements.exclusive)


def _contention(
    shared: Beside, usage: CaseUsage | None, own_load: float, *, timed_out: bool
) -> str | None:
    """What the attempt shared beyond its own need, as the note names it ("3 other cases (GPU
    97% busy, CPU 91% busy)"); None where it had what it needed: no other case ran beside it, or
    the resources it was sampled on had room. The GPU had room when the other cases' kernels
    kept it busy less than half the time, it was not saturated and the pool's book had the summed
    expected load within its capacity. The host's CPUs count for a timeout only (a slower case
    on busy cores is still right; a GPU shared with other kernels can give wrong numbers, e.g.
    NaNs from concurrent kernels on Blackwell): they had room when less than 85% busy. A case no
    poll saw (shorter than a poll) had no measured contention: it is judged as it ran."""
    if shared.others <= 0:
        return None
    found: list[str] = []
    if usage is not None:
        if usage.gpu_device is not None and (
            usage.saturated() or (usage.gpu_others or 0.0) >= _GPU_OTHERS_BUSY
        ):
            found.append(f"GPU {usage.gpu_device:.0%} busy")
        if timed_out and usage.cpu_host is not None and usage.cpu_host >= _CPU_SATURATED:
            found.append(f"CPU {usage.cpu_host:.0%} busy")
    over = shared.capacity is not None and shared.others_load + own_load > shared.capacity
    if over:
        found.append(
            f"expected GPU load {shared.others_load + own_load:.2f} of {shared.capacity:g}"
        )
    if not found:
        return None
    plural = "case" if shared.others == 1 else "cases"
    return f"{shared.others} other {plural} ({', '.join(found)})"


def run_case(case: Case, target: ExecTarget, options: RunOptions) -> CaseResult:
    """Check requirements, run the case, re-run failures (API logs, then --reruns), build a result:
    one case, its re-runs one after another, in this thread (no pool)."""
    got: list[CaseResult] = []
    case_run = CaseRun(case, target, options, lambda result, _usage, _alone: got.append(result))
    for follow in case_run.first():
        follow.run()
    return got[0]
