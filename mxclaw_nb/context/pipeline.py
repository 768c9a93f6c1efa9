"""SPEC C0/C2/C7: the request-view pipeline, a fixed sequence of small named passes (`C0_PASSES`).

1. **repair and count** (C4, C1/T2; `incremental.plan_and_count`): pair every tool call with one result,
   drop orphans, synthesise failures for dangling calls, and count each message in its sent form.
   First, because the estimate must be of what will be sent, and every later pass relies on the pairs
   being whole (a placeholder or the tail boundary must never split a call from its result).
2. **threshold check** (C2; `build_request_view`): under the threshold the repaired transcript goes out
   unchanged. Before any compaction, so a view that fits is never touched.
3. **safe tail** (C3; `split_conversation`): the most recent messages within `keep_recent_tokens`, which
   no later pass changes. Before compaction, because it decides what compaction may touch.
4. **microcompaction** (C5; `microcompact`): old successful tool outputs become placeholders (typed
   when the tool recorded facts). The cheapest loss, and the most common win, so it is tried before the
   summary; if it brings the view under the threshold the pipeline stops here.
5. **structured summary** (C6; `summarize_old`): the old messages are replaced by one deterministic
   summary (incremental with a session cache). Only when micro was not enough.
6. **fallback window** (C8; `_Builder.fallback`): only when the summariser raises: the first two system
   messages, a fixed note and the last six conversation messages. Last, because it loses the most.

Every pass works on the view; the input list and its dicts are never mutated, and the same input gives
byte-identical output. The pipeline is pure: no clock, no I/O; token counts may come from a
caller-supplied counter and are cached (`TokenCache`) so an iteration that appends a few messages does
not re-count the history. The `_Builder` only carries one build's state between the passes and turns
their results into a RequestView with its provenance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import cached_property
from itertools import compress, islice, repeat
from operator import not_
from typing import Any

from mxclaw_nb.context.counters import TokenCounter
from mxclaw_nb.context.fallback import fallback_indices, fallback_message
from mxclaw_nb.context.incremental import Layout, layout_of, own_inputs, plan_and_count
from mxclaw_nb.context.lineage import Lineage, compose_lineage
from mxclaw_nb.context.micro import micro_summary, placeholder_for, stays
from mxclaw_nb.context.overhead import tool_definitions_tokens
from mxclaw_nb.context.repair import Planned
from mxclaw_nb.context.summary import StructuredSummaryState, build_structured_summary
from mxclaw_nb.context.tail import safe_tail_start
from mxclaw_nb.context.tokens import TokenCache, estimate_sent
from mxclaw_nb.context.view import RequestView, Trace
from mxclaw_nb.messages import SYSTEM_ROLES, Message, content_text, sanitize
from mxclaw_nb.text_policy import display

Summarizer = Callable[[list[Message]], str]


Counter = TokenCounter  # the one counter Protocol lives in counters.py (kept under this name for callers)


@dataclass(frozen=True)
class ContextPolicy:
    """Window, threshold ratio, safe-tail budget and token counter for one model (SPEC C2, C3, T2)."""

    context_window_tokens: int = 64_000
    threshold_ratio: float = 0.8
    keep_recent_tokens: int = 8_000
    counter: Any = None  # a Counter; None = the C1 estimate
    # T1-T3/N2: the fixed part of every request that is no message: the tool definitions (the compact JSON of the
    # schemas the request carries, as data: the engine does no I/O). Counted once per request as its own layer,
    # in the estimate the threshold is checked on; C1 for messages is unchanged. "" = none (the engine alone).
    tool_definitions: str = ""
    # SPEC C12: a named strategy (context.strategies.Strategy); None = `article`, the C0 ladder below, byte for byte
    strategy: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.context_window_tokens, int) or self.context_window_tokens <= 0:
            raise ValueError(f"context_window_tokens must be a positive integer, got {self.context_window_tokens!r}")
        if not 0 < self.threshold_ratio <= 1:
            raise ValueError(f"threshold_ratio must be in (0, 1], got {self.threshold_ratio!r}")
        if not isinstance(self.keep_recent_tokens, int) or self.keep_recent_tokens < 0:
            raise ValueError(f"keep_recent_tokens must be an integer >= 0, got {self.keep_recent_tokens!r}")

    @cached_property  # read several times per build; the policy is frozen
    def threshold(self) -> int:
        """C2: floor(window * ratio), computed in decimal so 0.29 * 100 is 29, not 28."""
        return math.floor(Decimal(self.context_window_tokens) * Decimal(str(self.threshold_ratio)))

    @property
    def counter_name(self) -> str:
        """Name of the token counter in use (`estimate` for C1)."""
        return "estimate" if self.counter is None else str(self.counter.name)

    @cached_property
    def fixed_tokens(self) -> int:
        """T1-T3: tokens of the tool definitions every request carries (`tool_definitions_tokens`)."""
        return tool_definitions_tokens(self.tool_definitions, self.counter)

    def count(self, sent_message: Message) -> int:
        """Tokens of one message in its sent form under this policy's counter."""
        return estimate_sent(sent_message) if self.counter is None else int(self.counter.count(sent_message))


