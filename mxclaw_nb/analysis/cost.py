"""What calls cost: a prefix-cache model with a time to live, a price table, and compaction break-even (SPEC E2, E3).

Why derived data (DESIGN "Cost (E)"): a request record says what was sent and what the provider reported;
what that costs depends on the provider's prompt cache and price list, which change more often than the
records. So the model and the prices are functions over records (live, stored, replayed alike), never an
input to the engine's decisions (except the cache-aware variants, `context.cache_aware`, which take a
warm/cold flag computed here).

The cache model is the one the providers document for prefix caching: a call reads from the cache the prefix
it shares with the previous call (`context.prefix`), if that call was less than `ttl` ago (default 5 minutes,
Anthropic's default and OpenAI's typical eviction time); every other prompt token is processed afresh and
written to the cache (Anthropic bills the write; OpenAI and local servers bill it as plain input). Calls
without timestamps (replays of datasets) are taken as back to back. Every figure this module makes is an
estimate and is labelled `est.`; what a provider said stays in the `*_reported` columns (E1).

Prices: `PRICES` ships example rows with their source and the date they were read; they are examples, check
your provider's page. Add your own with `price_table({...})` or by passing a `Price`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

__all__ = ["DEFAULT_PRICE", "DEFAULT_TTL", "PRICES", "CallCost", "CallTokens", "Price", "break_even_calls",
           "cache_model", "call_costs", "price_for", "request_costs", "summary_call_costs", "price_table", "warm"]

DEFAULT_TTL = timedelta(minutes=5)
EST = "est."
REPORTED = "reported"


@dataclass(frozen=True)
class Price:
    """One price-table row: US dollars per million tokens, where it came from and when it was read."""

    model: str
    input: float
    cached_input: float
    output: float
    cache_write: float | None = None  # None: writes cost plain input (OpenAI, local servers)
    source: str = "user"
    as_of: str = ""

    @property
    def write(self) -> float:
        """The price of a cache-write token (plain input where the provider does not bill writes)."""
        return self.input if self.cache_write is None else self.cache_write

    @property
    def label(self) -> str:
        """How a cost figure names its price row (UX "Money is a view too")."""
        when = f", as of {self.as_of}" if self.as_of else ""
        return f"{self.model} ({self.source}{when})"


_OPENAI = "openai.com/api/pricing"
_ANTHROPIC = "docs.anthropic.com prompt caching pricing (5-minute cache writes)"
# Examples only: prices change; check the source before relying on a figure.
PRICES: dict[str, Price] = {p.model: p for p in (
    Price("gpt-4o", 2.50, 1.25, 10.00, None, _OPENAI, "2025-06"),
    Price("gpt-4o-mini", 0.15, 0.075, 0.60, None, _OPENAI, "2025-06"),
    Price("gpt-4.1", 2.00, 0.50, 8.00, None, _OPENAI, "2025-06"),
    Price("gpt-4.1-mini", 0.40, 0.10, 1.60, None, _OPENAI, "2025-06"),
    Price("claude-sonnet-4", 3.00, 0.30, 15.00, 3.75, _ANTHROPIC, "2025-06"),
    Price("claude-opus-4", 15.00, 1.50, 75.00, 18.75, _ANTHROPIC, "2025-06"),
    Price("claude-3-5-haiku", 0.80, 0.08, 4.00, 1.00, _ANTHROPIC, "2025-06"),
)}
DEFAULT_PRICE = "claude-sonnet-4"  # compare's default row: it bills cache writes, so breaks show


def price_table(extra: Mapping[str, Price | Mapping[str, Any]] | Iterable[Price] = ()) -> dict[str, Price]:
    """The shipped rows plus yours (a Price, or a dict with input/cached_input/output[/cache_write/source/as_of])."""
    table = dict(PRICES)
    items = extra.items() if isinstance(extra, Mapping) else ((p.model, p) for p in extra)
    for name, row in items:
        if isinstance(row, Price):
            table[name] = replace(row, model=name)
            continue
        missing = {"input", "cached_input", "output"} - set(row)
        if missing:
            raise ValueError(f"price row {name!r} needs {sorted(missing)} (US dollars per million tokens)")
        table[name] = Price(name, float(row["input"]), float(row["cached_input"]), float(row["output"]),
                            None if row.get("cache_write") is None else float(row["cache_write"]),
                            str(row.get("source", "user")), str(row.get("as_of", "")))
    return table


def price_for(model: str | Price | None, table: Mapping[str, Price] | None = None) -> Price:
    """The row for `model`: exact name, else the longest shipped name it starts with (`gpt-4o-2024-08-06`)."""
    if isinstance(model, Price):
        return model
    table = PRICES if table is None else table
    name = model or DEFAULT_PRICE
    if name in table:
        return table[name]
    hits = sorted((k for k in table if name.startswith(k)), key=len, reverse=True)
    if not hits:
        raise ValueError(f"no price row for model {name!r}; known: {', '.join(table)}. Add yours with "
                         "price_table({name: {'input': ..., 'cached_input': ..., 'output': ...}})")
    return table[hits[0]]


@dataclass(frozen=True)
class CallTokens:
    """One call as the cache model reads it: prompt tokens, the prefix shared with the previous call, when."""

    prompt: int
    shared: int
    completion: int = 0
    at: datetime | None = None


@dataclass(frozen=True)
class CallCost:
    """E2/E3 per call (all est.): cache reads, fresh tokens, cache writes, and dollars under one price row."""

    cached: int
    uncached: int
    written: int
    warm: bool
    cost: float


def warm(previous: datetime | None, now: datetime | None, ttl: timedelta = DEFAULT_TTL) -> bool:
    """Whether a cache entry written at `previous` is still there at `now` (no timestamps: back to back)."""
    if previous is None or now is None:
        return True
    return (now - previous) <= ttl


def cache_model(calls: Sequence[CallTokens], ttl: timedelta = DEFAULT_TTL) -> list[tuple[int, int, bool]]:
    """E2: (est. cached, est. uncached = written, warm) per call. The cache holds the previous call's prompt
    for `ttl` after that call; a call reads the prefix it shares with it, the rest is processed and written."""
    out: list[tuple[int, int, bool]] = []
    held, last = 0, None
    for n, call in enumerate(calls):
        hot = n > 0 and warm(last, call.at, ttl)
        cached = min(call.shared, held) if hot else 0
        out.append((cached, call.prompt - cached, hot))
        held, last = call.prompt, call.at if call.at is not None else last
    return out


def call_costs(calls: Sequence[CallTokens], price: Price, ttl: timedelta = DEFAULT_TTL) -> list[CallCost]:
    """E3: dollars per call under `price` (cached reads at the cached price, the rest at the write price)."""
    out = []
    for call, (cached, uncached, hot) in zip(calls, cache_model(calls, ttl), strict=True):
        dollars = (cached * price.cached_input + uncached * price.write + call.completion * price.output) / 1e6
        out.append(CallCost(cached, uncached, uncached, hot, dollars))
    return out


def summary_call_costs(calls: Sequence[CallTokens], price: Price) -> list[CallCost]:
    """C11 + E3: dollars per summary call. Its prompt (instructions, the older messages, the scaffold) shares no
    prefix with the turn's calls, and it is not part of their cache chain: every prompt token is fresh (est.)."""
    return [call_costs([replace(c, shared=0)], price)[0] for c in calls]


