"""Repair + count a transcript, reusing the previous build's work when the transcript only grew.

Why: inside a turn the loop rebuilds the request view before every model call, and between calls the
transcript only gains a few messages. Re-planning the C4 repair and re-counting 10k messages each time
costs tens of milliseconds in Python; the cached prefix makes a rebuild proportional to what was
appended. The reuse is exact: the repair loop is at its top level at every message with a known
non-tool role (a tool block never extends past one), so everything planned before the last such
message of the previous input is final, whatever is appended. Reuse requires the same message objects
(and the same content / tool-call objects) in the same positions — checked at C speed; anything else
re-plans from scratch, giving the same result as without a cache. The plan (repair, sent forms, C1
estimates) does not depend on the counter; with another counter the earlier counts are reused only
when the counter is the same object as last time, else everything is counted again.

A session cache (`TokenCache(append_only=True)`, what the Agent keeps across turns) is told that the
messages it sees are values that are never edited in place (stored rows, SPEC S2): it then checks only
that the previous input is a prefix of the new one (one list comparison at C speed, by identity first),
not every content object, so a rebuild after one new message is O(new) plus a few whole-list copies.
It keeps two prefixes: the whole stored transcript (the first call of each turn) and the turn's own
C7 input (later calls), so neither evicts the other. A view with placeholders makes a C7 input that extends
no planned prefix; `continued_input` plans it from the view itself (the view is already repaired), so the
turn's later builds stay O(new) under masking and clearing too.
"""

from __future__ import annotations

import base64
import math
import operator
import sys
import zlib
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, islice, repeat
from typing import Any, cast

from mxclaw_nb.context.counters import CalibratedCounter, EstimateCounter, message_key
from mxclaw_nb.context.micro import FACTS_KEY
from mxclaw_nb.context.repair import Planned, SentForms, append_result, plan_counted
from mxclaw_nb.context.rows import HeadTail, Spliced
from mxclaw_nb.context.summary import fingerprint
from mxclaw_nb.context.tokens import TokenCache, estimate_sent
from mxclaw_nb.context.view import RequestView, raw
from mxclaw_nb.messages import ROLES, SYSTEM_ROLES, Message

_TOP_LEVEL_ROLES = (frozenset(ROLES) | SYSTEM_ROLES) - {"tool"}


@dataclass(frozen=True)
class Layout:
    """Per-step facts the compaction stages read, kept across builds so a rebuild only extends them.

    `roles[k]` is step k's role, `systems` the steps with a system role, `total` the sum of the counted
    tokens and `tool_total` the same over tool steps only (negative counts as 0, as C5's bound does).
    """

    roles: list[Any]
    systems: list[int]
    total: int
    tool_total: int
    estimate_total: int | None = None  # sum of the C1 estimates when the counts are another counter's (kept)
    # the tool steps, ascending (C12: masking's and clearing's candidates), kept beside `roles` as they grow (O(new)
    # per build); None when not tracked (a resumed plan's lazy roles): then scanned from `roles` where read
    tools: list[int] | None = None

    def tool_tokens_before(self, tokens: Sequence[int], step: int) -> int:
        """Tool tokens of the steps before `step` (walks the steps after it: the safe tail is short)."""
        return self.tool_total - _tool_sum(tokens[step:], self.roles[step:])


def layout_of(planned: Planned, old: Layout | None = None, k: int = 0, same_counts: bool = False,
              old_tokens: Sequence[int] = (), old_tail: Sequence[int] | None = None,
              totals: tuple[int, int] | None = None, estimate_total: int | None = None) -> Layout:
    """The layout of `planned`, reusing the first `k` steps of `old` (its totals too when `same_counts`;
    `old_tokens` are the counts `old` was made from, or `old_tail` their part from step k on). `totals`:
    (total, tool total) of `planned.tokens` when the caller kept them (the calibrated counting does)."""
    if old is None:
        k = 0
    tokens = planned.tokens
    reuse_totals = same_counts and old is not None and k and totals is None
    if reuse_totals and old is not None:  # before the roles change below
        tail = old_tokens[k:] if old_tail is None else old_tail
        total = old.total - sum(tail)
        tool_total = old.tool_total - _tool_sum(tail, old.roles[k:])
    # the old layout belongs to the prefix this build consumed (nothing else reads it): extended in place
    roles = old.roles if k and old is not None else []
    del roles[k:]
    roles += map(dict.get, planned.messages[k:], repeat("role"))
    systems = [s for s in old.systems if s < k] if old is not None and k else []
    systems += compress(range(k, len(roles)), map(SYSTEM_ROLES.__contains__, roles[k:]))
    tools: list[int] | None = None
    if not (k and old is not None):
        tools = list(compress(range(len(roles)), map("tool".__eq__, roles)))
    elif old.tools is not None:  # like the roles: the consumed prefix's list, cut back and extended in place
        tools = old.tools
        del tools[bisect_left(tools, k):]
        tools += compress(range(k, len(roles)), map("tool".__eq__, roles[k:]))
    if totals is not None:
        total, tool_total = totals
    elif reuse_totals:
        total += sum(tokens[k:])
        tool_total += _tool_sum(tokens[k:], roles[k:])
    else:
        total = sum(tokens)
        tool_total = _tool_sum(tokens, roles)
    return Layout(roles, systems, total, tool_total, estimate_total, tools)


