"""Replay a compaction policy over a stored or imported transcript, without calling a model (SPEC S4).

Why: the question "what would a 32k window with a 4k tail have done to this session?" has an exact
answer that needs no model: the loop calls the model before every assistant message, and the context
engine is a pure function of what came before. So for each assistant message at index i we build the
request view of ``messages[:i]`` exactly as the loop would (SPEC C7): at each new user message the
view is rebuilt from the full transcript; within a turn the input is the previous view's
``next_input`` plus the messages added since, so earlier summaries stay pinned and compaction can
happen several times in one turn. One row per simulated call.

The kept/placeholder/summarized/dropped counts are per *transcript* message (of ``messages[:i]``), not
per input row: a message summarised in an earlier call of the same turn stays ``summarized``, and a
placeholder carried over stays ``placeholder``. So the four always add up to ``n_messages``.
``synthetic`` counts repair-made tool results sent in the view; ``typed_placeholders`` the K2 typed placeholders
it sends (C5 placeholders that name what a kernel tool left: type, shape, live variable), part of ``placeholder``.
Fact columns (S4, R2): of the facts of the compacted messages, ``facts_visible`` are still in the view,
``facts_recallable`` are not but sit in a message a placeholder or a summary's range names (C13: the ``recall``
tool fetches it), ``facts_lost`` are neither (a fallback window dropped them).
``full_tokens`` is the policy's count of the whole transcript so far plus the policy's tool definitions (what an
uncompacted request would cost: the same layers as ``before_tokens``/``after_tokens``); ``saved_tokens = full -
after``.
Token columns are in the policy's counter (``counter``), except ``estimate_tokens``: the C1 estimate of what
the call sends, whatever the counter (T3), as in a stored request record.
"""

from __future__ import annotations

import gc
import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import compress, count, islice, repeat
from operator import is_not, not_
from typing import Any, NamedTuple, Protocol

import numpy as np
import pandas as pd

from mxclaw_nb.analysis.facts import (
    FACT_KINDS,
    Fact,
    ViewText,
    combine_views,
    extract_facts,
    message_view,
    survival,
)
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.context import ContextPolicy, RequestView, TokenCache, build_request_view, build_structured_summary
from mxclaw_nb.context.cache_variants import cache_variant, choose
from mxclaw_nb.context.incremental import continued_input, sent_in_place
from mxclaw_nb.context.lineage import Lineage, compose_lineage
from mxclaw_nb.context.micro import is_typed_placeholder
from mxclaw_nb.context.model_summary import summary_prompt
from mxclaw_nb.context.prefix import shared_prefix
from mxclaw_nb.context.tokens import estimate_messages
from mxclaw_nb.context.view import Trace
from mxclaw_nb.messages import Message, sanitize
from mxclaw_nb.records import RequestRecord, c1_estimate
from mxclaw_nb.store.codec import text
from mxclaw_nb.store.records import FRAME_COLUMNS, frame_row, opt_int

COMPACTED = ("placeholder", "summarized", "dropped")
_STAYING = frozenset({"kept", "placeholder"})  # the states a kept step leaves as they are
COLUMNS = [
    "session_id", "call", "turn", "n_messages", "n_input", "rebuilt", "full_tokens", "before_tokens", "after_tokens",
    "estimate_tokens", "saved_tokens", "threshold", "window", "keep_recent", "counter", "stage", "compacted", "kept",
    "placeholder", "typed_placeholders", "summarized", "dropped", "synthetic", "n_sent", "summary_chars",
    "over_threshold", "shared_tokens", "broken_tokens", "completion_tokens", "cache_decision",
    "summary_calls", "summary_call_tokens", "summary_source",  # C11: the model summary calls a strategy makes
]
STAND_IN = "C6 stand-in"  # C11 `summary_source`: no summary recorded for this coverage; the C6 text was sent
RECORDED = "recorded"  # C11 `summary_source`: the session's recorded model summary (its call made live)
FACT_COLUMNS = ["facts_total", "facts_visible", "facts_recallable", "facts_lost", "fact_survival",
                *(f"survival_{k}" for k in FACT_KINDS)]
