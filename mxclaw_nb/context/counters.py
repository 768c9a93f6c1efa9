"""Pluggable token counters for the context policy (SPEC T1-T3).

Why: the C1 estimate is tokenizer-free and conservative on prose, but on real agent traffic (code, JSON,
logs) it is *below* the provider's count for most messages, so a threshold measured in estimated tokens
does not hold in real tokens. This module makes counting pluggable without giving up C1:

- ``EstimateCounter``: exactly the C1 estimate (T1: the default when nothing better is known).
- ``FunctionCounter``: any ``str -> int`` token function (e.g. an exact tiktoken encoding, built by the
  adapter ``mxclaw_nb.tokenizers``) applied with the same per-message structure as C1.
- ``CalibratedCounter``: the provider's last reported ``prompt_tokens`` for what it saw, plus C1 (or
  another base) scaled by a per-session factor learned from reported usage for messages added since (T2);
  available per message (so the engine uses it like any counter) and as ``anchored_total``.

Pure: standard library only, no I/O, no clock; counters are immutable values, ``observe`` returns a new one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from mxclaw_nb.context.tokens import IMAGE_TOKENS, estimate_tokens, tool_calls_json
from mxclaw_nb.messages import content_text, image_count, sanitize

Msg = dict[str, Any]  # a message as the engine sees it
Key = tuple[Any, ...]  # what identifies a message's sent content

__all__ = ["MESSAGE_OVERHEAD_TOKENS", "CalibratedCounter", "EstimateCounter", "FunctionCounter", "TokenCounter",
           "count_messages", "messages_added_since"]

#: Per-message framing overhead of the chat format. OpenAI's published recipe ("How to count tokens with
#: tiktoken", cookbook) charges 3 tokens per message for the <|start|>role/<|message|>...<|end|> framing
#: plus the role's own token (every role name is 1 token), i.e. 4 per message, plus 1 more when a
#: ``name`` field is present. The recipe's 3 tokens of reply priming are per *request*, not per message;
#: they are left to the provider's reported usage (CalibratedCounter) rather than guessed here.
MESSAGE_OVERHEAD_TOKENS = 4


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens one request message costs; ``name`` labels the counter in records and UIs."""

    @property
    def name(self) -> str:
        """The counter's label (`estimate`, `calibrated`, an encoding name)."""
        ...

    def count(self, message: Msg) -> int:
        """Token count of one message (only fields that are sent to a provider)."""
        ...


def count_messages(counter: TokenCounter, messages: Iterable[Msg]) -> int:
    """Sum of ``counter.count`` over ``messages`` (the request total for that counter)."""
    return sum(counter.count(m) for m in messages)


@dataclass(frozen=True)
class EstimateCounter:
    """SPEC C1 estimate as a counter (T1: the default; tokenizer-free)."""

    name: str = field(default="estimate", init=False)

    def count(self, message: Msg) -> int:
        """C1 estimate of one message (delegates to ``mxclaw_nb.context.tokens.estimate_tokens``)."""
        return estimate_tokens(message)


@dataclass(frozen=True)
class FunctionCounter:
    """Per-message counter built from a text token function, with the same structure as C1.

    The message is first reduced to what is sent (``mxclaw_nb.messages.sanitize``, as C1 does). Then:
    ``per_message`` framing tokens (``MESSAGE_OVERHEAD_TOKENS``, see there) + ``text_count`` of the
    content text (parts concatenated, as C1 measures it) + ``per_image`` per image part + ``text_count``
    of the compact tool-call JSON (the text C1 measures; a provider renders calls in its own format, so
    this is an approximation) + ``text_count(name) + 1`` when a ``name`` is sent. Not counted, as in C1:
    stored-only keys (``reasoning``, ``is_error``, ``attachments``) and ``tool_call_id``. A non-dict
    message counts 0, as in C1.
    """

    name: str
    text_count: Callable[[str], int] = field(compare=False, repr=False)
    per_message: int = MESSAGE_OVERHEAD_TOKENS
    per_image: int = IMAGE_TOKENS

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("FunctionCounter needs a non-empty name, e.g. 'o200k_base'")
        if not callable(self.text_count):
            raise ValueError(f"FunctionCounter {self.name!r}: text_count must be callable (str -> int)")
        if self.per_message < 0 or self.per_image < 0:
            raise ValueError(f"FunctionCounter {self.name!r}: per_message and per_image must be >= 0")

    def count(self, message: Msg) -> int:
        """Tokens of one message: framing + text + images + tool-call JSON (+ name)."""
        if not isinstance(message, dict):
            return 0
        sent = sanitize(message)
        content = sent.get("content")
        total = self.per_message + self.per_image * image_count(content)
        text = content_text(content)
        if text:
            total += self.text_count(text)
        calls = sent.get("tool_calls")
        if calls:
            total += self.text_count(tool_calls_json(calls))
        name = sent.get("name")
        if name:
            total += self.text_count(name) + 1
        return total


