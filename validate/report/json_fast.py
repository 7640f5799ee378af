"""The JSON report's ``results`` entries, one compact line each, without a dict per result.

``json_._result`` is the entry as data (``CaseResult.to_dict`` plus the report's keys); encoding
a million of those dicts with the json module was most of the cost of a JSON report (issue #27).
Here a result whose fields are the ones this module knows, with no exception, env, api_logs or
units, is written from pre-encoded pieces: the text json's compact encoder would give for that
dict, byte for byte (tests/unit/test_report_json_fast.py compares the two). Any other result
goes through the dict and the encoder.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, Final

from validate.judge.signoff import passed_on_rerun
from validate.model.results import SCHEMA_VERSION, CaseResult, cell_label, result_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from validate.report.model import StoredResult

__all__ = ["FIELDS", "ResultLines", "compact"]

#: One encoder for every entry: json.dumps with options builds a new one per call.
_ENCODER: Final = json.JSONEncoder(default=str, separators=(",", ":"))


def compact(value: Any) -> str:
    """`value` as one line of JSON (the report's compact form)."""
    return _ENCODER.encode(value)


#: The CaseResult fields the pieces below spell out, in to_dict's order.
FIELDS: Final = (
    "case",
    "outcome",
    "reason",
    "duration_s",
    "cell_id",
    "cell",
    "case_path",
    "exit_code",
    "signal",
    "exception",
    "tail",
    "log_path",
    "api_logs",
    "env",
    "attempts",
    "flaky",
    "known_issue",
    "ki_note",
    "started_at",
    "run_id",
    "content_key",
    "contention",
    "units",
)
#: False when CaseResult's fields are not FIELDS: then every result takes the dict's way.
_KNOWN: Final = tuple(CaseResult.__dataclass_fields__) == FIELDS
_SCHEMA: Final = compact(SCHEMA_VERSION)


class _Memo(dict[Any, str]):
    """Value -> its JSON text, for values that repeat (reasons, outcomes, pins, timestamps).
    Only strings and None are kept: 1, 1.0 and True are equal keys but not the same text."""

    def __missing__(self, value: Any) -> str:
        text = compact(value)
        if type(value) is str or value is None:
            self[value] = text
        return text


class _Floats(dict[Any, str]):
    """A duration -> its JSON text; only floats are kept (see _Memo)."""

    def __missing__(self, value: Any) -> str:
        text = compact(value)
        if type(value) is float:
            self[value] = text
        return text


#: The fields (and the cell label) whose values repeat across results: their text is kept.
_MEMOS: Final = (
    "reason",
    "case_path",
    "signal",
    "known_issue",
    "ki_note",
    "started_at",
    "run_id",
    "contention",
    "cell_id",
    "label",
)


class ResultLines:
    """Encodes the entries of one report's ``results``; `line(item)` is `compact(slow(item))`."""

    def __init__(self, labels: Mapping[str, str], slow: Callable[[StoredResult], Any]) -> None:
        self._labels = labels
        self._slow = slow
        self._memo: dict[str, _Memo] = {name: _Memo() for name in _MEMOS}
        self._floats = _Floats()
        self._ints: dict[Any, str] = {}  # exit codes (None and ints only)
        self._cells: dict[tuple[tuple[Any, Any], ...], str] = {}
        self._runs: dict[int, str] = {}  # id(RunInfo) -> its path's JSON text
        self._outcomes: dict[Any, str] = {}
        self._attempts: dict[tuple[str, ...], str] = {(): "[]"}

    def line(self, item: StoredResult) -> str:
        r = item.result
        f = r.__dict__
        if (
            not _KNOWN
            or len(f) != len(FIELDS)
            or f["exception"] is not None
            or f["env"]
            or f["api_logs"]
            or f["units"]
            or type(f["flaky"]) is not bool
        ):
            return compact(self._slow(item))
        try:
            return self._line(item, r, f)
        except TypeError:  # a field of an unexpected type (a number for a string): the slow way
            return compact(self._slow(item))

    def _line(self, item: StoredResult, r: CaseResult, f: dict[str, Any]) -> str:
        m = self._memo
        s = encode_basestring_ascii
        cell = f["cell"]
        pins = tuple(cell.items())
        cell_text = self._cells.get(pins)
        if cell_text is None:
            cell_text = compact(dict(cell))
            if all(type(k) is str and type(v) is str for k, v in pins):
                self._cells[pins] = cell_text
        run = self._runs.get(id(item.run))
        if run is None:
            run = self._runs[id(item.run)] = compact(str(item.run.path))
        exit_code = f["exit_code"]
        if exit_code is None:
            exit_text = "null"
        elif type(exit_code) is int:
            exit_text = self._ints.get(exit_code) or self._ints.setdefault(
                exit_code, compact(exit_code)
            )
        else:
            exit_text = compact(exit_code)
        duration = f["duration_s"]
        outcome = self._outcomes.get(f["outcome"])
        if outcome is None:
            outcome = self._outcomes[f["outcome"]] = compact(str(f["outcome"]))
        attempts = f["attempts"]
        attempts_text = self._attempts.get(attempts)
        if attempts_text is None:
            attempts_text = compact(list(attempts))
            if all(type(a) is str for a in attempts):
                self._attempts[attempts] = attempts_text
        rerun = "false" if len(attempts) < 2 else compact(passed_on_rerun(r))
        label = self._labels.get(r.cell_id) or cell_label(r)
        return (
            f'{{"case":{s(f["case"])},"outcome":{outcome},'
            f'"reason":{m["reason"][f["reason"]]},'
            f'"duration_s":{self._floats[duration] if type(duration) is float else compact(duration)},'
            f'"cell_id":{m["cell_id"][f["cell_id"]]},"cell":{cell_text},'
            f'"case_path":{m["case_path"][f["case_path"]]},"exit_code":{exit_text},'
            f'"signal":{m["signal"][f["signal"]]},"exception":null,'
            f'"tail":{s(f["tail"])},"log_path":{s(f["log_path"])},"api_logs":{{}},"env":{{}},'
            f'"attempts":{attempts_text},"flaky":{"true" if f["flaky"] else "false"},'
            f'"known_issue":{m["known_issue"][f["known_issue"]]},"ki_note":{m["ki_note"][f["ki_note"]]},'
            f'"started_at":{m["started_at"][f["started_at"]]},"run_id":{m["run_id"][f["run_id"]]},'
            f'"content_key":{s(f["content_key"])},"contention":{m["contention"][f["contention"]]},'
            f'"units":{{}},"schema":{_SCHEMA},"key":{s(result_key(r))},'
            f'"cell_label":{m["label"][label]},"run_dir":{run},"passed_on_rerun":{rerun}}}'
        )
