"""A model call as the widgets see it: its request record and the rows derived from it, live or stored.

Why: the gauge and the inspector must show a RequestView built a moment ago by the loop and a request
row read back from DuckDB months later in exactly the same way. Both are one `RequestRecord`
(`mxclaw_nb.records`: the loop builds it with `record_of_view`, the store reads it back with
`store.records.record_from_row`), so the figures and their T3 labels come from one place. `CallData` adds
only what a display derives from a record: the before/after rows (rebuilt from the lineage and the
stored transcript, SPEC N3, or the view's own provenance), the messages a row opens, and where the tail
starts among the rows. The before/after DataFrames and the per-layer split are computed from it once,
here, so no widget re-derives them differently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from mxclaw_nb.context import ACTIONS, LAYERS, Lineage, RequestView, lineage_messages, lineage_rows, message_layer
from mxclaw_nb.messages import SYSTEM_ROLES, Message, modernize_legacy_calls
from mxclaw_nb.records import RequestRecord, record_of_view
from mxclaw_nb.store.records import opt_int, record_from_row, records_frame

__all__ = ["AFTER_COLUMNS", "BEFORE_COLUMNS", "BY_CALL", "CallData", "after_frame", "before_frame", "call_data",
           "from_request", "from_view", "layer_split", "opt_int", "requests_from_views", "stored_lineage",
           "table_choices", "table_columns", "table_rows"]

BEFORE_COLUMNS = ["position", "role", "tool", "tokens_before", "tokens_after", "action", "failure", "preview"]
AFTER_COLUMNS = ["position", "source", "role", "tool", "tokens", "action", "preview"]
BY_CALL = "by_call"  # N3 rows only: the call of the turn that did it (a carried summary or placeholder)


@dataclass(frozen=True)
class CallData:
    """One model call as the gauge and the inspector show it: the record and the rows derived from it."""

    record: RequestRecord
    before: list[dict[str, Any]]  # MessageRecord dicts (transcript side)
    after: list[dict[str, Any]]  # SentRecord dicts (sent side)
    tail_start: int | None = None  # `position` of the first safe-tail row of `before`
    inputs: Sequence[Any] | None = field(default=None, repr=False)  # the messages `before` positions index
    sent: Sequence[Message] | None = field(default=None, repr=False)  # what was sent (live, or from a lineage)
    # SPEC N3: set when the rows are relative to the stored transcript (before = stored messages up to the call)
    carried: str | None = None  # "unchanged · carries the summary of call 1 and 2 placeholders"
    summaries: tuple[tuple[int, str], ...] = ()  # (call, text) of every summary or fallback note sent
    transcript_relative: bool = False

    @property
    def row_counter(self) -> str:
        """Counter of the per-message rows and the layer split.

        Transcript-relative rows (N3) are C1 estimates of each stored and sent message, whatever counter
        decided the stage; a call's own provenance rows are in the counter that decided it.
        """
        return "estimate" if self.transcript_relative else self.record.counter

    def with_record(self, **changes: Any) -> CallData:
        """The same call with record fields changed (e.g. the provider's reported usage once it is known)."""
        return replace(self, record=replace(self.record, **changes))


def _lineage_fields(lineage: Lineage | None, transcript: Sequence[Message] | None,
                    sent: Sequence[Message] | None = None) -> dict[str, Any] | None:
    """Before/after rows and the carried description from a lineage and the stored transcript (N3); `sent`:
    what was sent when known (a live view), else rebuilt from the lineage."""
    if lineage is None or transcript is None:
        return None
    try:
        rows = lineage_rows(lineage, transcript)
        if sent is None:  # a stored call: rebuilt, so its After rows open what the model got
            sent = lineage_messages(lineage, transcript)
    except (ValueError, KeyError, IndexError):
        return None  # a transcript that does not match the record: show the view's own provenance
    return {"before": rows["before"], "after": rows["after"], "carried": lineage.describe(), "sent": sent,
            "summaries": tuple(lineage.summaries()), "transcript_relative": True,
            "inputs": list(transcript[: lineage.upto]), "tail_start": lineage.tail_start}


def call_data(record: RequestRecord, transcript: Sequence[Message] | None = None, *,
              view: RequestView | None = None) -> CallData:
    """CallData of a record: N3 rows from its lineage and the stored `transcript` when both are there, else
    the view's own provenance rows (relative to the call's input), else none."""
    n3 = _lineage_fields(record.lineage, transcript, view.messages if view is not None else None)
    if n3 is not None:
        return CallData(record, **n3)
    provenance = record.provenance if record.provenance is not None or view is None else view.provenance
    rows = provenance.to_records() if provenance is not None else {"before": [], "after": []}
    tail = record.tail_start
    if tail is None and record.stage == "summary" and view is None:
        tail = _tail_from_after(rows["after"])
    inputs = view.trace.inputs if view is not None and view.trace is not None else None
    return CallData(record, rows["before"], rows["after"], tail, inputs, view.messages if view is not None else None)


def from_view(view: RequestView, *, turn: int | None = None, iteration: int | None = None,
              reported_prompt_tokens: int | None = None, calibrated_tokens: int | None = None) -> CallData:
    """CallData of a live RequestView: its record (`record_of_view`, as the loop stores it) and rows."""
    if not isinstance(view, RequestView):
        raise TypeError(f"expected a RequestView, got {type(view).__name__}")
    lineage = view.lineage if isinstance(view.lineage, Lineage) and view.lineage.live else None
    if iteration is None and lineage is not None and lineage.transcript is not None:
        iteration = lineage.call  # the lineage knows which call of its turn this is
    record = record_of_view(view, turn=turn, iteration=iteration, prompt_tokens_reported=reported_prompt_tokens,
                            calibrated_tokens=calibrated_tokens)
    return call_data(record, lineage.transcript if lineage is not None else None, view=view)


def _tail_from_after(after: list[dict[str, Any]]) -> int | None:
    for rec in after:
        if rec.get("role") not in ("system", "developer") and rec.get("source") is not None:
            return int(rec["source"])
    return None


def stored_lineage(row: Mapping[str, Any] | pd.Series, transcript: Sequence[Message] | None = None
                   ) -> Lineage | None:
    """The N3 lineage a stored request record carries (`extra.lineage`), read against the session's stored
    `transcript`; None for older records (or one that needs the transcript and got none)."""
    return record_from_row(row, transcript).lineage


def from_request(row: Mapping[str, Any] | pd.Series, transcript: Sequence[Message] | None = None) -> CallData:
    """CallData of one stored request record (a `store.requests(sid)` row or a plain dict).

    With the session's stored `transcript`, and a record that carries its lineage (N3), the rows are the
    stored transcript up to the call with transcript-relative actions; otherwise the record's own (format 3)
    provenance, relative to the call's input.
    """
    if transcript is None:
        transcript = _stored_transcript(row)
    return call_data(record_from_row(row, transcript), transcript)


def _stored_transcript(row: Mapping[str, Any] | pd.Series) -> list[Message] | None:
    """The transcript of the row's session from an open store of this process (the one `%agent` uses), so a
    row from `%agent sql` or `store.requests()` opens the full inspector as `%agent view` does (N3)."""
    from mxclaw_nb.store.writer import open_stores

    sid = row.get("session_id")
    if not isinstance(sid, str) or not sid:
        return None
    for store in open_stores():
        try:
            if store.has_session(sid):
                return modernize_legacy_calls(store.load_transcript(sid))  # as the engine read it (C4)
        except Exception:  # a store closed or busy meanwhile: the record's own provenance still shows
            continue
    return None


def _preview(rec: Mapping[str, Any]) -> str:
    text, chars = str(rec.get("preview") or ""), opt_int(rec.get("chars")) or 0
    return f"{text} ({chars:,} chars)" if chars > len(text) or text.endswith("…") else text


def _before_row(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"position": r.get("position"), "role": r.get("role"), "tool": r.get("tool_name"),
            "tokens_before": r.get("tokens_before", 0), "tokens_after": r.get("tokens_after", 0),
            "action": r.get("action"), "failure": bool(r.get("failure")), "preview": _preview(r)}


def _after_row(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"position": r.get("position"), "source": r.get("source"), "role": r.get("role"),
            "tool": r.get("tool_name"), "tokens": r.get("tokens", 0), "action": r.get("action"),
            "preview": _preview(r)}


def before_frame(data: CallData) -> pd.DataFrame:
    """The *before* table: one row per transcript message and what happened to it."""
    df = pd.DataFrame([_before_row(r) for r in data.before], columns=BEFORE_COLUMNS)
    df = df.astype({"position": "Int64", "tokens_before": "int64", "tokens_after": "int64", "failure": "bool"})
    if data.transcript_relative:
        df[BY_CALL] = pd.array([r.get("call") for r in data.before], dtype="Int64")
    return df


def after_frame(data: CallData) -> pd.DataFrame:
    """The *after* table: one row per sent message and where it came from."""
    df = pd.DataFrame([_after_row(r) for r in data.after], columns=AFTER_COLUMNS)
    df = df.astype({"position": "int64", "source": "Int64", "tokens": "int64"})
    if data.transcript_relative:
        df[BY_CALL] = pd.array([r.get("call") for r in data.after], dtype="Int64")
    return df


# how a frame column gives its values back (`to_dict("records")`): whole numbers, nullable whole numbers, text
_INTS = {"before": ("tokens_before", "tokens_after"), "after": ("position", "tokens")}
_NULLABLE_INTS = {"before": ("position", BY_CALL), "after": ("source", BY_CALL)}
_TEXTS = ("role", "tool", "action")


def table_columns(data: CallData, which: str) -> list[str]:
    """The columns of `before_frame(data)` (`which="before"`) or `after_frame(data)`."""
    cols = BEFORE_COLUMNS if which == "before" else AFTER_COLUMNS
    return [*cols, BY_CALL] if data.transcript_relative else list(cols)


def table_rows(data: CallData, which: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` rows of `before_frame(data)` (`which="before"`) or `after_frame(data)` with the values
    its `to_dict("records")` gives (int, None for a missing whole number, NaN for missing text), without making
    the frame: the inspector's static HTML shows a dozen rows of a call's hundreds (S4)."""
    if which not in ("before", "after"):
        raise ValueError("which must be 'before' or 'after'")
    records = data.before if which == "before" else data.after
    make = _before_row if which == "before" else _after_row
    ints, nullable = _INTS[which], _NULLABLE_INTS[which]
    out = []
    for r in records[:limit]:
        row = make(r)
        if data.transcript_relative:
            row[BY_CALL] = r.get("call")
        for col in ints:
            row[col] = int(row[col])
        for col in nullable:
            if col in row:
                v = row[col]
                row[col] = None if v is None or v is pd.NA or v != v else int(v)
        for col in _TEXTS:
            if row[col] is None:
                row[col] = math.nan
        out.append(row)
    return out


def table_choices(data: CallData) -> dict[str, list[str]]:
    """The roles (sorted) and actions (in ACTIONS order) of the call's before and after rows, as the inspector's
    filters offer them."""
    rows = [*data.before, *data.after]
    roles = {str(v) for r in rows if (v := r.get("role")) is not None and v is not pd.NA and v == v}
    present = {str(r.get("action")) for r in rows}
    return {"role": sorted(roles), "action": [a for a in ACTIONS if a in present]}


def _layer_of(rec: Mapping[str, Any]) -> str:
    # Frozen-context layers announce themselves on their first line, which the preview keeps.
    if rec.get("action") == "summary":
        return "summaries"
    tool = rec.get("tool_name")  # K1: kernel outputs are told apart by their call's tool name
    return message_layer({"role": rec.get("role"), "content": str(rec.get("preview") or "")},
                         str(tool) if tool is not None else None)


def layer_split(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
    """Tokens per context layer (all LAYERS present) from provenance records, using `key` as tokens.

    S4: a message's layer is read from its text only for a system role (frozen-context layers announce
    themselves on their first line); any other row's layer follows from its role and tool, found once per pair."""
    out = dict.fromkeys(LAYERS, 0)
    by_role: dict[tuple[Any, Any], str] = {}
    for rec in records:
        role, tool, action = rec.get("role"), rec.get("tool_name"), rec.get("action")
        if action == "summary" or role in SYSTEM_ROLES:
            layer = _layer_of(rec)
        else:
            layer = by_role.get((role, tool)) or by_role.setdefault((role, tool), _layer_of(rec))
        n = rec.get(key)
        out[layer] += n if n.__class__ is int else opt_int(n) or 0
    return out


def requests_from_views(views: Sequence[RequestView], turns: Sequence[int] | None = None) -> pd.DataFrame:
    """A `store.requests()`-shaped DataFrame from views (replays, tests); `turns[i]` is view i's turn (default 1).

    Each row is the view's `record_of_view`, laid out by the store's own codec (same columns, same JSON)."""
    records, last_turn, it = [], None, 0
    for i, view in enumerate(views):
        turn = 1 if turns is None else int(turns[i])
        it = it + 1 if turn == last_turn else 1
        last_turn = turn
        records.append(record_of_view(view, turn=turn, iteration=it))
    return records_frame(records)