NAMED = frozenset({"placeholder", "summarized"})  # C13: states whose original a placeholder or summary names
EXACT_COLUMNS = ["exact_full_tokens", "exact_after_tokens", "exact_over_window"]
PROGRESS_DELAY = 2.0  # seconds before a replay's progress bar appears: a short replay shows none
# S4: while a replay runs, the cyclic collector runs a generation-0 pass per this many new container objects (not
# Python's 700): a replay allocates many that outlive it (views, plans, rows), and the default passes traverse them
# again and again (about a quarter of the policy lab's redraw). Bounded, unlike gc.disable(): a long replay still
# collects, rarely. Reference counting frees everything as before; only when cycles are looked for changes.
REPLAY_GC_THRESHOLD = 100_000
_gc_lock = threading.Lock()
_gc_depth = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's generation-0 threshold to REPLAY_GC_THRESHOLD for the block (nested and concurrent
    blocks share one raise; the outermost restores the thresholds it found)."""
    global _gc_depth, _gc_saved
    with _gc_lock:
        if _gc_depth == 0:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0]:  # 0: the collector's automatic passes are off; left so
                gc.set_threshold(max(_gc_saved[0], REPLAY_GC_THRESHOLD), *_gc_saved[1:])
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0:
                gc.set_threshold(*_gc_saved)


class IdCache:
    """Values computed once per message object (keyed by identity; keeps a reference so ids stay valid)."""

    def __init__(self, fn: Callable[[Message], Any]) -> None:
        self.fn = fn
        self._items: dict[int, tuple[Message, Any]] = {}

    def __call__(self, message: Message) -> Any:
        hit = self._items.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        value = self.fn(message)
        self._items[id(message)] = (message, value)
        return value


def _content_key(message: Message) -> Any:
    # What facts and view text depend on: the content and the tool calls (not identity, not other keys).
    if not isinstance(message, dict):
        return None
    content, calls = message.get("content"), message.get("tool_calls")
    if not isinstance(content, str):
        content = json.dumps(content, sort_keys=True, default=str)
    return content, None if not calls else json.dumps(calls, sort_keys=True, default=str)


class ContentCache(IdCache):
    """IdCache that falls back to the message's content: fresh copies of a message (placeholders carried
    from call to call, sanitized sent copies) hit too, so fact survival costs O(new messages) per call."""

    def __init__(self, fn: Callable[[Message], Any]) -> None:
        super().__init__(fn)
        self._by_content: dict[Any, Any] = {}

    def __call__(self, message: Message) -> Any:
        hit = self._items.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        key = _content_key(message)
        value = self._by_content.get(key) if key is not None else None
        if value is None:
            value = self.fn(message)
            if key is not None:
                self._by_content[key] = value
        self._items[id(message)] = (message, value)
        return value


class SessionCaches:
    """Everything replay caches for one session, shared across policies and calls."""

    def __init__(self, exact: Any = None) -> None:
        self.tokens: dict[Any, TokenCache] = {}  # one TokenCache per counter
        self.facts = ContentCache(extract_facts)
        self.views = ContentCache(message_view)
        self.exact = IdCache(exact.count) if exact is not None else None
        # typed_count: the last messages counted (kept alive, so compared by identity) and their running counts
        self._typed_prev: list[Message] = []
        self._typed_cum: list[int] = [0]

    def typed_count(self, messages: list[Message]) -> int:
        """K2: how many of `messages` are tool results holding a typed placeholder. Consecutive replayed views share
        most of their message dicts, in order: the count of the part shared with the last view asked about (found
        at C speed, by identity) is reused, and only the rest is looked at."""
        prev, cum = self._typed_prev, self._typed_cum
        m = next(compress(count(), map(is_not, messages, prev)), min(len(messages), len(prev)))
        del cum[m + 1:]
        total = cum[m]
        for msg in islice(messages, m, None):
            total += msg.get("role") == "tool" and is_typed_placeholder(msg.get("content"))
            cum.append(total)
        self._typed_prev = messages
        return total

    def token_cache(self, policy: ContextPolicy) -> TokenCache:
        """The TokenCache for this policy's counter (a different counter would clear a shared one)."""
        key = policy.counter_name if policy.counter is None else id(policy.counter)
        # append-only (S2: stored rows are values): two prefixes kept, the whole transcript at each turn's start and
        # the turn's C7 input, so neither evicts the other and each build re-plans only what was appended
        return self.tokens.setdefault(key, TokenCache(append_only=True))


_KEPT_ROLES = frozenset({"system", "developer", "user", "assistant"})


def call_positions(messages: Sequence[Any]) -> list[int]:
    """Positions of the simulated model calls: before each assistant message with something to send before it.

    Repair (C4) drops orphan tool results and unknown roles, so a log opening with those (a real shape: results
    written before their call) has no call until a message the view keeps (system, developer, user, assistant)."""
    first = next((k for k, m in enumerate(messages) if isinstance(m, dict) and m.get("role") in _KEPT_ROLES),
                 len(messages))
    return [i for i, m in enumerate(messages) if i > first and isinstance(m, dict) and m.get("role") == "assistant"]


def _turns(messages: Sequence[Any]) -> list[int]:
    turn, out = 0, []
    for m in messages:
        turn += isinstance(m, dict) and m.get("role") == "user"
        out.append(turn)
    return out


def _full_counts(messages: Sequence[Any], policy: ContextPolicy, cache: TokenCache) -> list[int]:
    key = None if policy.counter is None else policy.counter

    def compute(m: Message) -> tuple[int, Message]:
        sent = sanitize(m)
        return policy.count(sent), sent

    return [cache.lookup(m, key, compute)[0] if isinstance(m, dict) else 0 for m in messages]


