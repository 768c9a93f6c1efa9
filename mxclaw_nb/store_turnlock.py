"""One turn at a time per session, across processes and threads (SPEC S3, L1).

Why: a turn reads the transcript, numbers itself (`1 + user messages so far`) and appends for
minutes. Two kernels driving one session at once interleaved their messages and stored one turn
number twice. The store lease (store_lease) serialises single writes, not whole turns, so each
session gets its own `filelock` file, `<db>.turns/<hash of the session id>.lock`, held for the
whole turn. A second process waits for it, after saying whom it waits for: the holder writes its
pid, host and start time into `<...>.owner` beside the lock (filelock truncates the lock file itself
when a waiter opens it, so the note lives in its own file). The OS drops the lock when the holder
dies, even by SIGKILL, so a killed kernel blocks nobody.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from filelock import FileLock, Timeout

from mxclaw_nb.store_errors import StoreError, translate

_HELD: dict[str, int] = {}  # lock file -> thread holding it in this process
_HELD_MU = threading.Lock()


def _lock_paths(db_path: Path, session_id: str) -> tuple[Path, Path]:
    folder = db_path.with_name(db_path.name + ".turns")
    stem = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return folder / f"{stem}.lock", folder / f"{stem}.owner"


def describe_holder(owner_file: Path) -> str:
    """Who holds a turn lock, from its owner note: `process 4242 on host-a since 18:40:02 UTC`."""
    try:
        note = json.loads(owner_file.read_text(encoding="utf-8"))
        return f"process {note['pid']} on {note['host']} since {note['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def turn_lock(db_path: Path, session_id: str, *, on_wait: Callable[[str], None] | None = None,
              timeout: float | None = None) -> Iterator[None]:
    """Hold session `session_id`'s turn lock for the block; waits (after `on_wait(holder)`) while another has it.

    `timeout` None waits until the other turn ends (interruptible); otherwise a StoreError names the holder.
    """
    lock_file, owner_file = _lock_paths(db_path, session_id)
    key, me = str(lock_file), threading.get_ident()
    with _HELD_MU:
        if _HELD.get(key) == me:
            raise StoreError(db_path, f"cannot run a turn: this thread is already running a turn of session "
                                      f"{session_id[:8]} (a turn cannot start another turn of its own session)")
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_file), thread_local=False)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            holder = describe_holder(owner_file)
            if on_wait is not None:
                on_wait(holder)
            try:
                lock.acquire(timeout=-1 if timeout is None else timeout, poll_interval=0.05)
            except Timeout:
                raise StoreError(db_path, f"cannot run a turn: session {session_id[:8]} is running a turn in "
                                          f"{describe_holder(owner_file)}; wait for it to finish, or start a new "
                                          "session (%agent new)") from None
    except OSError as exc:
        raise translate(db_path, exc, "lock the session for a turn") from exc
    try:
        with _HELD_MU:
            _HELD[key] = me
        since = datetime.now(UTC).strftime("%H:%M:%S UTC")
        with suppress(OSError):  # the note is a courtesy for waiters; the lock is what counts
            owner_file.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since,
                                              "time": time.time()}), encoding="utf-8")
        yield
    finally:
        with _HELD_MU:
            _HELD.pop(key, None)
        lock.release()
