"""A RequestRecord as a row of the `requests` table, and back (SPEC S1, S4, T3, N3).

Why here: the record is one dataclass from the loop to every reader (`mxclaw_nb.records`); how it is laid
out in DuckDB (which keys are columns, what goes in `extra`, how provenance is encoded) is the store's
business, so the writer, the readers (`%agent view`, the inspector, the browser) and the frames built
without a store (`requests_from_views`, a replay's `as_requests`) all go through these functions and
agree. Readers decode only the records they show; a record's lineage is decoded with the stored
transcript it refers to (`store.provenance`). No pandas at import (N1: a quick `%load_ext`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mxclaw_nb.context.lineage import Lineage
from mxclaw_nb.context.view import Provenance
from mxclaw_nb.messages import Message
from mxclaw_nb.records import COLUMN, EXTRA, KEY, RequestRecord, column_types, record_columns
from mxclaw_nb.store.codec import dumps_text, text
from mxclaw_nb.store.provenance import decode_lineage, decode_provenance, encode_lineage, encode_provenance

if TYPE_CHECKING:
    import pandas as pd

# Derived from the one declaration (`RequestRecord`'s fields, SPEC S1): the `requests` columns besides the key
# (session_id, seq, created_at) and `extra`, in table order; the DataFrame order of `store.requests()`; the
# fields kept in the `extra` JSON column; and how each column is read back, by its DuckDB type.
_COLUMNS = column_types()
REQUEST_FIELDS = tuple(c for c in record_columns() if c != "extra")
FRAME_COLUMNS = tuple(_COLUMNS)  # store.requests() order (the table's)
EXTRA_FIELDS = record_columns(EXTRA)
_INTS = tuple(c for c, sql in _COLUMNS.items() if sql in ("INTEGER", "BIGINT"))
_TEXTS = tuple(c for c, sql in _COLUMNS.items() if sql == "VARCHAR")
_FLOATS = tuple(c for c, sql in _COLUMNS.items() if sql == "DOUBLE")
_JSON = tuple(c for c, sql in _COLUMNS.items() if sql == "JSON")
_BOOLS = tuple(c for c, sql in _COLUMNS.items() if sql == "BOOLEAN")
_KNOWN = {f.name for f in fields(RequestRecord)}
_LABELS = {"extra": "extra request fields"}  # how an error names a JSON column that cannot be encoded


def opt_int(value: Any) -> int | None:
    """An int, or None for None/NaN/pd.NA/empty values."""
    if value is None:
        return None
    try:
        if isinstance(value, float) and math.isnan(value):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def _opt_float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _opt_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any, what: str) -> Any:
    if _missing(value):
        return None
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the request's {what} column is not valid JSON: {exc}") from exc
    return value


def _is_na(value: Any) -> bool:
    return type(value).__name__ == "NAType"  # pandas' NA, without importing pandas


# -- record -> row ------------------------------------------------------------------------------------------


def as_record(record: RequestRecord | Mapping[str, Any]) -> RequestRecord:
    """A RequestRecord from itself or from a mapping of its fields (a row read back, a hand-made dict).

    Unknown keys go to `extra`; `provenance`/`lineage` may be engine objects or their stored JSON forms."""
    if isinstance(record, RequestRecord):
        return record
    if not isinstance(record, Mapping):
        raise ValueError(f"a request record must be a RequestRecord or a mapping, not {type(record).__name__}")
    return record_from_row(record)


def row_values(record: RequestRecord, *, redact: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The record's column values for the `requests` table (its declared columns besides the key): JSON
    columns as JSON text, `extra` holding the fields declared to live there (tail_start, the compactor error,
    the engine time, the lineage, N3) after any other key the record carries; the view's own provenance
    (format 3) only without a lineage. `redact` (e.g. `secrets.redact_obj`) is applied to the JSON-able values
    before encoding."""
    extra: dict[str, Any] = {k: v for k, v in record.extra.items() if k not in _KNOWN}
    for k in EXTRA_FIELDS:
        if (value := getattr(record, k)) is not None:
            extra[k] = encode_lineage(value) if k == "lineage" else value
    row: dict[str, Any] = {k: getattr(record, k) for k in REQUEST_FIELDS if k != "provenance"}
    row["provenance"] = (encode_provenance(record.provenance)
                         if record.provenance is not None and record.lineage is None else None)
    row["extra"] = extra
    if redact is not None:
        row = redact(row)
    out = {k: text(row[k]) for k in REQUEST_FIELDS}
    for k in _BOOLS:
        out[k] = bool(row[k])
    for k in _JSON:
        out[k] = dumps_text(row[k], _LABELS.get(k, k)) if row[k] else None
    return out