def messages_added_since(sent: Sequence[Msg], current: Sequence[Msg]) -> list[Msg] | None:
    """Messages of ``current`` after ``sent`` when ``sent`` is its unchanged prefix, else None.

    None means the view changed (compaction, repair) since the provider reported usage, so the report no
    longer anchors ``current`` and the caller must count the whole view.
    """
    if len(sent) > len(current):
        return None
    # at C speed: identity first, then equality, per element (a long view is compared after every call)
    if tuple(current[: len(sent)]) != tuple(sent):
        return None
    return list(current[len(sent):])


def _calls_key(calls: Any) -> Any:
    """Hashable form of tool calls: (id, name, arguments) per well-formed call, else their JSON."""
    try:
        return tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls)
    except (KeyError, TypeError):
        return json.dumps(calls, sort_keys=True, ensure_ascii=False, default=str)


def _message_key(message: Msg) -> Key:
    """What identifies a message's sent content: role, name, content (text or JSON), tool calls."""
    content, calls = message.get("content"), message.get("tool_calls")
    if not (content is None or isinstance(content, str)):
        content = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    key = (message.get("role"), message.get("name"), content, _calls_key(calls) if calls else None)
    try:
        hash(key)
    except TypeError:  # e.g. a dict where a string was expected inside a call
        key = (*key[:3], json.dumps(calls, sort_keys=True, ensure_ascii=False, default=str))
    return key


message_key = _message_key  # the engine's calibrated counting keys its per-step facts the same way


@dataclass(eq=False)
class _Ledger:
    """The per-message facts of a chain of reports in which each extends the one before (the usual loop step:
    the last view + the assistant message and tool results), shared by them. Each entry carries the number
    of the report that added it, so a report sees only its own entries (counters stay immutable values) and
    the next report of the chain adds its new messages' entries, O(new), instead of copying every entry.

    `index`: message key -> (base count, report number); `by_id`: the same facts by object identity
    (message, its content, base count, key, report number): the loop sends the same dicts again for every
    message it did not change, so neither counting nor the next report builds the content keys of a long
    history again. `sizes[g]`: keys seen by report g; `head`: the newest report (only it may add entries).
    """

    index: dict[Key, tuple[int, int]] = field(default_factory=dict)
    by_id: dict[int, tuple[Msg, Any, int, Key, int]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    head: int = -1

    def upto(self, gen: int) -> _Ledger:
        """A ledger holding only the entries of reports 0..gen (a report that is not the chain's newest is
        extended again: a branch; rare, O(entries))."""
        return _Ledger({k: v for k, v in self.index.items() if v[1] <= gen},
                       {k: v for k, v in self.by_id.items() if v[4] <= gen}, self.sizes[: gen + 1], gen)


class _Index(Mapping[Key, int]):
    """Message key -> base count, as one report sees its ledger (read-only)."""

    __slots__ = ("_entries", "_gen", "_len")

    def __init__(self, ledger: _Ledger, gen: int) -> None:
        self._entries, self._gen, self._len = ledger.index, gen, ledger.sizes[gen]

    def __getitem__(self, key: Key) -> int:
        value = self._entries[key]
        if value[1] > self._gen:
            raise KeyError(key)
        return value[0]

    def get(self, key: Key, default: Any = None) -> Any:
        value = self._entries.get(key)
        return default if value is None or value[1] > self._gen else value[0]

    def __contains__(self, key: object) -> bool:
        value = self._entries.get(key)  # type: ignore[call-overload]
        return value is not None and value[1] <= self._gen

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Key]:
        gen = self._gen
        return (k for k, v in self._entries.items() if v[1] <= gen)