def _counter_of(policy: ContextPolicy) -> Callable[[Message], int]:
    """Per-message count of a sent message: C1 directly (no dispatch), else the policy's counter."""
    return estimate_sent if policy.counter is None else policy.count


def build_request_view(
    messages: Sequence[Message],
    policy: ContextPolicy,
    summarize: Summarizer | None = build_structured_summary,
    *,
    cache: TokenCache | None = None,
    seqs: Sequence[int | None] | None = None,
    previous: Lineage | None = None,
    transcript: Sequence[Message] | None = None,
    call: int | None = None,
) -> RequestView:
    """SPEC C0: the request view for one model call, with its lineage (N3, `view.lineage`) when it is a live
    call (the caller gives `previous`, `transcript` or `call`, as the loop does; otherwise the lineage over the
    input is composed when read, `view.own_lineage`).

    `seqs[p]`: the stored seq of input position p (None: an engine-made message), which placeholders name
    (C13, `recall #41`); None: the input positions are the seqs (a dry run or a replay from the transcript).
    `previous`: what the earlier calls of the turn did (C7: `next_call` of the previous view gives it with
    the next input and seqs); `transcript`: the stored messages by seq the lineage rebuilds its rows from
    (default: the previous lineage's)."""
    view = _build(messages, policy, summarize, cache, seqs)
    return _with_lineage(view, messages, seqs, previous, transcript, call)


def _with_lineage(view: RequestView, messages: Sequence[Message], seqs: Sequence[int | None] | None,
                  previous: Lineage | None, transcript: Sequence[Message] | None, call: int | None) -> RequestView:
    """N3: `view` with its transcript-relative lineage when the caller names the stored transcript, the turn's
    earlier calls or this call's number (the loop: a record keeps it). A dry run's or a replay's view gets none
    here: its lineage takes the input positions as seqs, indexes messages no store holds, and is composed only
    when read (`RequestView.own_lineage`, its own rows), so a build does not pay for it. A lineage that cannot
    be composed (a first call with an engine-made input) is left out (`lineage` None)."""
    if seqs is None or (previous is None and transcript is None and call is None):
        return view
    if transcript is None and previous is not None:
        transcript = previous.transcript
    if not isinstance(seqs, (range, list, tuple)):  # a lazy map (a replay's carried seqs): this call's positions
        seqs = [seqs[p] for p in range(len(messages))]
    try:
        return replace(view, lineage=compose_lineage(view, seqs, previous, call=call, transcript=transcript))
    except ValueError:
        return view


def _build(messages: Sequence[Message], policy: ContextPolicy, summarize: Summarizer | None,
           cache: TokenCache | None, seqs: Sequence[int | None] | None) -> RequestView:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError("messages must be a list of message dicts")
    inputs = own_inputs(messages, cache)  # a session cache's own list, extended in place (C7: O(new))
    planned = plan_and_count(inputs, _counter_of(policy), cache, policy.counter)
    if not planned.messages:
        raise ValueError("nothing to send: the transcript has no usable messages")
    build = _Builder(inputs, planned, policy, cache, seqs)
    view: RequestView
    if policy.strategy is not None:  # C12: another strategy's ladder (context.strategies), same passes
        view = policy.strategy.build(build, summarize)
    elif build.before <= policy.threshold:
        return build.finish("unchanged", None, None)
    else:
        view = build.compact(summarize)
    if view.stage in ("micro", "summary") and view.after_tokens >= view.before_tokens:
        # C5/C6: a compaction that does not shrink what it replaces is not applied ("nothing to gain"): the
        # view goes on unchanged (over the threshold; C9 still guards the call), and says what was tried
        unchanged = _Builder(inputs, planned, policy, cache, seqs).finish("unchanged", None, None)
        return replace(unchanged, no_gain={"stage": view.stage, "before_tokens": view.before_tokens,
                                           "after_tokens": view.after_tokens})
    return view


