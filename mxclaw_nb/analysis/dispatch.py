"""Where ``compare`` runs (SPEC S4, "past one machine"): chunks of sessions on any concurrent.futures.Executor.

Why: one machine replays 223 sessions x 3 policies in about a second, but 10,000 sessions or a sweep of
many policies want every core, or a cluster. The replay of a session is independent of every other, so
the sessions are cut into chunks, each chunk is replayed wherever the executor puts it (this process, a
process pool, a Dask cluster's workers) and the chunks' tables are stacked in input order: the result is
the same table whatever ran it. At most ``max_pending`` chunks are submitted or finished-but-not-stacked
at a time and the sessions are read lazily from an iterator or a Store, so memory does not grow with the
number of sessions; ``reduce`` shrinks each chunk's table where it ran (e.g. ``summarize_comparison``).

What crosses to a worker is pickled: policies (an exact counter travels by name, its tiktoken encoder
does not pickle), ``summarize`` and ``reduce`` (module-level functions; the auto mode stays inline for
functions defined in ``__main__``, which a worker cannot import).
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
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from mxclaw_nb.analysis.replay import SessionCaches, exact_o200k, frame, replay_messages
from mxclaw_nb.analysis.sources import Pair, _is_store, conversations, one_conversation
from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.messages import Message, modernize_legacy_calls

# executor=None/"auto": from this many sessions on, compare uses a process per core. 223 shared sessions x 3
# policies replay in about 1 s in one process, and starting a pool (forkserver + imports) costs about 1-2 s,
# so a pool pays only for jobs of several seconds: 1,000 sessions (bench/replay_bench.py --sessions).
PROCESS_MIN_SESSIONS = 1_000
CHUNK_SESSIONS = 25  # sessions per submitted task: ~0.1 s of work, small enough to pickle quickly


def run_compare(source: Any, pols: list[tuple[str, ContextPolicy]], *, store: Any, progress: bool, exact: bool,
                facts: bool, summarize: Callable[[list[Message]], str] | None, executor: Executor | str | None,
                chunk_size: int | None, max_pending: int | None,
                reduce: Callable[[pd.DataFrame], pd.DataFrame] | None, progress_min: int,
                summary_provider: Any = None) -> pd.DataFrame:
    """``compare``'s work once its policies are resolved (see ``compare`` for the arguments)."""
    from mxclaw_nb.summary_call import as_writer

    writer = as_writer(summary_provider)  # C11: real summary calls go from this process
    if writer is not None:
        if executor not in (None, "auto", "inline"):
            raise ValueError("summary_provider makes model calls from this process: use executor='inline' "
                             f"(got {executor!r})")
        executor = "inline"
        made, reused = writer.calls_made, writer.calls_reused
    chunk_size = CHUNK_SESSIONS if chunk_size is None else chunk_size
    items, known = _sessions(source, store)
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
    if progress and (known is None or known >= progress_min):
        from tqdm.auto import tqdm

        bar = tqdm(total=known, desc=f"replay x{len(pols)} policies", unit="session")
    job = _Job(pols if executor == "inline" else _shippable(pols, summarize, reduce), summarize, facts, exact, reduce,
               writer)
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
            if len(result.frame):  # an empty chunk's columns have no dtypes to stack with
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
    if writer is not None:  # C11: the summary calls this compare made, and those it reused
        df.attrs["summary_calls"] = {"made": writer.calls_made - made, "reused": writer.calls_reused - reused}
    return df


def _sessions(source: Any, store: Any) -> tuple[Iterator[Pair], int | None]:
    """(id, messages) pairs, lazily where the source allows it (a Store, an iterator), and their number if known."""
    if _is_store(source):
        ids = [str(sid) for sid in source.sessions()["id"]]
        # an empty session replays to no rows; legacy function calls read as tool calls, as `conversations` reads them
        return ((sid, modernize_legacy_calls(source.load_transcript(sid))) for sid in ids), len(ids)
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
    summary_writer: Any = None  # C11: a ModelSummarizer (inline only)


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
    from mxclaw_nb.tokenizers import COUNTER_NAMES

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
    from mxclaw_nb.tokenizers import counter_by_name

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
                                  caches=caches, summary_writer=job.summary_writer)
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
