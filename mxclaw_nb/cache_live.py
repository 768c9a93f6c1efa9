"""SPEC E4 + C12, live: a cache-aware variant (`<name>-cache`) at every call (a turn's first, and the others).

Why here and not in the engine: whether the previous call's prefix is still cached depends on when that call
ended, a clock read, and the engine (`mxclaw_nb.context`) has no clock. Replay walks recorded calls and builds the
continued alternative itself (`analysis.replay`); live, the loop rebuilds each turn's first call from the stored
transcript (C7), so the alternative that keeps the warm prefix, the previous call's view plus the messages stored
since (`next_call`, the same continuation the loop makes inside a turn), is only known to the process that made
that previous call. This object remembers, per session, that call's view, its input seqs, how many messages were
stored after it and when it ended; at the next turn's first call it builds the continued alternative and lets
`cache_variants.choose` decide (E4). A fresh process, or a session another process wrote to since, has no
previous call here: the plain strategy's view is sent (the decision says why).

Inside a turn each call continues the previous one (C7), so the prefix-keeping alternative is that same input
built under the threshold-only ladder, as replay builds it (`choose_next`): masking's next placeholder, say, is
deferred while the previous call's prefix is warm and nothing passes the threshold. Warmth is measured from when
the previous call's answer came (`answered`), so a long tool run between two calls can cool the cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mxclaw_nb.context import ContextPolicy, RequestView
from mxclaw_nb.context.cache_variants import cache_variant, choose
from mxclaw_nb.context.lineage import NextCall, next_call

DEFAULT_TTL_SECONDS = 300.0  # E2's prefix-cache time to live (`analysis.cost.DEFAULT_TTL`; the loop passes the setting)

# build(nxt, policy, cached): the view of `nxt` under `policy` (the loop's `_build_view`)
Build = Callable[[NextCall, ContextPolicy, bool], RequestView]


@dataclass
class _Last:
    view: RequestView  # the previous call's view
    seqs: Sequence[int | None]  # the stored seq of each of its input positions (NextCall.seqs)
    stored: int  # messages stored in the session once that call's answer and tool results were stored
    ended: float  # clock seconds when it ended


@dataclass
class LiveCacheAware:
    """E4 for the live loop: remembers each session's previous call in this process and chooses the first view
    of the next turn (`choose_first`). `clock` returns seconds (time.time); tests pass their own."""

    ttl: float = DEFAULT_TTL_SECONDS
    clock: Callable[[], float] = time.time
    last: dict[str, _Last] = field(default_factory=dict)
    _answered: dict[str, float] = field(default_factory=dict)

    def answered(self, session_id: str) -> None:
        """The model answered the session's call just now (the provider's prefix cache was written then)."""
        self._answered[session_id] = self.clock()

    def called(self, session_id: str, view: RequestView, seqs: Sequence[int | None], stored: int) -> None:
        """The loop made a call (`view`, built from `seqs`) and stored its answer and results (`stored` messages
        in the session now); it ended when its answer came (`answered`), else now."""
        ended = self._answered.pop(session_id, None)
        self.last[session_id] = _Last(view, seqs, stored, self.clock() if ended is None else ended)

    def forget(self, session_id: str) -> None:
        self.last.pop(session_id, None)

    def choose_first(self, session_id: str, nxt: NextCall, plain: RequestView, policy: ContextPolicy,
                     build: Build, ttl: float | None = None) -> tuple[RequestView, NextCall, dict[str, Any] | None]:
        """The view a turn's first call sends, what it was built from, and the decision to record (E4; None for
        a plain strategy, whose view is sent as built). `ttl`: the cache time to live in seconds (the
        `cache_ttl_seconds` setting; None: this object's)."""
        variant = cache_variant(policy)
        if variant is None:
            return plain, nxt, None
        ttl = self.ttl if ttl is None else ttl
        last = self.last.get(session_id)
        cont = self._continued(last, nxt)
        info: dict[str, Any] = {"strategy": variant.name, "ttl_seconds": ttl}
        if last is None or cont is None:
            why = ("no previous call in this process" if last is None
                   else "the session changed since this process's previous call")
            return plain, nxt, {"decision": "plain", "warm": None, "clear_at_least": variant.clear_at_least,
                                "why": why, "continued": False, **info}
        idle = max(0.0, self.clock() - last.ended)
        warm = idle < ttl
        sent = last.view.messages
        if plain.messages[:len(sent)] == sent:  # the plain view extends the previous call's: no rewrite to defer
            return plain, nxt, {"decision": "plain", "warm": warm, "clear_at_least": variant.clear_at_least,
                                "why": "keeps the prefix", "continued": False, **info, "idle_seconds": round(idle, 3),
                                "plain_stage": plain.stage, "plain_tokens": plain.after_tokens,
                                "sent_tokens": plain.after_tokens}

        def build_for(given: list[Any], pol: ContextPolicy) -> RequestView:
            if given is cont.inputs:  # the prefix-keeping alternative, as the next call of a turn is built
                return build(cont, pol, True)
            return build(nxt, pol, False)  # deeper / idle: the plain input under another threshold

        view, decision = choose(build_for, policy, plain, nxt.inputs, cont.inputs, warm=warm)
        decision = {**decision, **info, "idle_seconds": round(idle, 3), "plain_stage": plain.stage,
                    "plain_tokens": plain.after_tokens, "sent_tokens": view.after_tokens}
        return view, cont if decision["continued"] else nxt, decision

    def choose_next(self, session_id: str, nxt: NextCall, plain: RequestView, policy: ContextPolicy, build: Build,
                    ttl: float | None = None) -> tuple[RequestView, dict[str, Any] | None]:
        """E4 inside a turn: `nxt` continues the previous call (C7) and `plain` is the strategy's view of it; the
        view to send and the decision to record (None for a plain strategy). The prefix-keeping alternative is
        `nxt` under the threshold-only ladder, built only when the strategy's view compacts, as replay does."""
        variant = cache_variant(policy)
        if variant is None:
            return plain, None
        ttl = self.ttl if ttl is None else ttl
        last = self.last.get(session_id)
        idle = 0.0 if last is None else max(0.0, self.clock() - last.ended)

        def build_for(_given: list[Any], pol: ContextPolicy) -> RequestView:  # replay's `_Replay._choose`
            return build(nxt, pol, pol.strategy is None)  # deeper / idle (another threshold): not cached

        view, decision = choose(build_for, policy, plain, nxt.inputs, nxt.inputs, warm=idle < ttl)
        return view, {**decision, "strategy": variant.name, "ttl_seconds": ttl, "idle_seconds": round(idle, 3),
                      "plain_stage": plain.stage, "plain_tokens": plain.after_tokens, "sent_tokens": view.after_tokens}

    @staticmethod
    def _continued(last: _Last | None, nxt: NextCall) -> NextCall | None:
        """The previous call's view plus what was stored since (None when the session changed since: another
        process appended, or the stored seqs do not line up with the input positions)."""
        if last is None or nxt.previous is not None or not last.seqs:
            return None
        user = len(nxt.inputs) - 1
        covered = last.seqs[-1]  # the last input of a call is a stored message (an appended one or the prompt)
        if covered is None or nxt.seqs[-1] != user or user != last.stored or not 0 <= covered < user:
            return None
        start = covered + 1
        appended = [nxt.inputs[p] for p in range(start, user + 1)]
        return next_call(last.view, appended, range(start, user + 1), last.seqs)
