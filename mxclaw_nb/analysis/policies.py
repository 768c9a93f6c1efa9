"""Policies for replays and comparisons, given as ContextPolicy objects or plain dicts (SPEC S4).

Why: an analyst sweeping "8k, 16k, 32k windows with a 2k/4k/8k tail" should be able to write the
sweep as a list of small dicts in a notebook cell, and every result row needs a short, stable label
to group and plot by. Counters may be named (``"estimate"``, ``"o200k_base"``, ``"cl100k_base"``) and
are resolved through ``mxclaw_nb.tokenizers``; the label says which counter a policy uses, because
thresholds in estimated tokens and in exact tokens are different policies.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.cache_aware import CacheAware, CacheAwarePolicy, cache_options

ALIASES = {
    "window": "context_window_tokens", "context_window": "context_window_tokens",
    "ratio": "threshold_ratio", "threshold": "threshold_ratio",
    "keep_recent": "keep_recent_tokens", "tail": "keep_recent_tokens",
}
FIELDS = ("context_window_tokens", "threshold_ratio", "keep_recent_tokens", "counter")


def _k(n: int) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else str(n)


def policy_label(policy: ContextPolicy) -> str:
    """Short label, e.g. ``32k/0.8/4k``, ``32k/0.8/4k o200k_base`` or ``32k/0.8/4k cache-aware``."""
    label = f"{_k(policy.context_window_tokens)}/{policy.threshold_ratio:g}/{_k(policy.keep_recent_tokens)}"
    label = label if policy.counter_name == "estimate" else f"{label} {policy.counter_name}"
    return label + " cache-aware" if cache_options(policy) is not None else label


def _cache_aware(kwargs: dict[str, Any], aware: Any) -> ContextPolicy:
    """E4: the cache-aware variant of the policy (`aware`: True, or a dict of CacheAware options)."""
    if aware is not True and not isinstance(aware, dict):
        raise ValueError(f"cache_aware must be True or a dict of options (clear_at_least, idle_ratio), got {aware!r}")
    try:
        options = CacheAware(**({} if aware is True else aware))
    except TypeError as exc:
        raise ValueError(f"cache_aware options: {exc}; known: clear_at_least, idle_ratio") from None
    return CacheAwarePolicy(**kwargs, cache=options)


def as_policy(policy: ContextPolicy | dict[str, Any]) -> tuple[str, ContextPolicy]:
    """(label, ContextPolicy) from a policy or a dict (aliases: window, ratio, keep_recent; optional name;
    ``cache_aware``: True or a dict of `CacheAware` options, for the E4 variant)."""
    if isinstance(policy, ContextPolicy):
        return policy_label(policy), policy
    if not isinstance(policy, dict):
        raise ValueError(f"a policy must be a ContextPolicy or a dict, got {type(policy).__name__}")
    spec = dict(policy)
    name = spec.pop("name", None) or spec.pop("label", None)
    aware = spec.pop("cache_aware", None)
    kwargs: dict[str, Any] = {}
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
    pol = ContextPolicy(**kwargs) if not aware else _cache_aware(kwargs, aware)
    return (str(name) if name else policy_label(pol)), pol


def policy_columns(policy: ContextPolicy) -> dict[str, Any]:
    """The policy's settings as result columns."""
    return {"window": policy.context_window_tokens, "threshold_ratio": policy.threshold_ratio,
            "keep_recent": policy.keep_recent_tokens, "counter": policy.counter_name}