def _tool_sum(tokens: Sequence[int], roles: Sequence[Any]) -> int:
    """Sum of the tool steps' counts (negative as 0), at C speed."""
    return sum(map(max, compress(tokens, map("tool".__eq__, roles)), repeat(0)))


@dataclass
class _Calibration:
    """What counting under a calibrated counter needs per step, extended across builds (T2 as a factor over
    the cached C1 counts): the content key of each step's sent form, the steps of each key, each step's C1
    count and tool flag, and the C1 counts as a histogram (count value -> steps), overall and over tool steps.

    No per-step list is ever rescaled: a step's calibrated count is computed where it is read
    (`CalibratedCounts`), and a total under a factor is summed over the histogram's distinct values
    (`_histogram_total`: exact, as the per-step rounding is a function of the value), which are far fewer than
    the steps (15 in the 300k-message synthetic session, 366 over all the shared real transcripts)."""

    keys: list[Any] = field(default_factory=list)
    by_key: dict[Any, list[int]] = field(default_factory=dict)
    c1: list[int] = field(default_factory=list)  # this state's own copy (the plan's list may be replaced)
    tools: list[bool] = field(default_factory=list)  # per step: a tool result (the layout's tool total)
    histogram: Counter[int] = field(default_factory=Counter)
    tool_histogram: Counter[int] = field(default_factory=Counter)
    c1_total: int = 0  # running sum of `c1` (the view's C1 estimate when every step is sent)
    made: tuple[int, int] | None = None  # (total, tool total) of the counts the last call returned
    covered: tuple[Any, int, int] | None = None  # see _covers


    def truncate(self, k: int) -> None:
        if self.covered is not None:
            self.covered = (*self.covered[:2], min(self.covered[2], k))
        for step in range(k, len(self.keys)):
            self.by_key[self.keys[step]].remove(step)
        self.histogram.subtract(self.c1[k:])  # a value left at 0 steps adds 0 to a total
        self.tool_histogram.subtract(compress(self.c1[k:], self.tools[k:]))
        self.c1_total -= sum(self.c1[k:])
        del self.keys[k:]
        del self.c1[k:]
        del self.tools[k:]

    def extend(self, sent: list[Message], steps: Sequence[Message], c1: Sequence[int]) -> None:
        have = len(self.keys)
        for step in range(have, len(sent)):
            key = message_key(sent[step])
            self.keys.append(key)
            self.by_key.setdefault(key, []).append(step)
        added = c1[have:len(sent)]
        tools = list(map("tool".__eq__, map(dict.get, steps[have:len(sent)], repeat("role"))))
        self.histogram.update(added)  # at C speed
        self.tool_histogram.update(compress(added, tools))
        self.c1 += added
        self.tools += tools
        self.c1_total += sum(added)


def _scaled(c1: Any, factor: float) -> list[int]:
    """ceil(c * factor - 1e-9) per count, as CalibratedCounter.count rounds (at C speed)."""
    return list(map(math.ceil, map(_EPSILON.__rsub__, map(factor.__mul__, c1))))


_EPSILON = 1e-9


def _histogram_total(histogram: dict[int, int], factor: float) -> int:
    """Sum of ceil(c * factor - 1e-9) over the counts a histogram holds (negative as 0: the tool total's bound
    is only taken over tool steps, whose counts are never negative)."""
    return sum(map(operator.mul, histogram.values(), map(math.ceil, map(
        _EPSILON.__rsub__, map(factor.__mul__, histogram.keys())))))


