"""The RequestView and its provenance: the one structure every widget, event and experiment reads.

`build_request_view` decides; this module only records the decision. The view keeps what was sent
(`messages`) and, per message, where it came from and what happened to it, so the before/after
tables, the gauge's layers, the events and the replays are all projections of the same facts and can
never disagree. Provenance rows are built lazily: a 10k-message view that nobody inspects costs
nothing extra, which keeps the incremental rebuild inside the loop cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from mxclaw_nb.messages import (
    FALLBACK_PREFIX,
    SUMMARY_PREFIX,
    Message,
    content_text,
    is_failure,
    tool_call_list,
    tool_call_name,
)

STAGES = ("unchanged", "micro", "summary", "fallback")
ACTIONS = ("kept", "placeholder", "summarized", "dropped", "synthetic", "summary")
PREVIEW_CHARS = 80


class MessageRecord(NamedTuple):
    """One row of the *before* table: a message of the (repaired) transcript and what happened to it.

    Rows are named tuples, not frozen dataclasses: a view builds two per message, and tuple construction
    is several times cheaper (this is the largest per-call cost of storing a request record).
    """

    position: int | None  # index in the input messages; None for a synthetic repair result
    role: str
    tool_name: str | None
    tokens_before: int
    tokens_after: int
    action: str
    sent_position: int | None
    failure: bool
    synthetic: bool
    chars: int
    preview: str
    reason: str | None = None


class SentRecord(NamedTuple):
    """One row of the *after* table: a message as sent and where it came from."""

    position: int
    source: int | None  # input index; None for summaries, fallback notes and synthetic results
    role: str
    tool_name: str | None
    tokens: int
    action: str
    chars: int
    preview: str


@dataclass(frozen=True)
class Provenance:
    """Before (transcript) and after (sent) rows of one request view."""

    before: tuple[MessageRecord, ...]
    after: tuple[SentRecord, ...]

    def to_records(self) -> dict[str, list[dict[str, Any]]]:
        """JSON-able form: `before` and `after` lists of row dicts."""
        return {"before": [r._asdict() for r in self.before], "after": [r._asdict() for r in self.after]}

    def to_columns(self) -> dict[str, Any]:
        """Compact JSON-able form stored in `requests.provenance`: column names once, rows as lists.

        An *after* row that only repeats its *before* row (a message sent as it was: same role, tool,
        tokens, action, length and preview) is stored as the index of that before row; most rows of a
        long session are such. `provenance_rows` turns this form (and the records form) back into row
        dicts, so readers never see the difference.
        """
        before_index = {r.sent_position: k for k, r in enumerate(self.before) if r.sent_position is not None}
        after: list[Any] = []
        for r in self.after:
            k = before_index.get(r.position)
            if k is not None and r == _sent_from(self.before[k]):
                after.append(k)
            else:
                after.append(list(r))
        return {"format": 2, "before_columns": list(BEFORE_FIELDS), "before": [list(r) for r in self.before],
                "after_columns": list(AFTER_FIELDS), "after": after}


def _sent_from(before: MessageRecord) -> SentRecord:
    """The after row of a message sent exactly as it was (see Provenance.to_columns)."""
    return SentRecord(before.sent_position, before.position, before.role, before.tool_name,  # type: ignore[arg-type]
                      before.tokens_after, before.action, before.chars, before.preview)


def provenance_rows(stored: Any) -> dict[str, list[dict[str, Any]]]:
    """Row dicts (`before`, `after`) from a stored provenance in either the columns or the records form."""
    if not isinstance(stored, dict):
        raise ValueError("a provenance must be a JSON object with 'before' and 'after' lists")
    out: dict[str, list[dict[str, Any]]] = {}
    for side in ("before", "after"):
        rows = stored.get(side) or []
        columns = stored.get(f"{side}_columns")
        if not isinstance(rows, list):
            raise ValueError(f"the provenance's {side!r} must be a list")
        if not columns:
            out[side] = [dict(r) for r in rows]
            continue
        if side == "after" and any(isinstance(row, int) for row in rows):  # index k: the row of before row k
            before = [MessageRecord(*(row.get(f) for f in BEFORE_FIELDS)) for row in out["before"]]
            rows = [list(_sent_from(before[row])) if isinstance(row, int) else row for row in rows]
        out[side] = [dict(zip(columns, row, strict=False)) for row in rows]
    return out


BEFORE_FIELDS = MessageRecord._fields
AFTER_FIELDS = SentRecord._fields


@dataclass(frozen=True)
class Trace:
    """The pipeline's raw decision, from which provenance rows are derived on demand."""

    inputs: Sequence[Any]
    step_sources: Sequence[int | None]  # per repaired step: input position, None for a synthetic result
    step_messages: Sequence[Message]  # per repaired step: the message as given
    dropped: dict[int, str]
    tokens: list[int]  # per step, before
    actions: list[str]  # per step
    sent_of_step: Sequence[int | None]  # per step: position in the sent list (a range when unchanged)
    sent_sources: Sequence[int | None]  # per sent message: step index, None for engine-made messages
    sent_tokens: list[int]

    @property
    def steps(self) -> list[tuple[int | None, Message]]:
        """(input position or None if synthetic, message) per repaired step."""
        return list(zip(self.step_sources, self.step_messages, strict=True))


