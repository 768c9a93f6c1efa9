"""The request record: one model call as the loop stores it and every reader shows it (SPEC S1, T3, C10, N3).

Why one form: the loop, the store, the widgets, `%agent view`, the replay timeline and
`requests_from_views` all speak about the same call. Each used to carry its own dict or dataclass with
the same fields, and they drifted (a replay wrote its policy's count into the C1 estimate column, a
widget re-estimated what the view already carried). `RequestRecord` is the one shape; `record_of_view`
is the one place that turns a RequestView into it, so the three T3 figures are labelled the same way
everywhere: `estimate_tokens` is always the C1 estimate of what was sent (`est.`), `calibrated_tokens`
is the calibrated count (only when the calibrated counter decided), `prompt_tokens_reported` is what the
provider reported. `after_tokens`/`before_tokens` are in the unit of `counter` (what the threshold was
checked on).

Provenance travels as engine data: a live call's `lineage` (SPEC N3, relative to the stored transcript,
`context.lineage.Lineage`), or, for a view whose input no store holds (a dry run, a replay: its lineage takes
the input positions as seqs), `provenance`, the view's own rows (C10, built by `lineage_rows` from that
lineage; files of earlier versions stored these too). How both are stored is the store's business
(`store/provenance.py`). `RequestRecord` is also the one declaration of
the `requests` table's columns (type, place, meaning).
Pure: the engine and `messages` only, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from mxclaw_nb.context.lineage import Lineage
from mxclaw_nb.context.tokens import estimate_messages
from mxclaw_nb.context.view import Provenance, RequestView

COLUMN, KEY, EXTRA = "column", "key", "extra"  # where a field is stored: its own column, the key, `extra` JSON


def column(sql: str, default: Any = None, *, meaning: str, where: str = COLUMN, **kw: Any) -> Any:
    """A RequestRecord field and how the `requests` table keeps it: its DuckDB type (`sql`), where (a column of
    its own, part of the key, or a key of the `extra` JSON column) and what it means (the README's table)."""
    if "default_factory" not in kw:
        kw["default"] = default
    return field(metadata={"sql": sql, "where": where, "meaning": meaning}, **kw)


@dataclass(frozen=True)
class RequestRecord:
    """One model call: what was sent (tokens, stage, summary), what the provider said, and why (its lineage).

    SPEC S1: the one declaration of the `requests` table. Each field says its DuckDB type, where it is stored
    and what it means; the table's own columns are declared in table order. The store's writer and reader
    (`store.records`), the schema's migrations (`store.schema.add_request_columns`) and the README's table
    (checked by `tests/test_store_files.py`) are derived from it: a new column is a field here, a migration
    that adds it, and the code that fills it.
    """

    session_id: str | None = column("VARCHAR", None, where="key", meaning=(
        "the session"))
    seq: int | None = column("INTEGER", None, where="key", meaning=(
        "0-based position of the call record in its session"))
    turn: int | None = column("INTEGER", None, meaning=(
        "turn number"))
    iteration: int | None = column("INTEGER", None, meaning=(
        "model call within the turn"))
    created_at: datetime | None = column("TIMESTAMP", None, where="key", meaning=(
        "when the record was stored (UTC)"))
    model: str | None = column("VARCHAR", None, meaning=(
        "model name sent to the provider"))
    base_url: str | None = column("VARCHAR", None, meaning=(
        "provider endpoint (OpenAI-compatible base URL)"))
    counter: str = column("VARCHAR", "estimate", meaning=(
        "name of the token counter used for the estimates"))
    estimate_tokens: int | None = column("BIGINT", None, meaning=(
        "C1 estimate of the request view as sent (SPEC C1; `est.`), whatever counter decided (T3)"))
    calibrated_tokens: int | None = column("BIGINT", None, meaning=(
        "the calibrated count (estimate corrected by earlier provider-reported usage) when the calibrated "
        "counter decided, else NULL"))
    before_tokens: int | None = column("BIGINT", None, meaning=(
        "estimate of the transcript view before compaction"))
    after_tokens: int | None = column("BIGINT", None, meaning=(
        "estimate after compaction (what was sent)"))
    threshold: int | None = column("BIGINT", None, meaning=(
        "compaction threshold in tokens"))
    window_tokens: int | None = column("BIGINT", None, meaning=(
        "the model's context window in tokens"))
    stage: str = column("VARCHAR", "unchanged", meaning=(
        "compaction stage reached: `unchanged`, `micro`, `summary` or `fallback`"))
    prompt_tokens_reported: int | None = column("BIGINT", None, meaning=(
        "prompt tokens reported by the provider (NULL if not reported)"))
    completion_tokens_reported: int | None = column("BIGINT", None, meaning=(
        "completion tokens reported by the provider"))
    latency_ms: float | None = column("DOUBLE", None, meaning=(
        "wall time of the call in milliseconds"))
    error: str | None = column("VARCHAR", None, meaning=(
        "error message if the call failed, else NULL"))
    summary: str | None = column("VARCHAR", None, meaning=(
        "every summary text this request sent (SPEC N3, C7): the call's own compaction text (summary, "
        "`[microcompaction]` or fallback note) first, then each summary an earlier call of the same turn made "
        "and this call still carries, after a line `[carried: summary made by call N of this turn]`; NULL "
        "when nothing was summarized. `WHERE summary IS NOT NULL` finds every call that sent a summary"))
    provenance: Provenance | None = column("JSON", repr=False, compare=False, meaning=(
        "NULL when the record carries its lineage (`extra.lineage`, every call of the loop). Otherwise (a dry "
        "run's or a replay's view, whose lineage indexes messages no store holds; a view no lineage could be "
        "composed for; files of earlier versions) the per-message provenance of the request view relative to "
        "the call's input (C7, C10: in the counter that decided the stage): `{\"format\": 3, \"before\": "
        "{field: [...]}, \"after_from_before\": [...], \"after\": {field: [...]}}`, one list per field; "
        "`mxclaw_nb.store.provenance.provenance_rows` turns it (and the older format 2) into row dicts"))
    retry: bool = column("BOOLEAN", False, meaning=(
        "true if this call retried a failed one"))
    extra: Mapping[str, Any] = column("JSON", default_factory=dict, repr=False, meaning=(
        "any other fields of the record, among them `tail_start` (input position of the safe tail), "
        "`compactor_error` (C8: why the compactor raised) and `lineage` (below)"))
    cached_tokens_reported: int | None = column("BIGINT", None, meaning=(
        "SPEC E1 `reported`: prompt tokens the provider said it read from its prompt cache "
        "(OpenAI/vLLM/OpenRouter `prompt_tokens_details.cached_tokens`, llama.cpp `timings.cache_n`, "
        "Anthropic-style `cache_read_input_tokens`; imported Claude Code logs), NULL when it did not say"))
    cache_write_tokens_reported: int | None = column("BIGINT", None, meaning=(
        "SPEC E1 `reported`: prompt tokens written to the cache (`cache_creation_input_tokens`), NULL when "
        "not reported"))
    prefix_tokens: int | None = column("BIGINT", None, meaning=(
        "SPEC E2: tokens (in `counter`, so `est.` unless the counter is exact) of the leading messages this "
        "call sent exactly as the session's previous call did: what a warm prefix cache can serve"))
    purpose: str | None = column("VARCHAR", None, meaning=(
        "SPEC C11: NULL for a turn's call; `summary` for a model summary call (made before the call whose "
        "view it summarized, same `turn`/`iteration`; `extra.coverage` is its seq range, `extra.outcome` "
        "`accepted`, `rejected` or `failed`). `store.requests(sid)` returns a turn's calls only; "
        "`summary_calls=True` adds these (the timeline's diamonds, `analysis.cost.request_costs`)"))
    # kept as keys of the `extra` JSON column, not columns of their own (`sql`: the type its value is read as)
    tail_start: int | None = column("BIGINT", where=EXTRA, meaning=(
        "input position of the first safe-tail message (the lineage has it as a seq)"))
    compactor_error: str | None = column("VARCHAR", where=EXTRA, meaning=(
        "C8: why the compactor raised, on the fallback path"))
    engine_ms: float | None = column("DOUBLE", where=EXTRA, meaning=(
        "C10: how long the context engine took to build this view (wall clock, the loop's)"))
    lineage: Lineage | None = column("JSON", where=EXTRA, repr=False, compare=False, meaning=(
        "SPEC N3: the call's provenance relative to the stored transcript (`store.provenance` encodes it)"))


def record_columns(where: str = COLUMN) -> tuple[str, ...]:
    """Names of the RequestRecord fields stored `where` (COLUMN, KEY or EXTRA), in declaration (table) order."""
    return tuple(f.name for f in fields(RequestRecord) if f.metadata.get("where") == where)


def column_types() -> dict[str, str]:
    """DuckDB type of every field with a column of its own (key included), in table order."""
    return {f.name: f.metadata["sql"] for f in fields(RequestRecord) if f.metadata.get("where") in (COLUMN, KEY)}


def column_meanings() -> dict[str, str]:
    """What each column of the `requests` table means (the README's table), in table order."""
    return {f.name: f.metadata["meaning"] for f in fields(RequestRecord) if f.metadata.get("where") in (COLUMN, KEY)}


SUMMARY_CALL = "summary"  # C11: `purpose` of the model call that wrote a summary (not a turn's call)
COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


def c1_estimate(view: RequestView) -> int:
    """T3 `est.`: the C1 estimate of what the view sends (the engine carries it; counted only for old views)."""
    if view.counter == "estimate":
        return view.after_tokens
    return view.after_estimate if view.after_estimate is not None else estimate_messages(view.messages)


def record_of_view(view: RequestView, *, turn: int | None = None, iteration: int | None = None,
                   model: str | None = None, base_url: str | None = None, retry: bool = False,
                   error: str | None = None, latency_ms: float | None = None,
                   prompt_tokens_reported: int | None = None, completion_tokens_reported: int | None = None,
                   calibrated_tokens: int | None = None, engine_ms: float | None = None,
                   cached_tokens_reported: int | None = None, cache_write_tokens_reported: int | None = None,
                   prefix_tokens: int | None = None, extra: Mapping[str, Any] | None = None) -> RequestRecord:
    """The request record of a RequestView (the loop's, a dry run's, a replay's): the one place that labels
    its figures. A live view (the loop's) carries its lineage (N3), read back against the stored transcript;
    a dry run's or a replay's lineage indexes messages no store holds, so its record carries the view's own
    rows (C10, `view.provenance`: format 3 in `requests.provenance`)."""
    if calibrated_tokens is None and view.counter == "calibrated":
        calibrated_tokens = view.after_tokens
    lineage = view.lineage if isinstance(view.lineage, Lineage) and view.lineage.live else None
    more = dict(extra or {})
    if view.fixed_tokens:  # T3/N2: the "tool definitions" layer, included in the totals, stated apart (est.)
        more["tool_definitions_tokens"] = view.fixed_tokens
    return RequestRecord(
        turn=turn, iteration=iteration, model=model, base_url=base_url, counter=view.counter,
        estimate_tokens=c1_estimate(view), calibrated_tokens=calibrated_tokens, before_tokens=view.before_tokens,
        after_tokens=view.after_tokens, threshold=view.threshold, window_tokens=view.window, stage=view.stage,
        prompt_tokens_reported=prompt_tokens_reported, completion_tokens_reported=completion_tokens_reported,
        latency_ms=latency_ms, error=error, retry=retry,
        summary=sent_summaries(view.summary, lineage.summaries() if lineage is not None else (),
                               lineage.call if lineage is not None else iteration), compactor_error=view.error,
        tail_start=view.tail_start, engine_ms=engine_ms, lineage=lineage,
        cached_tokens_reported=cached_tokens_reported, cache_write_tokens_reported=cache_write_tokens_reported,
        prefix_tokens=prefix_tokens,
        provenance=view.provenance if lineage is None and view.trace is not None else None, extra=more)


CARRIED = "[carried: summary made by call {call} of this turn]"
_CARRIED_SPLIT = re.compile(r"\n\n(?=\[carried: summary made by call (\d+) of this turn\]\n)")


def sent_summaries(own: str | None, sent: Sequence[tuple[int, str]], call: int | None) -> str | None:
    """The `summary` column (SPEC N3, C7): this call's own compaction text (summary, micro or fallback note),
    then every summary it sends that an earlier call of its turn made, each after a `CARRIED` line; None when
    the call sent none. So `WHERE summary IS NOT NULL` finds every call that sent a summary."""
    parts: list[str] = [own] if own else []
    for made_by, text in sent:
        if not text or text in parts or (made_by == call and text == own):
            continue
        parts.append(text if made_by == call else f"{CARRIED.format(call=made_by)}\n{text}")
    return "\n\n".join(parts) or None


def summary_parts(text: str | None) -> list[tuple[int | None, str]]:
    """`sent_summaries` read back: (the call that made it, None for the call's own text; text), in order."""
    if not text:
        return []
    pieces = _CARRIED_SPLIT.split("\n\n" + text)  # [own-or-empty, call, carried, call, carried, ...]
    out: list[tuple[int | None, str]] = [(None, pieces[0][2:])] if pieces[0] else []
    for k in range(1, len(pieces) - 1, 2):
        out.append((int(pieces[k]), pieces[k + 1].split("\n", 1)[1]))
    return out

