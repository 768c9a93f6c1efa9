"""SPEC E2: the prefix a model call shares with the session's previous call, in the policy's counter.

Why here: providers cache the prompt by prefix (OpenAI automatically, Anthropic at cache_control marks,
vLLM and llama.cpp by prefix match), so what a call costs depends on how many of its leading messages the
previous call sent the same. That is a fact about two sent lists, the engine's own output, so it is pure
code beside the engine: no clock (the cache's time to live is applied later, over records, in
`mxclaw_nb.analysis.cost`), no I/O. The tokens are the view's own per-message counts (`Trace.sent_tokens`,
the policy's counter), so live records and replays label the figure with the counter they were built in.

Cost: O(new messages). The shared tokens are the call's total (the view knows it) less the tokens of the
messages past the shared prefix, so only those are summed, in this call's counter (the calibrated counter
rescales as it learns). Where the lists part is known without looking when the caller says the view
`extends` the previous one (C7: an `unchanged`, unrepaired view of the previous view's `next_input`, whose
sent forms are the previous sent forms plus the new ones, by determinism); otherwise (a turn's first call,
a compaction, which cost O(history) in the engine anyway) it is found with one list comparison at C speed.
The previous call's list is kept by reference: views are values, never changed after they are built.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, count, islice
from typing import Any

__all__ = ["PrefixState", "SharedPrefix", "shared_prefix"]


@dataclass(frozen=True)
class SharedPrefix:
    """E2: what one call shares with the previous one (tokens in `counter`; est. unless the counter is exact)."""

    messages: int  # leading messages sent exactly as in the previous call
    tokens: int  # their tokens
    total: int  # tokens of this call
    previous: int  # tokens of the previous call (0 for the first call)
    counter: str = "estimate"

    @property
    def new_tokens(self) -> int:
        """Tokens of this call past the shared prefix (what a warm prefix cache has not seen)."""
        return self.total - self.tokens

    @property
    def broken_tokens(self) -> int:
        """Tokens of the previous call's prefix this call no longer sends as they were (a cache break)."""
        return max(0, self.previous - self.tokens)


@dataclass(frozen=True)
class PrefixState:
    """The previous call's sent messages and its total tokens."""

    messages: list[Any] = field(default_factory=list)
    total: int = 0


def _parting(prev: list[Any], cur: Sequence[Any]) -> int:
    """How many leading messages `cur` shares with `prev` (C speed: a slice comparison, then a first mismatch)."""
    n = len(prev)
    if len(cur) >= n and (cur[:n] if isinstance(cur, list) else list(islice(cur, n))) == prev:
        return n
    return next(compress(count(), map(operator.ne, prev, cur)), min(n, len(cur)))


def shared_prefix(state: PrefixState | None, messages: Sequence[Any], tokens: Sequence[int],
                  counter: str = "estimate", total: int | None = None, *, extends: bool = False
                  ) -> tuple[SharedPrefix, PrefixState]:
    """E2: the prefix `messages` (with per-message `tokens`, summing to `total`) shares with the call `state`
    describes, and the state for the next call. `state` None: the session's first call (nothing shared).
    Give `total` (the view's `after_tokens`) and, when known, `extends` to keep the work O(new messages)."""
    if len(tokens) != len(messages):
        raise ValueError(f"need one token count per message, got {len(tokens)} for {len(messages)} messages")
    state = state or PrefixState()
    n = len(state.messages)
    k = n if extends and len(messages) >= n else _parting(state.messages, messages)
    total = sum(tokens) if total is None else total
    if 2 * k < len(tokens):  # a prefix rewritten early: its head is the shorter sum
        head = sum(tokens[j] for j in range(k))
    else:
        tail = tokens[k:] if isinstance(tokens, list | tuple) else [tokens[j] for j in range(k, len(tokens))]
        head = total - sum(tail)
    shared = SharedPrefix(messages=k, tokens=head, total=total, previous=state.total, counter=counter)
    return shared, PrefixState(messages if isinstance(messages, list) else list(messages), total)
