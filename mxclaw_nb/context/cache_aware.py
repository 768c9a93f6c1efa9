"""SPEC E4: the cache-aware variant of a compaction strategy, as one pure decision over two views.

Why a wrapper: any strategy (C12) answers "what to send" from the transcript; whether to *use* that answer
depends on the provider's prompt cache, which the strategy does not know. When the plain strategy rewrites
the prefix the previous call sent (a new compaction at a turn start, placeholders moving with the safe
tail) while that prefix is still cached, the call pays for the whole prefix again. The variant then sends the
*continued* view instead, the previous call's sent messages plus what was appended since (C7's `next_input`,
built by the same strategy, so C4 repair, the C3 tail and the C8/C9 nets hold), as long as it stays under
the threshold, unless the plain result frees at least `clear_at_least` tokens more than the continued one (a
compaction worth its break, as in Anthropic's `clear_at_least`). A cold cache (the previous call is older
than the cache's time to live) defers nothing: the prefix is paid for anyway, so the plain strategy's
compaction is free of a break; `idle_ratio` optionally compacts then even under the threshold.

Pure: the warm/cold flag comes from the caller (`analysis.cost.warm` over call timestamps); no clock here.
The decision is returned as a small dict the caller records per call (`RequestRecord.extra`, a replay row).
The registered variants (`article-cache`, `masking-cache`, ...) that use it live in `cache_variants` (C12).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mxclaw_nb.context.view import RequestView

__all__ = ["CacheAware", "cache_aware_choice"]

PLAIN = "plain"  # the strategy's own view was sent (no previous call, cold cache, or nothing to keep)
DEFERRED = "deferred"  # the continued view was sent: the warm prefix is kept
COMPACTED = "compacted"  # warm, but the plain compaction was needed (threshold) or worth it (clear_at_least)
IDLE = "idle"  # cold cache: compacted early, under the threshold


@dataclass(frozen=True)
class CacheAware:
    """E4 options: the tokens a compaction must free to break a warm prefix, and idle-time compaction."""

    clear_at_least: int = 0  # 0: a warm prefix is only rewritten when the threshold requires it
    idle_ratio: float | None = None  # cold cache and above this share of the threshold: compact now

    def __post_init__(self) -> None:
        if self.clear_at_least < 0:
            raise ValueError(f"clear_at_least must be >= 0, got {self.clear_at_least}")
        if self.idle_ratio is not None and not 0 < self.idle_ratio <= 1:
            raise ValueError(f"idle_ratio must be in (0, 1], got {self.idle_ratio}")


def cache_aware_choice(plain: RequestView, continued: RequestView | None, *, warm: bool,
                       options: CacheAware = CacheAware(), deeper: Callable[[], RequestView] | None = None,
                       idle: Callable[[], RequestView] | None = None) -> tuple[RequestView, dict[str, Any]]:
    """E4: the view to send and the recorded decision.

    `plain`: the strategy's view of this call; `continued`: the same strategy's view of the previous call's
    sent messages plus what came since (None on a session's first call or when it is `plain`'s own input);
    `warm`: whether the previous call's prefix is still cached; `deeper`: builds the strategy's view with the
    threshold lowered by `clear_at_least` (a break that must happen frees at least that much, so the next
    break comes later); `idle`: builds a view compacted below the threshold (cold-cache compaction)."""
    decision: dict[str, Any] = {"decision": PLAIN, "warm": warm, "clear_at_least": options.clear_at_least}
    if not warm:
        if idle is not None and options.idle_ratio is not None \
                and plain.after_tokens > options.idle_ratio * plain.threshold:
            early = idle()
            if early.after_tokens < plain.after_tokens:
                return early, decision | {"decision": IDLE, "freed": plain.after_tokens - early.after_tokens}
        return plain, decision
    # the continuation goes out unchanged only under the threshold (else it would compact too: no prefix kept)
    if continued is not None and not continued.compacted and continued.messages != plain.messages:
        freed = continued.after_tokens - plain.after_tokens
        if not options.clear_at_least or freed < options.clear_at_least:
            return continued, decision | {"decision": DEFERRED, "freed": freed}
        return plain, decision | {"decision": COMPACTED, "why": "clear_at_least", "freed": freed}
    if plain.compacted:  # the threshold requires a break: make it worth its cost
        freed = plain.before_tokens - plain.after_tokens
        if deeper is not None and options.clear_at_least and freed < options.clear_at_least:
            more = deeper()
            # judged against the real threshold (its own, lowered one may not be reachable: still fine)
            if more.after_tokens <= plain.threshold and more.after_tokens < plain.after_tokens:
                return more, decision | {"decision": COMPACTED, "why": "threshold, deeper",
                                         "freed": plain.before_tokens - more.after_tokens}
        return plain, decision | {"decision": COMPACTED, "why": "threshold", "freed": freed}
    return plain, decision
