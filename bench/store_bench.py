"""Benchmark the DuckDB store against the same workload on sqlite3 in WAL mode (SPEC S3).

Why: DuckDB lets one process write a file at a time and opening it costs ~10 ms, so the store keeps
a cross-process lease (mxclaw_nb/store/lease.py). This script measures what that design costs:
appends per second with one and two processes on one file, the time to load a 10k-message session,
the file size per 10k messages, and the storage overhead of one agent-loop tool iteration (request
record + assistant message + tool.started + tool result + tool.finished, in the loop's one commit:
`Store.deferred()`), compared in one run with sqlite3 WAL synchronous=FULL doing the same appends.
The sqlite3 side does the same work with the same columns and the same seq numbering under
`BEGIN IMMEDIATE`, with `journal_mode=WAL`, `synchronous=NORMAL`, `busy_timeout=30000` (FULL in the
iteration table). `--only iteration` also measures each engine's floor: the same five rows as bare narrow
INSERTs with no store around them, interleaved with both stores' iterations, so it shows how much of the gap
is the store and how much DuckDB's fixed cost per statement and per commit (and this disk's fsync).

Run: `.venv/bin/python bench/store_bench.py [--runs 5] [--appends 2000] [--only iteration]`; prints medians.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if "--path" in sys.argv:  # a baseline checkout: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, sys.argv[sys.argv.index("--path") + 1])
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.loop import COMMIT_AFTER  # noqa: E402
from mxclaw_nb.records import RequestRecord  # noqa: E402
from mxclaw_nb.store.codec import MESSAGE_COLUMNS, message_to_row, row_to_message  # noqa: E402
from mxclaw_nb.store.provenance import decode_lineage  # noqa: E402
from mxclaw_nb.store.records import row_values  # noqa: E402
from mxclaw_nb.store.writer import Store  # noqa: E402

CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}


def make_message(i: int) -> dict[str, Any]:
    """Alternate a ~400-char assistant message with a tool call and a ~2 KB tool result."""
    if i % 2 == 0:
        return {"role": "assistant", "content": f"Step {i}: reading the file. 让我看看。 " + "x" * 380,
                "tool_calls": [CALL]}
    return {"role": "tool", "tool_call_id": "call_1", "content": f"line {i}\n" + "def f():\n    return 1\n" * 90}


class SqliteStore:
    """The same append/load workload on sqlite3 (WAL), numbering seq under BEGIN IMMEDIATE."""

    def __init__(self, path: Path, sync: str = "NORMAL") -> None:
        self.path = path
        self.in_batch = False
        self.con = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute(f"PRAGMA synchronous={sync}")
        cols = ", ".join(f"{c} TEXT" for c in MESSAGE_COLUMNS)
        self.con.execute("CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY)")
        self.con.execute(f"CREATE TABLE IF NOT EXISTS messages (session_id TEXT, seq INTEGER, turn INTEGER, "
                         f"iteration INTEGER, {cols}, created_at TEXT, PRIMARY KEY (session_id, seq))")
        self.con.execute("CREATE TABLE IF NOT EXISTS events (session_id TEXT, seq INTEGER, type TEXT, "
                         "payload TEXT, created_at TEXT, PRIMARY KEY (session_id, seq))")
        self.con.execute("CREATE TABLE IF NOT EXISTS requests (session_id TEXT, seq INTEGER, record TEXT, "
                         "created_at TEXT, PRIMARY KEY (session_id, seq))")

    def create_session(self, sid: str) -> str:
        self.con.execute("INSERT INTO sessions VALUES (?)", (sid,))
        return sid

    @contextlib.contextmanager
    def batch(self) -> Any:
        """Several appends in one BEGIN IMMEDIATE ... COMMIT."""
        self.con.execute("BEGIN IMMEDIATE")
        self.in_batch = True
        try:
            yield
        finally:
            self.in_batch = False
            self.con.execute("COMMIT")

    def _append(self, table: str, sid: str, values: list[tuple[Any, ...]]) -> None:
        marks = ", ".join("?" * (3 + len(values[0])))
        if not self.in_batch:
            self.con.execute("BEGIN IMMEDIATE")
        start = self.con.execute(f"SELECT coalesce(max(seq) + 1, 0) FROM {table} WHERE session_id = ?",
                                 (sid,)).fetchone()[0]
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        self.con.executemany(f"INSERT INTO {table} VALUES ({marks})",
                             [(sid, start + k, *v, now) for k, v in enumerate(values)])
        if not self.in_batch:
            self.con.execute("COMMIT")

    def append_messages(self, sid: str, messages: list[dict[str, Any]], *, turn: int) -> None:
        self._append("messages", sid, [(turn, 0, *message_to_row(m)) for m in messages])

    def append_message(self, sid: str, message: dict[str, Any], *, turn: int, iteration: int | None = None) -> None:
        self._append("messages", sid, [(turn, iteration, *message_to_row(message))])

    def append_event(self, sid: str, type: str, payload: dict[str, Any], **_: Any) -> None:
        self._append("events", sid, [(type, json.dumps(payload))])

    def append_request(self, sid: str, record: RequestRecord) -> None:
        self._append("requests", sid, [(json.dumps(row_values(record)),)])  # the same encoding as the store

    def load_transcript(self, sid: str) -> list[dict[str, Any]]:
        rows = self.con.execute(f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE session_id = ? "
                                "ORDER BY seq", (sid,)).fetchall()
        return [row_to_message(r) for r in rows]

    def close(self) -> None:
        self.con.close()


def open_store(kind: str, path: Path) -> Any:
    return Store(path, idle_release=3.0) if kind == "duckdb" else SqliteStore(path)


def new_session(kind: str, store: Any, name: str) -> str:
    return store.create_session(session_id=name) if kind == "duckdb" else store.create_session(name)


def db_path(folder: Path, kind: str) -> Path:
    return folder / ("bench.duckdb" if kind == "duckdb" else "bench.sqlite")


def appends_per_second(kind: str, folder: Path, n: int) -> float:
    """One process appending n messages one call at a time."""
    store = open_store(kind, db_path(folder, kind))
    sid = new_session(kind, store, "one")
    start = time.perf_counter()
    for i in range(n):
        store.append_message(sid, make_message(i), turn=i // 10)
    elapsed = time.perf_counter() - start
    store.close()
    return n / elapsed


def _writer(kind: str, path: str, sid: str, n: int, go: Any, out: Any) -> None:
    store = open_store(kind, Path(path))
    go.wait()
    start = time.perf_counter()
    for i in range(n):
        store.append_message(sid, make_message(i), turn=i // 10)
    out.put((start, time.perf_counter()))
    store.close()


def two_process_appends_per_second(kind: str, folder: Path, n: int) -> float:
    """Two processes appending n/2 messages each to their own session in one file, at once."""
    path = db_path(folder, kind)
    store = open_store(kind, path)
    sids = [new_session(kind, store, f"p{k}") for k in range(2)]
    store.close()
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(kind, str(path), sid, n // 2, go, out)) for sid in sids]
    for p in procs:
        p.start()
    time.sleep(1.5)  # let both import and open before the start signal
    go.set()
    spans = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join()
    return (n // 2 * 2) / (max(e for _, e in spans) - min(s for s, _ in spans))


def build_session(kind: str, path: Path, count: int) -> tuple[Any, str]:
    store = open_store(kind, path)
    sid = new_session(kind, store, "big")
    for start in range(0, count, 500):
        store.append_messages(sid, [make_message(i) for i in range(start, min(count, start + 500))], turn=start)
    return store, sid


def load_and_size(kind: str, folder: Path, count: int) -> tuple[float, float]:
    """Seconds to load a `count`-message session, and the file size in MB after closing."""
    path = db_path(folder, kind)
    store, sid = build_session(kind, path, count)
    store.close()
    store = open_store(kind, path)
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        assert len(store.load_transcript(sid)) == count
        timings.append(time.perf_counter() - start)
    store.close()
    size = sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(path.name) and p.is_file())
    return statistics.median(timings), size / 1e6


# A loop-like record: C5 placeholders over part of 41 stored messages, the lineage the loop stores (N3).
RECORD = RequestRecord(
    turn=0, iteration=0, model="m", base_url="http://bench.invalid/v1", estimate_tokens=1234, before_tokens=9000,
    after_tokens=4000, threshold=8000, window_tokens=10_000, stage="micro", latency_ms=812.5, tail_start=30,
    lineage=decode_lineage({"format": 2, "call": 1, "stage": "micro", "tail_start": 30, "upto": 41,
                            "runs": [[0, 20, "kept"], [20, 21, "placeholder", 1], [21, 41, "kept"]],
                            "made": [], "sent": [[0, 41]]}))
FINISHED = {"call_id": "call_1", "name": "read_file", "is_error": False, "content": "def f():\n" * 50, "chars": 2000}


def _iteration(store: Any, sid: str, i: int, mode: str = "rows") -> None:
    """One tool iteration's appends as the loop makes them: record + answer, then tool events + result.

    mode "old": the loop's writes before `Store.deferred` (three commits); "rows": each append its own
    commit; "two": the loop's two commits before one transaction per iteration (record + answer before the
    tool runs, tool events + result before the next call); "one": all five appends in one commit, the loop's
    now (L4: before the next model call) — via `Store.deferred()` or, for sqlite, BEGIN IMMEDIATE ... COMMIT.
    """
    group: Callable[[], Any] = getattr(store, "deferred", None) or store.batch
    if mode == "old":  # the loop before Store.deferred: three commits, a statement per row
        with store.batch():
            store.append_request(sid, RECORD)
            store.append_message(sid, make_message(0), turn=i, iteration=0)
        store.append_event(sid, "tool.started", {"iteration": i})
        with store.batch():
            store.append_message(sid, make_message(1), turn=i, iteration=0)
            store.append_event(sid, "tool.finished", FINISHED)
        return
    if mode == "rows":
        store.append_request(sid, RECORD)
        store.append_message(sid, make_message(0), turn=i, iteration=0)
        store.append_event(sid, "tool.started", {"iteration": i})
        store.append_message(sid, make_message(1), turn=i, iteration=0)
        store.append_event(sid, "tool.finished", FINISHED)
        return
    if mode == "one":  # the loop's one commit per iteration (L4: written before the next model call)
        with store.deferred(commit_after=COMMIT_AFTER) if hasattr(store, "deferred") else store.batch():
            store.append_request(sid, RECORD)
            store.append_message(sid, make_message(0), turn=i, iteration=0)
            store.append_event(sid, "tool.started", {"iteration": i})
            store.append_message(sid, make_message(1), turn=i, iteration=0)
            store.append_event(sid, "tool.finished", FINISHED)
        return
    with group():  # "two": record + answer before the tool runs, tool events + result before the next call
        store.append_request(sid, RECORD)
        store.append_message(sid, make_message(0), turn=i, iteration=0)
    with group():
        store.append_event(sid, "tool.started", {"iteration": i})
        store.append_message(sid, make_message(1), turn=i, iteration=0)
        store.append_event(sid, "tool.finished", FINISHED)


def iteration_ms(kind: str, folder: Path, iterations: int = 200, mode: str = "rows", sync: str = "NORMAL") -> float:
    """Median ms for one tool iteration's writes (see `_iteration`)."""
    store = Store(db_path(folder, kind)) if kind == "duckdb" else SqliteStore(db_path(folder, kind), sync)
    sid = new_session(kind, store, "loop")
    timings = []
    for i in range(iterations):
        start = time.perf_counter()
        _iteration(store, sid, i, mode)
        timings.append(time.perf_counter() - start)
    store.close()
    return statistics.median(timings) * 1e3