class _Chain:
    """Transcript-level state of one turn's chain of views (see module doc).

    Reads the view's raw ``trace`` rather than its provenance rows: same facts, but no previews or
    failure scans, which makes a replay about three times faster.
    """

    def __init__(self, n: int, facts_of: Callable[[int], frozenset[Fact]] | None = None,
                 previous: _Chain | None = None) -> None:
        self.pos_map: list[int | None] = list(range(n))  # input position -> transcript index (None: engine-made)
        self.synthetic: set[int] = set()  # input positions holding a carried-over synthetic result
        self.state: dict[int, str] = {}  # transcript index -> action
        self.orphans: set[int] = set()  # transcript indices dropped by repair (not compaction)
        # the facts of the compacted messages, kept up to date as actions change (O(changes) per call)
        self.facts_of, self.members, self.fact_counts = facts_of, set[int](), dict[Fact, int]()
        # R2: the same for the compacted messages a placeholder or a summary's range names (recallable)
        self.named, self.named_counts = set[int](), dict[Fact, int]()
        self.action_counts: dict[str, int] = {}  # action -> transcript messages in that state (kept: the rest)
        self.settled = 0  # pos_map[:settled] all hold a kept or placeholder message (or an engine-made one)
        self._resync = False
        if previous is not None and previous.facts_of is facts_of:  # a new turn: start from the last turn's facts
            self.members, self.fact_counts, self._resync = previous.members, previous.fact_counts, True
            self.named, self.named_counts = previous.named, previous.named_counts

    def _set(self, t: int, action: str, touched: list[int]) -> None:
        old = self.state.get(t)
        if old == action:
            return
        if old is not None:
            self.action_counts[old] -= 1
        self.action_counts[action] = self.action_counts.get(action, 0) + 1
        self.state[t] = action
        touched.append(t)

    def _sync(self, touched: Iterable[int]) -> None:
        if self.facts_of is None:
            return
        for t in touched:
            state = self.state.get(t)
            compacted = state in COMPACTED and t not in self.orphans
            self._move(t, compacted, self.members, self.fact_counts)
            self._move(t, compacted and state in NAMED, self.named, self.named_counts)

    def _move(self, t: int, now: bool, members: set[int], counts: dict[Fact, int]) -> None:
        if now == (t in members) or self.facts_of is None:
            return
        step = 1 if now else -1
        (members.add if now else members.discard)(t)
        for fact in self.facts_of(t):
            left = counts.get(fact, 0) + step
            if left:
                counts[fact] = left
            else:
                counts.pop(fact, None)

    def advance(self, view: RequestView, start: int, end: int) -> None:
        """Map the next input (``view.next_input(messages[start:end])``) back to transcript indices."""
        trace = _trace(view)
        if _as_came(trace, len(self.pos_map)):  # sent as it came: the map only grows
            self.pos_map += range(start, end)
            self.synthetic = set()
            return
        self.settled = 0
        self.pos_map = [None if s is None else self.pos_map[s] for s in view.sources] + list(range(start, end))
        self.synthetic = {p for p, k in enumerate(trace.sent_sources)
                          if k is not None and trace.step_sources[k] is None}

    def record(self, view: RequestView) -> int:
        """Fold one view's decisions into the state; return the synthetic results it sends."""
        trace = _trace(view)
        synthetic = 0
        touched: list[int] = []
        if (trace.runs is not None and isinstance(trace.step_sources, range) and not trace.dropped
                and not self.synthetic):
            self._record_runs(trace, touched)
        else:
            synthetic = self._record_steps(trace, touched)
        if self._resync:  # inherited members whose action this chain has not set are "kept" now
            touched.extend(self.members)
            self._resync = False
        self._sync(touched)
        return synthetic

    def _record_runs(self, trace: Trace, touched: list[int]) -> None:
        """`record` when every step is an input message and the trace lists its non-kept steps as runs: the
        kept steps are looked at at C speed and only those whose state changes are touched (a long
        unchanged view costs what its new messages cost)."""
        sources = trace.step_sources
        assert isinstance(sources, range)
        # the settled prefix of the map is kept or placeholder already (only appended positions are new, C7)
        lo = min(self.settled, sources.stop) if sources.start == 0 else sources.start
        ts = self.pos_map[lo:sources.stop]
        # a kept step keeps a placeholder state (the C7 input carries the placeholder) and leaves "kept" as is
        changed = compress(ts, map(not_, map(_STAYING.__contains__, map(self.state.get, ts))))
        for t in changed:
            if t is not None:
                self._set(t, "kept", touched)
        for a, b, action in trace.runs or ():
            for k in range(a, b):
                t = self.pos_map[sources[k]]
                if t is None:
                    continue
                if action == "kept" and self.state.get(t) == "placeholder":
                    continue
                self._set(t, action, touched)
        settled = sources.start == 0 and all(action in _STAYING for _a, _b, action in trace.runs or ())
        self.settled = sources.stop if settled else 0

    def _record_steps(self, trace: Trace, touched: list[int]) -> int:
        self.settled = 0
        synthetic = 0
        for k, src in enumerate(trace.step_sources):
            action = trace.actions[k]
            if src is None or src in self.synthetic:
                synthetic += trace.sent_of_step[k] is not None
                continue
            t = self.pos_map[src]
            if t is None:
                continue  # a pinned summary or fallback note from an earlier call
            if action == "kept" and self.state.get(t) == "placeholder":
                action = "placeholder"
            self._set(t, action, touched)
        for src in trace.dropped:  # repair dropped it from the view (orphan or duplicate result)
            t = self.pos_map[src]
            if t is not None:
                self.orphans.add(t)
                self._set(t, "dropped", touched)
                touched.append(t)  # an orphan leaves the compacted facts even when already "dropped"
        return synthetic


