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

``compare_harness`` answers the next question for imported Claude Code / Codex sessions: where that harness
compacted (its ``harness.compaction`` events), what did it keep, and what would each policy have kept at the
same model call? One row per (session, point, policy) with a ``harness`` row first; harness tokens are C1
estimates of what it sent, its own reported counts sit apart in ``reported_*`` columns.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from mxclaw_nb.analysis.agent_logs import HARNESS_EVENT
from mxclaw_nb.analysis.cost import DEFAULT_TTL, CallTokens, Price, call_costs, price_for
from mxclaw_nb.analysis.facts import FACT_KINDS, Fact, combine_views, survival
from mxclaw_nb.analysis.importers import Conversation
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.analysis.replay import FACT_COLUMNS, RECORDED, STAND_IN, SessionCaches
from mxclaw_nb.context import ContextPolicy, RequestView, build_request_view, build_structured_summary
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.messages import Message, sanitize

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
            reduce: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
            summary_provider: Any = None) -> pd.DataFrame:
    """Replay every session under every policy: one row per (policy, session, simulated call).

    Sessions: a transcript file or folder (`.jsonl`, `.json`, gzipped or not), a Store (all sessions), session
    ids with ``store=``, a dict {id: messages}, a list of message lists / (id, messages) pairs, or any iterator of
    those (read lazily).
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

    ``summary_provider`` (SPEC C11): a provider (e.g. ``OpenAIProvider``) or a ``summary_call.ModelSummarizer``:
    the summaries ``model-summary`` policies plan are written by real model calls through it, as the live loop
    makes them (the engine's prompt, the deadline and the gates; a rejected one leaves the C6 text), once per
    (session, coverage, prompt) and then reused; the rows' ``summary_calls``, ``summary_call_tokens`` (reported
    usage, prompt + completion) and ``summary_source`` say what happened, ``df.attrs["summary_calls"]`` the
    totals (made, reused). It runs inline (the calls go from this process). Without it, the C6 text stands in.
    """
    from mxclaw_nb.analysis.dispatch import run_compare  # chunks on any executor (SPEC S4); see its module doc

    return run_compare(sessions_or_transcripts, _policies(policies), store=store, progress=progress, exact=exact,
                       facts=facts, summarize=summarize, executor=executor, chunk_size=chunk_size,
                       max_pending=max_pending, reduce=reduce, progress_min=PROGRESS_MIN_SESSIONS,
                       summary_provider=summary_provider)


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
    if "typed_placeholders" in df:  # K2: the most typed placeholders one call sent
        out["max_typed_placeholders"] = g["typed_placeholders"].max()
    if "fact_survival" in df:
        out["fact_survival"] = g["fact_survival"].mean()
        out["fact_survival_min"] = g["fact_survival"].min()
    if "exact_after_tokens" in df:
        out["max_exact_after_tokens"] = g["exact_after_tokens"].max()
        out["exact_over_window"] = g["exact_over_window"].sum()
    return out.reset_index()


def cost_columns(df: pd.DataFrame, price: str | Price | None = None, ttl: timedelta = DEFAULT_TTL) -> pd.DataFrame:
    """E2/E3: the rows with est. `cached_tokens`, `uncached_tokens` (= written) and `cost` (US dollars under
    one price-table row, named in ``df.attrs["price"]``), per (policy, session) in call order. Replayed calls
    carry no timestamps, so they are taken as back to back (the cache stays warm)."""
    row = price_for(price)
    out = df.copy()
    cached, uncached, dollars = (pd.Series(0.0, index=df.index) for _ in range(3))
    for _, d in df.groupby(["policy", "session_id"], observed=True, sort=False):
        calls = [CallTokens(int(a), int(s), int(c)) for a, s, c in
                 zip(d["after_tokens"], d["shared_tokens"], d["completion_tokens"], strict=True)]
        costs = call_costs(calls, row, ttl)
        cached[d.index] = [c.cached for c in costs]
        uncached[d.index] = [c.uncached for c in costs]
        dollars[d.index] = [c.cost for c in costs]
    out["cached_tokens"], out["uncached_tokens"], out["cost"] = cached.astype(int), uncached.astype(int), dollars
    out.attrs["price"] = f"est. cost under {row.label}, USD per call; cached/uncached est. (prefix-cache model)"
    return out


