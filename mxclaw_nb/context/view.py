"""The RequestView and its provenance: the one structure every widget, event and experiment reads.

`build_request_view` decides; this module only records the decision. The view keeps what was sent
(`messages`) and, per message, where it came from and what happened to it, so the before/after
tables, the gauge's layers, the events and the replays are all projections of the same facts and can
never disagree. Provenance rows are built lazily: a 10k-message view that nobody inspects costs
nothing extra, which keeps the incremental rebuild inside the loop cheap.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import Any, NamedTuple, TypeVar, cast, overload

from mxclaw_nb.context.actions import ACTION_NAMES
from mxclaw_nb.context.micro import FACTS_KEY
from mxclaw_nb.context.rows import Spliced
from mxclaw_nb.messages import (
    Message,
)

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
    # (start step, stop step, action) of every step whose action is not kept/synthetic, when the stage can say
    # so cheaply (unchanged, micro, summary); None = read `actions` (the lineage then looks at every step)
    runs: list[tuple[int, int, str]] | None = field(default=None, compare=False)
    # C5/C7: (policy, step): the strategy decided every step before `step` in this build (each got its placeholder
    # or stays), so the next build of the turn, continued from this view under the same policy, starts there
    # (`repair.Planned.settled`); None when the stage cannot say so
    settled: tuple[Any, int] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("inputs", "step_messages", "tokens", "sent_tokens"):
            object.__setattr__(self, name, _bounded(getattr(self, name)))


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
    # SPEC N3: the transcript-relative provenance (context.lineage.Lineage) the engine composes across a turn's
    # calls (the loop's); None for a dry run or a replay (their lineage over the input is `own_lineage`)
    lineage: Any = field(default=None, repr=False, compare=False)
    # SPEC C11: what a model-written summary of this view would cover (context.model_summary.SummaryPlan), set
    # when the view's summary is the C6 stand-in for one that is not recorded yet; the loop asks the model
    plan: Any = field(default=None, repr=False, compare=False)

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
    def own_lineage(self) -> Any:
        """SPEC N3 + C10: the lineage of this view over its own input, the input positions taken as seqs (a dry
        run's or a replay's lineage, `live` False: no store holds its input), composed when first read; None for
        a view without a trace. A live call's lineage (the loop's, over the stored transcript) is `lineage`."""
        from mxclaw_nb.context.lineage import compose_lineage  # the lineage module builds on this one

        t = self.trace
        return None if t is None else compose_lineage(self, range(len(t.inputs)), transcript=t.inputs, live=False)

    @cached_property
    def provenance(self) -> Provenance:
        """Per-message record of what happened (before rows) and where each sent message came from, relative
        to the view's input, in the counter that decided the stage (C10): `lineage.own_rows`, built by
        `lineage_rows` (SPEC N3, the one row builder) with the input positions as seqs."""
        from mxclaw_nb.context.lineage import own_rows  # the lineage module builds on this one

        if self.trace is None:
            return Provenance.from_rows((), ())
        rows = own_rows(self)
        return Provenance.from_rows([MessageRecord(**{f: r[f] for f in BEFORE_FIELDS}) for r in rows["before"]],
                                    [SentRecord(**{f: r[f] for f in AFTER_FIELDS}) for r in rows["after"]])
