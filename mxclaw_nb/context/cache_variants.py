"""SPEC E4 + C12: the cache-aware variant of every named strategy, registered as `<name>-cache`.

Why a wrapper strategy and not a policy subclass: a variant must be reachable by name and numbers wherever a
strategy is (`compare`, `replay`, `%agent replay`, `as_policy("masking-cache:keep_last=5")`), so it is one
registry row per strategy. Its `build` is the inner strategy's (so a single build, e.g. the C4 Hypothesis
properties, sees exactly the inner strategy's view); the E4 decision needs what one build does not know (the
previous call's view and whether its prefix is still cached), so the caller that walks the calls (replay)
builds the alternatives and asks `cache_aware.cache_aware_choice`, see `choose`. Pure: warmth comes in as data.

Parameters: the inner strategy's numbers plus `clear_at_least` (a warm prefix is rewritten only when the
threshold requires it or the compaction frees at least this many tokens more than the continued view; a forced
break frees at least this much) and `idle_ratio` (cold cache: compact early above this share of the threshold).
For `clearing-cache`, `clear_at_least` is also the inner strategy's own (Anthropic's meaning is the same).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mxclaw_nb.context import model_summary as _model_summary  # noqa: F401 - `model-summary` registered first
from mxclaw_nb.context.cache_aware import CacheAware, cache_aware_choice
from mxclaw_nb.context.pipeline import ContextPolicy, Summarizer, _Builder
from mxclaw_nb.context.strategies import ARTICLE, Strategy, add_variant_maker, strategy_from
from mxclaw_nb.context.view import RequestView

SUFFIX = "-cache"
_OWN = ("clear_at_least", "idle_ratio")


@dataclass(frozen=True)
class CacheVariant(Strategy):
    """`<inner>-cache`: the inner strategy's views, chosen per call by the E4 decision (SPEC E4, C12)."""

    name: str = "article-cache"
    ladder: tuple[str, ...] = ()
    inner: Strategy = ARTICLE
    clear_at_least: int = 0
    idle_ratio: float | None = None

    def __post_init__(self) -> None:
        CacheAware(self.clear_at_least, self.idle_ratio)  # validates (ValueError with the number)
        object.__setattr__(self, "ladder", ("keep a warm prefix (E4)", *self.inner.ladder))

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        """One build is the inner strategy's (the choice between builds is `choose`'s)."""
        return self.inner.build(b, summarize)

    def params(self) -> dict[str, Any]:
        return {**self.inner.params(), "clear_at_least": self.clear_at_least, "idle_ratio": self.idle_ratio}

    def with_params(self, given: Mapping[str, Any]) -> Strategy:
        inner_keys = self.inner.params()
        inner = {k: v for k, v in given.items() if k in inner_keys}
        own = {k: v for k, v in given.items() if k in _OWN}
        return replace(self, inner=strategy_from(self.inner, inner) if inner else self.inner, **own)

    @property
    def options(self) -> CacheAware:
        return CacheAware(self.clear_at_least, self.idle_ratio)


def cache_variant(policy: ContextPolicy) -> CacheVariant | None:
    """The policy's cache-aware variant, None for a plain strategy."""
    return policy.strategy if isinstance(policy.strategy, CacheVariant) else None


def choose(build: Callable[[list[Any], ContextPolicy], RequestView], policy: ContextPolicy, plain: RequestView,
           inputs: list[Any], continued: list[Any] | None, *, warm: bool) -> tuple[RequestView, dict[str, Any]]:
    """E4 over one call of a cache-aware policy: the view to send and the decision to record.

    `build(inputs, policy)` builds a view (the caller's cache and seqs); `plain` is `build(inputs, policy)`;
    `continued` is the previous call's `next_input` plus what came since (None on the first call). The continued
    alternative is built under the threshold-only ladder (`article`): it is the prefix-keeping view only when
    nothing is over the threshold, which is exactly when deferring is allowed."""
    variant = cache_variant(policy)
    if variant is None:
        raise ValueError("choose needs a policy whose strategy is a cache-aware variant (`<name>-cache`)")
    other = None
    if continued is not None and (continued is not inputs or plain.stage != "unchanged"):
        other = build(continued, replace(policy, strategy=None))
    window = policy.context_window_tokens

    def deeper() -> RequestView:
        lower = max(1, policy.threshold - variant.clear_at_least) / window
        return build(inputs, replace(policy, threshold_ratio=lower))

    def idle() -> RequestView:
        ratio = variant.idle_ratio if variant.idle_ratio is not None else 1.0
        return build(inputs, replace(policy, threshold_ratio=max(1, int(policy.threshold * ratio) - 1) / window))

    view, decision = cache_aware_choice(plain, other, warm=warm, options=variant.options, deeper=deeper, idle=idle)
    return view, decision | {"continued": other is not None and view is other}


def _variant_of(default: Strategy, _description: str) -> tuple[Strategy, str] | None:
    """`<name>-cache` for each plain strategy, also one registered after import (SPEC C12, E4)."""
    if default.name.endswith(SUFFIX) or isinstance(default, CacheVariant):
        return None
    return (CacheVariant(name=default.name + SUFFIX, inner=default),
            f"cache-aware {default.name} (E4): keeps a warm cached prefix unless the threshold is passed or the "
            f"compaction frees clear_at_least tokens more")


add_variant_maker(_variant_of)