class _ContinuedSeqs(Sequence[Any]):
    """The transcript index of each input position of `view.next_input(msgs[start:...])` (C7), read lazily: what
    `_Chain.advance` will map, without building the list (a placeholder asks for a few positions only, C13)."""

    def __init__(self, chain: _Chain, view: RequestView, start: int) -> None:
        self.pos_map, self.view, self.start = chain.pos_map, view, start
        t = _trace(view)
        self.same = _as_came(t, len(self.pos_map))
        self.n = len(self.pos_map) if self.same else len(view.messages)
        self._sources: list[int | None] | None = None  # view.sources, built on the first lookup (it is O(n))

    def __len__(self) -> int:  # only the carried part is bounded; new positions map past it
        return 1 << 62

    def __getitem__(self, p: Any) -> Any:
        if p >= self.n:
            return self.start + (p - self.n)
        if self.same:
            return self.pos_map[p]
        if self._sources is None:
            self._sources = self.view.sources
        s = self._sources[p]
        return None if s is None else self.pos_map[s]


def _as_came(trace: Trace, n: int) -> bool:
    """Every one of the `n` input positions is a step sent in place (unchanged, or micro's placeholders in place):
    the next input's positions are this one's (checked at C speed)."""
    steps = trace.step_sources
    return isinstance(steps, range) and steps == range(n) and sent_in_place(trace, n)


def _trace(view: RequestView) -> Trace:
    if view.trace is None:
        raise ValueError("replay needs a RequestView built by build_request_view (it carries the trace)")
    return view.trace


def _fact_columns(chain: _Chain, view: RequestView, caches: SessionCaches) -> dict:
    facts = chain.fact_counts.keys()  # kept up to date by _Chain.record
    if not facts:
        return {}
    seen: ViewText = combine_views(caches.views(m) for m in view.messages)
    result = survival(facts, seen)
    named = chain.named_counts.keys()
    recallable = sum(1 for f in facts if f in named) - survival((f for f in facts if f in named), seen).visible
    out: dict[str, Any] = {"facts_total": result.total, "facts_visible": result.visible,
                           "facts_recallable": recallable, "facts_lost": result.total - result.visible - recallable,
                           "fact_survival": result.share}
    for kind, (total, visible) in result.by_kind.items():
        out[f"survival_{kind}"] = visible / total if total else math.nan
    return out


class ViewSink(Protocol):
    """What receives each simulated call's view, in order (a list, or a sink that keeps only some: the lab's)."""

    def append(self, view: RequestView, /) -> None: ...


def _sent_tokens(view: RequestView, policy: ContextPolicy) -> Sequence[int]:
    """Per sent message tokens in the policy's counter: the view's own, else counted (views without a trace)."""
    if view.trace is not None and len(view.trace.sent_tokens) == len(view.messages):
        return view.trace.sent_tokens
    return [policy.count(m) for m in view.messages]


def replay_messages(messages: Sequence[Any], policy: ContextPolicy, *, session_id: str = "messages",
                    summarize: Callable[[list[Message]], str] | None = build_structured_summary,
                    facts: bool = True, caches: SessionCaches | None = None,
                    progress: bool | Callable[..., Any] = False,
                    views: ViewSink | None = None, first_call: int = 1,
                    summary_writer: Any = None, states: bool = True) -> list[dict[str, Any]]:
    """Replay rows (dicts) for one transcript under one policy; see ``replay``. ``views``: a list (or any
    ``ViewSink``) that receives every simulated call's RequestView (e.g. to compare them with what a live run sent).

    ``summary_writer`` (C11, a ``summary_call.ModelSummarizer``): where the engine plans a model summary, ask it as
    the live loop does (same prompt, provider adapter and gates); an accepted summary is then the strategy's for
    the rest of the replay (merged into by later ones), a rejected one leaves the C6 text. None: the C6 stand-in.

    ``first_call``: simulate only the calls from this one on, which must open a turn (C2: the engine rebuilds
    there from the stored transcript, so its views and the rest of its turn are those of the whole replay; what
    carries over turns is not: the facts columns (refused) and the E2 shared-prefix columns of that first call).
    The cache-aware variants may carry a view over a turn boundary (E4): refused for them.

    ``states=False`` (needs ``facts=False``): leave out the columns of per-message states and of the E2 shared
    prefix (`kept`, `placeholder`, `typed_placeholders`, `summarized`, `dropped`, `synthetic`, `shared_tokens`,
    `broken_tokens`), which a timeline does not draw: the same views and other columns, about a third sooner
    (the policy lab's whole replay, S4)."""
    if not states and facts:
        raise ValueError("states=False needs facts=False (the fact columns follow the message states)")
    run = _Replay(list(messages), policy, caches or SessionCaches(), session_id, summarize, facts, summary_writer,
                  states)
    calls = call_positions(run.msgs)
    _check_first_call(run, calls, first_call)
    steps = _with_progress(enumerate(calls[first_call - 1:], first_call), progress, len(calls), session_id)
    rows: list[dict[str, Any]] = []
    with fewer_collections():
        for call_no, i in steps:
            call = run.build(i)
            if views is not None:
                views.append(call.view)
            rows.append(run.row(call_no, i, call))
    return rows