def summarize_policies(df: pd.DataFrame, price: str | Price | None = None) -> pd.DataFrame:
    """One row per policy over all sessions: the figures for a report (see the README's analysis section);
    with E2/E3 columns (est. cost under `price`, cache-read share, cache breaks) where the rows carry them."""
    if "shared_tokens" in df and "cost" not in df:
        df = cost_columns(df, price)
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
        if "summary_calls" in d:  # C11: the model summary calls the strategy made (0 without model summaries)
            row.update(_summary_call_columns(d))
        if "cost" in d:  # E2/E3 (est.)
            row["cost"] = float(d["cost"].sum())
            row["cache_read_share"] = _share(d["cached_tokens"], d["after_tokens"])
            row["broken_tokens"] = int(d["broken_tokens"].sum())
        if "fact_survival" in d:
            f = compacted.dropna(subset=["fact_survival"])
            row["fact_survival"] = _share(f["facts_visible"], f["facts_total"])
            if "facts_recallable" in f:  # R2: not visible, but named by a placeholder or a summary's range (C13)
                row["fact_recallable"] = _share(f["facts_recallable"], f["facts_total"])
                row["fact_lost"] = _share(f["facts_lost"], f["facts_total"])
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


def _summary_call_columns(d: pd.DataFrame) -> dict[str, Any]:
    """C11 per policy: summary calls and their tokens, and where the summaries came from.
    `summary_calls_stand_in`: no summary recorded for that coverage and no writer, so the C6 text was sent and the
    tokens are the C1 estimate of the request the call *would* have sent. `summary_calls_recorded`: recorded
    live (their reported usage is in the session's `requests`, `purpose = 'summary'`). With a summary writer
    (`compare(..., summary_provider=...)`): `summary_calls_model` accepted and `summary_calls_rejected` rejected
    calls made now (tokens: the reported usage, prompt + completion), `summary_calls_reused` requests answered
    from the writer's earlier outcome (no call)."""
    from mxclaw_nb.summary_call import MODEL, MODEL_REUSED, REJECTED, REJECTED_REUSED

    calls = pd.to_numeric(d["summary_calls"], errors="coerce").fillna(0)
    source = d["summary_source"] if "summary_source" in d else pd.Series(None, index=d.index, dtype=object)
    out = {"summary_calls": int(calls.sum()),
           "summary_call_tokens": int(pd.to_numeric(d["summary_call_tokens"], errors="coerce").fillna(0).sum()),
           "summary_calls_stand_in": int(calls[source == STAND_IN].sum()),
           "summary_calls_recorded": int(calls[source == RECORDED].sum())}
    if source.isin([MODEL, MODEL_REUSED, REJECTED, REJECTED_REUSED]).any():
        out.update(summary_calls_model=int(calls[source == MODEL].sum()),
                   summary_calls_rejected=int(calls[source == REJECTED].sum()),
                   summary_calls_reused=int(source.isin([MODEL_REUSED, REJECTED_REUSED]).sum()))
    return out


# -- the harness's own compactions beside replayed policies (SPEC S4) ---------------------------------------------

HARNESS = "harness"  # the policy label of the rows that show what the other harness (Claude Code, Codex) kept
HARNESS_COLUMNS = [
    "session_id", "point", "harness", "trigger", "seq", "call", "turn", "policy", "counter", "tokens_basis",
    "full_tokens", "before_tokens", "after_tokens", "saved_tokens", "reported_pre_tokens", "reported_post_tokens",
    "stage", "compacted", "n_sent", "summary_chars", *FACT_COLUMNS,
]
HARNESS_LABELS = {
    "tokens_basis": "how full/before/after tokens were counted: 'est. (C1)' is the C1 estimate (SPEC C1), "
                    "else the policy's exact counter; the harness rows are always est. (C1)",
    "reported_pre_tokens": "reported by the harness (Claude Code compactMetadata.preTokens, Codex last "
                           "token_count input_tokens): its own count, with its system prompt and tools",
    "reported_post_tokens": "reported by the harness (compactMetadata.postTokens), when it records one",
    "fact_survival": "share of the facts of the transcript before the compaction point (paths, errors, numbers, "
                     "commands) still visible in the view at the first model call after it",
}
_C1 = ContextPolicy()  # the C1 estimate, for the harness's views


