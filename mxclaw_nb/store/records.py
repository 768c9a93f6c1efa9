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
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mxclaw_nb.context.lineage import Lineage
from mxclaw_nb.context.view import Provenance
from mxclaw_nb.messages import Message
from mxclaw_nb.records import RequestRecord
from mxclaw_nb.store.codec import dumps_text, text
from mxclaw_nb.store.provenance import decode_lineage, decode_provenance, encode_lineage, encode_provenance

if TYPE_CHECKING:
    import pandas as pd

# The `requests` columns between the key (session_id, seq) and (extra, created_at), in table order.
REQUEST_FIELDS = (
    "turn", "iteration", "model", "base_url", "counter", "estimate_tokens", "calibrated_tokens",
    "before_tokens", "after_tokens", "threshold", "window_tokens", "stage", "prompt_tokens_reported",
    "completion_tokens_reported", "latency_ms", "error", "summary", "provenance", "retry",
    "cached_tokens_reported", "cache_write_tokens_reported", "prefix_tokens",  # E1, E2 (migration 2)
    "purpose",  # C11: NULL for a turn's call, 'summary' for a summary call (migration 3)
)
FRAME_COLUMNS = ("session_id", "seq", *REQUEST_FIELDS, "extra", "created_at")  # store.requests() order
# RequestRecord fields kept in the `extra` JSON column (besides any unknown key a record carries)
EXTRA_FIELDS = ("tail_start", "compactor_error", "engine_ms", "lineage")
_INTS = ("turn", "iteration", "estimate_tokens", "calibrated_tokens", "before_tokens", "after_tokens", "threshold",
         "window_tokens", "prompt_tokens_reported", "completion_tokens_reported", "seq", "cached_tokens_reported",
         "cache_write_tokens_reported", "prefix_tokens")
_TEXTS = ("model", "base_url", "error", "summary", "session_id", "purpose")
_KNOWN = {f.name for f in fields(RequestRecord)}


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
    """The record's column values for the `requests` table: JSON columns as JSON text, `extra` holding
    tail_start, the compactor error and the lineage (N3); the view's own provenance only without a lineage.
    `redact` (e.g. `secrets.redact_obj`) is applied to the JSON-able values before encoding."""
    extra: dict[str, Any] = {k: v for k, v in record.extra.items() if k not in _KNOWN}
    if record.tail_start is not None:
        extra["tail_start"] = record.tail_start
    if record.compactor_error is not None:
        extra["compactor_error"] = record.compactor_error
    if record.engine_ms is not None:
        extra["engine_ms"] = record.engine_ms
    if record.lineage is not None:
        extra["lineage"] = encode_lineage(record.lineage)
    provenance = (encode_provenance(record.provenance)
                  if record.provenance is not None and record.lineage is None else None)
    row: dict[str, Any] = {k: getattr(record, k) for k in REQUEST_FIELDS if k != "provenance"}
    row["provenance"], row["extra"] = provenance, extra
    if redact is not None:
        row = redact(row)
    out = {k: text(row[k]) for k in REQUEST_FIELDS}
    out["provenance"] = None if row["provenance"] is None else dumps_text(row["provenance"], "provenance")
    out["retry"] = bool(row["retry"])
    out["extra"] = dumps_text(row["extra"], "extra request fields") if row["extra"] else None
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
    retry = get("retry")
    created = get("created_at")
    given: dict[str, Any] = {k: opt_int(get(k)) for k in _INTS} | {k: _opt_text(get(k)) for k in _TEXTS}
    return RequestRecord(
        **given,
        counter=str(get("counter") or "estimate"), stage=str(get("stage") or "unchanged"),
        latency_ms=_opt_float(get("latency_ms")), retry=False if _missing(retry) else bool(retry),
        compactor_error=_opt_text(moved["compactor_error"]), tail_start=opt_int(moved["tail_start"]),
        engine_ms=_opt_float(moved["engine_ms"]),
        lineage=lineage, provenance=provenance, extra=extra,
        created_at=created if isinstance(created, datetime) else None)


def _missing(value: Any) -> bool:
    return value is None or _is_na(value) or (isinstance(value, float) and math.isnan(value))
