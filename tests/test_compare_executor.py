"""compare() past one machine (SPEC S4): the same table inline, in local processes and on a real Dask cluster.

The Dask cluster is a real ``distributed.LocalCluster`` with two worker processes, listening on 127.0.0.1
only (no dashboard). Sessions come from the shared public transcripts (a slice, to keep the test short);
one policy counts in exact o200k tokens, whose tiktoken counter cannot be pickled, so it also checks
that such a policy reaches the workers by name.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mxclaw_nb.analysis import compare, summarize_comparison
from mxclaw_nb.analysis.dispatch import PROCESS_MIN_SESSIONS
from mxclaw_nb.analysis.sources import read_pairs
from mxclaw_nb.demo.examples import synthetic_transcript
from tests.conftest import SHARED_TRANSCRIPTS

POLICIES = [
    {"window": 8_000, "ratio": 0.8, "keep_recent": 2_000},
    {"window": 16_000, "ratio": 0.8, "keep_recent": 4_000, "counter": "o200k_base"},
]


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, list[dict]]]:
    if not SHARED_TRANSCRIPTS.is_dir():
        pytest.skip(f"shared transcripts not found at {SHARED_TRANSCRIPTS}")
    every = read_pairs(SHARED_TRANSCRIPTS)
    return every[::9]  # 25 sessions from both sources


@pytest.fixture(scope="module")
def dask_executor() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       host="127.0.0.1")
    client = distributed.Client(cluster)
    try:
        yield client.get_executor()
    finally:
        client.close()
        cluster.close()


@pytest.mark.slow
def test_the_table_is_the_same_inline_in_processes_and_on_a_dask_cluster(pairs: list, dask_executor: Any) -> None:
    """S4: one table whatever runs it; chunks come back in input order; timing says which executor ran."""
    inline = compare(pairs, POLICIES, progress=False, exact=True, executor="inline", chunk_size=len(pairs))
    assert inline.attrs["timing"]["executor"] == "inline" and len(inline) > 500
    assert set(inline["counter"]) == {"estimate", "o200k_base"}
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as pool:
        procs = compare(pairs, POLICIES, progress=False, exact=True, executor=pool, chunk_size=4)
    owned = compare(pairs, POLICIES, progress=False, exact=True, executor="processes", chunk_size=7)
    dask = compare(pairs, POLICIES, progress=False, exact=True, executor=dask_executor, chunk_size=3)
    for other in (procs, owned, dask):
        pd.testing.assert_frame_equal(inline, other)
    assert procs.attrs["timing"]["executor"] == "ProcessPoolExecutor"
    assert dask.attrs["timing"]["executor"] == "ClientExecutor"
    assert dask.attrs["timing"]["sessions"] == len(pairs) and dask.attrs["timing"]["calls"] == len(inline)


@pytest.mark.slow
def test_reduce_runs_per_chunk_and_gives_the_summary_of_the_whole(pairs: list, dask_executor: Any) -> None:
    """S4: reduce=summarize_comparison on the workers gives the summary of the full table, row for row."""
    whole = summarize_comparison(compare(pairs, POLICIES[:1], progress=False, executor="inline"))
    reduced = compare(iter(pairs), POLICIES[:1], progress=False, executor=dask_executor, chunk_size=4,
                      reduce=summarize_comparison)
    pd.testing.assert_frame_equal(whole, reduced)
    assert len(reduced) == len(pairs)


class CountingExecutor(ThreadPoolExecutor):
    """A real thread pool that records, at each submit, how many submitted chunks have not finished."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.lock = threading.Lock()
        self.unfinished = 0
        self.peak = 0
        self.on_submit: Callable[[], int] = lambda: 0
        self.pulled_at_submit: list[int] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self.lock:
            self.unfinished += 1
            self.peak = max(self.peak, self.unfinished)
            self.pulled_at_submit.append(self.on_submit())
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: Future[Any]) -> None:
        with self.lock:
            self.unfinished -= 1


def test_sessions_stream_through_a_bounded_window() -> None:
    """S4: a lazy source is read a chunk at a time, never more than max_pending chunks ahead of the results."""
    pulled = 0

    def sessions() -> Iterator[tuple[str, list[dict]]]:
        nonlocal pulled
        for k in range(60):
            pulled += 1
            yield f"s{k}", synthetic_transcript(6, seed=k)

    policy = {"window": 2_000, "keep_recent": 200}
    with CountingExecutor() as executor:
        executor.on_submit = lambda: pulled
        df = compare(sessions(), [policy], progress=False, executor=executor, chunk_size=2, max_pending=3)
    assert pulled == 60 and executor.pulled_at_submit[:3] == [2, 4, 6]
    assert executor.peak <= 3
    assert list(dict.fromkeys(df["session_id"])) == [f"s{k}" for k in range(60)]  # input order
    inline = compare([(f"s{k}", synthetic_transcript(6, seed=k)) for k in range(60)], [policy], progress=False)
    pd.testing.assert_frame_equal(inline, df)


def test_auto_is_inline_for_small_jobs_and_unpicklable_parts_get_a_clear_error() -> None:
    """S4: below PROCESS_MIN_SESSIONS the default runs here; a lambda summariser cannot go to a process."""
    convs = [synthetic_transcript(6, seed=k) for k in range(3)]
    df = compare(convs, [{"window": 2_000}], progress=False)
    assert df.attrs["timing"]["executor"] == "inline"
    many = [(f"s{k}", convs[k % 3]) for k in range(PROCESS_MIN_SESSIONS)]
    local = compare(many, [{"window": 2_000}], progress=False, summarize=lambda m: "notes", facts=False)
    assert local.attrs["timing"]["executor"] == "inline"  # a lambda cannot reach a process: auto stays here
    pooled = compare(many, [{"window": 2_000}], progress=False, facts=False)
    assert pooled.attrs["timing"]["executor"] == "ProcessPoolExecutor"  # from PROCESS_MIN_SESSIONS on
    pd.testing.assert_frame_equal(pooled, compare(many, [{"window": 2_000}], progress=False, facts=False,
                                                  executor="inline"))
    with pytest.raises(ValueError, match="summarize=.*cannot be sent to another process"):
        compare(convs, [{"window": 2_000}], progress=False, executor="processes", summarize=lambda m: "x")
    with pytest.raises(ValueError, match="chunk_size"):
        compare(convs, [{"window": 2_000}], progress=False, chunk_size=0)


def test_a_store_is_read_lazily_and_empty_sessions_give_no_rows(tmp_path: Path) -> None:
    """S4: a Store's sessions load one chunk at a time; an empty session (first chunk empty) changes nothing."""
    from mxclaw_nb.store.writer import Store

    policy = {"window": 2_000, "keep_recent": 200}
    with Store(tmp_path / "s.duckdb") as store:
        store.create_session(session_id="empty")
        for k in range(3):
            sid = store.create_session(session_id=f"s{k}")
            store.append_messages(sid, synthetic_transcript(6, seed=k), turn=1)
        chunked = compare(store, [policy], progress=False, executor="inline", chunk_size=1)
        whole = compare({f"s{k}": store.load_transcript(f"s{k}") for k in range(3)}, [policy], progress=False)
    assert chunked.attrs["timing"]["sessions"] == 4
    pd.testing.assert_frame_equal(chunked, whole)