class _From(Sequence[Any]):
    """`seq[offset:]` without the copy: the conversation after the leading system messages (read-only)."""

    __slots__ = ("_offset", "_seq", "_stop")

    def __init__(self, seq: Sequence[Any], offset: int, stop: int | None = None) -> None:
        self._seq, self._offset, self._stop = seq, offset, len(seq) if stop is None else stop

    def __len__(self) -> int:
        return self._stop - self._offset

    def __iter__(self) -> Iterator[Any]:  # C speed (the Sequence mixin would call __getitem__ per item)
        return islice(self._seq, self._offset, self._stop)

    def __reversed__(self) -> Iterator[Any]:  # C speed: the safe tail and the summary read from the end
        n = len(self._seq)
        return islice(reversed(self._seq), n - self._stop, n - self._offset)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            start, stop, step = k.indices(len(self))
            return self._seq[self._offset + start: self._offset + stop: step]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self._seq[self._offset + k]


def _head(seq: Sequence[Any], stop: int) -> list[Any]:
    """`list(seq[:stop])` (one copy, also for a `_From`)."""
    out = seq[:stop]
    return out if isinstance(out, list) else list(out)


# --- the passes -------------------------------------------------------------------------------------------
# Each takes what the passes before it produced and returns a small named result; none mutates its input
# (the session cache's summary state is the one thing `summarize_old` extends, by design: C6 is incremental).

C0_PASSES: tuple[tuple[str, str, str], ...] = (
    # (name, SPEC id, what does it)
    ("repair and count", "C4, C1/T2", "incremental.plan_and_count"),
    ("threshold check", "C2", "build_request_view"),
    ("safe tail", "C3", "split_conversation"),
    ("microcompaction", "C5", "microcompact"),
    ("structured summary", "C6", "summarize_old"),
    ("fallback window", "C8", "_Builder.fallback"),
)


@dataclass(frozen=True)
class Conversation:
    """The safe-tail pass's result (C3): the non-system steps, their messages and counts, and the tail.

    In the usual shape (system messages first) `steps` is a range and `messages`/`tokens` are offset views
    of the plan's lists, so no per-message work is done to make them.
    """

    steps: Sequence[int]  # step indices of the conversation, in order
    messages: Sequence[Message]
    tokens: Sequence[int]
    tail: int  # index into `steps` of the first message of the safe tail (== len(steps): no tail)

    @property
    def old(self) -> Sequence[int]:
        """The steps before the safe tail: what passes 4 and 5 may touch."""
        return self.steps[: self.tail]


def split_conversation(step_messages: Sequence[Message], tokens: Sequence[int], layout: Layout,
                       keep_recent_tokens: int) -> Conversation:
    """Pass 3 (C3): the conversation after the system messages and where its safe tail starts."""
    roles = layout.roles
    lead = len(layout.systems)
    conv: Sequence[int]
    if not lead or layout.systems[-1] == lead - 1:  # the usual shape: system messages first, then the rest
        conv = range(lead, len(roles))
        messages: Sequence[Message] = _From(step_messages, lead)
        counts: Sequence[int] = _From(tokens, lead)
    else:
        conv = list(compress(range(len(roles)), map(not_, map(SYSTEM_ROLES.__contains__, roles))))
        messages = list(map(step_messages.__getitem__, conv))
        counts = list(map(tokens.__getitem__, conv))
    return Conversation(conv, messages, counts, safe_tail_start(messages, counts, keep_recent_tokens))


@dataclass(frozen=True)
class Micro:
    """The microcompaction pass's result (C5): placeholder messages by step, their counts, the characters
    they replace and the view's total once they are in."""

    sent: dict[int, Message]
    tokens: dict[int, int]
    chars: int
    after: int


