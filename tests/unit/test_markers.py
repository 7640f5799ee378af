"""resources/markers.py: which id a process was running when it died, read back from its file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from validate.execute.resources.markers import Markers, abandon, unfinished

if TYPE_CHECKING:
    from pathlib import Path


def test_the_id_started_last_without_an_end_is_the_one_running(tmp_path: Path) -> None:
    path = str(tmp_path / "record.jsonl")
    markers = Markers(path)
    markers.start("a")
    markers.done("a")
    assert unfinished(path) is None  # between two ids
    markers.write({"ev": "item", "id": "x"})  # a kind's own lines do not count
    markers.start("b", t=1.0)
    assert unfinished(path) == "b"
    with open(path, "ab") as fh:  # noqa: PTH123 - a torn last line, as a kill leaves it
        fh.write(b'{"ev": "do')
    assert unfinished(path) == "b"


def test_an_abandoned_process_was_running_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "record.jsonl")
    Markers(path).start("a")
    abandon(path)
    assert unfinished(path) is None
    assert unfinished(str(tmp_path / "missing.jsonl")) is None
