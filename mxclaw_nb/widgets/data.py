"""One normalised shape for "a model call as the widgets see it", from a live view or a stored row.

Why: the gauge and the inspector must show a RequestView built a moment ago by the loop and a
request row read back from DuckDB months later in exactly the same way. Both carry the same facts
(DESIGN: the provenance is the one structure everything reads), but in different containers — a
frozen dataclass with lazy provenance versus a DataFrame row with the provenance as JSON text.
`CallData` is the common denominator, and the before/after DataFrames and the per-layer split are
computed from it once, here, so no widget re-derives them differently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from mxclaw_nb.context import (
    LAYERS,
    Lineage,
    RequestView,
    estimate_messages,
    lineage_rows,
    message_layer,
    provenance_rows,
)
from mxclaw_nb.messages import Message

BEFORE_COLUMNS = ["position", "role", "tool", "tokens_before", "tokens_after", "action", "failure", "preview"]
AFTER_COLUMNS = ["position", "source", "role", "tool", "tokens", "action", "preview"]
BY_CALL = "by_call"  # N3 rows only: the call of the turn that did it (a carried summary or placeholder)


@dataclass(frozen=True)
class CallData:
    """Everything the gauge and the inspector show about one model call."""

    stage: str
    before_tokens: int
    after_tokens: int
    threshold: int
    window: int
    summary: str | None
    counter: str
    tail_start: int | None
    before: list[dict[str, Any]]  # MessageRecord dicts (transcript side)
    after: list[dict[str, Any]]  # SentRecord dicts (sent side)
    error: str | None = None
    turn: int | None = None
    iteration: int | None = None
    estimate_tokens: int | None = None  # C1 estimate of what was sent
    calibrated_tokens: int | None = None
    reported_prompt_tokens: int | None = None
    retry: bool = False
    inputs: Sequence[Any] | None = field(default=None, repr=False)  # full transcript messages, live views only
    sent: Sequence[Message] | None = field(default=None, repr=False)  # full sent messages, live views only
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
        return "estimate" if self.transcript_relative else self.counter


def _lineage_fields(lineage: Lineage | None, transcript: Sequence[Message] | None) -> dict[str, Any] | None:
    """Before/after rows and the carried description from a lineage and the stored transcript (N3)."""
    if lineage is None or transcript is None:
        return None
    try:
        rows = lineage_rows(lineage, transcript)
    except (ValueError, KeyError, IndexError):
        return None  # a transcript that does not match the record: show the view's own provenance
    return {"before": rows["before"], "after": rows["after"], "carried": lineage.describe(),
            "summaries": tuple(lineage.summaries()), "transcript_relative": True}


def opt_int(value: Any) -> int | None:
    """An int, or None for None/NaN/pd.NA/empty values."""
    if value is None or value is pd.NA:
        return None
    try:
        if isinstance(value, float) and math.isnan(value):
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def from_view(view: RequestView, *, turn: int | None = None, iteration: int | None = None,
              reported_prompt_tokens: int | None = None, calibrated_tokens: int | None = None) -> CallData:
    """CallData of a live RequestView (provenance built here, once)."""
    if not isinstance(view, RequestView):
        raise TypeError(f"expected a RequestView, got {type(view).__name__}")
    lin = view.lineage
    n3 = _lineage_fields(lin, lin.transcript if lin is not None else None)
    records = n3 if n3 is not None else view.provenance.to_records()
    estimate = view.after_tokens if view.counter == "estimate" else estimate_messages(view.messages)
    if calibrated_tokens is None and view.counter == "calibrated":
        calibrated_tokens = view.after_tokens
    inputs = view.trace.inputs if view.trace is not None else None
    if n3 is not None:
        inputs = list(lin.transcript[: lin.upto])  # positions are stored seqs
    tail = lin.tail_start if n3 is not None else view.tail_start
    if n3 is not None and iteration is None:
        iteration = lin.call  # the lineage knows which call of its turn this is
    return CallData(view.stage, view.before_tokens, view.after_tokens, view.threshold, view.window, view.summary,
                    view.counter, tail, records["before"], records["after"], view.error, turn, iteration,
                    estimate, calibrated_tokens, reported_prompt_tokens, False, inputs, view.messages,
                    **({k: n3[k] for k in ("carried", "summaries", "transcript_relative")} if n3 else {}))


def _json(value: Any, what: str) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (str, bytes)):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the request's {what} column is not valid JSON: {exc}") from exc
    return value


def _tail_from_after(after: list[dict[str, Any]]) -> int | None:
    for rec in after:
        if rec.get("role") not in ("system", "developer") and rec.get("source") is not None:
            return int(rec["source"])
    return None


def stored_lineage(row: Mapping[str, Any] | pd.Series) -> Lineage | None:
    """The N3 lineage a stored request record carries (`extra.lineage`), or None for older records."""
    extra = _json(row.get("extra"), "extra") or {}
    stored = extra.get("lineage") if isinstance(extra, Mapping) else None
    if stored is None:
        return None
    try:
        return Lineage.from_record(stored)
    except ValueError:
        return None


def from_request(row: Mapping[str, Any] | pd.Series, transcript: Sequence[Message] | None = None) -> CallData:
    """CallData of one stored request record (a `store.requests(sid)` row or a plain dict).

    With the session's stored `transcript` and a record that carries its lineage (N3), the rows are the
    stored transcript up to the call with transcript-relative actions; otherwise the record's own (format 3)
    provenance, relative to the call's input.
    """
    get = row.get
    extra = _json(get("extra"), "extra") or {}
    lin = stored_lineage(row) if transcript is not None else None
    n3 = _lineage_fields(lin, transcript)
    if n3 is not None:
        before, after = n3["before"], n3["after"]
    else:
        prov = _json(get("provenance"), "provenance") or {}
        if not isinstance(prov, Mapping):
            raise ValueError("the request's provenance must be a JSON object with 'before' and 'after' lists")
        rows = provenance_rows(dict(prov))  # the loop stores the compact columns form; records form also accepted
        before, after = rows["before"], rows["after"]
    stage = str(get("stage") or "unchanged")
    tail = lin.tail_start if n3 is not None and lin is not None else opt_int(get("tail_start"))
    if tail is None and n3 is None and isinstance(extra, Mapping):
        tail = opt_int(extra.get("tail_start"))
    if tail is None and stage == "summary":
        tail = _tail_from_after(after)
    after_tokens = opt_int(get("after_tokens")) or 0
    summary = get("summary")
    error = get("error")
    return CallData(
        stage=stage, before_tokens=opt_int(get("before_tokens")) or after_tokens, after_tokens=after_tokens,
        threshold=opt_int(get("threshold")) or 0, window=opt_int(get("window_tokens")) or 0,
        summary=summary if isinstance(summary, str) else None, counter=str(get("counter") or "estimate"),
        tail_start=tail, before=before, after=after, error=error if isinstance(error, str) else None,
        turn=opt_int(get("turn")), iteration=opt_int(get("iteration")),
        estimate_tokens=opt_int(get("estimate_tokens")), calibrated_tokens=opt_int(get("calibrated_tokens")),
        reported_prompt_tokens=opt_int(get("prompt_tokens_reported")), retry=bool(get("retry") or False),
        inputs=list(transcript[: lin.upto]) if n3 is not None and lin is not None and transcript is not None else None,
        **({k: n3[k] for k in ("carried", "summaries", "transcript_relative")} if n3 else {}))


def _preview(rec: Mapping[str, Any]) -> str:
    text, chars = str(rec.get("preview") or ""), opt_int(rec.get("chars")) or 0
    return f"{text} ({chars:,} chars)" if chars > len(text) or text.endswith("…") else text


def before_frame(data: CallData) -> pd.DataFrame:
    """The *before* table: one row per transcript message and what happened to it."""
    rows = [{"position": r.get("position"), "role": r.get("role"), "tool": r.get("tool_name"),
             "tokens_before": r.get("tokens_before", 0), "tokens_after": r.get("tokens_after", 0),
             "action": r.get("action"), "failure": bool(r.get("failure")), "preview": _preview(r)}
            for r in data.before]
    df = pd.DataFrame(rows, columns=BEFORE_COLUMNS)
    df = df.astype({"position": "Int64", "tokens_before": "int64", "tokens_after": "int64", "failure": "bool"})
    if data.transcript_relative:
        df[BY_CALL] = pd.array([r.get("call") for r in data.before], dtype="Int64")
    return df


def after_frame(data: CallData) -> pd.DataFrame:
    """The *after* table: one row per sent message and where it came from."""
    rows = [{"position": r.get("position"), "source": r.get("source"), "role": r.get("role"),
             "tool": r.get("tool_name"), "tokens": r.get("tokens", 0), "action": r.get("action"),
             "preview": _preview(r)} for r in data.after]
    df = pd.DataFrame(rows, columns=AFTER_COLUMNS)
    df = df.astype({"position": "int64", "source": "Int64", "tokens": "int64"})
    if data.transcript_relative:
        df[BY_CALL] = pd.array([r.get("call") for r in data.after], dtype="Int64")
    return df


def _layer_of(rec: Mapping[str, Any]) -> str:
    # Frozen-context layers announce themselves on their first line, which the preview keeps.
    if rec.get("action") == "summary":
        return "summaries"
    return message_layer({"role": rec.get("role"), "content": str(rec.get("preview") or "")})


def layer_split(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
    """Tokens per context layer (all LAYERS present) from provenance records, using `key` as tokens."""
    out = dict.fromkeys(LAYERS, 0)
    for rec in records:
        out[_layer_of(rec)] += opt_int(rec.get(key)) or 0
    return out


def requests_from_views(views: Sequence[RequestView], turns: Sequence[int] | None = None) -> pd.DataFrame:
    """A `store.requests()`-shaped DataFrame from views (replays, tests); `turns[i]` is view i's turn (default 1)."""
    rows, last_turn, it = [], None, 0
    for i, view in enumerate(views):
        turn = 1 if turns is None else int(turns[i])
        it = it + 1 if turn == last_turn else 1
        last_turn = turn
        rows.append({"turn": turn, "iteration": it, "counter": view.counter,
                     "estimate_tokens": estimate_messages(view.messages),
                     "calibrated_tokens": view.after_tokens if view.counter == "calibrated" else None,
                     "before_tokens": view.before_tokens, "after_tokens": view.after_tokens,
                     "threshold": view.threshold, "window_tokens": view.window, "stage": view.stage,
                     "prompt_tokens_reported": None, "summary": view.summary, "error": view.error,
                     "provenance": json.dumps(view.provenance.to_records(), ensure_ascii=False), "retry": False})
    return pd.DataFrame(rows)
