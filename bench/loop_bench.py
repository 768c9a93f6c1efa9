"""Loop overhead per model call, everything but the model and HTTP (SPEC L1, C7: flat cost per call).

A stored session of N messages (1k, 10k, 100k; seeded once per size, the file copied per run) is resumed
by a fresh Agent, which runs several turns of K model calls each against the local test server (each reply
but the last is a cheap `list_dir` call; usage is reported, so T3's calibrated counter is in use from the
second call). Per call we time what the loop does outside `provider.complete`:

- the first call of a turn: from `agent.run` to the model call (transcript read, user message stored, C0
  view, lineage, events);
- a later call: from the previous model call's return to this one (store the answer and the request record,
  run the tool, store its result, rebuild the view).

Turn 1 of a fresh process is shown apart ("fresh"): it reads and plans the whole transcript once; the
first/later figures are medians over the following turns. Beside them, per call: the engine's share (C0
`build_request_view`, which composes the N3 lineage, + the C7 carry-over `next_call`) and the request
record's (provenance and lineage encoding, another engineer's part), and the JSON encoding of the request
body the provider client sends (`json.dumps` of model + messages + tools: the API's unavoidable cost). Three
paths: compacting (a 128k window: the first call of every turn sees the whole transcript and summarises it,
later calls work on the small view; "no-state": the same, with the saved engine state deleted, as before C7's
re-entry) and everything-fits (a window of twice the session's estimate: every call sends it all).

    .venv/bin/python bench/loop_bench.py [--sizes 1000 10000 100000 300000] [--turns 5] [--iterations 3] [--runs 2]

The re-entry lines (SPEC C7, T3, N2) compare the fresh process's first call with a later call and across sizes
(`--sizes 1000 100000 300000`): the fresh process continues the engine state saved with the session
(`engine_state`, see mxclaw_nb/reentry.py: the C6 summary state, the C4 plan and C1 counts) and reads the stored
transcript lazily (`transcript_rows`: a COUNT, then the last rows and the first few in one query, and any further
rows where the engine reads them; reads inside the engine's build count as engine time here, see
bench/reentry_bench.py for the split).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402

import mxclaw_nb.loop as loop_module  # noqa: E402
from mxclaw_nb import Agent  # noqa: E402
from mxclaw_nb.context import estimate_messages  # noqa: E402
from mxclaw_nb.demo.examples import synthetic_transcript  # noqa: E402
from mxclaw_nb.demo.server import TestServer  # noqa: E402
from mxclaw_nb.store.writer import Store  # noqa: E402

SESSION = "bench-session"
COMPACT_WINDOW = 128_000


def seed(path: Path, n: int) -> int:
    """A store holding one session of `n` synthetic messages; returns the session's C1 estimate."""
    messages = synthetic_transcript(n)
    store = Store(str(path))
    store.create_session(session_id=SESSION, source="bench")
    for at in range(0, n, 5_000):
        store.append_messages(SESSION, messages[at: at + 5_000], turn=0)
    store.close()
    prime(path, path.parent / "prime-ws")
    return estimate_messages(messages)


def prime(path: Path, ws: Path) -> None:
    """One compacting turn in its own process-like Agent, as a session's last turn before a kernel restart: it
    saves the engine state (C7, `engine_state`) the fresh process of every run continues."""
    ws.mkdir(exist_ok=True)
    with TestServer(usage_counter="estimate") as srv:
        agent = Agent(workspace=ws, db=str(path), base_url=srv.base_url, api_key="k", model="bench-model",
                      approval="allow", context_window_tokens=COMPACT_WINDOW, session_id=SESSION)
        srv.enqueue_text("primed")
        agent.run("the last turn before the restart")
        agent.close()