def replayed_lineage(view: RequestView, n_messages: int, previous: tuple[Lineage, int] | None = None, *,
                     call: int = 1) -> Lineage:
    """SPEC N3 + C7: the lineage the live loop composes for a replayed call, so its rows are relative to the stored
    transcript as the live inspector's are (the lab computes it for the call on screen only, not in a replay).

    `view`: the call made when the transcript had `n_messages` messages; `previous`: (the lineage, `n_messages`)
    of the call before it in its chain, None when `view` rebuilt from the transcript (a turn's first call, C2);
    `call`: its call number in its turn. As the loop's `first_call`/`next_call` give it: a rebuilt call's input
    position p is stored seq p; a continued call's input is what the previous one sent (origins in its lineage)
    plus the messages stored since, at their seqs. The lineage's `transcript` is not set (the caller's messages)."""
    if previous is None:
        return compose_lineage(view, range(n_messages), None, call=call)
    lineage, before = previous
    return compose_lineage(view, [*repeat(None, len(lineage.sent)), *range(before, n_messages)], lineage, call=call)


def _check_first_call(run: _Replay, calls: Sequence[int], first_call: int) -> None:
    """`first_call` > 1 must open a turn, without facts and with a policy that rebuilds at each turn."""
    if first_call == 1:
        return
    if run.facts or run.aware:
        raise ValueError("first_call > 1 needs facts=False and a policy that rebuilds at each turn "
                         "(not a -cache variant)")
    turns = run.turns
    if not 1 < first_call <= len(calls) or turns[calls[first_call - 1] - 1] == turns[calls[first_call - 2] - 1]:
        raise ValueError(f"first_call must open a turn among the {len(calls)} calls, got {first_call!r}")


def _with_progress(steps: Iterable[tuple[int, int]], progress: bool | Callable[..., Any], total: int,
                   session_id: str) -> Iterable[tuple[int, int]]:
    """The calls to replay, behind a progress bar when asked (after PROGRESS_DELAY: short replays show none)."""
    if not progress:
        return steps
    from tqdm.auto import tqdm

    bar = progress if callable(progress) else tqdm  # a caller's tqdm class (e.g. one whose saved form is final)
    return bar(steps, total=total, desc=f"replay {session_id[:8]}", unit="call", delay=PROGRESS_DELAY,  # type: ignore[no-any-return]
               leave=False)


def _prefix_sums(counts: Iterable[int]) -> list[int]:
    out = [0]
    for n in counts:
        out.append(out[-1] + n)
    return out


class _Call(NamedTuple):
    """One simulated model call: its view, whether it rebuilt from the transcript, its input, the E4 decision and
    what the C11 summary writer did (None: nothing asked)."""

    view: RequestView
    rebuilt: bool
    inputs: list[Any]
    decision: dict[str, Any]
    written: Any