def cold_iteration_ms(folder: Path, iterations: int = 20) -> float:
    """DuckDB only: the same iteration when the lease was given back first (reopen included)."""
    store = Store(db_path(folder, "duckdb"))
    sid = store.create_session()
    timings = []
    for i in range(iterations):
        store.release()
        start = time.perf_counter()
        _iteration(store, sid, i)
        timings.append(time.perf_counter() - start)
    store.close()
    return statistics.median(timings) * 1e3


def median_of(runs: int, fn: Callable[[Path], Any]) -> Any:
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="mxclaw-bench-") as tmp:
            results.append(fn(Path(tmp)))
    if isinstance(results[0], tuple):
        return tuple(statistics.median(r[k] for r in results) for k in range(len(results[0])))
    return statistics.median(results)


def iteration_table(runs: int) -> None:
    """Iteration writes, DuckDB store vs sqlite3 WAL synchronous=FULL, interleaved in one run (same noise)."""
    modes = ("old", "rows", "two", "one")
    got: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        for mode in modes:  # the two engines alternate iteration by iteration: the machine's noise hits both
            with tempfile.TemporaryDirectory(prefix="mxclaw-bench-") as tmp:
                stores = {"duckdb": Store(db_path(Path(tmp), "duckdb")),
                          "sqlite": SqliteStore(db_path(Path(tmp), "sqlite"), "FULL")}
                sids = {k: new_session(k, st, "loop") for k, st in stores.items()}
                times: dict[str, list[float]] = {k: [] for k in stores}
                for i in range(200):
                    for kind, st in stores.items():
                        start = time.perf_counter()
                        _iteration(st, sids[kind], i, mode)
                        times[kind].append(time.perf_counter() - start)
                for kind, st in stores.items():
                    st.close()
                    got.setdefault((kind, mode), []).append(statistics.median(times[kind]) * 1e3)
    med = {k: statistics.median(v) for k, v in got.items()}
    print(f"iteration writes (request + answer + tool.started + tool result + tool.finished), medians of {runs} "
          "runs x 200 iterations; sqlite3 WAL synchronous=FULL\n")
    print("| commits per iteration              | duckdb (store) | sqlite3 FULL | duckdb/sqlite |")
    print("| ----------------------------------- | -------------:| ------------:| -------------:|")
    for mode, label in (("old", "the loop's three, before deferred()"), ("rows", "one per append (5)"),
                        ("two", "two (record+answer, tool results)"), ("one", "one per iteration (the loop, L4)")):
        d, q = med[("duckdb", mode)], med[("sqlite", mode)]
        print(f"| {label:<35} | {d:>11.2f} ms | {q:>9.2f} ms | {d / q:>13.2f} |")
    d = med[("duckdb", "one")]
    print(f"\nthe loop's writes per tool iteration (one commit): {d:.2f} ms = {d / med[('sqlite', 'one')]:.2f}x sqlite "
          f"with the same one commit (target <= 3x), {d / med[('sqlite', 'rows')]:.2f}x sqlite row by row; the loop's "
          f"two commits: {med[('duckdb', 'two')]:.2f} ms = {med[('duckdb', 'two')] / d:.2f}x now; before deferred(): "
          f"{med[('duckdb', 'old')]:.2f} ms = {med[('duckdb', 'old')] / d:.2f}x now")
    floor = engine_floor(runs)
    print(f"\nthe same, against each engine's floor (the iteration's five rows as bare 3-column INSERTs: session, seq, "
          f"2 KB text; no encoding, no store), all five interleaved commit by commit; medians of {runs} runs x 300")
    for label, key in (("the store's iteration (one commit)", "store"),
                       ("sqlite3 store's iteration (FULL)", "sqlite_store"),
                       ("duckdb floor, three tables (the store's)", "duckdb3"),
                       ("duckdb floor, all five rows in one table", "duckdb1"),
                       ("sqlite3 floor, three tables (FULL)", "sqlite")):
        print(f"  {label:<42} {floor[key]:6.2f} ms = {floor[key] / floor['sqlite_store']:5.2f}x the sqlite3 store")
    print(f"  the store is {floor['store'] / floor['duckdb3']:.2f}x DuckDB's own floor; DuckDB's floor is "
          f"{floor['duckdb3'] / floor['sqlite']:.2f}x sqlite3's (this disk's fsync: {floor['fsync']:.2f} ms)")
    parts = iteration_breakdown()
    print("\nwhere the DuckDB iteration's time goes (one run, medians of 200 iterations):")
    for name, ms in parts.items():
        print(f"  {name:<36} {ms:7.2f} ms")