class Timers:
    """Wall time spent inside wrapped functions, per model call (reset by `take`)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.depth: dict[str, int] = {}
        self.in_model = False  # inside provider.complete: the model call and the in-process server's work

    def wrap(self, owner: Any, name: str, label: str) -> Callable[[], None]:
        original = getattr(owner, name, None)
        if original is None:  # an older loop without that step
            return lambda: None

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth.get(label):  # nested (an append inside a batch): counted once, by the outer one
                return original(*args, **kwargs)
            self.depth[label] = 1
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent[label] = self.spent.get(label, 0.0) + time.perf_counter() - t0
                self.depth[label] = 0

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, original)

    def wrap_batch(self, store: Any) -> None:
        """Time `store.batch()` (its commit happens on exit) as store time."""
        original = store.batch

        @contextlib.contextmanager
        def timed() -> Any:
            t0 = time.perf_counter()
            cm = original()
            cm.__enter__()
            self.spent["store"] = self.spent.get("store", 0.0) + time.perf_counter() - t0
            self.depth["store"] = 1
            try:
                yield
            finally:
                self.depth["store"] = 0
                t1 = time.perf_counter()
                cm.__exit__(*sys.exc_info())
                self.spent["store"] = self.spent.get("store", 0.0) + time.perf_counter() - t1

        store.batch = timed

    def watch_gc(self) -> Callable[[], None]:
        """Time the cyclic garbage collector's passes (a full one walks every live object: the whole history).

        Only the loop's own passes count: none started while the model call is in flight (`self.in_model`,
        set around `provider.complete`) nor any started on another thread (the in-process test server)."""
        started: list[float | None] = [None]
        main = threading.get_ident()

        def callback(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                ours = not self.in_model and threading.get_ident() == main
                started[0] = time.perf_counter() if ours else None
            elif started[0] is not None:
                self.spent["gc"] = self.spent.get("gc", 0.0) + time.perf_counter() - started[0]
                started[0] = None

        gc.callbacks.append(callback)
        return lambda: gc.callbacks.remove(callback)

    def take(self) -> dict[str, float]:
        out, self.spent = self.spent, {}
        return out


def one_run(template: Path, root: Path, window: int, turns: int, iterations: int, *, saved_state: bool = True,
            ) -> list[list[dict[str, float]]]:
    """Per turn, per call: {'overhead', 'engine', 'record', 'json'} in ms. `saved_state=False`: the engine state
    saved with the session is deleted first (the fresh process rebuilds it from the rows, as before C7's)."""
    db = root / f"run-{time.monotonic_ns()}.duckdb"
    shutil.copy(template, db)
    if not saved_state:
        con = duckdb.connect(str(db))
        con.execute("DELETE FROM engine_state")
        con.close()
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    timers = Timers()
    undo = [timers.wrap(loop_module, "build_request_view", "engine"),
            timers.wrap(loop_module, "build_fallback_view", "engine"),
            timers.wrap(loop_module, "next_call", "engine"),
            timers.wrap(loop_module, "_request_record", "record"), timers.watch_gc()]
    out: list[list[dict[str, float]]] = []
    try:
        with TestServer(usage_counter="estimate") as srv:
            agent = Agent(workspace=ws, db=str(db), base_url=srv.base_url, api_key="k", model="bench-model",
                          approval="allow", context_window_tokens=window, session_id=SESSION)
            for name in ("append_request", "append_message", "append_messages", "append_event",
                         "load_transcript_after", "load_transcript", "transcript_rows"):
                if hasattr(agent.store, name):
                    timers.wrap(agent.store, name, "store")
            timers.wrap_batch(agent.store)
            schemas = agent.tools.schemas()
            complete = agent.provider.complete
            calls: list[dict[str, float]] = []
            mark = [0.0]

            def timed(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
                entered = time.perf_counter()
                timers.in_model = True  # from here on (the body's encoding too) nothing is the loop's
                spent = timers.take()
                t0 = time.perf_counter()
                json.dumps({"model": "bench-model", "messages": messages, "tools": schemas})
                encode = time.perf_counter() - t0
                overhead = (entered - mark[0]) * 1000
                record, store = spent.get("record", 0) * 1000, spent.get("store", 0) * 1000
                calls.append({"overhead": overhead, "engine": spent.get("engine", 0) * 1000, "record": record,
                              "store": store, "own": overhead - record - store, "gc": spent.get("gc", 0) * 1000,
                              "json": encode * 1000})
                try:
                    return complete(messages, *args, **kwargs)
                finally:
                    timers.in_model = False
                    mark[0] = time.perf_counter()

            agent.provider.complete = timed  # type: ignore[method-assign]
            for turn in range(turns):
                for _ in range(iterations - 1):
                    srv.enqueue_tool_calls([("list_dir", {"path": "."})])
                srv.enqueue_text("done")
                calls.clear()
                timers.take()
                mark[0] = time.perf_counter()
                result = agent.run(f"go on, part {turn}")
                assert result.iterations == iterations, result
                out.append(list(calls))
            agent.close()
    finally:
        for u in undo:
            u()
    return out


def summarize(runs: list[list[list[dict[str, float]]]]) -> dict[str, dict[str, float]]:
    """The median call of each group: 'fresh' (turn 1's first call), 'first' (later turns' first calls), 'later'
    (the other calls; a later call's interval also holds the storing of the call before it)."""
    groups: dict[str, list[dict[str, float]]] = {"fresh": [], "first": [], "later": []}
    for run in runs:
        for t, turn in enumerate(run):
            for c, call in enumerate(turn):
                groups["fresh" if t == 0 and c == 0 else "first" if c == 0 else "later"].append(call)
    # the call of median overhead, with its own breakdown (independent medians of the parts would not add up)
    return {g: sorted(calls, key=lambda c: c["overhead"])[(len(calls) - 1) // 2] for g, calls in groups.items()
            if calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    rows: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    print(f"{'path':<10} {'stored':>8} {'window':>11} | {'fresh ms':>9} {'first ms':>9} {'later ms':>9} "
          f"{'first/later':>11} | {'own 1st':>8} {'own later':>9} | {'engine 1st':>10} {'engine later':>12} "
          f"{'record later':>12} {'store 1st':>9} {'store later':>11} {'gc 1st':>7} {'gc later':>8} "
          f"{'json 1st':>9} {'json later':>10}",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in args.sizes:
            template = root / f"seed-{n}.duckdb"
            estimate = seed(template, n)
            for label, window, saved in (("compacting", COMPACT_WINDOW, True), ("no-state", COMPACT_WINDOW, False),
                                         ("fits", -(-estimate * 2 // 1_000) * 1_000, True)):
                runs = [one_run(template, root, window, args.turns, args.iterations, saved_state=saved)
                        for _ in range(args.runs)]
                s = summarize(runs)
                rows[(label, n)] = s
                f, first, later = s["fresh"], s["first"], s["later"]
                print(f"{label:<10} {n:>8,} {window:>11,} | {f['overhead']:9.1f} {first['overhead']:9.1f} "
                      f"{later['overhead']:9.1f} {first['overhead'] / later['overhead']:10.2f}x | "
                      f"{first['own']:8.2f} {later['own']:9.2f} | "
                      f"{first['engine']:10.2f} {later['engine']:12.2f} {later['record']:12.2f} "
                      f"{first['store']:9.2f} {later['store']:11.2f} {first['gc']:7.1f} {later['gc']:8.1f} "
                      f"{first['json']:9.2f} {later['json']:10.2f}",
                      flush=True)
    print()
    small, big = min(args.sizes), max(args.sizes)
    for key, what in (("overhead", "whole overhead"), ("own", "loop without store writes and request record")):
        for label in ("compacting", "fits"):
            for n in args.sizes:
                s = rows[(label, n)]
                ratio = s["first"][key] / s["later"][key]
                print(f"target {label} {n:,} ({what}): first call of a turn within 2x a later call: {ratio:.2f}x "
                      f"-> {'MET' if ratio <= 2 else 'MISSED'}")
        if small != big:
            for group in ("first", "later"):
                a, b = rows[("compacting", small)][group][key], rows[("compacting", big)][group][key]
                print(f"target compacting {group} call ({what}): {big:,} within 2x of {small:,}: {b:.1f} vs "
                      f"{a:.1f} ms ({b / a:.2f}x) -> {'MET' if b <= 2 * a else 'MISSED'}")
    # C7/T3/N2 (re-entry): the first call of a fresh process (kernel restart) against a later call, and across sizes
    for label in ("compacting", "no-state", "fits"):
        for n in args.sizes:
            s = rows[(label, n)]
            ratio = s["fresh"]["overhead"] / s["later"]["overhead"]
            fresh = s["fresh"]["overhead"]
            print(f"target re-entry {label} {n:,}: fresh first call within 3x a later call: {fresh:.1f} "
                  f"vs {s['later']['overhead']:.1f} ms ({ratio:.1f}x; store/read {s['fresh']['store']:.1f} ms, engine "
                  f"{s['fresh']['engine']:.1f} ms) -> {'MET' if ratio <= 3 else 'MISSED'}")
        if small != big:
            a, b = rows[(label, small)]["fresh"]["overhead"], rows[(label, big)]["fresh"]["overhead"]
            print(f"target re-entry {label}: fresh first call at {big:,} within 2x of {small:,}: {b:.1f} vs {a:.1f} ms "
                  f"({b / a:.1f}x) -> {'MET' if b <= 2 * a else 'MISSED'}")
    for n in args.sizes:
        for group in ("first", "later"):
            s = rows[("fits", n)][group]
            print(f"target fits {n:,} {group} call: engine {s['engine']:.2f} ms <= JSON encoding of the body "
                  f"{s['json']:.2f} ms -> {'MET' if s['engine'] <= s['json'] else 'MISSED'}")
    print("\nWall clock (perf_counter); each figure is the call of median overhead in its group, with its own "
          "breakdown; overhead excludes provider.complete (model + "
          "HTTP) and includes everything else the loop does for that call (store writes, tool run, record, "
          "engine); own = overhead - store - record (what is left when the store writes and the request record, "
          "owned by the storage work, are taken out: engine, events, tool run, glue). engine = "
          "build_request_view (with its N3 lineage) + the C7 carry (next_call); record = the request "
          "record's construction (provenance columns + lineage record; made after a call returns, so it is "
          "counted in the next call's interval); gc = time in the cyclic garbage collector during the interval, "
          "on the loop's thread and outside the model call "
          "(inside any of the others; a full pass walks every live object, so it grows with the history and with "
          "what the interval allocates); json = json.dumps of the request body.")


if __name__ == "__main__":
    main()
