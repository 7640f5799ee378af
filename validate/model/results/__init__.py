"""Results of one run: the record (schema), its signing key (signing), the append-only store
(store) and the reader; every name importable from `validate.model.results` as before the split."""

from __future__ import annotations

from validate.model.results.durable import write_json
from validate.model.results.reader import (
    ReadResults,
    iter_records,
    iter_results,
    load_results,
    read_results,
)
from validate.model.results.schema import (
    SCHEMA_VERSION,
    CaseResult,
    axis_value,
    cell_label,
    is_bad,
    is_good,
    result_key,
)
from validate.model.results.signing import RUN_KEY_ENV, RunKey
from validate.model.results.store import MIN_FREE_BYTES, RESERVE_BYTES, ResultStore

__all__ = [
    "MIN_FREE_BYTES",
    "RESERVE_BYTES",
    "RUN_KEY_ENV",
    "SCHEMA_VERSION",
    "CaseResult",
    "ReadResults",
    "ResultStore",
    "RunKey",
    "axis_value",
    "cell_label",
    "is_bad",
    "is_good",
    "iter_records",
    "iter_results",
    "load_results",
    "read_results",
    "result_key",
    "write_json",
]