class _Replay:
    """One replay of a transcript under a policy: what it carries from call to call (the previous view and its
    transcript-level chain, C7; the E2 prefix state; the C11 summaries already counted)."""

    def __init__(self, msgs: list[Any], policy: ContextPolicy, caches: SessionCaches, session_id: str,
                 summarize: Callable[[list[Message]], str] | None, facts: bool, summary_writer: Any,
                 states: bool = True) -> None:
        self.msgs, self.policy, self.caches, self.session_id = msgs, policy, caches, session_id
        self.summarize, self.facts, self.summary_writer, self.states = summarize, facts, summary_writer, states
        self.cache = caches.token_cache(policy)
        self.full = _full_counts(msgs, policy, self.cache)
        self.prefix = _prefix_sums(self.full)
        self.exact_prefix = (None if caches.exact is None else
                             _prefix_sums(caches.exact(m) if isinstance(m, dict) else 0 for m in msgs))
        self.turns = _turns(msgs)
        self.aware = cache_variant(policy) is not None
        # one function object for every chain: a new turn's chain starts from the last one's facts (`_Chain`)
        self.facts_of: Callable[[int], frozenset[Fact]] | None = self._facts_of if facts else None
        self.view: RequestView | None = None
        self.chain, self.prev = _Chain(0), 0
        self.pstate: Any = None  # E2: the shared-prefix state of the previous call
        self.summarized: set[str] = set()  # C11: recorded summaries already sent (their call is counted once)

    def _facts_of(self, t: int) -> frozenset[Fact]:
        return self.caches.facts(self.msgs[t]) if isinstance(self.msgs[t], dict) else frozenset()

    def _view(self, inputs: list[Any], policy: ContextPolicy, seqs: Any, cached: bool = True) -> RequestView:
        return build_request_view(inputs, policy, self.summarize, cache=self.cache if cached else None, seqs=seqs)

    def build(self, i: int) -> _Call:
        """The view of the call made when the transcript has `i` messages (C7: continued within a turn, rebuilt
        from the transcript at a turn's first call), and the chain moved on to it."""
        view, msgs, policy = self.view, self.msgs, self.policy
        rebuilt = view is None or self.turns[i - 1] != self.turns[self.prev - 1]
        continued = None
        if view is not None and not rebuilt:  # C7: the view's own plan seeds the next build's (O(new) per call)
            continued = continued_input(view, msgs[self.prev:i], self.cache, policy.counter)
        elif view is not None and self.aware:
            continued = view.next_input(msgs[self.prev:i])
        inputs: Any = msgs[:i] if rebuilt else continued
        # C13: placeholders name the transcript index (a rebuilt call's input positions are those already)
        cont_seqs = None if view is None else _ContinuedSeqs(self.chain, view, self.prev)
        seqs = None if rebuilt else cont_seqs
        built = self._view(inputs, policy, seqs)
        written = None
        if built.plan is not None and self.summary_writer is not None:  # C11: the summary call, as the loop makes it
            def rebuild(p: ContextPolicy, given: Any = inputs, s: Any = seqs) -> RequestView:
                return self._view(given, p, s)

            self.policy, built, written = _write_summary(self.summary_writer, self.session_id, policy, built,
                                                         rebuild)
        decision: dict[str, Any] = {}
        if self.aware and view is not None:  # E4 (C12 `<name>-cache`): keep a warm prefix, or break it for enough
            built, decision = self._choose(built, inputs, continued, cont_seqs, seqs)
            if decision["continued"]:
                rebuilt, inputs = False, continued
        if rebuilt:
            self.chain = _Chain(i, self.facts_of, self.chain)
        else:
            assert view is not None
            self.chain.advance(view, self.prev, i)
        self.view = built
        return _Call(built, rebuilt, inputs, decision, written)

    def _choose(self, built: RequestView, inputs: list[Any], continued: Any, cont_seqs: Any, seqs: Any
                ) -> tuple[RequestView, dict[str, Any]]:
        """E4: the prefix-keeping continuation or the built view, whichever the cache-aware variant chooses."""

        def build(given: list[Any], pol: ContextPolicy) -> RequestView:
            if pol.strategy is None:  # the prefix-keeping alternative (as the next call of the turn would be)
                return self._view(given, pol, cont_seqs)
            return self._view(given, pol, seqs, cached=False)  # deeper / idle: another threshold

        return choose(build, self.policy, built, inputs, continued, warm=True)  # no timestamps: warm

    def row(self, call_no: int, i: int, call: _Call) -> dict[str, Any]:
        """The replay row of the call made at `i` messages (its figures, the chain's counts, facts, exact)."""
        view, policy, caches, prefix, full = call.view, self.policy, self.caches, self.prefix, self.full
        counts: dict[str, Any] = {}  # the per-message states and the E2 shared prefix (S4: states=False skips)
        shared: dict[str, Any] = {}
        if self.states:
            got, self.pstate = shared_prefix(self.pstate, view.messages, _sent_tokens(view, policy),  # E2
                                             view.counter, view.after_tokens if view.trace is not None else None,
                                             extends=not call.rebuilt and view.stage == "unchanged"
                                             and not view.repaired)
            shared = {"shared_tokens": got.tokens, "broken_tokens": got.broken_tokens}  # E2, in `counter`
            counts = _state_columns(self.chain, view, caches, i)
        row: dict[str, Any] = {
            "session_id": self.session_id, "call": call_no, "turn": self.turns[i - 1], "n_messages": i,
            # the uncompacted request carries the tool definitions too, as before/after do (T1-T3)
            "n_input": len(call.inputs), "rebuilt": call.rebuilt, "full_tokens": prefix[i] + policy.fixed_tokens,
            "before_tokens": view.before_tokens,
            "after_tokens": view.after_tokens, "estimate_tokens": c1_estimate(view),
            "saved_tokens": prefix[i] + policy.fixed_tokens - view.after_tokens,
            "threshold": view.threshold, "window": view.window, "keep_recent": policy.keep_recent_tokens,
            "counter": view.counter, "stage": view.stage, "compacted": view.compacted, **counts,
            "n_sent": len(view.messages), "summary_chars": len(view.summary or ""),
            "over_threshold": view.over_threshold, **shared,
            "completion_tokens": full[i] if i < len(full) else 0, "cache_decision": call.decision.get("decision"),
            **_summary_call(view, policy, self.summarized),
            **(call.written.columns() if call.written is not None else {}),  # C11: what the writer really did
        }
        if self.facts:
            row.update(_fact_columns(self.chain, view, caches))
        if caches.exact is not None and self.exact_prefix is not None:
            exact_after = sum(caches.exact(m) for m in view.messages)
            row.update(exact_full_tokens=self.exact_prefix[i], exact_after_tokens=exact_after,
                       exact_over_window=exact_after > view.window)
        self.prev = i
        return row


