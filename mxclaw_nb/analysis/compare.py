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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from mxclaw_nb.analysis.facts import FACT_KINDS
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.context import ContextPolicy, build_structured_summary
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.messages import Message

PROGRESS_MIN_SESSIONS = 20  # fewer sessions than this replay in well under a second: no bar

if TYPE_CHECKING:
    from concurrent.futures import Executor


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
            summarize: Callable[[list[Message]], str] | None = build_structured_summary,
            executor: Executor | str | None = None, chunk_size: int | None = None,
            max_pending: int | None = None,
            reduce: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> pd.DataFrame:
    """Replay every session under every policy: one row per (policy, session, simulated call).

    Sessions: a JSONL path or folder, a Store (all sessions), session ids with ``store=``, a dict
    {id: messages}, a list of message lists / (id, messages) pairs, or any iterator of those (read lazily).
    Policies: ContextPolicy objects or dicts (see ``policies.as_policy``). ``exact=True`` adds exact
    o200k_base counts of every view.

    Where it runs (SPEC S4, "past one machine"): ``executor`` is ``"inline"`` (this process), ``"processes"``
    (a ``ProcessPoolExecutor`` on this machine's cores, started and shut down here) or any
    ``concurrent.futures.Executor`` you own, e.g. a Dask cluster's ``client.get_executor()``. The default
    (None, ``"auto"``) is inline below ``PROCESS_MIN_SESSIONS`` sessions and processes from there on (inline
    too when ``summarize`` or ``reduce`` is defined in the notebook or script, so no worker can import it).
    Sessions go out in chunks of ``chunk_size`` (default 25); at most ``max_pending`` chunks (default: twice the
    executor's workers, or a Dask cluster's threads) are in flight or waiting to be stacked, so memory stays
    bounded however many sessions the iterator yields. ``reduce`` (e.g.
    ``summarize_comparison``) is applied to each chunk's rows where the chunk ran, so only its result
    comes back: one row per (policy, session) instead of one per simulated call (10,000 sessions x 3
    policies: 30,000 rows instead of 324,000).
    The result is the same whatever the executor (chunks are stacked in input order). ``df.attrs["timing"]``
    adds ``executor``, ``worker_seconds``/``worker_cpu_seconds`` (summed over chunks) and ``worker_peak_rss_mb``
    (the highest ``ru_maxrss`` a worker process reported after a chunk).
    """
    from mxclaw_nb.analysis.dispatch import run_compare  # chunks on any executor (SPEC S4); see its module doc

    return run_compare(sessions_or_transcripts, _policies(policies), store=store, progress=progress, exact=exact,
                       facts=facts, summarize=summarize, executor=executor, chunk_size=chunk_size,
                       max_pending=max_pending, reduce=reduce, progress_min=PROGRESS_MIN_SESSIONS)


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