class CalibratedCounts(Sequence[int]):
    """The per-step counts of one calibrated build, computed where read (T2: the factor is applied to the
    cached C1 counts on reading, never by rescanning them per build): ceil(c1 * ratio) for the first `m`
    steps (those the last usage report covered, anchored), ceil(c1 * factor) after them, and `overrides` (step ->
    count) for single steps anchored by their content. Read-only; `c1` may grow later (only its first `n`
    counts are this build's)."""

    __slots__ = ("_c1", "_factor", "_m", "_n", "_over", "_ratio")

    def __init__(self, c1: list[int], n: int, factor: float, m: int = 0, ratio: float = 1.0,
                 overrides: dict[int, int] | None = None) -> None:
        self._c1, self._n, self._factor, self._m, self._ratio = c1, n, factor, m, ratio
        self._over = overrides or {}

    def __len__(self) -> int:
        return self._n

    def _at(self, k: int) -> int:
        hit = self._over.get(k)
        if hit is not None:
            return hit
        return math.ceil(self._c1[k] * (self._ratio if k < self._m else self._factor) - _EPSILON)

    def _span(self, start: int, stop: int) -> list[int]:
        """Counts of steps start..stop-1, at C speed."""
        m = min(max(self._m, start), stop)
        out = _scaled(self._c1[start:m], self._ratio) if m > start else []
        out += _scaled(self._c1[m:stop], self._factor)
        for k, v in self._over.items():
            if start <= k < stop:
                out[k - start] = v
        return out

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            start, stop, step = k.indices(self._n)
            if step == 1:
                return self._span(start, max(start, stop))
            return [self._at(i) for i in range(start, stop, step)]
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(k)
        return self._at(k)

    def __iter__(self) -> Iterator[int]:
        return iter(self._span(0, self._n))

    def __reversed__(self) -> Iterator[int]:  # the safe tail reads from the end, a few steps
        return map(self._at, range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._n and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CalibratedCounts({list(self)!r})"


def calibrated_counts(counter: CalibratedCounter, sent: list[Message], c1: list[int], state: _Calibration,
                      k: int, steps: Sequence[Message]) -> CalibratedCounts:
    """Per-step counts of `counter` (base C1) equal to `counter.count(sent[i])`, with the state's first `k`
    steps reused: O(new + what the last usage report covered beyond a plain prefix + distinct count values),
    not O(steps). `steps` are the step messages (their roles); `state.made` is left with the counts' total and
    tool total."""
    state.truncate(min(k, len(state.keys)))
    state.extend(sent, steps, c1)
    factor = float(counter.factor)
    n = len(sent)
    report = counter.last_report
    if report is not None and report.base_total > 0:
        ratio = max(counter.floor, report.reported / report.base_total)
        m = len(report.sent)
        if 0 < m <= n and _covers(report, sent, m, state):
            # the usual loop step: the report covered exactly these first m steps (the everything-fits path),
            # so they are all anchored; a later step only when its key was reported
            index, tools = report.index, state.tools
            overrides: dict[int, int] = {}
            total = _histogram_total(state.histogram, ratio)
            tool_total = _histogram_total(state.tool_histogram, ratio)
            for step in range(m, n):
                base = c1[step]
                if state.keys[step] in index:
                    now = overrides[step] = math.ceil(base * ratio - _EPSILON)
                    continue
                now = math.ceil(base * factor - _EPSILON)
                was = math.ceil(base * ratio - _EPSILON)  # what the histogram sum counted for it
                total += now - was
                if tools[step]:
                    tool_total += now - was
            state.made = (total, tool_total)
            return CalibratedCounts(c1, n, factor, m, ratio, overrides)
        by_key, tools = state.by_key, state.tools
        total = _histogram_total(state.histogram, factor)
        tool_total = _histogram_total(state.tool_histogram, factor)
        overrides = {}
        for key in report.index if len(report.index) <= len(by_key) else [x for x in by_key if x in report.index]:
            for step in by_key.get(key, ()):
                now = math.ceil(c1[step] * ratio - _EPSILON)
                delta = now - math.ceil(c1[step] * factor - _EPSILON)
                total += delta
                if tools[step]:
                    tool_total += delta
                overrides[step] = now
        state.made = (total, tool_total)
        return CalibratedCounts(c1, n, factor, overrides=overrides)
    state.made = (_histogram_total(state.histogram, factor), _histogram_total(state.tool_histogram, factor))
    return CalibratedCounts(c1, n, factor)


def _covers(report: Any, sent: list[Message], m: int, state: _Calibration) -> bool:
    """`sent[:m] == list(report.sent)`, comparing only what the state has not verified before: O(new).

    `state.covered` = (ledger, gen, v): the steps before v equal the first v messages of that report (a
    report is named by its ledger and number: only the ledger's newest report is ever extended in place,
    so one ledger never holds two reports of the same number). The next report of the same ledger extends
    it (`CalibratedCounter.observe` checked that), so its first v messages are the same values."""
    v = 0
    if state.covered is not None:
        ledger, gen, upto = state.covered
        if report.ledger is ledger and report.gen in (gen, gen + 1):
            v = min(upto, m)
    ok = sent[v:m] == list(report.sent[v:m])
    state.covered = (report.ledger, report.gen, m) if ok else None
    return ok


def _is_calibrated(counter_key: Any) -> bool:
    return isinstance(counter_key, CalibratedCounter) and isinstance(counter_key.base, EstimateCounter)


@dataclass
class _Prefix:
    inputs: list[Any]  # the build's own list; an append-only cache extends it in place (see own_inputs)
    length: int  # how many of `inputs` this prefix planned
    contents: list[Any] | None  # None for an append-only cache (nothing in place is checked)
    calls: list[Any] | None
    planned: Planned
    resume: int  # input position where planning may resume
    resume_step: int  # number of steps planned before `resume`
    counter_key: Any
    summary: Any = None  # this prefix's summary.StructuredSummaryState (made by the first summary build)
    calibration: _Calibration | None = None  # per-step keys and scaled counts under a calibrated counter
    continued: bool = False  # planned from a view's own plan (`continued_input`) or grown from one (C7)
    settled: tuple[Any, int] | None = None  # the view's `Trace.settled` (seeded by `continued_input` only)


def _snapshot(inputs: list[Any]) -> tuple[list[Any], list[Any]] | None:
    try:
        return list(map(dict.get, inputs, repeat("content"))), list(map(dict.get, inputs, repeat("tool_calls")))
    except TypeError:  # a non-dict entry: no reuse (rare, and the plan drops it anyway)
        return None


def _same(a: list[Any], b: list[Any]) -> bool:
    return all(map(operator.is_, a, b))


def _reusable(prev: _Prefix | None, inputs: list[Any], snap: tuple[list[Any], list[Any]] | None) -> bool:
    if prev is None:
        return False
    m = prev.length
    if len(inputs) < m:
        return False
    if inputs is prev.inputs:  # adopted by own_inputs: already compared
        return True
    if prev.contents is None or prev.calls is None:  # append-only: values never edited in place
        # identity first at C speed; a message read back from the store is an equal copy (compared by value).
        # `inputs` is the build's own copy: cut to m for the comparison and restored (no slice of the history)
        if m == 0:
            return True
        tail = inputs[m:]
        del inputs[m:]
        try:
            return inputs == prev.inputs if len(prev.inputs) == m else inputs == prev.inputs[:m]
        finally:
            inputs += tail
    if snap is None:
        return False
    return (_same(inputs[:m], prev.inputs) and _same(snap[0][:m], prev.contents)
            and _same(snap[1][:m], prev.calls))


def _resume_point(inputs: list[Any], sources: Sequence[int | None]) -> tuple[int, int]:
    for pos in range(len(inputs) - 1, -1, -1):
        msg = inputs[pos]
        role = msg.get("role") if isinstance(msg, dict) else None
        if isinstance(role, str) and role in _TOP_LEVEL_ROLES:
            if isinstance(sources, range):  # nothing repaired: step k is input position start + k
                return pos, pos - sources.start
            for k in range(len(sources) - 1, -1, -1):
                if sources[k] == pos:
                    return pos, k
    return 0, 0


def _joined(head: Sequence[int | None], tail: Sequence[int | None]) -> Sequence[int | None]:
    if isinstance(head, range) and isinstance(tail, range) and (not head or head.stop == tail.start):
        return range(head.start if head else tail.start, tail.stop)
    return [*head, *tail]


def _grown(head: Sequence[Any], k: int, tail: list[Any]) -> list[Any]:
    """`head[:k] + tail` with one copy of the head."""
    out: Any = head[:k]
    if not isinstance(out, (list, Spliced)):  # a Spliced prefix stays one (its head is not read)
        out = list(out)
    out += tail
    return cast(list[Any], out)


def _extended(head: list[Any], k: int, tail: list[Any]) -> list[Any]:
    """`head[:k] + tail`, made in place in `head` (which nothing else may hold)."""
    del head[k:]
    head += tail
    return head


def _kept_extended(head: list[Any], k: int, tail: list[Any]) -> list[Any]:
    """`head[:k] + tail`: in place in `head` when its items stay as they are (views hold it as Upto their
    length: only appending is invisible to them), else a new list."""
    overlap = len(head) - k
    if 0 <= overlap <= len(tail) and head[k:] == tail[:overlap]:
        head += tail[overlap:]
        return head
    return _grown(head, k, tail)


def _counted(counter: Callable[[Message], int], out: Message) -> Callable[[Message], tuple[int, Message]]:
    return lambda _message: (counter(out), out)


def _pick(cache: TokenCache, inputs: list[Any], snap: tuple[list[Any], list[Any]] | None) -> _Prefix | None:
    """The cached prefix `inputs` extends (the longest), or None."""
    best: _Prefix | None = None
    slots: list[_Prefix] = getattr(cache, "slots", [])
    for prev in slots:
        if prev.inputs is inputs and len(inputs) >= prev.length:  # adopted (own_inputs)
            return prev
    for prev in slots:
        if (best is None or prev.length > best.length) and _reusable(prev, inputs, snap):
            best = prev
    return best


def own_inputs(messages: Sequence[Any], cache: TokenCache | None) -> list[Any]:
    """The build's own list of `messages` (C0 copies its input). With an append-only session cache and a list
    that extends a cached prefix, that prefix's list is extended in place by the new messages instead (O(new)
    plus a comparison of pointers at C speed): no copy of the history per build. Views built earlier hold
    it as `view.Upto` their length, so they do not see it grow."""
    spliced = isinstance(messages, Spliced)  # C7: a long stored head read lazily, plus the turn's messages
    if cache is None or not getattr(cache, "append_only", False) or (messages.__class__ is not list and not spliced):
        return list(messages)
    n = len(messages)
    slots: list[_Prefix] = getattr(cache, "slots", [])
    for prev in sorted(slots, key=lambda p: -p.length) if len(slots) > 1 else slots:
        mine: list[Any] = prev.inputs
        m = prev.length
        if m > n or m == 0:
            continue
        del mine[m:]  # a build that failed half-way may have left it extended
        mine += messages[m:]
        if mine == messages:  # identity first per item: pointer reads only when it is the same history
            return mine
        del mine[m:]
    return cast(list[Any], messages.copy()) if isinstance(messages, Spliced) else list(messages)


def plan_and_count(inputs: list[Any], counter: Callable[[Message], int], cache: TokenCache | None,
                   counter_key: Any) -> Planned:
    """C4 repair of `inputs` with each step sanitised and counted (`counter` takes the sent form); with a
    cache, only the grown part is re-planned and only new messages are counted."""
    append_only = bool(getattr(cache, "append_only", False))
    snap = _snapshot(inputs) if cache is not None and not append_only else None
    # The plan (repair, sent forms, C1 estimates) does not depend on the counter, so it is reused even when
    # the counter changed (the calibrated counter is a new one after every usage report); only the counts
    # are then redone.
    if cache is not None and cache.resume_plan is not None:  # C7: a fresh process's first build
        _seed(cache, inputs)
    reuse = _pick(cache, inputs, snap) if cache is not None else None
    start = reuse.resume if reuse is not None else 0
    # a long stretch of a lazily read input (no saved plan, or a stale one) is planned from one list of it: one read
    # of the rows and list indexing, not a call per message through the lazy sequence (same messages, same plan)
    new = plan_counted(list(inputs) if isinstance(inputs, Spliced) and len(inputs) - start > 4_096 else inputs, start)
    k = 0
    old_tail: Sequence[int] | None = None
    sources, messages, dropped, sent = new.sources, new.messages, new.dropped, new.sent
    c1 = cast(list[int], new.tokens)  # plan_counted's own list
    if reuse is not None:
        k, old = reuse.resume_step, reuse.planned
        old_c1 = cast(list[int], old.tokens if old.estimates is None else old.estimates)  # C1: lists
        sources = _joined(old.sources[:k], new.sources)
        old_tail = reuse.planned.tokens[k:]  # before the in-place extension below (the layout's totals)
        # nothing repaired: the steps are the input (our own copy), no second list of the same messages
        messages = inputs if sources == range(len(inputs)) else _grown(old.messages, k, new.messages)
        dropped = {**{i: why for i, why in old.dropped.items() if i < reuse.resume}, **new.dropped}
        if append_only:  # the prefix grown from is consumed: its sent list (no view holds it) is extended
            cache.slots = [p for p in cache.slots if p is not reuse]  # type: ignore[union-attr]
            sent = _extended(old.sent, k, new.sent)
        else:
            sent = _grown(old.sent, k, new.sent)
        # views hold their counts as Upto their length (Trace.tokens): the session cache extends in place
        c1 = _kept_extended(old_c1, k, c1) if append_only else _grown(old_c1, k, c1)
    if counter is estimate_sent:  # C1 comes with the plan
        planned = Planned(sources, messages, dropped, sent, c1, None)
        if cache is not None:
            cache.hits += k
            cache.misses += len(new.messages)
    elif cache is not None and _is_calibrated(counter_key):  # T2: a factor over the cached C1 counts
        calibration = reuse.calibration if reuse is not None and reuse.calibration is not None else _Calibration()
        counted = calibrated_counts(counter_key, sent, c1, calibration, k if reuse is not None else 0, messages)
        cache.__dict__["_calibration_made"] = calibration
        planned = Planned(sources, messages, dropped, sent, counted, c1)
    else:  # another counter counts the sent forms: only new messages, unless the counter changed
        same = reuse is not None and reuse.counter_key is counter_key
        first = k if same else 0
        if cache is None or (reuse is not None and not same):
            # no cache, or a counter that changed since the last build: per-message entries for it would
            # not outlive this build (the calibrated counter changes after every usage report)
            others = list(map(counter, sent[first:]))
        else:
            others = [counter(out) if src is None else cache.lookup(msg, counter_key, _counted(counter, out))[0]
                      for src, msg, out in zip(sources[first:], messages[first:], sent[first:], strict=True)]
        tokens = _grown(reuse.planned.tokens, k, others) if same and reuse is not None else others
        planned = Planned(sources, messages, dropped, sent, tokens, c1)
    if cache is not None:
        same = reuse is not None and reuse.counter_key is counter_key  # None for C1: the counts are C1 both times
        old_layout = reuse.planned.layout if reuse is not None else None
        made = cache.__dict__.get("_calibration_made") if _is_calibrated(counter_key) else None
        calibrated = isinstance(made, _Calibration)
        layout = layout_of(planned, old_layout, k, same, old_tail=old_tail,
                           totals=made.made if calibrated else None,  # type: ignore[union-attr]
                           estimate_total=made.c1_total if calibrated else None)  # type: ignore[union-attr]
        # C7: the steps a continued view's strategy decided, of those planned before (the reused plan's)
        settled = None if reuse is None or reuse.settled is None else (reuse.settled[0], min(reuse.settled[1], k))
        planned = Planned(planned.sources, planned.messages, planned.dropped, planned.sent, planned.tokens,
                          planned.estimates, layout, settled)
        _remember(cache, inputs, snap, planned, counter_key, reuse, append_only)
    return planned


def _remember(cache: TokenCache, inputs: list[Any], snap: tuple[list[Any], list[Any]] | None, planned: Planned,
              counter_key: Any, reuse: _Prefix | None, append_only: bool) -> None:
    """Keep this build's prefix (replacing the one it grew from); the summary state follows its prefix."""
    slots: list[_Prefix] = [p for p in getattr(cache, "slots", ()) if p is not reuse]
    if snap is None and not append_only:
        cache.slots, cache.prefix, cache.summary = slots, None, None
        return
    resume, resume_step = _resume_point(inputs, planned.sources)
    contents, calls = (None, None) if append_only or snap is None else snap
    # the summary state trusts that messages planned before kept their content and tool calls
    summary = reuse.summary if reuse is not None else None
    # the calibrated counting state of this build (plan_and_count leaves it on the cache), else none
    calibration = cache.__dict__.pop("_calibration_made", None) if _is_calibrated(counter_key) else None
    prefix = _Prefix(inputs, len(inputs), contents, calls, planned, resume, resume_step, counter_key, summary,
                     calibration, reuse is not None and reuse.continued)
    cache.slots = [prefix, *slots][: 2 if append_only else 1]
    cache.prefix, cache.summary = prefix, summary


def summary_snapshot(cache: TokenCache) -> dict[str, Any] | None:
    """C7: the C6 state of the session cache's longest prefix (the whole stored transcript the first call of a
    turn builds from) as plain data, for another process to continue (`TokenCache.resume_summary`); None when
    no summary was built over it."""
    slots: list[_Prefix] = [p for p in getattr(cache, "slots", ()) if p.summary is not None]
    if not slots:
        return None
    snapshot: dict[str, Any] | None = max(slots, key=lambda p: p.length).summary.snapshot()
    return snapshot


PLAN_STATE_VERSION = 3  # the layout of `plan_snapshot`'s data (bumped when it or the plan's meaning changes)
PLAN_RESAVE_STEPS = 512  # a saved plan is made again once the transcript grew by more steps than this
_ROLE_CODES = {"system": "s", "developer": "d", "user": "u", "assistant": "a", "tool": "t"}
_CODE_ROLES = {code: role for role, code in _ROLE_CODES.items()}
_CODES = "".join(_CODE_ROLES).encode("ascii")


def _packed(counts: Sequence[int]) -> bytes:
    """Counts as int32 little-endian bytes."""
    packed = array("i", counts)  # OverflowError past 2**31 (never a C1 count of a bounded message)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _counts_text(packed: bytes) -> str:
    """Packed counts as text: zlib (small counts pack about tenfold), base64."""
    return base64.b64encode(zlib.compress(packed, 1)).decode("ascii")


def _unpacked(text: Any) -> bytes:
    try:
        return zlib.decompress(base64.b64decode(text, validate=True))
    except zlib.error as exc:
        raise ValueError(str(exc)) from exc


def _counts_of(packed: bytes) -> memoryview | array[int]:
    """The int32 counts of `packed`: a view of its bytes where the machine is little-endian (no copy), else an array
    made from them."""
    if sys.byteorder == "little":
        return memoryview(packed).cast("i")
    counts = array("i")
    counts.frombytes(packed)
    counts.byteswap()
    return counts


def _seal(packed: bytes, n: int, codes: str, systems: list[Any], total: Any, tool_total: Any) -> int:
    """CRC-32 of a saved plan's parts (its counts' bytes, roles, systems, totals): what a fresh process checks it
    by, at C speed, instead of summing and scanning 300k counts (C7: no O(n) Python work on the first call)."""
    rest = f"{n}|{codes}|{systems}|{total}|{tool_total}".encode("utf-8", "surrogatepass")
    return zlib.crc32(rest, zlib.crc32(packed))


def plan_snapshot(cache: TokenCache, rows: Sequence[Message]) -> dict[str, Any] | None:
    """C7: the C4 plan and C1 counts of the session cache's whole-transcript prefix, as plain data, for a fresh
    process to seed its first build with (`TokenCache.resume_plan`): the steps planned before the prefix's resume
    point, when repair changed nothing there (a dangling call at the end is after it) and those inputs are the first
    stored `rows` (the caller's). None otherwise (the fresh process plans it all again: never a wrong plan).

    Data: the number of steps `n` (= input positions), the fingerprints of the first and last of them, each step's
    C1 count (packed int32, zlib, base64) and role (one letter each), the system steps, the two totals (C5's bound)
    and a CRC-32 `seal` of these (`_seal`: what a fresh process checks them by, at C speed).
    Made again only when the transcript grew by more than `PLAN_RESAVE_STEPS` steps since the plan this cache last
    made or resumed (`TokenCache.saved_plan`, kept as it is until then): a turn's save stays O(new) but once in a
    while, and a fresh process plans at most that many steps more."""
    slots: list[_Prefix] = [p for p in getattr(cache, "slots", ()) if not p.continued]
    if not slots:
        return None
    prefix = max(slots, key=lambda p: p.length)
    planned, k = prefix.planned, prefix.resume_step
    kept = cache.saved_plan
    if (isinstance(kept, dict) and isinstance(kept.get("n"), int) and 0 <= k - kept["n"] <= PLAN_RESAVE_STEPS
            and 0 < kept["n"] <= len(rows) and fingerprint(rows[kept["n"] - 1]) == kept.get("last")):
        return kept  # still the plan of the first n stored rows (they never change, S1): not made again
    c1 = planned.estimates if planned.estimates is not None else (
        planned.tokens if prefix.counter_key is None else None)
    layout = planned.layout
    sources = planned.sources
    if (c1 is None or layout is None or prefix.resume != k or not 0 < k <= min(len(rows), len(prefix.inputs))
            or any(d < k for d in planned.dropped)  # repaired before the resume point: planned again
            or (sources[:k] != range(k) if isinstance(sources, range) else sources[:k] != list(range(k)))
            or not _same_rows(prefix.inputs, rows, k)):
        return None
    try:
        packed, roles = _packed(c1[:k]), "".join(map(_ROLE_CODES.__getitem__, layout.roles[:k]))
    except (KeyError, TypeError, OverflowError):
        return None
    head = c1[:k]
    systems = [s for s in layout.systems if s < k]
    total, tool_total = sum(head), _tool_sum(head, layout.roles[:k])
    made: dict[str, Any] = {
        "version": PLAN_STATE_VERSION, "n": k, "first": fingerprint(rows[0]), "last": fingerprint(rows[k - 1]),
        "c1": _counts_text(packed), "roles": roles, "systems": systems, "total": total, "tool_total": tool_total,
        "seal": _seal(packed, k, roles, systems, total, tool_total)}
    cache.saved_plan = made
    return made


def _same_rows(inputs: Sequence[Any], rows: Sequence[Message], k: int) -> bool:
    """`inputs[:k] == rows[:k]`: identity first, at C speed; past the lazy head only when `inputs` is `rows` plus
    its own messages (C7: the head is not read)."""
    if isinstance(inputs, Spliced) and inputs.head is rows:
        h = min(inputs.h, k)  # the first h inputs are rows[:h] themselves
        return h == k or inputs[h:k] == list(rows[h:k])
    return list(inputs[:k]) == list(rows[:k])


class _Roles(HeadTail):
    """The roles of a resumed plan's steps, made from their saved one-letter codes where read (C7: no list of a
    long session's roles made up front); the roles of the steps planned after them follow as a list. Supports what
    `layout_of` does to a layout's roles: read, cut back, extend."""

    __slots__ = ("_codes",)

    def __init__(self, codes: str) -> None:
        super().__init__(len(codes))
        self._codes = codes

    def _item(self, k: int) -> Any:
        return _CODE_ROLES[self._codes[k]]

    def _items(self, start: int, stop: int) -> list[Any]:
        return list(map(_CODE_ROLES.__getitem__, self._codes[start:stop]))

    def _cut(self, h: int) -> None:
        self._codes, self._h = self._codes[:h], h


class _Counts(HeadTail):
    """The C1 counts of a resumed plan's steps, read from the saved int32 array where read (C7: no list of a long
    session's counts made up front), then the counts of the steps planned after them as a list. Supports what the
    session cache does to a plan's counts: read, slice (a list), cut back, extend."""

    __slots__ = ("_counts",)

    def __init__(self, counts: memoryview | array[int]) -> None:  # int32 each
        super().__init__(len(counts))
        self._counts = counts

    def _item(self, k: int) -> int:
        return int(self._counts[k])

    def _items(self, start: int, stop: int) -> list[int]:
        return self._counts[start:stop].tolist()

    def __iter__(self) -> Iterator[int]:  # at C speed
        return chain(islice(self._counts, self._h), self._tail)

    def __eq__(self, other: object) -> bool:  # as the list it stands for
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _seed(cache: TokenCache, inputs: list[Any]) -> None:
    """C7: the saved plan (`plan_snapshot`) as the cache's prefix over `inputs`, when it fits them; else
    `cache.resume_note` says why not (the build then plans everything, once)."""
    saved, cache.resume_plan = cache.resume_plan, None
    if not cache.append_only or cache.slots:
        return
    prefix, why = _seeded(saved, inputs)
    if prefix is None:
        cache.resume_note = why if not cache.resume_note else f"{cache.resume_note}; {why}"
    else:
        cache.slots, cache.saved_plan = [prefix], saved


def _seeded(data: Any, inputs: list[Any]) -> tuple[_Prefix | None, str]:
    if not isinstance(data, dict):
        return None, "the saved plan is not an object"
    if data.get("version") != PLAN_STATE_VERSION:
        return None, f"the saved plan is of version {data.get('version')!r}, this engine's is {PLAN_STATE_VERSION}"
    fields: list[Any] = [data.get(k) for k in ("n", "roles", "systems", "total", "tool_total", "seal")]
    n, codes, systems, total, tool_total, seal = fields
    try:
        if (not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, total, tool_total, seal))
                or not isinstance(codes, str) or not isinstance(systems, list)):
            raise ValueError
        packed = _unpacked(data.get("c1"))
    except (ValueError, TypeError):
        return None, "the saved plan is malformed"
    # checked at C speed, no per-step Python work (C7): the seal over every part (the counts' bytes, the roles,
    # the systems, the totals), then what the engine relies on: the number of counts and roles, known role letters
    # only, the systems where the roles say
    if (not n > 0 or len(packed) != 4 * n or len(codes) != n or not codes.isascii()
            or _seal(packed, n, codes, systems, total, tool_total) != seal
            or not 0 <= tool_total <= total or codes.encode("ascii").translate(None, _CODES)
            or codes.count("s") + codes.count("d") != len(systems)
            or not all(isinstance(k, int) and 0 <= k < n and codes[k] in "sd" for k in systems)
            or systems != sorted(set(systems))):
        return None, "the saved plan is malformed"
    if len(inputs) < n:
        return None, f"the saved plan covers {n} messages, the transcript has {len(inputs)}"
    after = inputs[n] if n < len(inputs) else None
    if (fingerprint(inputs[0]) != data.get("first") or fingerprint(inputs[n - 1]) != data.get("last")
            or (after is not None and (not isinstance(after, dict) or after.get("role") not in _TOP_LEVEL_ROLES))):
        return None, "the saved plan does not match the stored messages"
    layout = Layout(cast(list[Any], _Roles(codes)), systems, total, tool_total)
    planned = Planned(range(n), inputs, {}, cast(list[Message], SentForms(inputs, n)),
                      cast(list[int], _Counts(_counts_of(packed))), None, layout)
    return _Prefix(inputs, n, None, None, planned, n, n, None), ""


