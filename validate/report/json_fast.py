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
import operator
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, Final

from validate.judge.signoff import passed_on_rerun
from validate.model.results import SCHEMA_VERSION, CaseResult, cell_label, result_key

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from validate.report.model import RunInfo, StoredResult

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


_FIELD_VALUES: Final = operator.itemgetter(*FIELDS)


class _Slow(Exception):  # not an error: the result takes the dict's way
    """A result the pieces do not spell out (an exception, env, api_logs or units)."""


#: The fields (and the cell label) whose values repeat across results: their text is kept;
#: the first eight in the order _line unpacks them.
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


class _Ints(dict[int, str]):
    """An exit code (an int, not a bool) -> its JSON text."""

    def __missing__(self, value: int) -> str:
        text = self[value] = compact(value)
        return text


class _Outcomes(dict[Any, str]):
    """An outcome -> the JSON text of its str() (what to_dict writes)."""

    def __missing__(self, value: Any) -> str:
        text = self[value] = compact(str(value))
        return text


class _Attempts(dict[Any, str]):
    """The attempts (a tuple of outcomes) -> their JSON list; only tuples of strings are kept."""

    def __missing__(self, value: Any) -> str:
        text = compact(list(value))
        if all(type(a) is str for a in value):
            self[value] = text
        return text


class CellLabels(dict[str, str]):
    """Cell id -> the label of the first result met in that cell (the results' `cell_label`);
    asked of the results in their order."""

    def of(self, result: CaseResult) -> str:
        cell_id = result.cell_id
        if not cell_id:
            return cell_label(result)
        label = self.get(cell_id)
        if label is None:
            label = self[cell_id] = cell_label(result)
        return label or cell_label(result)


class ResultLines:
    """Encodes the entries of one report's ``results``, in their order: `line(item)` is
    `"    " + compact(slow(item, label))` (the entry's line in the report), label being
    CellLabels.of the result."""

    def __init__(self, slow: Callable[[StoredResult, str], Any]) -> None:
        self._labels = CellLabels()
        self._slow = slow
        self._memo: dict[str, _Memo] = {name: _Memo() for name in _MEMOS}
        self._memos = tuple(self._memo[name] for name in _MEMOS[:8])
        self._floats = _Floats()
        self._ints = _Ints()  # exit codes
        self._cells: dict[tuple[tuple[Any, Any], ...], str] = {}
        self._runs: dict[int, str] = {}  # id(RunInfo) -> its path's JSON text
        self._outcomes = _Outcomes()
        self._attempts = _Attempts()
        #: the last result's cell mapping, cell id and run, and the text they give (a run's
        #: results share one mapping per cell, and come cell by cell)
        self._last: tuple[object, object, object, str, str, str] = (None, None, None, "", "", "")

    def line(self, item: StoredResult) -> str:
        f = item.result.fields()  # a result read from a line holds only the fields it names
        if _KNOWN and len(f) == len(FIELDS):
            try:
                return self._line(item, _FIELD_VALUES(f))
            except (TypeError, _Slow):  # a field of a type the schema does not give it
                pass
        return "    " + compact(self._slow(item, self._labels.of(item.result)))

    def _cell(self, r: CaseResult, cell: Mapping[str, str], run: RunInfo) -> tuple[str, str]:
        """The `"cell_id":..,"cell":..` and the `"cell_label":..,"run_dir":..` of a result."""
        pins = tuple(cell.items())
        cell_text = self._cells.get(pins)
        if cell_text is None:
            cell_text = compact(dict(cell))
            if all(type(k) is str and type(v) is str for k, v in pins):
                self._cells[pins] = cell_text
        run_text = self._runs.get(id(run))
        if run_text is None:
            run_text = self._runs[id(run)] = compact(str(run.path))
        label = self._labels.of(r)
        return (
            f'"cell_id":{self._memo["cell_id"][r.cell_id]},"cell":{cell_text}',
            f'"cell_label":{self._memo["label"][label]},"run_dir":{run_text}',
        )

    def _line(self, item: StoredResult, values: tuple[Any, ...]) -> str:
        (case, outcome, reason, duration, cell_id, cell, case_path, exit_code, signal, exception,
         tail, log_path, api_logs, env, attempts, flaky, known_issue, ki_note, started_at, run_id,
         content_key, contention, units) = values  # fmt: skip
        if exception is not None or env or api_logs or units or type(flaky) is not bool:
            raise _Slow
        m_reason, m_path, m_signal, m_issue, m_note, m_started, m_run, m_contention = self._memos
        s = encode_basestring_ascii
        run = item.run
        last = self._last
        if cell is last[0] and cell_id == last[1] and run is last[2]:
            cell_text, place, cell_key = last[3], last[4], last[5]
        else:
            cell_text, place = self._cell(item.result, cell, run)
            if type(cell_id) is not str:
                raise _Slow
            cell_key = s(cell_id)
            self._last = (cell, cell_id, run, cell_text, place, cell_key)
        if exit_code is None:
            exit_text = "null"
        elif type(exit_code) is int:
            exit_text = self._ints[exit_code]
        else:
            exit_text = compact(exit_code)
        outcome_text = self._outcomes[outcome]
        attempts_text = self._attempts[attempts]
        rerun = "false" if len(attempts) < 2 else compact(passed_on_rerun(item.result))
        case_text = s(case)
        # result_key is `<cell_id>::<case>` where there is a cell id; JSON escapes character by
        # character, so its text is the two texts joined (without encoding the key again)
        key = cell_key[:-1] + "::" + case_text[1:] if cell_id else s(result_key(item.result))
        return (
            f'    {{"case":{case_text},"outcome":{outcome_text},"reason":{m_reason[reason]},'
            f'"duration_s":{self._floats[duration] if type(duration) is float else compact(duration)},'
            f'{cell_text},"case_path":{m_path[case_path]},"exit_code":{exit_text},'
            f'"signal":{m_signal[signal]},"exception":null,"tail":{s(tail)},'
            f'"log_path":{s(log_path)},"api_logs":{{}},"env":{{}},"attempts":{attempts_text},'
            f'"flaky":{"true" if flaky else "false"},"known_issue":{m_issue[known_issue]},'
            f'"ki_note":{m_note[ki_note]},"started_at":{m_started[started_at]},'
            f'"run_id":{m_run[run_id]},"content_key":{s(content_key)},'
            f'"contention":{m_contention[contention]},"units":{{}},"schema":{_SCHEMA},'
            f'"key":{key},{place},"passed_on_rerun":{rerun}}}'
        )
