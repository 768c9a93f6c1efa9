"""The prompt cache and cost as views (SPEC E1-E3; UX "Money is a view too").

Why one module: the gauge, the timeline and the inspector header show the same two things — how much of
a call's prompt was (or would be) read from the provider's prefix cache, and what the calls cost — and
must label them the same way: `reported` when the provider said how many tokens it served from its cache
(E1), `est.` when the figure comes from the prefix-cache model over the prefix each call shares with the
previous one (E2, `analysis.cost`), with the price-table row a cost came from named beside it.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.cost import (
    DEFAULT_TTL,
    CallTokens,
    Price,
    break_even_calls,
    cache_model,
    price_for,
    summary_call_costs,
)
from mxclaw_nb.events import ContextCacheDecision, parse
from mxclaw_nb.records import RequestRecord
from mxclaw_nb.widgets.style import MUTED, esc, fmt_int

CACHE_COLOR = "#26a69a"
REPORTED_LABEL = "cached (reported by the provider)"
EST_LABEL = "cached (est., shared prefix)"


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype("float64")


def _stamp(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value) \
        else pd.Timestamp(value).to_pydatetime()


def cached_part(df: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """Per call, the cached part of the sent tokens (in the sent line's unit) and its label, or None.

    Reported (E1) where the provider said: its cached share of its own prompt count, applied to what was sent;
    else est. (E2): the prefix shared with the previous call while the 5-minute cache is warm."""
    reported, prefix = (_num(df[c]) if c in df and not df[c].isna().all() else None  # a missing value stays one
                        for c in ("cached_tokens_reported", "prefix_tokens"))
    if (reported is None or reported.isna().all()) and (prefix is None or prefix.isna().all()):
        return None  # S4: nothing to show, the sent figures are not read
    sent = _num(df["after_tokens"]).fillna(_num(df.get("estimate_tokens", pd.Series(dtype=float))))
    if reported is not None and reported.notna().any():
        prompt = _num(df["prompt_tokens_reported"])
        return ((reported / prompt.where(prompt > 0)).clip(0, 1) * sent).fillna(0), REPORTED_LABEL
    assert prefix is not None
    stamps = [_stamp(t) for t in df["created_at"]] if "created_at" in df else [None] * len(df)
    calls = [CallTokens(int(s) if s == s else 0, int(p) if p == p else 0, 0, at)
             for s, p, at in zip(sent, prefix, stamps, strict=True)]
    return pd.Series([c for c, _, _ in cache_model(calls, DEFAULT_TTL)], index=df.index, dtype=float), EST_LABEL


def price_or_none(model: str | None) -> Price | None:
    """The price-table row of `model`, None when the table has none (a local or demo model)."""
    try:
        return price_for(model) if model else None
    except ValueError:
        return None


def cost_caption(df: pd.DataFrame) -> str:
    """One line: cache-read share (reported or est.) and est. cost under the model's price row (or why none)."""
    part = cached_part(df)
    if part is None:
        return ""
    cached, label = part
    sent = _num(df["after_tokens"]).fillna(0)
    share = float(cached.sum() / sent.sum()) if sent.sum() else 0.0
    kind = "reported" if label == REPORTED_LABEL else "est.; the provider reported no cache figure"
    text = f"prompt cache: {share:.0%} of sent tokens read from cache ({kind})"
    model = next((m for m in df.get("model", pd.Series(dtype=object)).dropna()), None)
    price = price_or_none(model)
    if price is None:
        text += f" · no price row for {model or 'this model'} (add one with analysis.cost.price_table)"
    else:
        completion = _num(df.get("completion_tokens_reported", pd.Series(0, index=df.index))).fillna(0)
        calls = [CallTokens(int(s), int(c), int(o)) for s, c, o in zip(sent, cached, completion, strict=True)]
        dollars = _dollars(calls, price)
        summaries = df.attrs.get("summary_calls") or []  # C11: the summary calls cost like any call
        if summaries:
            made = [CallTokens(int(c["tokens"]), 0, int(c["completion"] or 0)) for c in summaries]
            extra = sum(c.cost for c in summary_call_costs(made, price))
            dollars += extra
            # one dollar sign per line: two would be typeset as LaTeX by JupyterLab
            share = extra / dollars if dollars else 0.0
            text += (f" · est. cost ${dollars:,.4f} under {price.label}, of which {share:.0%} for "
                     f"{len(summaries)} summary call{'s' if len(summaries) != 1 else ''} (C11)")
        else:
            text += f" · est. cost ${dollars:,.4f} under {price.label}"
    return f'<span class="mx-cost" style="color:{MUTED}">{esc(text)}</span>'


def _dollars(calls: list[CallTokens], price: Price) -> float:
    """Dollars of calls whose cached part is already known (`shared` holds it): reads, fresh input, output."""
    return sum(c.shared * price.cached_input + (c.prompt - c.shared) * price.write + c.completion * price.output
               for c in calls) / 1e6


def cache_figure(rec: RequestRecord) -> str | None:
    """The gauge's cache line for one call: reported cached tokens, else the est. shared prefix, labelled."""
    if rec.cached_tokens_reported is not None:
        of = f" of {fmt_int(rec.prompt_tokens_reported)}" if rec.prompt_tokens_reported else ""
        return f"{fmt_int(rec.cached_tokens_reported)}{of} prompt tokens read from the provider's cache (reported)"
    if rec.prefix_tokens is not None:
        return (f"{fmt_int(rec.prefix_tokens)} tokens shared with the previous call (est.; the provider "
                "reports no cache figure, so what it cached is not known)")
    return None


def cache_strip(rec: RequestRecord, scale: int) -> str:
    """A thin bar under the sent bar: its cached part (reported share, else est. shared prefix), labelled."""
    figure = cache_figure(rec)
    sent = rec.after_tokens or 0
    if figure is None or not sent:
        return ""
    if rec.cached_tokens_reported is not None and rec.prompt_tokens_reported:
        part = sent * min(1.0, rec.cached_tokens_reported / rec.prompt_tokens_reported)
        label, right = "prompt cache (reported)", f"~{fmt_int(round(part))} cached"  # the reported share, sent unit
    else:
        part = min(sent, rec.prefix_tokens or 0)
        label, right = "shared prefix (est.)", f"{fmt_int(part)} shared (est.)"
    width = 100.0 * part / max(scale, 1)
    rest = 100.0 * (sent - part) / max(scale, 1)
    return (f'<div class="mx-cache" style="display:flex;align-items:center;margin:0 0 5px 0;gap:8px">'
            f'<div style="width:190px;flex:none;color:{MUTED}">{esc(label)}</div>'
            f'<div style="position:relative;flex:1;min-width:120px;height:6px;display:flex">'
            f'<div class="mx-cache-part" title="{esc(figure)}" style="width:{width:.3f}%;background:{CACHE_COLOR}">'
            f'</div><div title="not cached" style="width:{rest:.3f}%;background:rgba(128,128,128,.35)"></div></div>'
            f'<div style="width:150px;flex:none;text-align:right;white-space:nowrap;color:{MUTED}">'
            f'{esc(right)}</div></div>'
            f'<div class="mx-cache-note" style="color:{MUTED};font-size:90%;margin:-3px 0 4px 198px">'
            f'{esc(figure)}</div>')


def cache_header(rec: RequestRecord) -> str:
    """The inspector's cache line: what the provider cached (or est.), and for a compaction its cache break and
    break-even under the model's price row (E3)."""
    parts = [x for x in (cache_figure(rec),) if x]
    broken = rec.extra.get("prefix_broken_tokens") if isinstance(rec.extra, dict) else None
    if rec.stage != "unchanged" and isinstance(broken, int) and broken > 0:
        saved = (rec.before_tokens or 0) - (rec.after_tokens or 0)
        text = f"cache break: {fmt_int(broken)} tokens of the previous call's prefix rewritten (est.)"
        price = price_or_none(rec.model)
        if price is None:
            text += f"; no price row for {rec.model or 'this model'}, so no break-even"
        else:
            calls = break_even_calls(broken, saved, price)
            when = "never" if calls == math.inf else f"after {fmt_int(int(calls))} calls"
            text += f"; {fmt_int(saved)} tokens saved per later call pay for it {when} (est., {price.label})"
        parts.append(text)
    decision = cache_decision_text(rec)
    if decision:
        parts.append(decision)
    if not parts:
        return ""
    return "".join(f'<div class="mx-cache-head" style="color:{MUTED}">{esc(p)}</div>' for p in parts)


def cache_decision_text(rec: RequestRecord) -> str:
    """E4: the line the live log showed for this call's cache decision (a `<name>-cache` strategy's turn-first
    call: kept the warm prefix, or compacted, and why), from the record's `extra.cache_decision`; '' when none."""
    decision = rec.extra.get("cache_decision") if isinstance(rec.extra, dict) else None
    if not isinstance(decision, dict) or decision.get("warm") is None:  # no previous call to keep: nothing decided
        return ""
    event = parse("context.cache_decision", decision)
    return event.text() if isinstance(event, ContextCacheDecision) else ""
