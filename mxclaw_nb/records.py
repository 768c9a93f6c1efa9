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

Provenance travels as engine data: `lineage` (SPEC N3, transcript-relative, `context.lineage.Lineage`)
or, for a view without one (a dry run, a replay, records of older files), `provenance` (the view's own
rows, `context.view.Provenance`). How they are stored is the store's business (`store/provenance.py`).
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


@dataclass(frozen=True)
class RequestRecord:
    """One model call: what was sent (tokens, stage, summary), what the provider said, and why (provenance).

    Column for column the `requests` table (README "The store: tables and columns"); `tail_start`,
    `lineage` and any other key a file carries travel in its `extra` JSON column.
    """

    turn: int | None = None
    iteration: int | None = None
    model: str | None = None
    base_url: str | None = None
    counter: str = "estimate"  # the counter `before_tokens`/`after_tokens`/`threshold` are in (T2)
    estimate_tokens: int | None = None  # T3 `est.`: the C1 estimate of the messages sent
    calibrated_tokens: int | None = None  # T3 `calibrated`: set when the calibrated counter decided
    before_tokens: int | None = None
    after_tokens: int | None = None
    threshold: int | None = None
    window_tokens: int | None = None
    stage: str = "unchanged"
    prompt_tokens_reported: int | None = None  # T3 `reported`: what the provider said it read
    completion_tokens_reported: int | None = None
    latency_ms: float | None = None
    error: str | None = None  # why the call failed (provider, interrupt), else None
    summary: str | None = None  # every summary text the call sent (`sent_summaries`), N3
    retry: bool = False
    compactor_error: str | None = None  # C8: why the compactor raised, on the fallback path
    tail_start: int | None = None  # input position of the first safe-tail message (the lineage has it as a seq)
    engine_ms: float | None = None  # how long the context engine took to build this view (wall clock, the loop's)
    cached_tokens_reported: int | None = None  # E1 `reported`: prompt tokens the provider read from its cache
    cache_write_tokens_reported: int | None = None  # E1 `reported`: prompt tokens it wrote to its cache
    prefix_tokens: int | None = None  # E2: tokens (in `counter`) of the prefix shared with the previous call
    purpose: str | None = None  # None: a turn's call; SUMMARY_CALL: a C11 summary call (made before this call)
    lineage: Lineage | None = field(default=None, repr=False, compare=False)  # N3, transcript-relative
    provenance: Provenance | None = field(default=None, repr=False, compare=False)  # the view's own rows
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)  # other keys a stored record carries
    session_id: str | None = None  # set when read back from the store
    seq: int | None = None
    created_at: datetime | None = None  # None: the store's clock when appended


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
    its figures. A view with a lineage (N3) carries it; a view without one carries its own provenance."""
    if calibrated_tokens is None and view.counter == "calibrated":
        calibrated_tokens = view.after_tokens
    lineage = view.lineage if isinstance(view.lineage, Lineage) else None
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
        provenance=None if lineage is not None else _provenance(view), extra=more)


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


def _provenance(view: RequestView) -> Provenance | None:
    return view.provenance if view.trace is not None else None