def records_frame(records: Sequence[RequestRecord], *, session_id: str | None = None) -> pd.DataFrame:
    """A `store.requests()`-shaped DataFrame of records that were never stored (a replay, live views):
    the same columns and JSON text, so every reader of stored records reads these too."""
    import pandas as pd

    rows = [frame_row(rec, k, session_id) for k, rec in enumerate(records)]
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def frame_row(record: RequestRecord, k: int = 0, session_id: str | None = None) -> dict[str, Any]:
    """One row of `records_frame` (the `k`-th record; `session_id` when the record names none)."""
    return {"session_id": record.session_id if record.session_id is not None else session_id,
            "seq": record.seq if record.seq is not None else k, **row_values(record), "created_at": record.created_at}


# -- row -> record ------------------------------------------------------------------------------------------


def record_from_row(row: Mapping[str, Any] | pd.Series, transcript: Sequence[Message] | None = None
                    ) -> RequestRecord:
    """The RequestRecord of one stored row (`store.requests()` row, Series or dict).

    The lineage (N3) is decoded against the session's stored `transcript`; without it a lineage that needs
    it (a run of C5 placeholders) is left out, like one that cannot be read. Raises ValueError when a JSON
    column is not valid JSON or the provenance is not a stored provenance."""
    get = row.get
    extra = _json(get("extra"), "extra") or {}
    if not isinstance(extra, Mapping):
        raise ValueError("the request's extra column must be a JSON object")
    extra = dict(extra)
    moved = {k: extra.pop(k) if k in extra else get(k) for k in EXTRA_FIELDS}  # extra keys, or a dict's own
    lineage = moved["lineage"]
    if lineage is not None and not isinstance(lineage, Lineage):  # its stored form
        try:
            lineage = decode_lineage(lineage, transcript)
        except ValueError:
            lineage = None
    provenance = get("provenance")
    if provenance is not None and not isinstance(provenance, Provenance):
        stored = _json(provenance, "provenance")
        if stored is not None and not isinstance(stored, Mapping):
            raise ValueError("the request's provenance must be a JSON object with 'before' and 'after' lists")
        provenance = decode_provenance(dict(stored)) if stored is not None else None
    for key in row.keys():  # noqa: SIM118 - a Series iterates values; any other key a dict carries
        if key not in _KNOWN and key != "extra" and not _missing(value := get(key)):
            extra.setdefault(str(key), value)
    values = {k: decode(get(k)) for k, decode in _DECODE.items()}
    values |= {k: decode(moved[k]) for k, decode in _DECODE_EXTRA.items()}
    return RequestRecord(**{k: v if v is not None or k not in _DEFAULTS else _DEFAULTS[k] for k, v in values.items()},
                         lineage=lineage, provenance=provenance, extra=extra)


def _missing(value: Any) -> bool:
    return value is None or _is_na(value) or (isinstance(value, float) and math.isnan(value))


def _opt_bool(value: Any) -> bool | None:
    return None if _missing(value) else bool(value)


def _opt_time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _opt_nonempty(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# How a stored value of each declared type is read back (None: missing or not of the type).
_READ: dict[str, Callable[[Any], Any]] = {"INTEGER": opt_int, "BIGINT": opt_int, "VARCHAR": _opt_text,
                                          "DOUBLE": _opt_float, "BOOLEAN": _opt_bool, "TIMESTAMP": _opt_time}
_DECODE = {f.name: _READ[f.metadata["sql"]] for f in fields(RequestRecord)
           if f.metadata.get("where") in (COLUMN, KEY) and f.metadata["sql"] != "JSON"}
_DECODE_EXTRA = {f.name: _READ[f.metadata["sql"]] for f in fields(RequestRecord)
                 if f.metadata.get("where") == EXTRA and f.metadata["sql"] != "JSON"}
# A field with a non-None default (counter, stage, retry) takes it when the stored value is missing or empty.
_DEFAULTS = {f.name: f.default for f in fields(RequestRecord) if f.default is not None and f.default is not MISSING}
for _name in _DEFAULTS:
    if _DECODE.get(_name) is _opt_text:
        _DECODE[_name] = _opt_nonempty
