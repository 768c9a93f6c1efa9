"""One turn at a time per session, across processes and threads (SPEC S3, L1).

Why: a turn reads the transcript, numbers itself (`1 + user messages so far`) and appends for
minutes. Two kernels driving one session at once interleaved their messages and stored one turn
number twice. The store lease (store_lease) serialises single writes, not whole turns, so each
session gets its own `filelock` file, `<db>.turns/<hash of the session id>.lock`, held for the
whole turn, with a queue lock beside it so waiters take turns fairly (the store lease's pattern).
A second process waits for it, after saying whom it waits for: the holder writes its
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

from mxclaw_nb.store.errors import StoreError, translate

_HELD: dict[str, int] = {}  # lock file -> thread holding it in this process
_HELD_MU = threading.Lock()
_QUIET_WAIT = 0.5  # seconds waited before saying whom we wait for


def _lock_paths(db_path: Path, session_id: str) -> tuple[Path, Path, Path]:
    folder = db_path.with_name(db_path.name + ".turns")
    stem = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return folder / f"{stem}.lock", folder / f"{stem}.queue", folder / f"{stem}.owner"


def describe_holder(owner_file: Path) -> str:
    """Who holds a turn lock, from its owner note: `process 4242 on host-a since 18:40:02 UTC`."""
    try:
        note = json.loads(owner_file.read_text(encoding="utf-8"))
        return f"process {note['pid']} on {note['host']} since {note['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


class _Waiter:
    """Takes filelocks by polling; says whom it waits for once the wait is no longer short."""

    def __init__(self, db_path: Path, session_id: str, owner_file: Path, on_wait: Callable[[str], None] | None,
                 timeout: float | None) -> None:
        self.db_path, self.session_id, self.owner_file, self.on_wait = db_path, session_id, owner_file, on_wait
        self.start = time.monotonic()
        self.deadline = None if timeout is None else self.start + timeout
        self.told = False

    def take(self, lock: FileLock) -> None:
        while True:
            try:
                lock.acquire(blocking=False)
                return
            except Timeout:
                pass
            now = time.monotonic()
            if not self.told and now - self.start >= _QUIET_WAIT:
                # Said only now: the holder may be about to finish, and it writes its note just after locking.
                self.told = True
                if self.on_wait is not None:
                    self.on_wait(describe_holder(self.owner_file))
            if self.deadline is not None and now >= self.deadline:
                raise StoreError(self.db_path, f"cannot run a turn: session {self.session_id[:8]} is running a turn "
                                               f"in {describe_holder(self.owner_file)}; wait for it to finish, or "
                                               "start a new session (%agent new)")
            time.sleep(0.02)


@contextmanager
def turn_lock(db_path: Path, session_id: str, *, on_wait: Callable[[str], None] | None = None,
              timeout: float | None = None) -> Iterator[None]:
    """Hold session `session_id`'s turn lock for the block; waits (after `on_wait(holder)`) while another has it.

    Fair between processes: a waiter first takes the session's queue lock, so a holder that comes back for
    its next turn queues behind it. `timeout` None waits until the other turn ends (interruptible);
    otherwise a StoreError names the holder.
    """
    lock_file, queue_file, owner_file = _lock_paths(db_path, session_id)
    key, me = str(lock_file), threading.get_ident()
    with _HELD_MU:
        if _HELD.get(key) == me:
            raise StoreError(db_path, f"cannot run a turn: this thread is already running a turn of session "
                                      f"{session_id[:8]} (a turn cannot start another turn of its own session)")
    lock, queue = FileLock(key, thread_local=False), FileLock(str(queue_file), thread_local=False)
    waiter = _Waiter(db_path, session_id, owner_file, on_wait, timeout)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        waiter.take(queue)
        try:
            waiter.take(lock)
        finally:
            queue.release()
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