def _state_columns(chain: _Chain, view: RequestView, caches: SessionCaches, i: int) -> dict[str, Any]:
    """The per-message state columns of the call at `i` (its view folded into the chain's states first)."""
    synthetic = chain.record(view)
    counts: dict[str, Any] = {a: chain.action_counts.get(a, 0) for a in COMPACTED}
    counts["kept"] = i - sum(counts.values())  # every other transcript message so far
    counts.update(typed_placeholders=caches.typed_count(view.messages), synthetic=synthetic)  # K2
    return counts


def _write_summary(writer: Any, session_id: str, policy: ContextPolicy, view: RequestView,
                   rebuild: Callable[[ContextPolicy], RequestView]) -> tuple[ContextPolicy, RequestView, Any]:
    """C11 in a replay: the writer asks for the planned summary; an accepted one joins the strategy's recorded
    summaries (as `Agent` does with `on_summary`) and the view is rebuilt with it."""
    strategy = policy.strategy
    inner = getattr(strategy, "inner", None)  # a `-cache` variant (E4) of `model-summary`: its inner strategy's
    target = strategy if hasattr(strategy, "with_summary") else inner if hasattr(inner, "with_summary") else None
    if view.plan is None or target is None:
        return policy, view, None
    written = writer.write(session_id, view.plan, float(getattr(target, "deadline", 60.0)))
    if written.summary is None:
        return policy, view, written
    kept = target.with_summary(written.summary)
    policy = replace(policy, strategy=kept if target is strategy else replace(strategy, inner=kept))
    return policy, rebuild(policy), written


def _summary_call(view: RequestView, policy: ContextPolicy, seen: set[str]) -> dict[str, Any]:
    """C11: the model summary call the strategy makes at this call. A planned one (no summary recorded for its
    coverage): 1 call, the C1 estimate of its request, and `C6 stand-in` (a replay makes no model call: the C6
    text was sent). A recorded summary sent for the first time: 1 call, made live (its reported tokens are in the
    session's `requests` with `purpose = 'summary'`; here NaN). Else 0 calls, 0 tokens."""
    if view.plan is not None:
        return {"summary_calls": 1, "summary_call_tokens": estimate_messages(summary_prompt(view.plan)),
                "summary_source": STAND_IN}
    recorded = getattr(policy.strategy, "summaries", ()) if view.stage == "summary" and view.summary else ()
    new = {r.text for r in recorded if r.text not in seen and r.text in (view.summary or "")}
    seen |= new
    if new:
        return {"summary_calls": len(new), "summary_call_tokens": math.nan, "summary_source": RECORDED}
    return {"summary_calls": 0, "summary_call_tokens": 0, "summary_source": None}


def frame(rows: list[dict[str, Any]], *, facts: bool, exact: bool, extra: Sequence[str] = ()) -> pd.DataFrame:
    """Rows -> DataFrame with a stable column order (fact columns NaN where nothing was compacted)."""
    columns = [*extra, *COLUMNS, *(FACT_COLUMNS if facts else []), *(EXACT_COLUMNS if exact else [])]
    df = pd.DataFrame(rows, columns=columns)
    if facts:
        df[FACT_COLUMNS] = df[FACT_COLUMNS].astype(float)
    return df


def replay(session_or_messages: Any, policy: ContextPolicy | dict[str, Any], *, store: Any = None,
           summarize: Callable[[list[Message]], str] | None = build_structured_summary, exact: bool = False,
           facts: bool = True, progress: bool | Callable[..., Any] = False,
           summary_provider: Any = None) -> pd.DataFrame:
    """One row per simulated model call as the transcript grew (see module doc for the columns).

    ``session_or_messages``: a list of messages, an ``(id, messages)`` pair, a ``Conversation``, or a
    session id (needs ``store``). ``exact=True`` adds exact o200k_base counts of each view. ``progress=True``
    shows a progress bar (tqdm) when the replay takes longer than ``PROGRESS_DELAY`` seconds; a tqdm class
    instead of ``True`` draws it (the notebook's, whose saved output is the finished bar).
    ``summary_provider`` (C11): a provider (e.g. ``OpenAIProvider``) or a ``summary_call.ModelSummarizer``: the
    summaries a ``model-summary`` policy plans are then written by real model calls (``summary_source`` "model",
    "C6 (model summary rejected)", or "... reused"); without one, the C6 text stands in ("C6 stand-in").
    """
    from mxclaw_nb.analysis.sources import one_conversation
    from mxclaw_nb.summary_call import as_writer

    sid, messages = one_conversation(session_or_messages, store)
    _, pol = as_policy(policy)
    caches = SessionCaches(exact_o200k() if exact else None)
    rows = replay_messages(messages, pol, session_id=sid, summarize=summarize, facts=facts, caches=caches,
                           progress=progress, summary_writer=as_writer(summary_provider))
    return frame(rows, facts=facts, exact=exact)