def microcompact(conv: Conversation, step_messages: Sequence[Message], sent: Sequence[Message],
                 tokens: Sequence[int], layout: Layout, policy: ContextPolicy, before: int,
                 recall: Callable[[int], int | None] | None = None, cache: TokenCache | None = None) -> Micro:
    """Pass 4 (C5): a placeholder for each old successful tool output (typed when its tool recorded facts).

    Placeholders cost >= 0, so this pass can at best remove every old tool result; when even that leaves
    the view over the threshold the summary is certain and no placeholder is made. (Tool steps are never
    system steps, so the old tool results are the tool steps before the tail.)
    """
    old = conv.old
    tail_step = conv.steps[conv.tail] if conv.tail < len(conv.steps) else len(layout.roles)
    if before - layout.tool_tokens_before(tokens, tail_step) > policy.threshold:
        return Micro({}, {}, 0, before)
    return placeholders(compress(old, map("tool".__eq__, map(layout.roles.__getitem__, old))), step_messages, sent,
                        policy, before, tokens, recall, cache)


def placeholders(steps: Iterable[int], step_messages: Sequence[Message], sent: Sequence[Message],
                 policy: ContextPolicy, before: int, tokens: Sequence[int],
                 recall: Callable[[int], int | None] | None = None, cache: TokenCache | None = None) -> Micro:
    """C5's placeholder for each of `steps` that has one (a successful tool result longer than it), not applied;
    `recall(step)` is the stored seq each names (C13; None: the version 1 text).

    Shared by pass 4 and the C12 strategies that choose their own steps (masking, clearing). With a session
    cache (append-only: message dicts are values), the steps whose message is known to stay (`micro.stays`, e.g.
    placeholders carried from the turn's earlier calls, C7) are skipped at C speed: a build looks at new ones."""
    out: dict[int, Message] = {}
    counts: dict[int, int] = {}
    chars = 0
    known = cache.stays if cache is not None and cache.append_only else None
    if known is not None:
        steps = [k for k in steps if id(step_messages[k]) not in known]  # a comprehension beats a map chain here
        if len(known) > cache.max_entries:  # type: ignore[union-attr]
            known.clear()
    made = cache.placeholders if known is not None and policy.counter is None else None  # type: ignore[union-attr]
    for k in steps:
        msg = step_messages[k]
        hit = None if made is None else made.get(id(msg))
        seq = None if recall is None else recall(k)
        if hit is not None and hit[0] is msg and hit[1] is sent[k] and hit[2] == seq:
            # the same original, sent form and seq as a build before (a later turn's rebuild, C2): the same
            # placeholder (message dicts are values; C1 counts only)
            out[k], counts[k] = hit[3], hit[4]
            chars += hit[5]
            continue
        if known is not None and stays(msg):
            known[id(msg)] = msg
            continue
        text = placeholder_for(msg, seq, known is not None)  # with a session cache, `stays` was asked just above
        if text is not None:
            n = len(content_text(msg.get("content")))
            chars += n
            out[k] = {**sent[k], "content": text}
            counts[k] = policy.count(out[k])
            if made is not None:
                if len(made) > cache.max_entries:  # type: ignore[union-attr]
                    made.clear()
                made[id(msg)] = (msg, sent[k], seq, out[k], counts[k], n)
    return Micro(out, counts, chars, before + sum(c - tokens[k] for k, c in counts.items()))


def summarize_old(conv: Conversation, step_messages: Sequence[Message], lead: int, summarize: Summarizer | None,
                  cache: TokenCache | None) -> str:
    """Pass 5 (C6): the summary text of the old messages. Raises when the summariser fails (pass 6, C8)."""
    if summarize is None:
        raise RuntimeError("no summariser configured")
    if summarize is build_structured_summary and cache is not None:
        # same text, but only the old messages added since the last call are scanned
        prefix = cache.prefix
        # plan_and_count drops this state whenever the transcript did not just grow (see there)
        old_part = (_From(step_messages, lead, lead + conv.tail) if cache.append_only
                    and isinstance(conv.messages, _From) else _head(conv.messages, conv.tail))
        if cache.summary is None:
            cache.summary = _resumed(cache, old_part) or StructuredSummaryState()
            if prefix is not None:
                prefix.summary = cache.summary
        text = cache.summary.summary(old_part, unchanged_content=True, trusted=cache.append_only)
    else:
        text = summarize(_head(conv.messages, conv.tail))
    if not isinstance(text, str):
        raise TypeError(f"summariser returned {type(text).__name__}, not str")
    return display(text)  # SPEC L7: quoted goals/failures may hold text that is not valid Unicode


