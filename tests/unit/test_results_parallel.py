"""The reader with line MACs checked on a second core (results/parallel.py, issue #27): the same
results and the same skipped lines as the serial reader, whatever the child does.

Every test forces the parallel path (no size threshold, small blocks, two cores) and compares it
with the serial reader over the same file; a counting `verifies_line` shows which lines the
reader checked itself, so a test of the child's work fails where the child does none.
"""

from __future__ import annotations

import json
import os
import time
from typing import IO, TYPE_CHECKING

import pytest

from validate.errors import ResultsError
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, RunKey, parallel, read_results
from validate.model.results.parallel import _HEAD, _read_exact, _write_all

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

KEY = RunKey(b"k" * 32)
FORGED = json.dumps({"case": "forged.py", "outcome": "pass", "mac": "0" * 64}).encode()


def _good(i: int, reason: str = "") -> bytes:
    outcome = (Outcome.PASS, Outcome.FAIL, Outcome.SKIP)[i % 3]
    result = CaseResult(case=f"t.py::test_{i}", outcome=outcome, reason=reason, cell_id="c1")
    return KEY.signed_line(result.to_line())


def _older(i: int) -> bytes:
    """A line as versions before #27 signed it: the MAC among the keys (not vouched for)."""
    data = CaseResult(case=f"old.py::test_{i}", outcome=Outcome.PASS).to_dict()
    data["mac"] = KEY.sign(data)
    return json.dumps(data, sort_keys=True).encode()


def _file(tmp_path: Path, lines: list[bytes], tail: bytes = b"") -> Path:
    file = tmp_path / "results.jsonl"
    file.write_bytes(b"".join(line + b"\n" for line in lines) + tail)
    return file


def _hostile(tmp_path: Path) -> tuple[Path, set[bytes]]:
    """200 good lines and, among them, a forged line, an older line, a blank line, a line longer
    than a block, and a torn last line; with the lines the reader must check itself."""
    lines = [_good(i) for i in range(200)]
    lines[5] = _good(5, reason="x" * 5000)  # longer than a block: read across several
    lines[60:60] = [FORGED]
    lines[120:120] = [_older(1), b""]
    torn = b'{"case": "half'
    return _file(tmp_path, lines, tail=torn), {FORGED, _older(1), b"", torn}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """The parallel path for any file, blocks of 1 KiB, no sampling; the lines the reader (this
    process) checks itself are recorded. Fails the test unless every read started a child."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "_BLOCK", 1024)
    monkeypatch.setattr(parallel, "_cores", lambda: 2)
    monkeypatch.setattr(parallel, "_alone", lambda: True)  # an earlier test's thread may linger
    monkeypatch.setattr(parallel, "_sample", lambda _count: range(0))
    started: list[bool] = []
    start = parallel._Child.start

    def starting(stream: IO[bytes], key: RunKey | None) -> parallel._Child | None:
        child = start(stream, key)
        started.append(child is not None)
        return child

    monkeypatch.setattr(parallel._Child, "start", starting)
    checked: list[bytes] = []
    pid = os.getpid()
    verifies_line = RunKey.verifies_line

    def counting(self: RunKey, raw: bytes) -> bool:
        if os.getpid() == pid:
            checked.append(raw)
        return verifies_line(self, raw)

    monkeypatch.setattr(RunKey, "verifies_line", counting)
    yield checked
    assert started, "no read of the test took the parallel path"
    assert all(started), "a read of the test did not start its child"


def _serial(file: Path, checked: list[bytes]) -> tuple[list[CaseResult], list[str]]:
    """What the serial reader makes of `file` (the lines it checks are not recorded)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel._Child, "start", lambda *_: None)
        try:
            read = read_results(file, KEY)
        finally:
            checked.clear()
    return read.results, read.skipped


