"""The RequestView and its provenance: the one structure every widget, event and experiment reads.

`build_request_view` decides; this module only records the decision. The view keeps what was sent
(`messages`) and, per message, where it came from and what happened to it, so the before/after
tables, the gauge's layers, the events and the replays are all projections of the same facts and can
never disagree. Provenance rows are built lazily: a 10k-message view that nobody inspects costs
nothing extra, which keeps the incremental rebuild inside the loop cheap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import islice
from typing import Any, NamedTuple, TypeVar, cast, overload

from mxclaw_nb.context.actions import ACTION_NAMES
from mxclaw_nb.context.micro import FACTS_KEY
from mxclaw_nb.context.rows import Spliced
from mxclaw_nb.messages import (
    FALLBACK_PREFIX,
    SUMMARY_PREFIX,
    Message,
    content_text,
    is_failure,
    tool_call_list,
    tool_call_name,
)
from mxclaw_nb.text_policy import display

ACTIONS = ACTION_NAMES  # the action registry (context.actions): kept, placeholder, summarized, dropped, ...
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
    """Before (transcript) and after (sent) rows of one request view.

    Held as columns (one list per field) and turned into rows only when someone reads `before` or
    `after`: per-row tuples for a long session are tens of thousands of objects that only make the
    garbage collector work (a full collection of a large kernel heap costs ~100 ms). `derived[k]` is the
    before row that the after row k repeats exactly (a message sent as it was), else None: a stored form
    (`mxclaw_nb.store.provenance`, format 3) keeps just that index.
    """

    before_columns: tuple[list[Any], ...]
    after_columns: tuple[list[Any], ...]
    derived: list[int | None]

    @classmethod
    def from_rows(cls, before: Sequence[MessageRecord], after: Sequence[SentRecord]) -> Provenance:
        """A provenance from row tuples (the columns are their transposition)."""
        b = tuple(map(list, zip(*before, strict=True))) if before else tuple([] for _ in BEFORE_FIELDS)
        a = tuple(map(list, zip(*after, strict=True))) if after else tuple([] for _ in AFTER_FIELDS)
        index = {r.sent_position: k for k, r in enumerate(before) if r.sent_position is not None}
        derived = [k if (k := index.get(r.position)) is not None and r == sent_from(before[k]) else None
                   for r in after]
        return cls(b, a, derived)

    @cached_property
    def before(self) -> tuple[MessageRecord, ...]:
        """One row per message of the (repaired) transcript, in input order, dropped ones included."""
        return tuple(map(MessageRecord._make, zip(*self.before_columns, strict=True)))

    @cached_property
    def after(self) -> tuple[SentRecord, ...]:
        """One row per sent message, in sent order."""
        return tuple(map(SentRecord._make, zip(*self.after_columns, strict=True)))

    def to_records(self) -> dict[str, list[dict[str, Any]]]:
        """JSON-able form: `before` and `after` lists of row dicts."""
        return {"before": [r._asdict() for r in self.before], "after": [r._asdict() for r in self.after]}


def sent_from(before: MessageRecord) -> SentRecord:
    """The after row of a message sent exactly as it was (`Provenance.derived` points at its before row)."""
    return SentRecord(before.sent_position, before.position, before.role, before.tool_name,  # type: ignore[arg-type]
                      before.tokens_after, before.action, before.chars, before.preview)


BEFORE_FIELDS = MessageRecord._fields
AFTER_FIELDS = SentRecord._fields


_T = TypeVar("_T")


class Upto(Sequence[_T]):
    """The first `n` items of a list that may grow later (read-only, no copy).

    A session's append-only TokenCache extends its lists of inputs and counts in place (SPEC C7: a rebuild
    after one new message costs O(new), not a copy of the history); a view built earlier keeps seeing the
    items it was built from. Iteration and slices run at C speed.
    """

    __slots__ = ("_n", "_seq")

    def __init__(self, seq: list[_T], n: int) -> None:
        self._seq, self._n = seq, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, k: int) -> _T: ...
    @overload
    def __getitem__(self, k: slice) -> list[_T]: ...
    def __getitem__(self, k: int | slice) -> _T | list[_T]:
        if isinstance(k, slice):
            start, stop, step = k.indices(self._n)
            return self._seq[start:stop:step]
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        return self._seq[k]

    def __iter__(self) -> Iterator[_T]:
        return islice(self._seq, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Upto):
            other = other._seq[: other._n]
        if isinstance(other, list):
            return len(other) == self._n and self._seq[: self._n] == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Upto({self._seq[: self._n]!r})"

    @property
    def base(self) -> list[_T]:
        """The underlying list (its first `len(self)` items are this sequence's; read-only)."""
        return self._seq


def _bounded(seq: Any) -> Any:
    return Upto(cast(list[Any], seq), len(seq)) if seq.__class__ is list or isinstance(seq, Spliced) else seq


def raw(seq: Sequence[_T]) -> Sequence[_T]:
    """A sequence to index at C speed in a hot loop: the list behind an `Upto` (only indices < len(seq) may be
    read), else `seq` itself."""
    return seq._seq if isinstance(seq, Upto) else seq


@dataclass(frozen=True)
class Trace:
    """The pipeline's raw decision, from which provenance rows are derived on demand.

    The lists a session cache may extend later (inputs, step messages, counts) are held as `Upto` their
    length at construction (O(1)), so this trace keeps describing the build that made it.
    """

    inputs: Sequence[Any]
    step_sources: Sequence[int | None]  # per repaired step: input position, None for a synthetic result
    step_messages: Sequence[Message]  # per repaired step: the message as given
    dropped: dict[int, str]
    tokens: Sequence[int]  # per step, before
    actions: list[str]  # per step
    sent_of_step: Sequence[int | None]  # per step: position in the sent list (a range when unchanged)
    sent_sources: Sequence[int | None]  # per sent message: step index, None for engine-made messages
    sent_tokens: Sequence[int]
    # per-message display facts (chars, preview, failure) kept across builds by the session's TokenCache,
    # keyed by message identity: a long session's provenance then only looks at new messages' texts
    memo: dict[int, tuple[Any, ...]] | None = field(default=None, compare=False)
    # (start step, stop step, action) of every step whose action is not kept/synthetic, when the stage can say
    # so cheaply (unchanged, micro, summary); None = read `actions` (the lineage then looks at every step)
    runs: list[tuple[int, int, str]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("inputs", "step_messages", "tokens", "sent_tokens"):
            object.__setattr__(self, name, _bounded(getattr(self, name)))


def _preview(text: str) -> str:
    # Only the head can show, so collapse whitespace in a bounded slice (a 20 KB tool output costs the same
    # as a short message). Runs of spaces longer than the slice are the only case where this shows less.
    # SPEC L7: a preview is shown (widgets, DataFrames, Arrow), so lone surrogates are escaped (`display`).
    text = display(" ".join(text[: PREVIEW_CHARS * 4].split()))
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
    # T1-T3/N2: the "tool definitions" layer (tokens of the tool schemas the request carries), included in
    # before_tokens, after_tokens and after_estimate; 0 when the caller passed none
    fixed_tokens: int = 0
    # C5/C6: a compaction tried and not applied because it did not shrink the view (stage, before, after)
    no_gain: dict[str, Any] | None = None
    trace: Trace | None = field(default=None, repr=False, compare=False)
    # SPEC N3: the transcript-relative provenance (context.lineage.Lineage) the loop composes across a turn
    lineage: Any = field(default=None, repr=False, compare=False)
    # SPEC C11: what a model-written summary of this view would cover (context.model_summary.SummaryPlan), set
    # when the view's summary is the C6 stand-in for one that is not recorded yet; the loop asks the model
    plan: Any = field(default=None, repr=False, compare=False)

    def with_lineage(self, lineage: Any) -> RequestView:
        """This view with its transcript-relative lineage attached (same messages, stage and trace)."""
        return replace(self, lineage=lineage)

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
        if isinstance(t.sent_sources, range) and self.stage == "unchanged":  # every step sent as it came
            as_came = list(t.step_messages)
            as_came += appended
            return as_came
        out: list[Message] = []
        steps = raw(t.step_messages)
        for pos, k in enumerate(t.sent_sources):
            action = None if k is None else t.actions[k]
            if action in ("kept", "synthetic"):
                out.append(steps[k])  # type: ignore[index]
            elif action == "placeholder" and FACTS_KEY in steps[k]:  # type: ignore[index]
                # K3: a placeholder keeps its result's recorded facts (stored-only, never sent), so a later
                # summary's Kernel state still names the variables it created
                out.append({**self.messages[pos], FACTS_KEY: steps[k][FACTS_KEY]})  # type: ignore[index]
            else:
                out.append(self.messages[pos])
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
            return Provenance.from_rows((), ())
        return _build_provenance(self, self.trace)


def _is_summary(message: Message) -> bool:
    if message.get("role") != "system":  # cheap test first: this runs for every sent message
        return False
    return content_text(message.get("content")).startswith((SUMMARY_PREFIX, FALLBACK_PREFIX))


MEMO_ENTRIES = 500_000  # a provenance memo larger than this is cleared (then refilled by the next build)

def _build_provenance(view: RequestView, t: Trace) -> Provenance:
    # Column by column: whole-list copies where a column is one of the trace's lists, one pass over the
    # steps for what needs the message (role, tool name, failure, length, preview: from the memo when the
    # message was described before), one pass over the sent messages.
    memo = t.memo
    if memo is not None and len(memo) > MEMO_ENTRIES:
        memo.clear()
    roles: list[str] = []
    names: list[str | None] = []
    failures: list[bool] = []
    lengths: list[int] = []
    previews: list[str] = []
    contents: list[Any] = []
    calls: dict[str, str | None] = {}
    for msg in t.step_messages:
        role = msg.get("role")
        content = msg.get("content")
        flagged = msg.get("is_error")
        hit = memo.get(id(msg)) if memo is not None else None
        if hit is not None and hit[0] is msg and hit[1] is content and hit[2] is flagged:
            chars, preview, failure = hit[3], hit[4], hit[5]
        else:
            text = content if content.__class__ is str else content_text(content)
            chars, preview, failure = len(text), _preview(text), role == "tool" and is_failure(msg)
            if memo is not None:
                memo[id(msg)] = (msg, content, flagged, chars, preview, failure)
        if role == "assistant":
            calls = {str(c.get("id")): tool_call_name(c) for c in tool_call_list(msg) if isinstance(c, dict)}
            names.append(None)
        else:
            names.append(calls.get(str(msg.get("tool_call_id"))) if role == "tool" else None)
        roles.append(role if role.__class__ is str and role.isascii() else display(str(role)))
        failures.append(failure)
        lengths.append(chars)
        previews.append(preview)
        contents.append(content)
    sources, n, sent_tokens = t.step_sources, len(t.step_messages), raw(t.sent_tokens)
    unchanged = isinstance(t.sent_of_step, range)
    before: tuple[list[Any], ...] = (
        list(sources), roles, names, list(t.tokens),
        list(t.sent_tokens) if unchanged else [0 if s is None else sent_tokens[s] for s in t.sent_of_step],
        list(t.actions), list(t.sent_of_step), failures,
        [False] * n if isinstance(sources, range) else [s is None for s in sources], lengths, previews, [None] * n)
    row_of_step: Sequence[int] = range(n)
    if t.dropped:
        before, row_of_step = _with_dropped(before, t)
    a_src: list[int | None] = []
    a_role: list[str] = []
    a_name: list[str | None] = []
    a_action: list[str] = []
    a_chars: list[int] = []
    a_preview: list[str] = []
    derived: list[int | None] = []
    actions = t.actions
    for msg, k in zip(view.messages, t.sent_sources, strict=True):
        content = msg.get("content")
        if k is not None and contents[k] is content:
            chars, preview = lengths[k], previews[k]
        else:
            text = content if content.__class__ is str else content_text(content)
            chars, preview = len(text), _preview(text)
        action = "summary" if k is None or _is_summary(msg) else actions[k]
        role = msg.get("role")
        role = role if role.__class__ is str else str(role)
        a_src.append(None if k is None else sources[k])
        a_role.append(role)
        a_name.append(None if k is None else names[k])
        a_action.append(action)
        a_chars.append(chars)
        a_preview.append(preview)
        derived.append(row_of_step[k] if k is not None and action == actions[k] and role == roles[k]
                       and chars == lengths[k] and preview == previews[k] else None)
    after = (list(range(len(view.messages))), a_src, a_role, a_name, list(t.sent_tokens), a_action, a_chars,
             a_preview)
    return Provenance(before, after, derived)


def _with_dropped(columns: tuple[list[Any], ...], t: Trace) -> tuple[tuple[list[Any], ...], list[int]]:
    """The before columns with the rows repair dropped, in input order (a synthetic result right after the
    step before it); and the row of each step."""
    rows: list[tuple[tuple[int, int, int], tuple[Any, ...]]] = []
    last = -1
    for k, row in enumerate(zip(*columns, strict=True)):
        src = row[0]
        last = src if src is not None else last
        rows.append(((last, 1 if src is None else 0, k), row))
    for i, reason in t.dropped.items():
        msg = t.inputs[i]
        ok = isinstance(msg, dict)
        text = content_text(msg.get("content")) if ok else str(msg)
        rows.append(((i, 0, -1), (i, str(msg.get("role")) if ok else "?", None, 0, 0, "dropped", None,
                                  ok and msg.get("role") == "tool" and is_failure(msg), False, len(text),
                                  _preview(text), reason)))
    rows.sort(key=lambda r: r[0])
    row_of_step = [0] * len(columns[0])
    for at, (key, _) in enumerate(rows):
        if key[2] >= 0:
            row_of_step[key[2]] = at
    return tuple(map(list, zip(*(row for _, row in rows), strict=True))), row_of_step