def _resumed(cache: TokenCache, old_part: Sequence[Message]) -> StructuredSummaryState | None:
    """C7: the C6 state another process saved, continued over `old_part` (None when there is none, or when it
    does not fit: then `cache.resume_note` says why, and the state is built from scratch, once)."""
    saved, cache.resume_summary = cache.resume_summary, None
    if saved is None or not cache.append_only:
        return None
    state, why = StructuredSummaryState.resumed(saved, old_part)
    if state is None:
        cache.resume_note = why
    return state


def recall_line(recall_of: Callable[[int], int | None], steps: Sequence[int]) -> str:
    """C13: `\nRecall: #0-#40 are in the transcript (the recall tool reads them).`, the stored range a summary
    covers ('' when none of its steps is a stored message)."""
    first = next((s for s in map(recall_of, steps) if s is not None), None)
    last = next((s for s in map(recall_of, reversed(steps)) if s is not None), None)
    if first is None or last is None:
        return ""
    span = f"#{first}" if first == last else f"#{first}-#{last}"
    return f"\nRecall: {span} {'is' if first == last else 'are'} in the transcript (the recall tool reads them)."


class _Builder:
    """Holds one build's intermediate state; each stage turns it into a RequestView."""

    def __init__(self, inputs: list[Any], planned: Planned, policy: ContextPolicy,
                 cache: TokenCache | None = None, seqs: Sequence[int | None] | None = None) -> None:
        self.inputs, self.dropped, self.cache, self.seqs = inputs, planned.dropped, cache, seqs
        self.sources, self.step_messages = planned.sources, planned.messages
        # `tokens` is only read; `sent` is copied before a stage rewrites an entry (the cache keeps the plan)
        self.tokens, self.sent, self.policy, self._own_sent = planned.tokens, planned.sent, policy, False
        self.estimates = planned.estimates  # C1 per step when the policy counts otherwise (T3 records both)
        self.layout: Layout | None = planned.layout
        self.fixed = policy.fixed_tokens  # the tool definitions: part of every request, never compacted
        self.before = (sum(self.tokens) if self.layout is None else self.layout.total) + self.fixed
        sources = self.sources
        # the action of each step, made where first needed (C7: the summary path makes it once, of its runs)
        self._actions: list[str] | None = None
        k = -1
        while not isinstance(sources, range) and None in sources[k + 1:]:  # synthetic results: at C speed
            k = sources.index(None, k + 1)
            self.actions[k] = "synthetic"
        self.repaired = bool(self.dropped) or k >= 0
        self.systems: list[int] = []
        self.conversation: Sequence[int] = []
        self.tail: int | None = None  # index into self.conversation
        self.runs: list[tuple[int, int, str]] | None = []  # see view.Trace.runs
        self.settled: tuple[Any, int] | None = None  # see view.Trace.settled (set by a strategy's `settle`)
        self._continues = planned.settled  # the plan's: what the view this build continues had settled

    @property
    def actions(self) -> list[str]:
        if self._actions is None:
            self._actions = ["kept"] * len(self.sources)
        return self._actions

    @actions.setter
    def actions(self, actions: list[str]) -> None:
        self._actions = actions

    def compact(self, summarize: Summarizer | None) -> RequestView:
        """Passes 3-6 (see the module docstring) on a view over the threshold."""
        conv = self.split()
        micro = microcompact(conv, self.step_messages, self.sent, self.tokens, self.layout_now, self.policy,
                             self.before, self.recall_of, self.cache)
        if micro.after <= self.policy.threshold or not conv.old:
            return self.finish_micro(conv, micro)
        return self.summarize(conv, summarize)

    def recall_of(self, step: int) -> int | None:
        """C13: the stored seq of a step (its input position in a dry run), which its placeholder names."""
        p = self.sources[step]
        if p is None or self.seqs is None:
            return p
        return self.seqs[p] if p < len(self.seqs) else None

    @property
    def layout_now(self) -> Layout:
        """The plan's layout (computed here when the plan did not keep one)."""
        if self.layout is None:
            self.layout = layout_of(Planned(self.sources, self.step_messages, self.dropped, self.sent, self.tokens))
        return self.layout

    def split(self) -> Conversation:
        """Pass 3 (C3): the conversation and its safe tail (kept on the builder for `finish`)."""
        layout = self.layout_now
        self.systems = layout.systems
        conv = split_conversation(self.step_messages, self.tokens, layout, self.policy.keep_recent_tokens)
        self.conversation, self.tail = conv.steps, conv.tail
        return conv

    def finish_micro(self, conv: Conversation, micro: Micro, label: str = "microcompaction") -> RequestView:
        """The view with pass 4's (or a strategy's) placeholders in, every step sent (`micro`, or `unchanged`)."""
        self._apply(micro)
        summary = None
        if micro.sent:
            summary = micro_summary(len(micro.sent), micro.chars, self.before, micro.after,
                                    self.policy.counter_name, label)
        # every step, systems first: the micro view drops nothing; in place (a range, no list per build) when the
        # systems lead (C7: the next input's positions are this one's)
        steps, lead, n = conv.steps, len(self.systems), len(self.sources)
        leading = not lead or self.systems[-1] == lead - 1
        order: Sequence[int] = (range(n) if isinstance(steps, range) and steps == range(lead, n) and leading
                                else self.systems + list(steps))
        return self.finish("micro" if micro.sent else "unchanged", order, summary, micro.tokens)

    def summarize(self, conv: Conversation, summarize: Summarizer | None) -> RequestView:
        """Passes 5-6: the old messages become one summary (C6), or the C8 window when the summariser fails."""
        self._mark_summarized(conv.old)  # the summary path does not send old messages (nor their placeholders)
        try:
            text = summarize_old(conv, self.step_messages, len(self.systems), summarize, self.cache)
        except Exception as exc:  # noqa: BLE001 - any compactor failure must take the C8 path
            return self.fallback(f"{type(exc).__name__}: {exc}")
        text += recall_line(self.recall_of, conv.old)
        return self.finish("summary", self.systems + [None] + list(conv.steps[conv.tail:]), text,
                           extra={"role": "system", "content": text})

    def _apply(self, micro: Micro) -> None:
        """Put pass 4's placeholders into the sent view (copied first: the cache keeps the plan's list)."""
        if micro.sent:
            self._copy_sent()
        for k, message in micro.sent.items():
            self.sent[k] = message
            self.actions[k] = "placeholder"
            self.runs.append((k, k + 1, "placeholder"))  # type: ignore[union-attr]

    def _mark_summarized(self, old: Sequence[int]) -> None:
        if isinstance(old, range):  # a new list, not a slice assignment (no temporary lists of a long session's size)
            made = self._actions
            actions = ["kept"] * old.start if made is None else made[:old.start]
            actions += repeat("summarized", len(old))
            actions += repeat("kept", len(self.sources) - old.stop) if made is None else made[old.stop:]
            self.actions = actions
            self.runs = [(old.start, old.stop, "summarized")]
        else:
            for k in old:
                self.actions[k] = "summarized"
            self.runs = None

    def settled_before(self) -> int:
        """C7: the step before which the view this build continues decided everything under this same policy
        (its placeholders are in, the rest stays), so a strategy's pass looks from there on; 0 otherwise."""
        given = self._continues
        return given[1] if given is not None and given[0] == self.policy else 0

    def settle(self, step: int) -> None:
        """Say that this build decided every step before `step` (recorded on the view's trace for the next)."""
        self.settled = (self.policy, step)

    def _copy_sent(self) -> None:
        if not self._own_sent:
            self.sent, self._own_sent = list(self.sent), True

    def fallback(self, error: str) -> RequestView:
        """C8 on the repaired steps: first two systems + fixed note + last six conversation messages."""
        msgs = list(self.step_messages)
        systems, tail = fallback_indices(msgs)
        self._copy_sent()
        keep = set(systems) | set(tail)
        for k, (src, msg) in enumerate(zip(self.sources, msgs, strict=True)):
            self.sent[k] = sanitize(msg)
            self.actions[k] = ("synthetic" if src is None else "kept") if k in keep else "dropped"
        self.runs = None
        note = fallback_message()
        return self.finish("fallback", [*systems, None, *tail], note["content"], extra=note, error=error)

    def finish(self, stage: str, order: Sequence[int | None] | None, summary: str | None,
               override: dict[int, int] | None = None, extra: Message | None = None,
               error: str | None = None) -> RequestView:
        """`order` lists the step sent at each position (None = `extra`); None means every step, in order."""
        sent_of_step: Sequence[int | None]
        sent_sources: Sequence[int | None]
        if order is None:  # the common, unchanged path: plain copies, no per-message Python work
            # step k is sent at position k: a range says so without an int object per message
            out, sent_tokens, sent_of_step = list(self.sent), self.tokens, range(len(self.sources))
            sent_sources = sent_of_step
        else:
            out, sent_tokens, sent_of_step = self._arrange(order, override or {}, extra)
            sent_sources = list(order)  # a list: a range says "every step sent as it came" (lineage)
        after = self.before if order is None else sum(sent_tokens) + self.fixed
        estimate = after if self.policy.counter is None else self._estimate(order, out, override or {}) + self.fixed
        tail_start = None
        if self.tail is not None and self.tail < len(self.conversation):
            tail_start = self.sources[self.conversation[self.tail]]
        trace = Trace(self.inputs, self.sources, self.step_messages, self.dropped, self.tokens, self.actions,
                      sent_of_step, sent_sources, sent_tokens, runs=self.runs,
                      settled=self.settled if stage in ("micro", "unchanged") else None)
        return RequestView(
            messages=out, stage=stage, before_tokens=self.before, after_tokens=after,
            threshold=self.policy.threshold, window=self.policy.context_window_tokens, summary=summary,
            counter=self.policy.counter_name, tail_start=tail_start, over_threshold=after > self.policy.threshold,
            repaired=self.repaired, error=error, trace=trace, after_estimate=estimate, fixed_tokens=self.fixed)

    def _estimate(self, order: Sequence[int | None] | None, out: list[Message], override: dict[int, int]) -> int:
        """C1 estimate of the sent messages (steps sent unchanged reuse the plan's estimate)."""
        est = self.estimates
        if est is None:
            return sum(map(estimate_sent, out))
        if order is None:
            kept = None if self.layout is None else self.layout.estimate_total
            return sum(est) if kept is None else kept
        return sum(estimate_sent(m) if k is None or k in override else est[k] for k, m in zip(order, out, strict=True))

    def _arrange(self, order: Sequence[int | None], override: dict[int, int], extra: Message | None
                 ) -> tuple[list[Message], list[int], Sequence[int | None]]:
        n = len(self.sources)
        if extra is None and len(order) == n and (order == range(n) if isinstance(order, range)
                                                  else order == list(range(n))):  # every step in order (micro)
            counts = list(self.tokens)
            for step, count in override.items():
                counts[step] = count
            return list(self.sent), counts, range(n)
        out: list[Message] = []
        sent_tokens: list[int] = []
        sent_of_step: list[int | None] = [None] * len(self.sources)
        for k in order:
            if k is None:
                assert extra is not None
                out.append(extra)
                sent_tokens.append(self.policy.count(extra))
                continue
            sent_of_step[k] = len(out)
            out.append(self.sent[k])
            sent_tokens.append(override.get(k, self.tokens[k]))
        return out, sent_tokens, sent_of_step


def build_fallback_view(messages: Sequence[Message], policy: ContextPolicy, reason: str, *,
                        seqs: Sequence[int | None] | None = None, previous: Lineage | None = None,
                        transcript: Sequence[Message] | None = None, call: int | None = None) -> RequestView:
    """C8/C9: the fallback window as a RequestView (with its lineage, as `build_request_view`), e.g. for the
    prompt-too-long retry."""
    inputs = list(messages)
    planned = plan_and_count(inputs, _counter_of(policy), None, policy.counter)
    if not planned.messages:
        raise ValueError("nothing to send: the transcript has no usable messages")
    return _with_lineage(_Builder(inputs, planned, policy).fallback(reason), messages, seqs, previous, transcript,
                         call)