def test_the_child_checks_the_macs_and_the_reader_reads_as_serially(
    tmp_path: Path, forced: list[bytes]
) -> None:
    file, bad = _hostile(tmp_path)
    serial = _serial(file, forced)
    read = read_results(file, KEY)
    assert (read.results, read.skipped) == serial
    assert len(read.results) == 201
    assert read.skipped == [
        f"{file}:61: MAC does not verify: a line the tool did not write",
        f"{file}:204: not a JSON object (torn or foreign line)",
    ]
    # the reader checked only the lines the child did not vouch for: the 200 good ones it did
    assert set(forced) <= bad
    assert FORGED in forced


def test_a_line_of_a_newer_schema_is_refused_as_serially(
    tmp_path: Path, forced: list[bytes]
) -> None:
    future = CaseResult(case="b.py", outcome=Outcome.PASS).to_line()
    future["schema"] = 99
    file = _file(tmp_path, [*(_good(i) for i in range(30)), KEY.signed_line(future)])
    with pytest.raises(ResultsError) as serial:
        _serial(file, forced)
    with pytest.raises(ResultsError) as got:
        read_results(file, KEY)
    assert str(got.value) == str(serial.value)
    assert f"{file}:31: written by a newer cudnn-matrix (results schema 99" in str(got.value)
    assert forced == []  # the child vouched for every MAC; the reader still refused the line


def _answers_once_then(after: Callable[[], None]) -> Callable[[RunKey, int, int], None]:
    """A child that answers the first block right, then does `after` (exit, hang)."""

    def serve(key: RunKey, source: int, answers: int) -> None:
        head = _read_exact(source, _HEAD.size, None)
        assert head is not None
        number, size = _HEAD.unpack(head)
        body = _read_exact(source, size, None)
        assert body is not None
        verdicts = bytes(map(key.verifies_line, body.split(b"\n")))
        _write_all(answers, _HEAD.pack(number, len(verdicts)) + verdicts)
        after()

    return serve


def _vouching_for_all(shift: int, cut: int) -> Callable[[RunKey, int, int], None]:
    """A child that vouches for every line, forged or not, its answers numbered `shift` off and
    `cut` verdicts short: the reader must take none of them."""

    def serve(key: RunKey, source: int, answers: int) -> None:  # noqa: ARG001
        while (head := _read_exact(source, _HEAD.size, None)) is not None:
            number, size = _HEAD.unpack(head)
            body = _read_exact(source, size, None)
            assert body is not None
            verdicts = b"\x01" * (body.count(b"\n") + 1 - cut)
            _write_all(answers, _HEAD.pack(number + shift, len(verdicts)) + verdicts)

    return serve


CHILDREN = {
    "exits after one block": _answers_once_then(lambda: None),
    "hangs after one block": _answers_once_then(lambda: time.sleep(60)),
    "answers out of turn": _vouching_for_all(shift=1, cut=0),
    "answers short": _vouching_for_all(shift=0, cut=1),
}


@pytest.mark.parametrize("kind", sorted(CHILDREN))
def test_a_child_that_fails_leaves_the_reader_to_check_every_line_itself(
    tmp_path: Path, forced: list[bytes], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(parallel, "_serve", CHILDREN[kind])
    monkeypatch.setattr(parallel, "_PATIENCE_S", 0.5)
    file, bad = _hostile(tmp_path)
    serial = _serial(file, forced)
    read = read_results(file, KEY)
    assert (read.results, read.skipped) == serial
    assert f"{file}:61: MAC does not verify: a line the tool did not write" in read.skipped
    # after the child's failure the reader checked every later line itself
    assert set(forced) - bad >= {_good(i) for i in range(100, 200)}


def test_a_child_that_vouches_for_a_forged_line_is_caught_by_the_sample(
    tmp_path: Path, forced: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parallel, "_serve", _vouching_for_all(shift=0, cut=0))
    monkeypatch.setattr(parallel, "_sample", lambda count: range(count))
    file, _ = _hostile(tmp_path)
    serial = _serial(file, forced)
    read = read_results(file, KEY)
    assert (read.results, read.skipped) == serial
    assert "forged.py" not in {r.case for r in read.results}
    assert forced
