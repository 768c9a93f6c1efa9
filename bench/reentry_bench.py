"""Re-entry into a stored session (SPEC C7, T3, N2): the first model call of a fresh Agent, with the engine state
saved with the session (`engine_state`) and without it (deleted: rebuilt from the rows), side by side.

A session of N synthetic messages is seeded and primed by one compacting turn (128k window), which saves the engine
state; then, alternately, a copy with and a copy without the saved state is opened by a fresh Agent that runs one
turn. Per first call: the transcript read (`transcript_rows`: a COUNT, then the rows read where the engine
uses them, counted here; `load_transcript_after` for a store without it), the engine (`build_request_view`, without
the reads inside it), the whole loop overhead up to the model call, the C6 old messages the summary state scanned
and the stored rows read. Medians over `--runs` pairs.

    .venv/bin/python bench/reentry_bench.py [--sizes 1000 100000 300000] [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import duckdb  # noqa: E402
from loop_bench import COMPACT_WINDOW, SESSION, Timers, seed  # noqa: E402

import mxclaw_nb.loop as loop_module  # noqa: E402
from mxclaw_nb import Agent  # noqa: E402
from mxclaw_nb.demo.server import TestServer  # noqa: E402


def first_call(template: Path, root: Path, srv: TestServer, saved: bool) -> dict[str, float]:
    db = root / f"run-{time.monotonic_ns()}.duckdb"
    shutil.copy(template, db)
    if not saved:
        con = duckdb.connect(str(db))
        con.execute("DELETE FROM engine_state")
        con.close()
    timers = Timers()
    undo = timers.wrap(loop_module, "build_request_view", "engine")
    agent = Agent(workspace=root / "ws", db=str(db), base_url=srv.base_url, api_key="k", model="bench-model",
                  approval="allow", context_window_tokens=COMPACT_WINDOW, session_id=SESSION)
    timers.wrap(agent.store, "load_transcript_after", "read")
    fetched = [0]
    rows_of = getattr(agent.store, "transcript_rows", None)
    if rows_of is not None:  # C7, N2: the lazily read transcript: its COUNT, then each read of rows
        def rows(session_id: str) -> Any:
            t0 = time.perf_counter()
            got = rows_of(session_id)
            timers.spent["read"] = timers.spent.get("read", 0.0) + time.perf_counter() - t0
            if got is not None:
                fetch = got._fetch

                def timed_fetch(start: int, stop: int, head: int = 0) -> Any:
                    t1 = time.perf_counter()
                    try:
                        return fetch(start, stop, head)
                    finally:  # a read inside the engine's build is the store's time, not the engine's
                        spent = time.perf_counter() - t1
                        timers.spent["read"] = timers.spent.get("read", 0.0) + spent
                        if timers.depth.get("engine"):
                            timers.spent["fetch_in_engine"] = timers.spent.get("fetch_in_engine", 0.0) + spent
                        fetched[0] += stop - start + head
                got._fetch = timed_fetch
            return got
        agent.store.transcript_rows = rows  # type: ignore[method-assign]
    complete = agent.provider.complete
    out: dict[str, float] = {}
    start = [0.0]

    def timed(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        if not out:
            spent = timers.take()
            out.update(overhead=(time.perf_counter() - start[0]) * 1000, read=spent.get("read", 0) * 1000,
                       engine=(spent.get("engine", 0) - spent.get("fetch_in_engine", 0)) * 1000,
                       rows_read=float(fetched[0]))
        return complete(messages, *args, **kwargs)

    agent.provider.complete = timed  # type: ignore[method-assign]
    srv.enqueue_text("done")
    start[0] = time.perf_counter()
    try:
        agent.run("go on after the restart")
        whole = max(agent._cache.slots, key=lambda p: p.length).summary
        out["scanned"] = float(whole.scanned) if whole is not None else float("nan")
    finally:
        undo()
        agent.close()
        db.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 300_000])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{'stored':>8} {'state':>6} | {'overhead ms':>11} {'read ms':>8} {'engine ms':>9} {'rest ms':>8} | "
          f"{'C6 scanned':>10} {'rows read':>10}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, TestServer(usage_counter="estimate") as srv:
        root = Path(tmp)
        (root / "ws").mkdir()
        for n in args.sizes:
            template = root / f"seed-{n}.duckdb"
            seed(template, n)
            got: dict[bool, list[dict[str, float]]] = {True: [], False: []}
            for _ in range(args.runs):
                for saved in (True, False):  # alternated: the machine's load hits both alike
                    got[saved].append(first_call(template, root, srv, saved))
            med = {s: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for s, rows in got.items()}
            for saved in (True, False):
                m = med[saved]
                print(f"{n:>8,} {'saved' if saved else 'none':>6} | {m['overhead']:11.1f} {m['read']:8.1f} "
                      f"{m['engine']:9.1f} {m['overhead'] - m['read'] - m['engine']:8.1f} | {m['scanned']:10,.0f} "
                      f"{m['rows_read']:10,.0f}",
                      flush=True)
            print(f"{n:>8,} engine with the saved state / without: {med[True]['engine'] / med[False]['engine']:.2f}x; "
                  f"whole first call: {med[True]['overhead'] / med[False]['overhead']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