def request_costs(requests: Any, price: Price, ttl: timedelta = DEFAULT_TTL) -> Any:
    """E3 over request records (a `store.requests(sid, summary_calls=True)` frame): one row per call with
    `purpose` (None: a turn's call; 'summary': a C11 summary call), tokens and est. dollars. The turn's calls
    are costed as `call_costs` costs them (their own cache chain, untouched by summary calls); each summary
    call is added by `summary_call_costs`. Reported tokens where the provider said, else what was sent (est.)."""
    import pandas as pd

    df = requests.sort_values("seq", kind="stable").reset_index(drop=True) if "seq" in requests else requests

    def num(col: str) -> pd.Series:
        return pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(math.nan, index=df.index)

    prompt = num("prompt_tokens_reported").fillna(num("after_tokens")).fillna(num("estimate_tokens")).fillna(0)
    completion = num("completion_tokens_reported").fillna(0)
    shared = num("prefix_tokens").fillna(0)
    stamps = [None if pd.isna(t) else pd.Timestamp(t).to_pydatetime() for t in df["created_at"]] \
        if "created_at" in df else [None] * len(df)
    purpose = (df["purpose"].where(df["purpose"].notna(), None) if "purpose" in df
               else pd.Series([None] * len(df), index=df.index, dtype=object))
    calls = [CallTokens(int(p), int(s), int(c), at) for p, s, c, at in zip(prompt, shared, completion, stamps,
                                                                          strict=True)]
    summary = [p == "summary" for p in purpose]
    turn_calls = call_costs([c for c, s in zip(calls, summary, strict=True) if not s], price, ttl)
    summary_calls = summary_call_costs([c for c, s in zip(calls, summary, strict=True) if s], price)
    costs = iter(turn_calls), iter(summary_calls)
    rows = [next(costs[1] if s else costs[0]) for s in summary]
    return pd.DataFrame({
        "seq": df["seq"] if "seq" in df else range(len(df)), "turn": df.get("turn", None),
        "iteration": df.get("iteration", None), "purpose": list(purpose),
        "prompt_tokens": [c.prompt for c in calls], "cached_tokens_est": [r.cached for r in rows],
        "completion_tokens": [c.completion for c in calls], "cost_est": [r.cost for r in rows]})


