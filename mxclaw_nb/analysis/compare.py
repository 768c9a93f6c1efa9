"""Compare compaction policies across many sessions: one tidy DataFrame, plus summaries (SPEC S4).

Why: a policy is judged on a population, not on one session: how often it compacts, how much it
saves, which stages it reaches, what facts survive, and whether its threshold holds in real tokens.
``compare`` replays every (session, policy) pair with ``replay_messages`` and stacks the rows (one per
simulated model call) so pandas can slice them any way; ``summarize_comparison`` and
``summarize_policies`` are the two aggregations people ask for first.

Cost: per session, the replay rebuilds one request view per assistant message; per-message token
counts, extracted facts and exact o200k counts are cached per session (shared by all policies with the
same counter), so a call costs little more than the pipeline itself. ``df.attrs["timing"]`` records the
measured cost per session and policy; ``bench/replay_bench.py`` prints it for the shared transcripts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.facts import FACT_KINDS
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.analysis.replay import SessionCaches, exact_o200k, frame, replay_messages
from mxclaw_nb.analysis.sources import conversations
from mxclaw_nb.context import ContextPolicy, build_structured_summary
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.messages import Message

PROGRESS_MIN_SESSIONS = 20  # fewer sessions than this replay in well under a second: no bar


def _policies(policies: Any) -> list[tuple[str, ContextPolicy]]:
    if isinstance(policies, ContextPolicy | dict):
        policies = [policies]
    out = [as_policy(p) for p in policies]
    if not out:
        raise ValueError("give at least one policy")
    labels = [label for label, _ in out]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"policies need distinct labels, got duplicates {dupes}; add a 'name' to each dict")
    return out


def compare(sessions_or_transcripts: Any, policies: Sequence[ContextPolicy | dict[str, Any]] | Any, *,
            store: Any = None, progress: bool = True, exact: bool = False, facts: bool = True,
            summarize: Callable[[list[Message]], str] | None = build_structured_summary) -> pd.DataFrame:
    """Replay every session under every policy: one row per (policy, session, simulated call).

    Sessions: a JSONL path or folder, a Store (all sessions), session ids with ``store=``, a dict
    {id: messages}, or a list of message lists / (id, messages) pairs. Policies: ContextPolicy objects
    or dicts (see ``policies.as_policy``). ``exact=True`` adds exact o200k_base counts of every view.
    """
    convs = conversations(sessions_or_transcripts, store)
    pols = _policies(policies)
    exact_counter = exact_o200k() if exact else None
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    items: Any = convs
    if progress and len(convs) >= PROGRESS_MIN_SESSIONS:
        from tqdm.auto import tqdm

        items = tqdm(convs, desc=f"replay x{len(pols)} policies", unit="session")
    n_calls = 0
    for sid, messages in items:
        caches = SessionCaches(exact_counter)
        for label, pol in pols:
            out = replay_messages(messages, pol, session_id=sid, summarize=summarize, facts=facts, caches=caches)
            for row in out:
                row["policy"] = label
                row["threshold_ratio"] = pol.threshold_ratio
            rows.extend(out)
            n_calls += len(out)
    seconds = time.perf_counter() - started
    df = frame(rows, facts=facts, exact=exact, extra=("policy",))
    df.insert(df.columns.get_loc("threshold") + 1, "threshold_ratio", [r["threshold_ratio"] for r in rows])
    df["policy"] = pd.Categorical(df["policy"], [label for label, _ in pols], ordered=True)
    n = max(len(convs), 1)
    df.attrs["timing"] = {
        "sessions": len(convs), "policies": len(pols), "calls": n_calls, "seconds": seconds,
        "ms_per_session": 1000 * seconds / n, "ms_per_session_policy": 1000 * seconds / (n * len(pols)),
        "exact": exact, "facts": facts,
    }
    return df


def _share(num: pd.Series, den: pd.Series) -> float:
    total = den.sum()
    return float(num.sum() / total) if total else float("nan")


def _stage_count(stage: str) -> Callable[[pd.Series], int]:
    return lambda s: int((s == stage).sum())


def summarize_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, session): calls, stages reached, tokens saved, fact survival, real-token overflow."""
    g = df.groupby(["policy", "session_id"], observed=True, sort=False)
    out = g.agg(
        calls=("call", "size"), turns=("turn", "max"), compactions=("compacted", "sum"),
        **{stage: ("stage", _stage_count(stage)) for stage in STAGES if stage != "unchanged"},
        max_full_tokens=("full_tokens", "max"),
        max_after_tokens=("after_tokens", "max"), saved_tokens=("saved_tokens", "sum"),
        full_tokens=("full_tokens", "sum"), over_threshold=("over_threshold", "sum"),
    )
    out["saved_share"] = out["saved_tokens"] / out["full_tokens"].where(out["full_tokens"] > 0)
    if "fact_survival" in df:
        out["fact_survival"] = g["fact_survival"].mean()
        out["fact_survival_min"] = g["fact_survival"].min()
    if "exact_after_tokens" in df:
        out["max_exact_after_tokens"] = g["exact_after_tokens"].max()
        out["exact_over_window"] = g["exact_over_window"].sum()
    return out.reset_index()


def summarize_policies(df: pd.DataFrame) -> pd.DataFrame:
    """One row per policy over all sessions: the figures for a report (see the README's analysis section)."""
    rows = []
    for label, d in df.groupby("policy", observed=True, sort=False):
        per_session = d.groupby("session_id", sort=False)
        compacted = d[d["compacted"]]
        row: dict[str, Any] = {
            "policy": label, "sessions": d["session_id"].nunique(), "calls": len(d),
            "sessions_compacted": int(per_session["compacted"].any().sum()),
            "compactions": int(d["compacted"].sum()),
            **{f"stage_{s}": int((d["stage"] == s).sum()) for s in STAGES},
            "saved_share": _share(d["saved_tokens"], d["full_tokens"]),
            "saved_share_compacted": _share(compacted["saved_tokens"], compacted["full_tokens"]),
            "over_threshold": int(d["over_threshold"].sum()),
        }
        if "fact_survival" in d:
            f = compacted.dropna(subset=["fact_survival"])
            row["fact_survival"] = _share(f["facts_visible"], f["facts_total"])
            row["fact_survival_mean"] = float(f["fact_survival"].mean()) if len(f) else float("nan")
            for kind in FACT_KINDS:
                row[f"survival_{kind}"] = float(f[f"survival_{kind}"].mean()) if len(f) else float("nan")
        if "exact_after_tokens" in d:
            ratio = d["after_tokens"] / d["exact_after_tokens"].where(d["exact_after_tokens"] > 0)
            row["est_over_exact_median"] = float(ratio.median())
            row["est_over_exact_p5"] = float(ratio.quantile(0.05))
            row["exact_over_threshold"] = int((d["exact_after_tokens"] > d["threshold"]).sum())
            row["exact_over_window"] = int(d["exact_over_window"].sum())
        rows.append(row)
    return pd.DataFrame(rows)
