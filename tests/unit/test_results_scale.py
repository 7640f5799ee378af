"""The results store at a pytest suite's scale (issue #27): grouped durability (a batch shares one
fsync, and a result is durable once the call that stored it returns), reads that stream, and
lines of older versions that still verify."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import tracemalloc
from typing import TYPE_CHECKING

import pytest

from validate.model.outcome import Outcome
from validate.model.results import (
    CaseResult,
    ResultStore,
    RunKey,
    iter_results,
    read_results,
)

if TYPE_CHECKING:
    from pathlib import Path

_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from validate.model.outcome import Outcome
    from validate.model.results import CaseResult, ResultStore
    store = ResultStore(Path(sys.argv[1]))
    with store.batch():
        for i in range(200):
            store.append(CaseResult(case=f"t.py::test_{i}", outcome=Outcome.PASS, cell_id="c"))
        print("queued", flush=True)
        sys.stdin.readline()  # the parent has looked: nothing of the batch is on disk yet
    print("stored", flush=True)  # the batch block has ended: all 200 are durable
    store.append_many(
        CaseResult(case=f"u.py::test_{i}", outcome=Outcome.FAIL, cell_id="c") for i in range(50)
    )
    print("stored", flush=True)
    time.sleep(600)
    """
)


def test_a_result_stored_by_a_batch_is_on_disk_when_the_writer_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "run" / "results.jsonl"
    monkeypatch.setenv("CUDNN_MATRIX_STATE_DIR", str(tmp_path / "keys"))  # the run's key
    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,  # the installed package, never the checkout's (`-c` puts cwd on the path)
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline() == "queued\n"
            assert not file.exists() or file.read_bytes() == b""  # queued is not stored
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "stored\n"
            assert proc.stdout.readline() == "stored\n"
            proc.send_signal(signal.SIGKILL)  # right after append_many returned
        finally:
            proc.kill()
            proc.wait()
    read = read_results(file)
    assert read.skipped == []
    assert len(read.results) == 250
    assert [r.case for r in read.results][199:201] == ["t.py::test_199", "u.py::test_0"]