def engine_floor(runs: int, commits: int = 300) -> dict[str, float]:
    """The least each engine can pay per iteration (five narrow rows, one commit), interleaved commit by commit
    with the store's own iteration and the sqlite3 store's, so the machine's noise hits all of them alike."""
    import duckdb

    got: dict[str, list[float]] = {}
    text = "x" * 2000

    def bare(con: Any, key: str, i: int) -> None:
        con.execute("BEGIN IMMEDIATE" if key == "sqlite" else "BEGIN TRANSACTION")
        if key == "duckdb1":
            con.execute("INSERT INTO one VALUES " + ", ".join(["(?, ?, ?)"] * 5),
                        [v for k in range(5) for v in ("s", 5 * i + k, text)])
        else:
            con.execute("INSERT INTO r VALUES (?, ?, ?)", ["s", i, text])
            pair = [("s", 2 * i, text), ("s", 2 * i + 1, text)]
            for table in ("m", "e"):
                if key == "sqlite":
                    con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", pair)
                else:
                    con.execute(f"INSERT INTO {table} VALUES (?, ?, ?), (?, ?, ?)", [v for row in pair for v in row])
        con.execute("COMMIT")

    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="mxclaw-bench-") as tmp:
            duck = duckdb.connect(str(Path(tmp) / "floor.duckdb"))
            lite = sqlite3.connect(Path(tmp) / "floor.sqlite", isolation_level=None)
            lite.execute("PRAGMA journal_mode=WAL")
            lite.execute("PRAGMA synchronous=FULL")
            for con in (duck, lite):
                for table in ("r", "m", "e", "one"):
                    con.execute(f"CREATE TABLE {table} (s VARCHAR, seq INTEGER, c VARCHAR, PRIMARY KEY (s, seq))")
            stores = {"store": Store(db_path(Path(tmp), "duckdb")),
                      "sqlite_store": SqliteStore(db_path(Path(tmp), "sqlite"), "FULL")}
            sids = {"store": new_session("duckdb", stores["store"], "loop"),
                    "sqlite_store": new_session("sqlite", stores["sqlite_store"], "loop")}
            times: dict[str, list[float]] = {k: [] for k in ("store", "sqlite_store", "duckdb3", "duckdb1", "sqlite")}
            for i in range(commits):
                for key in times:
                    start = time.perf_counter()
                    if key in stores:
                        _iteration(stores[key], sids[key], i, "one")
                    else:
                        bare(lite if key == "sqlite" else duck, key, i)
                    times[key].append(time.perf_counter() - start)
            for store in stores.values():
                store.close()
            duck.close()
            lite.close()
            fd = os.open(Path(tmp) / "fsync", os.O_WRONLY | os.O_CREAT)
            syncs = []
            for _ in range(100):
                os.write(fd, b"x" * 4096)
                start = time.perf_counter()
                os.fsync(fd)
                syncs.append(time.perf_counter() - start)
            os.close(fd)
            times["fsync"] = syncs
            for key, values in times.items():
                got.setdefault(key, []).append(statistics.median(values) * 1e3)
    return {k: statistics.median(v) for k, v in got.items()}