def _preview(text: str) -> str:
    # Only the head can show, so collapse whitespace in a bounded slice (a 20 KB tool output costs the same
    # as a short message). Runs of spaces longer than the slice are the only case where this shows less.
    text = " ".join(text[: PREVIEW_CHARS * 4].split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


@dataclass(frozen=True)
class RequestView:
    """What one model call sends, and why (SPEC C0-C8, C10)."""

    messages: list[Message]
    stage: str
    before_tokens: int
    after_tokens: int
    threshold: int
    window: int
    summary: str | None
    counter: str
    tail_start: int | None  # input position of the first safe-tail message (None when not computed)
    over_threshold: bool  # after_tokens > threshold even after every allowed step
    repaired: bool  # repair dropped or synthesised something
    error: str | None = None  # why the compactor failed, on the fallback path
    after_estimate: int | None = None  # C1 estimate of `messages` (= after_tokens when counter is "estimate")
    trace: Trace | None = field(default=None, repr=False, compare=False)

    @property
    def compacted(self) -> bool:
        """True when the stage is anything but `unchanged`."""
        return self.stage != "unchanged"

    @property
    def sources(self) -> list[int | None]:
        """Input position of each sent message (None for engine-made messages)."""
        if self.trace is None:
            return [None] * len(self.messages)
        t = self.trace
        return [None if k is None else t.step_sources[k] for k in t.sent_sources]

    def next_input(self, appended: Sequence[Message] = ()) -> list[Message]:
        """C7: the input of the next iteration: this view (originals where kept) plus new messages."""
        if self.trace is None:
            return [*self.messages, *appended]
        t = self.trace
        out: list[Message] = []
        for pos, k in enumerate(t.sent_sources):
            kept = k is not None and t.actions[k] in ("kept", "synthetic")
            out.append(t.step_messages[k] if kept else self.messages[pos])  # type: ignore[index]
        return out + list(appended)

    def event(self) -> dict[str, Any] | None:
        """C10 payload of the `context.compacted` event, or None when nothing was compacted."""
        if not self.compacted:
            return None
        return {"stage": self.stage, "before_tokens": self.before_tokens, "after_tokens": self.after_tokens,
                "tokens_are": "estimates" if self.counter == "estimate" else self.counter,
                "threshold": self.threshold, "summary": self.summary or ""}

    @cached_property
    def provenance(self) -> Provenance:
        """Per-message record of what happened (before rows) and where each sent message came from."""
        if self.trace is None:
            return Provenance((), ())
        return _build_provenance(self, self.trace)


def _is_summary(message: Message) -> bool:
    if message.get("role") != "system":  # cheap test first: this runs for every sent message
        return False
    return content_text(message.get("content")).startswith((SUMMARY_PREFIX, FALLBACK_PREFIX))


# A named tuple from a full tuple of its fields, without the generated __new__'s argument binding (what
# NamedTuple._make does, minus its length check): two rows per message, so it shows.
_new_row = tuple.__new__


def _build_provenance(view: RequestView, t: Trace) -> Provenance:
    # One pass per table; per message the text, its length and preview are made once and reused for the
    # after row when the sent content is the same object (the usual case): a stored request carries both
    # tables, so this runs once per model call.
    names: dict[str, str | None] = {}
    before: list[MessageRecord] = []
    step_names: list[str | None] = []
    shown: list[tuple[Any, int, str]] = []  # per step: (content object, chars, preview)
    sent_of_step, sent_tokens, tokens, actions = t.sent_of_step, t.sent_tokens, t.tokens, t.actions
    for k, (src, msg) in enumerate(zip(t.step_sources, t.step_messages, strict=True)):
        role = msg.get("role")
        content = msg.get("content")
        text = content if content.__class__ is str else content_text(content)
        name = None
        if role == "assistant":
            names = {str(c.get("id")): tool_call_name(c) for c in tool_call_list(msg) if isinstance(c, dict)}
        elif role == "tool":
            name = names.get(str(msg.get("tool_call_id")))
        step_names.append(name)
        preview = _preview(text)
        shown.append((content, len(text), preview))
        sent = sent_of_step[k]
        before.append(_new_row(MessageRecord, (
            src, role if role.__class__ is str else str(role), name, tokens[k],
            0 if sent is None else sent_tokens[sent], actions[k], sent, role == "tool" and is_failure(msg),
            src is None, len(text), preview, None)))
    if t.dropped:
        keyed = [((src if src is not None else -1, 1 if src is None else 0, k), r) for k, (src, r) in
                 enumerate(zip(t.step_sources, before, strict=True))]
        last = -1
        for k, (key, r) in enumerate(keyed):  # a synthetic result sorts right after the step before it
            last = r.position if r.position is not None else last
            keyed[k] = ((last, key[1], key[2]), r)
        for i, reason in t.dropped.items():
            msg = t.inputs[i]
            ok = isinstance(msg, dict)
            text = content_text(msg.get("content")) if ok else str(msg)
            keyed.append(((i, 0, -1), MessageRecord(
                i, str(msg.get("role")) if ok else "?", None, 0, 0, "dropped", None,
                ok and msg.get("role") == "tool" and is_failure(msg), False, len(text), _preview(text), reason)))
        keyed.sort(key=lambda r: r[0])
        before = [r for _, r in keyed]
    after = []
    for pos, k in enumerate(t.sent_sources):
        msg = view.messages[pos]
        content = msg.get("content")
        if k is not None and shown[k][0] is content:
            chars, preview = shown[k][1], shown[k][2]
        else:
            text = content if content.__class__ is str else content_text(content)
            chars, preview = len(text), _preview(text)
        action = "summary" if k is None or _is_summary(msg) else actions[k]
        role = msg.get("role")
        after.append(_new_row(SentRecord, (pos, None if k is None else t.step_sources[k],
                                           role if role.__class__ is str else str(role),
                                           None if k is None else step_names[k], sent_tokens[pos], action, chars,
                                           preview)))
    return Provenance(tuple(before), tuple(after))
