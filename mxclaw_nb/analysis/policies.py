"""Policies for replays and comparisons, given as ContextPolicy objects or plain dicts (SPEC S4).

Why: an analyst sweeping "8k, 16k, 32k windows with a 2k/4k/8k tail" should be able to write the
sweep as a list of small dicts in a notebook cell, and every result row needs a short, stable label
to group and plot by. A dict may name a C12 strategy and its numbers beside the policy's
(``{"strategy": "masking", "keep_last": 5, "window": 32_000}``, or ``"masking:keep_last=5"``).
Counters may be named (``"estimate"``, ``"o200k_base"``, ``"cl100k_base"``) and
are resolved through ``mxclaw_nb.tokenizers``; the label says which counter a policy uses, because
thresholds in estimated tokens and in exact tokens are different policies.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.strategies import ARTICLE, parse_strategy, strategy_from

ALIASES = {
    "window": "context_window_tokens", "context_window": "context_window_tokens",
    "ratio": "threshold_ratio", "threshold": "threshold_ratio",
    "keep_recent": "keep_recent_tokens", "tail": "keep_recent_tokens",
}
FIELDS = ("context_window_tokens", "threshold_ratio", "keep_recent_tokens", "counter", "strategy")


def _k(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def policy_label(policy: ContextPolicy) -> str:
    """Short label, e.g. ``32k/0.8/4k``, ``32k/0.8/4k o200k_base`` or ``32k/0.8/4k cache-aware``."""
    label = f"{_k(policy.context_window_tokens)}/{policy.threshold_ratio:g}/{_k(policy.keep_recent_tokens)}"
    if policy.strategy is not None:  # C12: `masking(keep_last=5) 32k/0.8/4k`; the article's label is unchanged
        label = f"{policy.strategy.label()} {label}"
    return label if policy.counter_name == "estimate" else f"{label} {policy.counter_name}"


def strategy_name(policy: ContextPolicy) -> str:
    """The policy's strategy name (SPEC C12): `article` unless another one is set."""
    return "article" if policy.strategy is None else str(policy.strategy.name)


def _cache_aware(strategy: Any, aware: Any) -> Any:
    """E4: the registered cache-aware variant of `strategy` (`aware`: True, or a dict of its options)."""
    if aware is not True and not isinstance(aware, dict):
        raise ValueError(f"cache_aware must be True or a dict of options (clear_at_least, idle_ratio), got {aware!r}")
    options = {} if aware is True else dict(aware)
    unknown = [k for k in options if k not in ("clear_at_least", "idle_ratio")]
    if unknown:
        raise ValueError(f"cache_aware options: unknown {unknown[0]!r}; known: clear_at_least, idle_ratio")
    variant = strategy_from(strategy.name if strategy.name.endswith("-cache") else strategy.name + "-cache")
    return strategy_from(variant, {**strategy.params(), **options})


def as_policy(policy: ContextPolicy | dict[str, Any] | str) -> tuple[str, ContextPolicy]:
    """(label, ContextPolicy) from a policy, a strategy name or a dict (aliases: window, ratio, keep_recent;
    optional name; ``strategy`` and its numbers, C12; ``cache_aware``: True or a dict of `CacheAware` options,
    the same as naming the strategy's registered `<name>-cache` variant, E4)."""
    if isinstance(policy, ContextPolicy):
        return policy_label(policy), policy
    if isinstance(policy, str):  # C12: a strategy name (with its numbers), at the default window
        policy = {"strategy": policy}
    if not isinstance(policy, dict):
        raise ValueError(f"a policy must be a ContextPolicy or a dict, got {type(policy).__name__}")
    spec = dict(policy)
    name = spec.pop("name", None) or spec.pop("label", None)
    aware = spec.pop("cache_aware", None)
    kwargs: dict[str, Any] = {}
    strategy = parse_strategy(spec.pop("strategy", None))  # C12: by name, its numbers beside the policy's
    numbers = {k: spec.pop(k) for k in list(spec) if k in strategy.params()}
    strategy = strategy_from(strategy, numbers)
    if aware:
        strategy = _cache_aware(strategy, aware)
    for key, value in spec.items():
        field = ALIASES.get(key, key)
        if field not in FIELDS:
            known = ", ".join([*FIELDS, *ALIASES, "name"])
            raise ValueError(f"unknown policy key {key!r}; known keys: {known}")
        if field in kwargs:
            raise ValueError(f"policy key {key!r} given twice (as {field})")
        kwargs[field] = value
    counter = kwargs.get("counter")
    if isinstance(counter, str):
        from mxclaw_nb.tokenizers import counter_by_name

        kwargs["counter"] = None if counter == "estimate" else counter_by_name(counter)
    kwargs["strategy"] = None if strategy == ARTICLE else strategy
    pol = ContextPolicy(**kwargs)
    return (str(name) if name else policy_label(pol)), pol


def policy_columns(policy: ContextPolicy) -> dict[str, Any]:
    """The policy's settings as result columns."""
    return {"strategy": strategy_name(policy), "window": policy.context_window_tokens,
            "threshold_ratio": policy.threshold_ratio, "keep_recent": policy.keep_recent_tokens,
            "counter": policy.counter_name}