def test_a_batch_is_one_write_and_nested_batches_join_it(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    with store.batch():
        store.append(CaseResult(case="a", outcome=Outcome.PASS))
        with store.batch():
            store.append(CaseResult(case="b", outcome=Outcome.PASS))
        assert not store.path.exists()  # the inner block's end stores nothing yet
    assert [r.case for r in store] == ["a", "b"]
    assert store.done_keys() == {"::a", "::b"}


def _lines(key: RunKey, count: int) -> bytes:
    outcomes = (Outcome.PASS, Outcome.SKIP, Outcome.FAIL)
    return b"".join(
        key.signed_line(
            CaseResult(
                case=f"test/python/test_f{i // 200:03d}.py::test_x[param-{i}]",
                outcome=outcomes[i % 3],
                reason="why" if i % 3 else "",
                cell_id="c1",
                cell={"cudnn": "9.24.0.43"},
            ).to_line()
        )
        + b"\n"
        for i in range(count)
    )


@pytest.mark.slow  # ~9 s: 100,000 lines signed, then read under tracemalloc
def test_the_reader_streams_a_hundred_thousand_results(tmp_path: Path) -> None:
    key = RunKey(b"k" * 32)
    file = tmp_path / "results.jsonl"
    body = _lines(key, 100_000)
    forged = json.dumps({"case": "forged.py", "outcome": "pass", "mac": "0" * 64}).encode()
    half = body.index(b"\n", len(body) // 2) + 1
    file.write_bytes(body[:half] + forged + b"\n" + body[half:] + b'{"case": "torn')
    skipped: list[str] = []
    tracemalloc.start()
    try:
        count, last, outcomes = 0, None, dict.fromkeys(Outcome, 0)
        for result in iter_results(file, key, skipped=skipped):
            count += 1
            outcomes[result.outcome] += 1
            last = result
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 100_000
    assert last is not None
    assert last.case == "test/python/test_f499.py::test_x[param-99999]"
    assert (outcomes[Outcome.PASS], outcomes[Outcome.SKIP], outcomes[Outcome.FAIL]) == (
        33_334,
        33_333,
        33_333,
    )
    line = body[:half].count(b"\n") + 1
    assert skipped == [
        f"{file}:{line}: MAC does not verify: a line the tool did not write",
        f"{file}:100002: not a JSON object (torn or foreign line)",
    ]
    assert peak < len(body) / 10  # line by line: never the whole file (or its results) at once


def test_a_line_of_an_older_version_still_verifies(tmp_path: Path) -> None:
    """Before #27 the MAC sat among the keys in sorted order; such a run still reads, and a line
    written now verifies the old way too (an older reader checks it by encoding it again)."""
    key = RunKey(b"k" * 32)
    old = CaseResult(case="old.py", outcome=Outcome.FAIL, reason="r").to_dict()
    old["mac"] = key.sign(old)
    file = tmp_path / "results.jsonl"
    new = key.signed_line(CaseResult(case="new.py", outcome=Outcome.PASS).to_line())
    file.write_bytes(json.dumps(old, sort_keys=True).encode() + b"\n" + new + b"\n")
    read = read_results(file, key)
    assert [r.case for r in read.results] == ["old.py", "new.py"]
    assert read.skipped == []
    assert key.verifies(json.loads(new))
    assert read.results[1] == CaseResult(case="new.py", outcome=Outcome.PASS)  # defaults back


def _pytest_line(key: RunKey, i: int, **extra: object) -> bytes:
    """A results line as a pytest batch writes it: the file, cell, run and start repeat."""
    result = CaseResult(
        case=f"test/python/test_f{i // 50:03d}.py::test_x[param-{i}]",
        outcome=Outcome.PASS,
        cell_id="6484915a09",
        cell={"cudnn": "9.24.0.43", "frontend": "1.27.0"},
        case_path=f"test/python/test_f{i // 50:03d}.py",
        run_id="20261204T205127Z-337085",
        started_at="2026-12-04T20:51:32+00:00",
        content_key=f"{i:016x}",
        duration_s=0.25 + i,
        **extra,  # type: ignore[arg-type]
    )
    return key.signed_line(result.to_line()) + b"\n"


def test_results_read_back_share_what_repeats_and_make_no_empty_mappings(tmp_path: Path) -> None:
    """A million results are read for one report (issue #27): a value the line before held too is
    one string, not a copy per result, and the mappings a line leaves out (units, env, api_logs)
    are one shared read-only empty mapping. The results stay equal to the ones written."""
    key = RunKey(b"k" * 32)
    file = tmp_path / "results.jsonl"
    count = 5_000
    file.write_bytes(
        b"".join(_pytest_line(key, i) for i in range(count))
        + _pytest_line(key, count, units={"call": 1.5}, env={"python": "3.12"})
    )
    tracemalloc.start()
    try:
        results = read_results(file, key).results
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    first, second, last = results[0], results[1], results[-1]
    assert len(results) == count + 1
    for name in ("case_path", "cell_id", "run_id", "started_at"):
        assert getattr(first, name) is getattr(second, name), name
    assert first.units == first.env == first.api_logs == {}
    assert first.units is second.env
    with pytest.raises(TypeError):
        first.units["call"] = 1.0  # type: ignore[index]
    assert (last.units, last.env, last.api_logs) == ({"call": 1.5}, {"python": "3.12"}, {})
    written = [CaseResult.from_dict(json.loads(line)) for line in file.read_bytes().splitlines()]
    assert results == written  # every field as written, the defaults given back
    assert first.to_dict()["units"] == {}
    assert type(first.to_dict()["env"]) is dict  # a copy that json encodes
    json.dumps(first.to_dict())
    # what each result holds: ~1,690 bytes with a copy of every repeated string, three empty
    # dicts and the decoded object's oversized table (04127df); ~1,030 without
    assert held / len(results) < 1_250, held / len(results)