def iteration_breakdown(iterations: int = 200) -> dict[str, float]:
    """DuckDB only: median ms of each part of one iteration's commit (the `Store.deferred()` flush)."""
    import mxclaw_nb.store.writer as writer

    parts: dict[str, list[float]] = {}
    insert_rows, transaction = writer._insert_rows, writer.transaction

    def timed_insert(con: Any, sql: str, rows: list[list[Any]]) -> None:
        t = time.perf_counter()
        insert_rows(con, sql, rows)
        parts.setdefault(f"INSERT {sql.split()[2]} ({len(rows)} rows)", []).append(time.perf_counter() - t)

    @contextlib.contextmanager
    def timed_transaction(con: Any) -> Any:
        t = time.perf_counter()
        con.execute("BEGIN TRANSACTION")
        parts.setdefault("BEGIN", []).append(time.perf_counter() - t)
        yield con
        t = time.perf_counter()
        con.execute("COMMIT")
        parts.setdefault("COMMIT (WAL write + fsync)", []).append(time.perf_counter() - t)

    writer._insert_rows, writer.transaction = timed_insert, timed_transaction  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory(prefix="mxclaw-bench-") as tmp:
            store = Store(Path(tmp) / "parts.duckdb")
            sid = store.create_session()
            total = []
            for i in range(iterations):
                t = time.perf_counter()
                _iteration(store, sid, i, "one")
                total.append(time.perf_counter() - t)
            floor = []  # DuckDB's fixed cost of one statement that touches no table, for scale
            with store._lease.connection("bench") as con:
                for _ in range(iterations):
                    t = time.perf_counter()
                    con.execute("SELECT ?, ?, ?, ?, ?, ?, ?", [1, 2, 3, 4, "x", "y", None]).fetchall()
                    floor.append(time.perf_counter() - t)
            parts["(scale: one SELECT of 7 parameters)"] = floor
            store.close()
    finally:
        writer._insert_rows, writer.transaction = insert_rows, transaction  # type: ignore[assignment]
    out = {k: statistics.median(v) * 1e3 for k, v in parts.items()}
    out["total (incl. encoding, queueing)"] = statistics.median(total) * 1e3
    return out