def _harness_sessions(source: Any, store: Any) -> list[tuple[str, list[Message], list[dict[str, Any]]]]:
    """(id, messages, harness.compaction payloads) for Conversations, a Store, or session ids with ``store``."""
    if isinstance(source, Conversation):
        source = [source]
    if hasattr(source, "load_transcript") and hasattr(source, "sessions"):
        store, source = source, list(source.sessions()["id"])
    elif hasattr(source, "columns") and "id" in getattr(source, "columns", ()):
        source = list(source["id"])
    elif isinstance(source, str):
        source = [source]
    out = []
    for item in source:
        if isinstance(item, Conversation):
            out.append((item.id, item.messages, [p for kind, p in item.events if kind == HARNESS_EVENT]))
            continue
        if not isinstance(item, str) or store is None:
            raise ValueError("compare_harness takes Conversations (parse_claude_code / parse_codex), a Store, "
                             f"or session ids with store=; got a {type(item).__name__}")
        events = store.events(item, type=HARNESS_EVENT)
        payloads = [json.loads(p) if isinstance(p, str) else p for p in events["payload"]]
        out.append((item, store.load_transcript(item), payloads))
    return out


def _views_at(messages: list[Message], policy: ContextPolicy, targets: set[int], summarize: Any,
              caches: SessionCaches) -> dict[int, RequestView]:
    """The policy's request view before each target index, built exactly as ``replay_messages`` builds it
    (rebuilt from the transcript at each new turn, chained with ``next_input`` within a turn)."""
    turns = list(itertools.accumulate(int(isinstance(m, dict) and m.get("role") == "user") for m in messages))
    calls = {i for i, m in enumerate(messages) if i > 0 and isinstance(m, dict) and m.get("role") == "assistant"}
    cache = caches.token_cache(policy)
    out: dict[int, RequestView] = {}
    view: RequestView | None = None
    prev = 0
    for i in sorted(calls | targets):
        if i > max(targets):
            break
        rebuilt = view is None or turns[i - 1] != turns[prev - 1]
        inputs = messages[:i] if rebuilt or view is None else view.next_input(messages[prev:i])
        view = build_request_view(inputs, policy, summarize, cache=cache)
        if i in targets:
            out[i] = view
        prev = i
    return out


def _c1(messages: Sequence[Message]) -> int:
    return sum(_C1.count(sanitize(m)) for m in messages if isinstance(m, dict))


def _facts_row(facts: set[Fact], view: Sequence[Message], caches: SessionCaches) -> dict[str, Any]:
    result = survival(facts, combine_views(caches.views(m) for m in view))
    row: dict[str, Any] = {"facts_total": result.total, "facts_visible": result.visible,
                           "fact_survival": result.share if result.total else math.nan}
    for kind, (total, visible) in result.by_kind.items():
        row[f"survival_{kind}"] = visible / total if total else math.nan
    return row


def _session_points(sid: str, messages: list[Message], comps: list[dict[str, Any]],
                    pols: list[tuple[str, ContextPolicy]], summarize: Any) -> list[dict[str, Any]]:
    n = len(messages)
    comps = sorted((c for c in comps if 0 <= int(c.get("seq", -1)) <= n), key=lambda c: int(c["seq"]))
    if not comps or not n:
        return []
    calls = [i for i, m in enumerate(messages) if i > 0 and isinstance(m, dict) and m.get("role") == "assistant"]
    turns = list(itertools.accumulate(int(isinstance(m, dict) and m.get("role") == "user") for m in messages))
    points = [(c, int(c["seq"]), next((j for j in calls if j >= max(int(c["seq"]), 1)), n)) for c in comps]
    caches = SessionCaches()
    views = {label: _views_at(messages, pol, {i for _, _, i in points}, summarize, caches) for label, pol in pols}
    rows: list[dict[str, Any]] = []
    head: list[Message] | None = None  # what the harness sent in place of messages[:last_seq]
    last_seq = 0
    for k, (c, s, i) in enumerate(points, 1):
        facts: set[Fact] = set()
        for m in messages[:s]:
            facts |= caches.facts(m) if isinstance(m, dict) else set()
        before = messages[:s] if head is None else head + messages[last_seq:s]
        kept = [messages[j] for j in c.get("kept_seqs") or [] if 0 <= j < s] + list(c.get("kept") or [])
        summary = [{"role": "user", "content": c["summary"]}] if c.get("summary") else []
        head = [m for m in messages[:s] if isinstance(m, dict) and m.get("role") == "system"] + summary + kept
        last_seq = s
        seen = head + messages[s:i]
        reported = c.get("reported_tokens") or {}
        common = {"session_id": sid, "point": k, "harness": c.get("harness"), "trigger": c.get("trigger"), "seq": s,
                  "call": calls.index(i) + 1 if i < n else None, "turn": turns[i - 1] if i else 0}
        full = _c1(messages[:i])
        rows.append({
            **common, "policy": HARNESS, "counter": "estimate", "tokens_basis": "est. (C1)", "full_tokens": full,
            "before_tokens": _c1(before), "after_tokens": _c1(seen), "saved_tokens": full - _c1(seen),
            "reported_pre_tokens": reported.get("pre_tokens"), "reported_post_tokens": reported.get("post_tokens"),
            "stage": HARNESS, "compacted": True, "n_sent": len(seen), "summary_chars": len(c.get("summary") or ""),
            **_facts_row(facts, seen, caches),
        })
        for label, pol in pols:
            view = views[label][i]
            pol_full = sum(pol.count(sanitize(m)) for m in messages[:i] if isinstance(m, dict))
            rows.append({
                **common, "policy": label, "counter": view.counter,
                "tokens_basis": "est. (C1)" if view.counter == "estimate" else view.counter, "full_tokens": pol_full,
                "before_tokens": view.before_tokens, "after_tokens": view.after_tokens,
                "saved_tokens": pol_full - view.after_tokens, "reported_pre_tokens": None,
                "reported_post_tokens": None, "stage": view.stage, "compacted": view.compacted,
                "n_sent": len(view.messages), "summary_chars": len(view.summary or ""),
                **_facts_row(facts, view.messages, caches),
            })
    return rows