def continued_input(view: RequestView, appended: Sequence[Any], cache: TokenCache | None,
                    counter_key: Any = None) -> list[Any]:
    """C7: `view.next_input(appended)`, the next build's input within a turn; with a session cache
    (`append_only`) whose last build made `view` with placeholders, that input's plan is also kept on the cache,
    made from the view's own: the next build then plans only `appended` (O(new)) instead of the whole input,
    whose placeholders break reuse of the prefix the view was built from.

    The seeded plan is the one `plan_counted` would make of `view.next_input()`: the view is C4-repaired (every
    result right after its call, nothing to drop or add) so the plan is the identity with the view's messages as
    the sent forms and the view's counts; a placeholder made by this build is a tool result that planning puts
    through `append_result` again (done here, for it alone: the carried ones already were). Only C1 counts, the
    micro stage and views without synthetic results; else nothing is seeded (the plain path plans it)."""
    trace = view.trace
    if (cache is None or not cache.append_only or counter_key is not None or trace is None or view.stage != "micro"
            or trace.runs is None or not isinstance(trace.step_sources, range)
            or any(action != "placeholder" for _a, _b, action in trace.runs)):  # only micro's own placeholders
        return view.next_input(appended)
    m = len(view.messages)
    in_place = len(trace.step_sources) == m and sent_in_place(trace, m)
    if in_place:
        # every step sent in place (micro): `next_input` at C speed, the originals (and the placeholders carried
        # as inputs) with this build's placeholders put in; the same list
        steps = raw(trace.step_messages)
        # (a list's slice is already a new list: not copied twice)
        out: list[Any] = steps[:m] if steps.__class__ is list else list(steps[:m])
        for a, b, _action in trace.runs:
            for k in range(a, b):
                out[k] = view.messages[k] if FACTS_KEY not in steps[k] else {**view.messages[k],
                                                                              FACTS_KEY: steps[k][FACTS_KEY]}
        out += appended
    else:
        out = view.next_input(appended)
    mine = out[:m]
    sent = list(view.messages)
    tokens = list(trace.sent_tokens)
    step_of = raw(trace.sent_of_step)
    replanned = cache.replanned
    for a, b, _action in trace.runs:
        for k in range(a, b):
            p = step_of[k]
            if p is None:
                return out
            msg = mine[p]
            hit = replanned.get(id(msg))
            if hit is not None and hit[0] is msg:  # the same placeholder as an earlier turn's (pipeline.placeholders)
                sent[p], tokens[p] = hit[1], hit[2]
                continue
            one: list[Any] = []
            counts: list[int] = []
            append_result(msg, str(msg.get("tool_call_id")), one, counts)
            sent[p], tokens[p] = one[0], counts[0]
            if len(replanned) > cache.max_entries:
                replanned.clear()
            replanned[id(msg)] = (msg, one[0], counts[0])
    planned = Planned(range(m), mine, {}, sent, tokens, None)
    layout = _continued_layout(cache, trace, planned) if in_place else layout_of(planned)
    planned = Planned(planned.sources, mine, {}, sent, tokens, None, layout)
    first = appended[0] if appended else None
    if isinstance(first, dict) and first.get("role") in _TOP_LEVEL_ROLES:
        # the view is C4-repaired (its last block complete) and no tool result follows it: its plan is final, so
        # the next build plans only `appended` (else from the last block, which a following result may join)
        resume, resume_step = m, m
    else:
        resume, resume_step = _resume_point(mine, planned.sources)
    # the steps the view's strategy decided are the same steps here when sent in place (step k is position k)
    seeded = _Prefix(mine, m, None, None, planned, resume, resume_step, None, continued=True,
                     settled=trace.settled if in_place else None)
    cache.slots = [seeded, *(p for p in cache.slots if not p.continued)][:2]
    return out