def main() -> None:
    """Run every measurement for both engines and print a table of medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--appends", type=int, default=2000)
    parser.add_argument("--session", type=int, default=10_000, help="messages in the load/size session")
    parser.add_argument("--only", choices=("iteration",), help="run one measurement only")
    parser.add_argument("--path", help="run against another checkout (e.g. the baseline) instead of this one")
    args = parser.parse_args()
    if args.only == "iteration":
        iteration_table(args.runs)
        return
    rows: list[tuple[str, float, float, str]] = []
    for label, fn, unit in (
        ("appends/s, 1 process", lambda k: median_of(args.runs, lambda d: appends_per_second(k, d, args.appends)),
         "/s"),
        ("appends/s, 2 processes, 1 file",
         lambda k: median_of(args.runs, lambda d: two_process_appends_per_second(k, d, args.appends)), "/s"),
        ("iteration writes, the loop's two commits",
         lambda k: median_of(args.runs, lambda d: iteration_ms(k, d, mode="one")), "ms"),
    ):
        rows.append((label, fn("duckdb"), fn("sqlite"), unit))
    loads = {k: median_of(args.runs, lambda d, k=k: load_and_size(k, d, args.session)) for k in ("duckdb", "sqlite")}
    rows.append((f"load {args.session} messages", loads["duckdb"][0] * 1e3, loads["sqlite"][0] * 1e3, "ms"))
    per = 10_000 / args.session
    rows.append(("file size per 10k messages", loads["duckdb"][1] * per, loads["sqlite"][1] * per, "MB"))
    cold = median_of(args.runs, cold_iteration_ms)
    print(f"store_bench: medians of {args.runs} runs; {args.appends} appends; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs; sqlite3 WAL synchronous=NORMAL\n")
    print(f"| {'metric':<42} | {'duckdb (store)':>14} | {'sqlite3 WAL':>12} | {'duckdb/sqlite':>13} |")
    print(f"| {'-' * 42} | {'-' * 14}:| {'-' * 12}:| {'-' * 13}:|")
    for label, duck, lite, unit in rows:
        print(f"| {label:<42} | {duck:>11.1f} {unit:<2} | {lite:>9.1f} {unit:<2} | {duck / lite:>13.2f} |")
    warm = rows[2][1]
    print(f"\nper-iteration storage overhead: {warm:.2f} ms warm = {warm / 10:.2f}% of a 1 s model call "
          f"(target < 1%); {cold:.2f} ms when the lease was released first (reopen after >3 s idle or a handover "
          "to another process); bench/store_bench.py --only iteration compares with sqlite3 synchronous=FULL\n")
    print()
    iteration_table(args.runs)


if __name__ == "__main__":
    main()
