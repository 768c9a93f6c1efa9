"""SPEC C12: named compaction strategies, each a declared ladder of small passes over one build.

Why a registry: the same strategy must mean the same thing to the live agent (the `strategy` setting),
`replay`, `compare`, the widgets and `%agent replay`, and a teacher comparing "what the article does" with
"what JetBrains' observation masking does" needs both by name with their numbers. Each strategy is a
frozen object (hashable, so it can sit in a frozen `ContextPolicy`) whose `ladder` names its passes in
order; `build` runs them over the pipeline's `_Builder`, which already did C4 repair and the counting.
Every strategy keeps C4 repair (done before any of them), the C3 safe tail (no pass here touches a step
from the tail on) and the C8 fallback (the summary pass falls back when the summariser raises); the
loop's C9 retry does not depend on the strategy.

The strategies (`STRATEGIES`, by name):

- `article` (default): C2 threshold, C5 placeholders for every old tool output when that is enough, else
  the C6 summary. `ContextPolicy(strategy=None)` runs the pipeline's own code, byte for byte; the registered
  object runs the same passes.
- `masking` (observation masking, JetBrains' "The Complexity Trap"): on every call, whatever the threshold,
  old successful tool results (before the safe tail) other than the last `keep_last` tool results become
  C5 placeholders; when the view is still over the threshold, the C6 summary.
- `clearing` (age-based clearing, Anthropic's `clear_tool_uses`): when the view is over `trigger_tokens`
  (default: the C2 threshold), every old tool result but the last `keep_last` (and never those of
  `exclude_tools`) becomes a placeholder, as Anthropic's API does; a step that would clear fewer than
  `clear_at_least` tokens is not taken (it breaks the prompt cache for too little). Then, if still over, C6.
  Inside a turn the placeholders are carried (C7), so the next step clears only what aged since.
- `model-summary` (C11, `context.model_summary`): the article's ladder whose summary is model-written (the loop
  asks, gates and records it); a summary recorded for the same coverage is reused; without one, C6 stands in.

Adding a strategy is one module and one registration (`cache_variants` registers the E4 `<name>-cache` wrappers
of every strategy this way):

    @dataclass(frozen=True)
    class Deferring(Strategy):
        inner: Strategy = ARTICLE
        name: str = "article-deferring"
        def build(self, b, summarize):
            view = self.inner.build(b, summarize)   # or decide before calling it
            ...                                      # return a RequestView
    register(Deferring(), "defers a compaction that would break a warm cached prefix (E4)")

`register` makes it available by name to `strategy_from` (and so to every caller that takes a strategy name
and parameters); a wrapper can read `b.before`, `b.policy`, `b.split()` and call `b.finish(...)`.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from itertools import compress
from typing import Any

from mxclaw_nb.context.pipeline import Conversation, Micro, Summarizer, _Builder, placeholders
from mxclaw_nb.context.view import RequestView
from mxclaw_nb.messages import tool_call_list, tool_call_name


@dataclass(frozen=True)
class Strategy:
    """A named compaction strategy: its passes (`ladder`, for display) and `build` (SPEC C12)."""

    name: str = "article"
    ladder: tuple[str, ...] = ("threshold (C2)", "placeholders (C5)", "summary (C6)", "fallback (C8)")

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        """The request view of one build (the article's ladder)."""
        if b.before <= b.policy.threshold:
            return b.finish("unchanged", None, None)
        return b.compact(summarize)

    def params(self) -> dict[str, Any]:
        """The strategy's numbers (for labels and result columns)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("name", "ladder")}

    def with_params(self, given: Mapping[str, Any]) -> Strategy:
        """This strategy with `given` numbers (a wrapper routes them to what it wraps)."""
        return replace(self, **given)

    def label(self) -> str:
        """`masking(keep_last=5)`: the name and the numbers that differ from the registered defaults."""
        default = STRATEGIES[self.name][0].params() if self.name in STRATEGIES else {}
        p = {k: v for k, v in self.params().items() if default.get(k, object()) != v}
        return self.name if not p else f"{self.name}({', '.join(f'{k}={_show(v)}' for k, v in p.items())})"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def _tool_steps(b: _Builder, steps: Sequence[int]) -> list[int]:
    layout = b.layout_now
    roles, tools = layout.roles, layout.tools
    if isinstance(steps, range) and steps.step == 1 and tools is not None:  # kept by the layout: one slice of it
        return tools[bisect_left(tools, steps.start):bisect_left(tools, steps.stop)]
    if isinstance(steps, range) and steps.step == 1:  # the usual shape: one slice of the roles, at C speed
        return list(compress(steps, map("tool".__eq__, roles[steps.start:steps.stop])))
    return list(compress(steps, map("tool".__eq__, map(roles.__getitem__, steps))))


def _recent(b: _Builder, conv: Conversation, keep_last: int) -> set[int]:
    """The steps of the last `keep_last` tool results of the conversation."""
    if keep_last <= 0:
        return set()
    return set(_tool_steps(b, conv.steps)[-keep_last:])


@dataclass(frozen=True)
class Masking(Strategy):
    """Observation masking: keep the last `keep_last` tool results verbatim, placeholders for older ones."""

    name: str = "masking"
    ladder: tuple[str, ...] = ("mask old tool results (every call)", "threshold (C2)", "summary (C6)",
                               "fallback (C8)")
    keep_last: int = 10

    def __post_init__(self) -> None:
        _non_negative(self, "keep_last")

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        conv = b.split()
        tools = _tool_steps(b, conv.steps)  # ascending, as the steps: the old ones are a prefix (one pass)
        kept = tools[-self.keep_last:] if self.keep_last > 0 else []
        stop = len(b.sources) if conv.tail >= len(conv.steps) else conv.steps[conv.tail]
        if kept:
            stop = min(stop, kept[0])
        # the old results before the first kept one or the tail; C7: those the view this build continues
        # decided (under the same policy) are placeholders already or stay, so only the newly old are looked at
        old = tools[bisect_left(tools, b.settled_before()):bisect_left(tools, stop)]
        micro = placeholders(old, b.step_messages, b.sent, b.policy, b.before, b.tokens, b.recall_of, b.cache)
        if micro.after <= b.policy.threshold or not conv.old:
            b.settle(stop)
            if not micro.sent:
                return b.finish("unchanged", None, None)
            return b.finish_micro(conv, micro, "masking")
        return b.summarize(conv, summarize)


@dataclass(frozen=True)
class Clearing(Strategy):
    """Age-based tool-result clearing (trigger, keep N, clear_at_least, excluded tools)."""

    name: str = "clearing"
    ladder: tuple[str, ...] = ("trigger", "clear oldest tool results", "summary (C6)", "fallback (C8)")
    keep_last: int = 3
    clear_at_least: int = 0
    trigger_tokens: int | None = None  # None: the C2 threshold
    exclude_tools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _non_negative(self, "keep_last")
        _non_negative(self, "clear_at_least")
        if self.trigger_tokens is not None:
            _non_negative(self, "trigger_tokens")
        object.__setattr__(self, "exclude_tools", tuple(self.exclude_tools))

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        trigger = b.policy.threshold if self.trigger_tokens is None else self.trigger_tokens
        if b.before <= trigger and b.before <= b.policy.threshold:
            return b.finish("unchanged", None, None)
        conv = b.split()
        keep = _recent(b, conv, self.keep_last)
        names = _tool_names(b) if self.exclude_tools else {}
        chosen = [k for k in _tool_steps(b, conv.old) if k not in keep and names.get(k) not in self.exclude_tools]
        micro = placeholders(chosen, b.step_messages, b.sent, b.policy, b.before, b.tokens, b.recall_of, b.cache)
        if b.before - micro.after < self.clear_at_least:
            micro = Micro({}, {}, 0, b.before)  # a step smaller than clear_at_least is not worth breaking the cache
        if micro.after <= b.policy.threshold or not conv.old:
            if not micro.sent:
                return b.finish("unchanged", None, None)
            return b.finish_micro(conv, micro, "clearing")
        return b.summarize(conv, summarize)


def _tool_names(b: _Builder) -> dict[int, str | None]:
    """Step -> tool name of each tool result (from its assistant's call)."""
    by_id: dict[str, str | None] = {}
    out: dict[int, str | None] = {}
    for k, (role, m) in enumerate(zip(b.layout_now.roles, b.step_messages, strict=True)):
        if role == "assistant":
            by_id.update({str(c.get("id")): tool_call_name(c) for c in tool_call_list(m) if isinstance(c, dict)})
        elif role == "tool":
            out[k] = by_id.get(str(m.get("tool_call_id")))
    return out


def _non_negative(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{obj.name}: {name} must be an integer >= 0, got {value!r}")


ARTICLE = Strategy()
STRATEGIES: dict[str, tuple[Strategy, str]] = {}


# SPEC C12, E4: functions that derive companion strategies from each registered one (the `<name>-cache` variants);
# each returns the companion and its description, or None. Applied to every strategy, also one registered later.
VARIANT_MAKERS: list[Callable[[Strategy, str], tuple[Strategy, str] | None]] = []


def register(default: Strategy, description: str) -> Strategy:
    """Make a strategy available by its name (its fields give the parameters `strategy_from` accepts), with the
    companions `VARIANT_MAKERS` derive from it."""
    STRATEGIES[default.name] = (default, description)
    for make in VARIANT_MAKERS:
        made = make(default, description)
        if made is not None and made[0].name not in STRATEGIES:
            register(*made)
    return default


def add_variant_maker(make: Callable[[Strategy, str], tuple[Strategy, str] | None]) -> None:
    """Derive companions with `make` for every strategy registered so far and every one registered later."""
    VARIANT_MAKERS.append(make)
    for default, description in list(STRATEGIES.values()):
        made = make(default, description)
        if made is not None and made[0].name not in STRATEGIES:
            register(*made)


def strategy_from(name: str | Strategy | None = None, params: Mapping[str, Any] | None = None,
                  **more: Any) -> Strategy:
    """The strategy registered as `name` with `params` (a `Strategy` is returned as is, with params applied)."""
    given = {**(params or {}), **more}
    if isinstance(name, Strategy):
        base = name
    else:
        key = "article" if name is None else str(name).strip()
        if key not in STRATEGIES:
            raise ValueError(f"unknown strategy {key!r}; known strategies: {', '.join(STRATEGIES)}")
        base = STRATEGIES[key][0]
    allowed = base.params()
    unknown = [k for k in given if k not in allowed]
    if unknown:
        known = ", ".join(allowed) or "none"
        raise ValueError(f"strategy {base.name!r} has no parameter {unknown[0]!r} (its parameters: {known})")
    try:
        return base.with_params(given) if given else base
    except TypeError as exc:
        raise ValueError(f"strategy {base.name!r}: {exc}") from None


def describe() -> list[dict[str, Any]]:
    """One row per registered strategy: name, what it does, its passes and default numbers."""
    return [{"strategy": n, "description": d, "ladder": " -> ".join(s.ladder), "defaults": s.params()}
            for n, (s, d) in STRATEGIES.items()]


register(ARTICLE, "the article's policy: placeholders when enough, else the structured summary (C5, C6)")
register(Masking(), "observation masking: the last keep_last tool results verbatim, older ones as placeholders, "
                    "on every call")
register(Clearing(), "age-based tool-result clearing over a trigger: oldest first, keep the last keep_last, "
                     "at least clear_at_least tokens a step, never exclude_tools")


def parse_strategy(spec: str | Strategy | None) -> Strategy:
    """A strategy from its setting text: `masking`, `masking:keep_last=5`,
    `clearing:keep_last=2,clear_at_least=2000,exclude_tools=read_file|grep` (numbers as integers, `none`,
    lists split on `|`); raises ValueError with the known names and parameters."""
    if spec is None or isinstance(spec, Strategy):
        return strategy_from(spec)
    name, _, rest = str(spec).partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"strategy parameter {item!r} must be key=value")
        params[key.strip()] = _value(value.strip())
    base = strategy_from(name)
    for key, value in params.items():  # a one-item list for a tuple parameter
        if isinstance(base.params().get(key), tuple) and not isinstance(value, tuple):
            params[key] = (str(value),)
    return strategy_from(base, params)


def _value(text: str) -> Any:
    if text.lower() in ("none", "null", ""):
        return None
    if "|" in text:
        return tuple(t for t in text.split("|") if t)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text.replace("_", ""))
    except ValueError:
        return text