def break_even_calls(broken_tokens: int, saved_tokens: int, price: Price) -> float:
    """E3: calls after a compaction until the tokens it saved have paid for the cache it broke.

    The break re-writes `broken_tokens` that would have been cache reads; each later call then sends
    `saved_tokens` fewer tokens, each of which would have been a cache read. inf when it never pays."""
    cost = broken_tokens * (price.write - price.cached_input)
    if cost <= 0:
        return 0.0
    per_call = saved_tokens * price.cached_input
    return math.ceil(cost / per_call) if per_call > 0 else math.inf


def predicted_reads(prompts: Sequence[int], ats: Sequence[datetime | None], breaks: Sequence[bool],
                    ttl: timedelta = DEFAULT_TTL) -> list[int]:
    """E2 against reality: est. cache reads of a harness's logged calls from its reported prompt sizes alone.

    An append-only harness sends each call's prompt again as the next call's prefix, so the shared prefix is
    the previous call's reported prompt, unless the harness compacted in between (`breaks[k]`: nothing of
    the logged conversation is shared; its unlogged system prompt and tools may still be)."""
    calls = [CallTokens(p, 0 if k == 0 or breaks[k] else prompts[k - 1], 0, at)
             for k, (p, at) in enumerate(zip(prompts, ats, strict=True))]
    return [cached for cached, _, _ in cache_model(calls, ttl)]


def imported_cache_check(store: Any, session_id: str, ttl: timedelta = DEFAULT_TTL) -> Any:
    """E2 against reality, per imported call: reported cache reads (E1) beside the model's est. ones.

    A DataFrame (call, at, prompt_reported, cached_reported, cached_est, compacted_before); read from the
    request records an import wrote (`analysis.importers.call_records`) and the harness's compaction events."""
    import pandas as pd

    rows = store.requests(session_id, columns=["seq", "created_at", "prompt_tokens_reported",
                                               "cached_tokens_reported", "extra"]).sort_values("seq")
    rows = rows[rows["prompt_tokens_reported"].notna()].reset_index(drop=True)
    rows["message_index"] = [(json.loads(e) if isinstance(e, str) else e or {}).get("message_index", -1)
                             for e in rows["extra"]]
    events = store.events(session_id, "harness.compaction")
    cuts = sorted(int(json.loads(p)["seq"]) if isinstance(p, str) else int(p["seq"]) for p in events["payload"])
    index = rows["message_index"].tolist()
    breaks = [k > 0 and any(index[k - 1] < c <= index[k] for c in cuts) for k in range(len(index))]
    ats = [None if pd.isna(t) else t.to_pydatetime() for t in rows["created_at"]]
    prompts = [int(p) for p in rows["prompt_tokens_reported"]]
    return pd.DataFrame({"call": range(1, len(rows) + 1), "at": rows["created_at"], "prompt_reported": prompts,
                         "cached_reported": rows["cached_tokens_reported"], "cached_est": predicted_reads(
                             prompts, ats, breaks, ttl), "compacted_before": breaks})