def compare_harness(sessions: Any, policies: Sequence[ContextPolicy | dict[str, Any]] | Any, *, store: Any = None,
                    summarize: Callable[[list[Message]], str] | None = build_structured_summary) -> pd.DataFrame:
    """The harness's own compactions beside each replayed policy: one row per (session, point, policy).

    A *point* is a compaction the other harness made (a stored ``harness.compaction`` event, imported by
    ``import_claude_code`` / ``import_codex``). At each point, the ``harness`` row shows what the harness sent
    at the first model call after it (its summary, what it kept, and the messages since), and one row per
    policy shows that policy's replayed view at the same call. Tokens are counted the same way for all
    rows of a point where the policy uses C1 (``tokens_basis``; the harness rows are always est. (C1)); the
    harness's own figures are in ``reported_*`` (labelled, never mixed with estimates). Fact survival uses one
    denominator per point for every row: the facts of the transcript before the point (see HARNESS_LABELS,
    also in ``df.attrs["labels"]``). Sessions: Conversations from ``parse_claude_code``/``parse_codex``, a
    Store, or session ids with ``store=``; sessions without harness compactions give no rows.
    """
    pols = _policies(policies)
    rows: list[dict[str, Any]] = []
    for sid, messages, comps in _harness_sessions(sessions, store):
        rows.extend(_session_points(sid, list(messages), comps, pols, summarize))
    df = pd.DataFrame(rows, columns=HARNESS_COLUMNS)
    df[FACT_COLUMNS] = df[FACT_COLUMNS].astype(float)
    for col in ("call", "reported_pre_tokens", "reported_post_tokens"):
        df[col] = df[col].astype("Int64")  # missing stays missing (<NA>), never a float or a 0
    df["policy"] = pd.Categorical(df["policy"], [HARNESS, *(label for label, _ in pols)], ordered=True)
    df.attrs["labels"] = dict(HARNESS_LABELS)
    return df


def summarize_harness(df: pd.DataFrame) -> pd.DataFrame:
    """One row per policy (``harness`` first) over all harness compaction points of a ``compare_harness`` table."""
    rows = []
    for label, d in df.groupby("policy", observed=True, sort=True):
        row: dict[str, Any] = {
            "policy": label, "points": len(d), "sessions": d["session_id"].nunique(),
            "tokens_basis": ", ".join(sorted(set(d["tokens_basis"]))),
            "mean_before_tokens": float(d["before_tokens"].mean()),
            "mean_after_tokens": float(d["after_tokens"].mean()),
            "saved_share": _share(d["saved_tokens"], d["full_tokens"]),
            "fact_survival": _share(d["facts_visible"], d["facts_total"]),
        }
        for kind in FACT_KINDS:
            row[f"survival_{kind}"] = float(d[f"survival_{kind}"].mean())
        rows.append(row)
    return pd.DataFrame(rows)
