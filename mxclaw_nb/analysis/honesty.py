"""Estimator honesty: the C1 estimate beside exact o200k_base counts and provider-reported usage (SPEC S4, T1-T3).

Why: the threshold (C2) protects the window only as far as the count behind it is honest. C1 is
deliberately simple, and it under-counts some traffic badly (code, JSON, logs). This module shows
where and by how much, per message, grouped by role and by a simple content classifier (code, JSON,
prose, CJK), so a user can see which of *their* sessions the estimate is unsafe for, and where the
store has provider-reported usage, the estimate and calibrated count next to what the provider said.

Reference counts are exact ``o200k_base`` tokens of what is sent (``mxclaw_nb.tokenizers``: text +
tool-call JSON + 4 framing tokens per message, as the provider charges them); ``framing=0`` compares
text only. ``ratio = estimate / exact``; ``under`` means the estimate is below the exact count.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.sources import conversations
from mxclaw_nb.context import estimate_tokens
from mxclaw_nb.context.counters import MESSAGE_OVERHEAD_TOKENS, FunctionCounter
from mxclaw_nb.context.tokens import count_cjk, tool_calls_json
from mxclaw_nb.messages import content_text, sanitize

KINDS = ("prose", "code", "json", "cjk", "empty")
_CODE_LINE = re.compile(
    r"^\s*(\d+[:|]\s?|def |class |import |from \S+ import|return\b|if .*:$|for .*:$|#include|function |const |let |"
    r"var |public |private |\}|\{|@@|[+-]{3} )|[;{}]\s*$|^\s{2,}\S|\w\(.*\)\s*$"
)


def content_kind(message: dict[str, Any]) -> str:
    """Classify what a message's counted text mostly is: prose, code, json, cjk or empty (heuristic)."""
    sent = sanitize(message) if isinstance(message, dict) else {}
    text = content_text(sent.get("content"))
    if sent.get("tool_calls"):
        text = (text + "\n" + tool_calls_json(sent["tool_calls"])) if text.strip() else tool_calls_json(
            sent["tool_calls"])
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return "empty"
    if count_cjk(text) >= 0.2 * len(visible):
        return "cjk"
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            json.loads(stripped)
            return "json"
        except ValueError:
            if sum(c in '{}[]":,' for c in visible) >= 0.1 * len(visible):
                return "json"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if "```" in text or (len(lines) >= 2 and sum(bool(_CODE_LINE.search(ln)) for ln in lines) >= 0.4 * len(lines)):
        return "code"
    return "prose"


def _reference(encoding: str, framing: int) -> FunctionCounter:
    from mxclaw_nb.tokenizers import exact_counter, unavailable_reason

    counter = exact_counter(encoding)
    if not isinstance(counter, FunctionCounter):
        raise RuntimeError(f"exact {encoding} counts are not available: {unavailable_reason(encoding)}")
    return FunctionCounter(encoding, counter.text_count, per_message=framing)


def estimate_honesty(source: Any, *, store: Any = None, encoding: str = "o200k_base",
                     framing: int = MESSAGE_OVERHEAD_TOKENS, progress: bool = True) -> pd.DataFrame:
    """One row per message: session_id, index, role, kind, chars, estimate, exact, ratio, under, missing."""
    convs = conversations(source, store)
    reference = _reference(encoding, framing)
    items: Any = convs
    if progress and len(convs) >= 20:
        from tqdm.auto import tqdm

        items = tqdm(convs, desc=f"estimate vs {encoding}", unit="session")
    rows = []
    for sid, messages in items:
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                continue
            est, exact = estimate_tokens(m), reference.count(m)
            rows.append((sid, i, str(m.get("role")), content_kind(m), len(content_text(m.get("content"))), est, exact))
    df = pd.DataFrame(rows, columns=["session_id", "index", "role", "kind", "chars", "estimate", "exact"])
    df["ratio"] = df["estimate"] / df["exact"].where(df["exact"] > 0)
    df["under"] = df["estimate"] < df["exact"]
    df["missing"] = (df["exact"] - df["estimate"]).clip(lower=0)
    df.attrs["reference"] = f"{encoding} (+{framing} framing tokens per message)"
    return df


def honesty_table(df: pd.DataFrame, by: str | list[str] = "kind") -> pd.DataFrame:
    """Per group: n, share under-counted, median / 5th-percentile ratio, totals and tokens missed."""
    keys = [by] if isinstance(by, str) else list(by)
    out = df.groupby(keys, sort=True).agg(
        n=("ratio", "size"), under_share=("under", "mean"), median_ratio=("ratio", "median"),
        p5_ratio=("ratio", lambda s: s.quantile(0.05)), min_ratio=("ratio", "min"),
        estimate=("estimate", "sum"), exact=("exact", "sum"), missing=("missing", "sum"),
    )
    out["total_ratio"] = out["estimate"] / out["exact"].where(out["exact"] > 0)
    out["missing_share"] = out["missing"] / out["exact"].where(out["exact"] > 0)
    return out.reset_index()


def reported_honesty(store: Any, session_id: str | None = None) -> pd.DataFrame:
    """Per stored model call: estimate, calibrated count and provider-reported prompt tokens, with ratios."""
    req = store.requests(session_id)
    cols = ["session_id", "seq", "turn", "iteration", "model", "counter", "estimate_tokens", "calibrated_tokens",
            "prompt_tokens_reported"]
    df = req[[c for c in cols if c in req.columns]].copy()
    reported = df["prompt_tokens_reported"].where(df["prompt_tokens_reported"] > 0)
    df["estimate_over_reported"] = df["estimate_tokens"] / reported
    df["calibrated_over_reported"] = df["calibrated_tokens"] / reported
    df["estimate_under"] = df["estimate_tokens"] < reported
    return df
