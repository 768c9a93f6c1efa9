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

import functools
import itertools
import math
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.facts import FACT_KINDS
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.analysis.replay import SessionCaches, exact_o200k, frame, replay_messages
from mxclaw_nb.analysis.sources import Pair, _is_store, conversations, one_conversation
from mxclaw_nb.context import ContextPolicy, build_structured_summary
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.messages import Message

PROGRESS_MIN_SESSIONS = 20  # fewer sessions than this replay in well under a second: no bar
# executor=None/"auto": from this many sessions on, compare uses a process per core. 223 shared sessions x 3
# policies replay in about 1 s in one process, and starting a pool (forkserver + imports) costs about 1-2 s,
# so a pool pays only for jobs of several seconds: 1,000 sessions (bench/replay_bench.py --sessions).
PROCESS_MIN_SESSIONS = 1_000
CHUNK_SESSIONS = 25  # sessions per submitted task: ~0.1 s of work, small enough to pickle quickly


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
            executor: Executor | str | None = None, chunk_size: int = CHUNK_SESSIONS,
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
    Sessions go out in chunks of ``chunk_size``; at most ``max_pending`` chunks (default: twice the
    executor's workers, or a Dask cluster's threads) are in flight or waiting to be stacked, so memory stays
    bounded however many sessions the iterator yields. ``reduce`` (e.g.
    ``summarize_comparison``) is applied to each chunk's rows where the chunk ran, so only its result
    comes back: one row per (policy, session) instead of one per simulated call (10,000 sessions x 3
    policies: 30,000 rows instead of 324,000).
    The result is the same whatever the executor (chunks are stacked in input order). ``df.attrs["timing"]``
    adds ``executor``, ``worker_seconds``/``worker_cpu_seconds`` (summed over chunks) and ``worker_peak_rss_mb``
    (the highest ``ru_maxrss`` a worker process reported after a chunk).
    """
    pols = _policies(policies)
    items, known = _sessions(sessions_or_transcripts, store)
    if executor is None or executor == "auto":
        head = list(itertools.islice(items, PROCESS_MIN_SESSIONS))
        items = itertools.chain(head, items)
        known = len(head) if len(head) < PROCESS_MIN_SESSIONS else known
        big = len(head) >= PROCESS_MIN_SESSIONS
        # a function defined in a notebook or script (__main__) pickles by name, which a worker cannot resolve
        executor = "processes" if big and all(map(_importable, (summarize, reduce))) else "inline"
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    started = time.perf_counter()
    bar = None
    if progress and (known is None or known >= PROGRESS_MIN_SESSIONS):
        from tqdm.auto import tqdm

        bar = tqdm(total=known, desc=f"replay x{len(pols)} policies", unit="session")
    job = _Job(pols if executor == "inline" else _shippable(pols, summarize, reduce), summarize, facts, exact, reduce)
    chunks = _chunks(items, chunk_size)
    parts: list[pd.DataFrame] = []
    n_sessions = n_calls = 0
    worker_seconds, worker_cpu, worker_peak = 0.0, 0.0, math.nan
    owned: Executor | None = None
    try:
        if executor == "inline":
            results: Iterator[_Chunk] = (_replay_chunk(job, chunk) for chunk in chunks)
            label = "inline"
        else:
            if executor == "processes":
                owned = executor = _process_pool()
            if not isinstance(executor, Executor):
                raise ValueError(f"executor must be 'auto', 'inline', 'processes' or a concurrent.futures.Executor, "
                                 f"got {executor!r}")
            label = type(executor).__name__
            window = max_pending or 2 * _parallelism(executor)
            results = _stream(executor, job, chunks, window)
        for result in results:
            n_sessions += result.sessions
            n_calls += result.calls
            worker_seconds += result.seconds
            worker_cpu += result.cpu_seconds
            worker_peak = max(worker_peak, result.peak_rss_mb) if worker_peak == worker_peak else result.peak_rss_mb
            if len(result.frame) or not parts:
                parts.append(result.frame)
            if bar is not None:
                bar.update(result.sessions)
    finally:
        if bar is not None:
            bar.close()
        if owned is not None:
            owned.shutdown(wait=True, cancel_futures=True)
    seconds = time.perf_counter() - started
    df = _stack(parts, job) if parts else _chunk_frame([], pols, facts, exact, reduce)
    n = max(n_sessions, 1)
    df.attrs["timing"] = {
        "sessions": n_sessions, "policies": len(pols), "calls": n_calls, "seconds": seconds,
        "ms_per_session": 1000 * seconds / n, "ms_per_session_policy": 1000 * seconds / (n * len(pols)),
        "exact": exact, "facts": facts, "executor": label, "chunk_size": chunk_size,
        "worker_seconds": worker_seconds, "worker_cpu_seconds": worker_cpu, "worker_peak_rss_mb": worker_peak,
    }
    return df


# -- where compare runs (SPEC S4): chunks of sessions, any concurrent.futures.Executor ---------------------


def _sessions(source: Any, store: Any) -> tuple[Iterator[Pair], int | None]:
    """(id, messages) pairs, lazily where the source allows it (a Store, an iterator), and their number if known."""
    if _is_store(source):
        ids = [str(sid) for sid in source.sessions()["id"]]
        return (one_conversation(sid, source) for sid in ids), len(ids)
    if isinstance(source, Iterator):
        return (one_conversation(item, store) for item in source), None
    pairs = conversations(source, store)
    return iter(pairs), len(pairs)


def _importable(fn: Any) -> bool:
    """Whether a worker process can load ``fn`` by name (None counts: nothing to load)."""
    if fn is None:
        return True
    if getattr(fn, "__module__", "__main__") == "__main__":
        return False
    try:
        pickle.dumps(fn)
    except Exception:  # noqa: BLE001 - lambdas, closures, bound methods of unpicklable objects
        return False
    return True


def _chunks(items: Iterator[Pair], size: int) -> Iterator[list[Pair]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _parallelism(executor: Executor) -> int:
    """Tasks the executor runs at once: a pool's workers, a Dask cluster's threads, else this machine's cores."""
    workers = getattr(executor, "_max_workers", None)  # ProcessPoolExecutor, ThreadPoolExecutor
    if isinstance(workers, int) and workers > 0:
        return workers
    client = getattr(executor, "_client", None)  # distributed's ClientExecutor
    try:
        threads = sum(client.nthreads().values()) if client is not None else 0
    except Exception:  # noqa: BLE001 - not a Dask client after all: fall back to this machine
        threads = 0
    return threads or _cores()