def exact_o200k() -> Any:
    """The exact o200k_base counter, or a clear error when tiktoken/bpe-openai are missing."""
    from mxclaw_nb.tokenizers import exact_counter, unavailable_reason

    counter = exact_counter("o200k_base")
    if counter is None:
        raise RuntimeError(f"exact=True needs o200k_base: {unavailable_reason('o200k_base')}")
    return counter


def as_requests(df: pd.DataFrame, session_id: str | None = None) -> pd.DataFrame:
    """Replay rows of one session in the shape of ``store.requests()`` (e.g. for ``widgets.TokenTimeline``).

    Each row becomes the request record a stored call would have (`mxclaw_nb.records.RequestRecord`), laid out
    by the store's codec: `after_tokens` in the policy's counter, `estimate_tokens` the C1 estimate (T3
    `est.`), `calibrated_tokens` only under the calibrated counter."""
    if session_id is not None:
        df = df[df["session_id"] == session_id]
    if df["session_id"].nunique() > 1 or ("policy" in df and df["policy"].nunique() > 1):
        raise ValueError("as_requests takes the rows of one session and one policy; filter the frame first")
    return rows_as_requests(df.to_dict("records"))


def rows_as_requests(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """`as_requests` of the rows of one replay (`replay_messages`' dicts, one session and policy) without making
    their DataFrame first (the policy lab's timeline, S4). The store's codec lays out the first row's record; the
    others differ from it only in the columns a replay row sets (`records_frame`'s frame: a test holds it). Built
    column by column (S4: a frame from row dicts costs more than the rest of the timeline at 500 calls); pandas
    infers each column's dtype from its values as it does from the row dicts."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return pd.DataFrame([], columns=list(FRAME_COLUMNS))
    iteration, last_turn, it = [], None, 0
    for row in rows:
        it = it + 1 if row["turn"] == last_turn else 1
        last_turn = row["turn"]
        iteration.append(it)
    counter = [str(r.get("counter") or "estimate") for r in rows]
    after = [int(r["after_tokens"]) for r in rows]
    estimate = [e if (e := r.get("estimate_tokens")).__class__ is int else opt_int(e) for r in rows]
    cols: dict[str, list[Any]] = {
        "session_id": [str(r["session_id"]) for r in rows], "seq": [int(r["call"]) - 1 for r in rows],
        "turn": [int(r["turn"]) for r in rows], "iteration": iteration, "counter": counter,
        "estimate_tokens": [e if e is not None else a if c == "estimate" else None
                            for e, a, c in zip(estimate, after, counter, strict=True)],
        "calibrated_tokens": [a if c == "calibrated" else None for a, c in zip(after, counter, strict=True)],
        "before_tokens": [int(r["before_tokens"]) for r in rows], "after_tokens": after,
        "threshold": [int(r["threshold"]) for r in rows], "window_tokens": [int(r["window"]) for r in rows],
        "stage": [str(r["stage"]) for r in rows]}
    # the record a stored call would have (`mxclaw_nb.records.RequestRecord`): the first row's
    template = frame_row(RequestRecord(**{k: v[0] for k, v in cols.items()}))
    for key in ("counter", "stage"):  # as the codec writes them (a few distinct values)
        coded = {v: text(v) for v in set(cols[key])}
        cols[key] = [coded[v] for v in cols[key]]
    # E4: a `-cache` strategy's decision (the timeline marks it); NaN where a row has none, as a row dict without
    # the key gives
    decisions = [r.get("cache_decision") for r in rows]
    columns = list(FRAME_COLUMNS)
    if any(d is not None for d in decisions):
        columns.append("cache_decision")
        cols["cache_decision"] = [d if d is not None else math.nan for d in decisions]
    n = len(rows)
    data: dict[str, Any] = {}
    for c in columns:
        if c in ("seq", "turn", "iteration", "before_tokens", "after_tokens", "threshold", "window_tokens"):
            try:  # whole numbers as an int64 array: what pandas infers from them, without the walk
                data[c] = np.array(cols[c], dtype=np.int64)
            except OverflowError:
                data[c] = cols[c]
        elif c in cols:
            data[c] = cols[c]
        else:  # the template's value on every row; all None is an object column (as pandas infers it)
            data[c] = np.full(n, None, dtype=object) if template[c] is None else [template[c]] * n
    return pd.DataFrame(data, columns=columns, copy=False)  # the arrays are this frame's alone