@dataclass(frozen=True, eq=False)
class _Report:
    """One usage report: what was sent, its base total, the reported tokens, and (in its ledger) the base count
    per message key."""

    sent: tuple[Msg, ...]
    base_total: int
    reported: int
    ledger: _Ledger = field(repr=False)
    gen: int = 0  # this report's number in its ledger

    @property
    def index(self) -> _Index:
        """Base count per message key of the messages this report covered."""
        return _Index(self.ledger, self.gen)

    def known(self, message: Msg) -> tuple[Msg, Any, int, Key, int] | None:
        """The ledger's facts of this very message object when this report covered it (and its content
        object is unchanged), else None."""
        hit = self.ledger.by_id.get(id(message))
        if hit is None or hit[0] is not message or hit[1] is not message.get("content") or hit[4] > self.gen:
            return None
        return hit


@dataclass(frozen=True)
class CalibratedCounter:
    """Base counter (C1 by default) anchored on and scaled by provider-reported usage (T2).

    Counting (per message, so the engine can use it like any counter):

    - a message the provider has seen in the last report (same role, name, content and tool calls):
      ``ceil(base * max(floor, reported / base total of that report))``: the report is spread over what
      it covered, so an unchanged view sums to the reported ``prompt_tokens`` (+ at most 1 per message
      for rounding), i.e. the anchored total; the reported number includes request overhead (tool
      schemas, priming) that no message carries, and this is where it is counted;
    - any other message (added since, or rewritten by compaction): ``ceil(base * factor)``.

    ``anchored_total`` states the same thing for a whole request. ``observe`` returns a new counter; an
    instance never changes. How ``factor`` is learned, and why it errs high:

    - Segment ratios: when a report's sent messages extend those of the segment start (the usual loop
      step: assistant message + tool results appended), ``(reported - start.reported) / (base total of
      the added messages)`` is the provider's price of exactly the traffic the factor is applied to:
      recent messages. Fixed request overhead and the system prompt's own ratio cancel out. Segments
      under ``min_segment`` base tokens are too noisy (ceil rounding, framing on a one-word message):
      the start stays and the next report extends the segment. A view that is not an extension
      (compaction, repair) starts a new segment.
    - Before any segment: the bootstrap ratio ``reported / base total`` of the first report (it includes
      the request overhead, so it errs high).
    - ``factor = max(floor, max of the last `window` segment ratios)``. The max (not a mean or EMA)
      because under-counting is what hurts: the provider rejects the request and C9 falls back to six
      messages, while over-counting only compacts a little early. Old ratios leave the window.
    - ``floor`` defaults to 1.0: a count is never below C1. A provider cheaper than C1 on the session so
      far (e.g. CJK prose) could justify < 1, but the next message may be a JSON tool result that C1
      under-counts; giving up C1's margin is not worth the few tokens.

    Equality (a per-message cache key in the engine): same base, factor and last report; every report
    therefore makes a new, unequal counter and a cache keyed on it re-counts (dictionary look-ups for
    anchored messages; the base count only for the others).
    """

    factor: float = 1.0
    base: TokenCounter = field(default_factory=EstimateCounter)
    floor: float = field(default=1.0, compare=False)
    window: int = field(default=8, compare=False)
    min_segment: int = field(default=64, compare=False)
    ratios: tuple[float, ...] = field(default=(), compare=False)
    bootstrap: float | None = field(default=None, compare=False)
    reports: int = field(default=0, compare=False)
    last_report: _Report | None = field(default=None, repr=False)
    segment_start: _Report | None = field(default=None, repr=False, compare=False)
    name: str = field(default="calibrated", init=False)

    def __post_init__(self) -> None:
        for label, value in (("factor", self.factor), ("floor", self.floor)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"CalibratedCounter {label} must be a finite number > 0, got {value!r}")
        for label, value in (("window", self.window), ("min_segment", self.min_segment)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CalibratedCounter {label} must be an int >= 1, got {value!r}")
        if not isinstance(self.base, TokenCounter):
            raise ValueError("CalibratedCounter base must be a TokenCounter (name + count(message))")

    @property
    def calibrated(self) -> bool:
        """True once at least one provider usage report has been observed (T3: the loop switches then)."""
        return self.reports > 0

    @property
    def label(self) -> str:
        """Human label for gauges and records, e.g. 'calibrated x1.27 (5 usage reports)'."""
        if not self.reports:
            return f"calibrated x{self.factor:.2f} (no usage reported yet)"
        return f"calibrated x{self.factor:.2f} ({self.reports} usage reports)"

    def count(self, message: Msg) -> int:
        """Calibrated tokens of one message (anchored share when last reported, else base * factor)."""
        report = self.last_report
        if report is not None and report.base_total > 0 and isinstance(message, dict):
            hit = report.known(message)
            if hit is not None:
                base: int | None = hit[2]
            else:
                base = report.index.get(_message_key(message))
            if base is not None:
                return math.ceil(base * max(self.floor, report.reported / report.base_total) - 1e-9)
        return math.ceil(self.base.count(message) * self.factor - 1e-9)

    def observe(self, sent_messages: Sequence[Msg], reported_prompt_tokens: int | None) -> CalibratedCounter:
        """New counter that has learned from one usage report for exactly ``sent_messages``.

        None or 0 (no usage reported) returns the counter unchanged.
        """
        reported = _check_reported(reported_prompt_tokens)
        if reported is None:
            return self
        sent = tuple(sent_messages)
        last = self.last_report
        # counts are a function of the key (the same base counter): any earlier entry may be reused
        previous: dict[Key, tuple[int, int]] = last.ledger.index if last is not None else {}
        previous_ids: dict[int, tuple[Msg, Any, int, Key, int]] = last.ledger.by_id if last is not None else {}
        base_total, gen = 0, 0
        rest: Sequence[Any] = sent
        if last is not None and last.sent and len(last.sent) <= len(sent) and sent[: len(last.sent)] == last.sent:
            # the usual loop step: the last report's messages + what was appended. Its ledger is extended by
            # the new messages only (O(new) entries, not a copy of every one)
            ledger = last.ledger if last.ledger.head == last.gen else last.ledger.upto(last.gen)
            base_total, gen = last.base_total, last.gen + 1
            rest = sent[len(last.sent):]
        else:
            ledger = _Ledger()
        index, by_id = ledger.index, ledger.by_id
        ledger.head = gen  # first: a report that fails half-way leaves a ledger the next one will not extend
        for m in rest:
            if isinstance(m, dict):
                content = m.get("content")
                hit = previous_ids.get(id(m))
                if hit is not None and hit[0] is m and hit[1] is content:
                    n, key = hit[2], hit[3]
                else:
                    key = _message_key(m)
                    known = previous.get(key)
                    n = self.base.count(m) if known is None else known[0]
                if key not in index:  # the first report that covered it (earlier reports see it then)
                    index[key] = (n, gen)
                entry = by_id.get(id(m))
                if entry is None or entry[0] is not m or entry[1] is not content:
                    by_id[id(m)] = (m, content, n, key, gen)
            else:
                n = self.base.count(m)
            base_total += n
        ledger.sizes.append(len(index))
        report = _Report(sent, base_total, reported, ledger, gen)
        ratios, bootstrap, start = self.ratios, self.bootstrap, report
        added = None if self.segment_start is None else messages_added_since(self.segment_start.sent, sent)
        if added is not None and self.segment_start is not None:
            delta_base = base_total - self.segment_start.base_total
            if delta_base < self.min_segment:
                start = self.segment_start  # too small to measure: the next report extends this segment
            elif reported > self.segment_start.reported:
                ratios = (*ratios, (reported - self.segment_start.reported) / delta_base)[-self.window:]
        elif bootstrap is None and base_total > 0:
            bootstrap = reported / base_total
        learned = max(ratios) if ratios else (bootstrap if bootstrap is not None else self.floor)
        return replace(self, ratios=ratios, bootstrap=bootstrap, reports=self.reports + 1,
                       last_report=report, segment_start=start, factor=max(self.floor, learned))

    def anchored_total(
        self, sent_messages: Sequence[Msg], reported_prompt_tokens: int | None, new_messages: Iterable[Msg]
    ) -> int:
        """Last reported ``prompt_tokens`` for what the provider saw + calibrated counts of messages since.

        ``new_messages`` are the messages appended after ``sent_messages``. Without a report (None or 0:
        the provider reported no usage) the sent messages are counted with this counter instead.
        """
        reported = _check_reported(reported_prompt_tokens)
        anchor = count_messages(self, sent_messages) if reported is None else reported
        return anchor + count_messages(self, new_messages)

    def view_total(
        self, sent_messages: Sequence[Msg], reported_prompt_tokens: int | None, view: Sequence[Msg]
    ) -> int:
        """Total for a whole request ``view``: anchored when it extends ``sent_messages``, else counted."""
        added = messages_added_since(sent_messages, view)
        if added is None:
            return count_messages(self, view)
        return self.anchored_total(sent_messages, reported_prompt_tokens, added)


def _check_reported(value: Any) -> int | None:
    """Validate a reported prompt token count; None or 0 mean "no usage reported" (some servers send 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"reported_prompt_tokens must be an int >= 0 or None, got {value!r}")
    return value or None