def sent_in_place(trace: Any, n: int) -> bool:
    """The view sent its `n` steps at their own positions (`sent_sources == range(n)`): O(1) when the build said so
    (`sent_of_step` a range over as many sent messages: step k at position k, nothing else), else compared."""
    sent = trace.sent_sources
    if isinstance(trace.sent_of_step, range) and trace.sent_of_step == range(n) and len(sent) == n:
        return True
    return sent == range(n) if isinstance(sent, range) else (len(sent) == n and sent == list(range(n)))


def _continued_layout(cache: TokenCache, trace: Any, planned: Planned) -> Layout:
    """The layout of a plan seeded from a micro view that sent every step in place: the layout of the build
    that made the view (the same steps and roles, in the same order), its totals moved by this build's
    placeholders only (O(new)); made afresh when that build's plan is not the cache's last one."""
    last = cache.prefix
    m = len(planned.sources)
    if (last is None or last.planned.layout is None or last.planned.messages is not raw(trace.step_messages)
            or len(last.planned.layout.roles) != m or last.planned.estimates is not None):
        return layout_of(planned)
    old, before = last.planned.layout, raw(trace.tokens)
    total, tool_total = old.total, old.tool_total
    for a, b, _action in trace.runs:
        for k in range(a, b):  # a placeholder replaces a tool step (a C5 placeholder is a tool result)
            total += planned.tokens[k] - before[k]
            tool_total += max(planned.tokens[k], 0) - max(before[k], 0)
    tools = None if old.tools is None else old.tools[:bisect_left(old.tools, m)]
    return Layout(old.roles[:m], list(old.systems), total, tool_total, tools=tools)