def _process_pool() -> Executor:
    """One process per core; forkserver (not fork) on POSIX: compare may run in a kernel with threads."""
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(max_workers=_cores(), mp_context=multiprocessing.get_context(method))


@dataclass(frozen=True)
class _Job:
    """What every chunk needs besides its sessions (pickled once per chunk for another process)."""

    policies: list[tuple[str, Any]]  # (label, ContextPolicy), or (label, _Shipped) for another process
    summarize: Callable[[list[Message]], str] | None
    facts: bool
    exact: bool
    reduce: Callable[[pd.DataFrame], pd.DataFrame] | None


@dataclass(frozen=True)
class _Shipped:
    """A policy whose counter cannot be pickled (tiktoken's encoders): sent by counter name, resolved there."""

    policy: ContextPolicy
    counter: str


@dataclass
class _Chunk:
    frame: pd.DataFrame
    sessions: int
    calls: int
    seconds: float
    cpu_seconds: float  # CPU time of the process that ran it (time.process_time), for load-independent costs
    peak_rss_mb: float  # the peak resident memory of the process that ran it, so far (NaN where unknown)


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (``resource.getrusage``; NaN where there is none)."""
    try:
        import resource
    except ImportError:  # Windows
        return math.nan
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _shippable(pols: list[tuple[str, ContextPolicy]], summarize: Any, reduce: Any) -> list[tuple[str, Any]]:
    from mxclaw_nb.provider.tokenizers import COUNTER_NAMES

    out: list[tuple[str, Any]] = []
    for label, pol in pols:
        try:
            pickle.dumps(pol)
            out.append((label, pol))
        except Exception as exc:  # noqa: BLE001 - any pickling failure means "send it by name"
            if pol.counter_name not in COUNTER_NAMES:
                raise ValueError(f"policy {label!r}: its counter cannot be sent to another process ({exc}); "
                                 "use a named counter or executor='inline'") from exc
            out.append((label, _Shipped(replace(pol, counter=None), pol.counter_name)))
    for what, fn in (("summarize", summarize), ("reduce", reduce)):
        try:
            pickle.dumps(fn)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"{what}={fn!r} cannot be sent to another process ({exc}): use a module-level "
                             "function or executor='inline'") from exc
    return out


@functools.lru_cache(maxsize=8)
def _named_counter(name: str) -> Any:
    from mxclaw_nb.provider.tokenizers import counter_by_name

    return counter_by_name(name)


@functools.lru_cache(maxsize=1)
def _exact() -> Any:
    return exact_o200k()


def _resolve(pol: Any) -> ContextPolicy:
    return replace(pol.policy, counter=_named_counter(pol.counter)) if isinstance(pol, _Shipped) else pol


def _chunk_frame(rows: list[dict[str, Any]], pols: list[tuple[str, Any]], facts: bool, exact: bool,
                 reduce: Callable[[pd.DataFrame], pd.DataFrame] | None) -> pd.DataFrame:
    df = frame(rows, facts=facts, exact=exact, extra=("policy",))
    df.insert(df.columns.get_loc("threshold") + 1, "threshold_ratio", [r["threshold_ratio"] for r in rows])
    df["policy"] = pd.Categorical(df["policy"], [label for label, _ in pols], ordered=True)
    return reduce(df) if reduce is not None else df


def _replay_chunk(job: _Job, chunk: list[Pair]) -> _Chunk:
    """Replay one chunk of sessions under every policy (runs wherever the executor puts it)."""
    started, cpu = time.perf_counter(), time.process_time()
    pols = [(label, _resolve(pol)) for label, pol in job.policies]
    exact_counter = _exact() if job.exact else None
    rows: list[dict[str, Any]] = []
    for sid, messages in chunk:
        caches = SessionCaches(exact_counter)
        for label, pol in pols:
            out = replay_messages(messages, pol, session_id=sid, summarize=job.summarize, facts=job.facts,
                                  caches=caches)
            for row in out:
                row["policy"] = label
                row["threshold_ratio"] = pol.threshold_ratio
            rows.extend(out)
    df = _chunk_frame(rows, job.policies, job.facts, job.exact, job.reduce)
    return _Chunk(df, len(chunk), len(rows), time.perf_counter() - started, time.process_time() - cpu,
                  peak_rss_mb())


def _stream(executor: Executor, job: _Job, chunks: Iterator[list[Pair]], window: int) -> Iterator[_Chunk]:
    """Results in input order, with at most ``window`` chunks submitted or finished-but-not-yet-yielded."""
    pending: dict[int, Future[_Chunk]] = {}
    next_out = 0
    submitted = 0
    try:
        for chunk in chunks:
            pending[submitted] = executor.submit(_replay_chunk, job, chunk)
            submitted += 1
            while len(pending) >= window:
                yield pending.pop(next_out).result()
                next_out += 1
        while pending:
            yield pending.pop(next_out).result()
            next_out += 1
    finally:
        for future in pending.values():
            future.cancel()


def _stack(parts: list[pd.DataFrame], job: _Job) -> pd.DataFrame:
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)
    df = pd.concat(parts, ignore_index=True)
    if "policy" in df and not isinstance(df["policy"].dtype, pd.CategoricalDtype):
        df["policy"] = pd.Categorical(df["policy"], [label for label, _ in job.policies], ordered=True)
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
