"""Subprocess worker for the store's multi-process, SIGKILL, read-only and full-disk tests (SPEC S3).

Why a separate script: those properties only show with real processes (DuckDB's file lock, the
OS dropping locks on SIGKILL, per-process resource limits), so the tests launch this file with
`python tests/helpers/store_worker.py MODE DB ...` and read what it prints (one JSON line per fact).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mxclaw_nb.store.writer import Store, StoreError  # noqa: E402


def say(**fact: object) -> None:
    """Print one JSON fact and flush, so the parent sees it even if we are killed right after."""
    print(json.dumps(fact, ensure_ascii=False), flush=True)


def append(db: str, session: str, shared: str, count: int, tag: str) -> None:
    """Append `count` messages to `session` and to `shared`, alternating; report each seq."""
    store = Store(db, idle_release=0.5)
    for i in range(count):
        for sid in (session, shared):
            seq = store.append_message(sid, {"role": "user", "content": f"{tag}-{i} 你好"}, turn=i, iteration=0)
            say(session=sid, seq=seq, i=i)
    say(done=True, opens=store._lease.opens)
    store.close()


def run_forever(db: str, session: str) -> None:
    """Append a whole agent-like iteration after another until killed (the SIGKILL test)."""
    store = Store(db)
    i = 0
    while True:
        seq = store.append_message(session, {"role": "assistant", "content": f"answer {i}"}, turn=i, iteration=0)
        store.append_request(session, {"turn": i, "iteration": 0, "estimate_tokens": i})
        store.append_event(session, "loop.iteration", {"i": i}, turn=i)
        say(seq=seq, i=i)
        i += 1


def slow_tool(db: str, session: str) -> None:
    """One loop iteration whose tool never finishes: answer, record and tool.started queued in a deferred()
    block with commit_after (as the loop does), then the 'tool' runs until the process is killed."""
    store = Store(db)
    with store.deferred(commit_after=0.2):
        seq = store.append_message(session, {"role": "assistant", "content": "running a slow tool"}, turn=1,
                                   iteration=1)
        store.append_request(session, {"turn": 1, "iteration": 1, "estimate_tokens": 7})
        store.append_event(session, "tool.started", {"name": "shell"}, turn=1, iteration=1)
        say(seq=seq)  # reported: the user has seen the answer and its tool call
        while True:
            time.sleep(1)


def hold_raw(db: str, seconds: float) -> None:
    """Hold the file with a plain duckdb connection (a program outside the lease protocol)."""
    import duckdb

    con = duckdb.connect(db)
    say(holding=True)
    time.sleep(seconds)
    con.close()


def try_open(db: str, drop_to_uid: int | None = None) -> None:
    """Open the store (optionally as an unprivileged user) and report the error, if any."""
    if drop_to_uid is not None:
        os.setgid(drop_to_uid)
        os.setuid(drop_to_uid)
    try:
        started = time.perf_counter()
        Store(db).close()
        say(ok=True, seconds=time.perf_counter() - started)
    except StoreError as exc:
        say(error=str(exc))


def fill_disk(db: str, session: str, limit_bytes: int) -> None:
    """Write a big artifact under a file-size limit (how a full disk looks to the process)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    store = Store(db)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    try:
        store.put_artifact(session, "x" * 20_000_000)
        say(ok=True)
    except StoreError as exc:
        say(error=str(exc))
    try:
        store.close()
    except StoreError as exc:
        say(close_error=str(exc))


if __name__ == "__main__":
    mode, db, *rest = sys.argv[1:]
    if mode == "append":
        append(db, rest[0], rest[1], int(rest[2]), rest[3])
    elif mode == "forever":
        run_forever(db, rest[0])
    elif mode == "slow_tool":
        slow_tool(db, rest[0])
    elif mode == "hold":
        hold_raw(db, float(rest[0]))
    elif mode == "open":
        try_open(db, int(rest[0]) if rest else None)
    elif mode == "fill":
        fill_disk(db, rest[0], int(rest[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")
