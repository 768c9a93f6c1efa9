"""Cross-process lease on one DuckDB file (SPEC S3).

Why: DuckDB lets only one process have a database file open for writing, and opening + closing a
connection costs ~12 ms, more than the whole per-iteration storage budget (< 10 ms). So a process
keeps its connection open while it is busy (a *lease*) and gives it back when either

* it has been idle for `idle_release` seconds (so other programs, e.g. a duckdb shell, can open
  the file between turns), or
* another mxclaw_nb process is waiting and this one is idle (between an agent's write bursts, so
  the waiter gets the file within ~10 ms), or has been busy for `max_hold` seconds (bulk writers
  take turns in slices long enough to pay the ~25 ms close + reopen only now and then).

Waiting is announced through two `filelock` files beside the database: a waiter first takes
`<db>.queue.lock`, then waits for `<db>.lock`. The holder sees the queue lock taken and hands over;
when it needs the file again it queues behind the waiter, so nobody starves. The OS drops both
locks when a process dies (even by SIGKILL), and DuckDB replays its WAL on the next open, so a
killed holder blocks nobody and loses no committed row.

Read-only files: when the lock files cannot be created or the database cannot be opened for writing
(a read-only filesystem or mount, no write permission), the lease opens the file with DuckDB's
`read_only=True` instead and says why (`read_only_reason`): every read works, and a write is refused
with one sentence before DuckDB is asked. `Lease(read_only=True)` asks for that mode directly.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
from filelock import FileLock, Timeout

try:
    import fcntl
except ImportError:  # Windows: filelock's own locks only
    fcntl = None  # type: ignore[assignment]

from mxclaw_nb.store.errors import MOVE_HINT, StoreError, translate

# Errors that leave the connection usable (bad SQL, constraint hit); anything else discards it.
_BENIGN = (
    duckdb.ParserException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConstraintException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
)


_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class NotWritable(Exception):
    """The lock files or the database cannot be written here; carries the reason in words."""


def _not_writable_reason(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno in _NOT_WRITABLE:
        return f"{os.strerror(exc.errno)}: {exc.filename or ''}".rstrip(": ")
    text = str(exc).lower()
    for marker in ("read-only file system", "permission denied"):
        if marker in text:
            return marker.capitalize() if marker != "read-only file system" else "Read-only file system"
    return None


def _probe_writable(lock_path: str) -> str | None:
    """None if `lock_path` can be opened for writing (created if needed), else the reason."""
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        return _not_writable_reason(exc) or str(exc)
    os.close(fd)
    return None


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> tuple[Any, ...] | None:
    """The first row of a query, with the result read to its end.

    Why not `fetchone()`: DuckDB 2 streams results, and one that was not read until a fetch returns nothing
    keeps the connection busy ("connection has an unfinished result from execute()"): the next `register()` of
    an Arrow table on it fails. The store's queries return a row or none, so reading all of it costs nothing.
    """
    rows = con.execute(sql, params).fetchall() if params is not None else con.execute(sql).fetchall()
    return rows[0] if rows else None


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Run the block in one transaction: all of it is stored, or none of it."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        with suppress(duckdb.Error):  # the connection may already be unusable (e.g. disk full)
            con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


class Lease:
    """Hands out one DuckDB connection at a time, shared politely between processes."""

    def __init__(
        self,
        path: Path,
        *,
        timeout: float = 30.0,
        idle_release: float = 3.0,
        max_hold: float = 0.25,
        poll: float = 0.005,
        on_open: Callable[[duckdb.DuckDBPyConnection, bool], None] | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = path
        self.timeout, self.idle_release, self.max_hold, self.poll = timeout, idle_release, max_hold, poll
        self._main = FileLock(f"{path}.lock", thread_local=False)
        self._queue = FileLock(f"{path}.queue.lock", thread_local=False)
        self._on_open = on_open
        self._mu = threading.RLock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._held_since = 0.0
        self._last_used = 0.0
        self._last_check = 0.0
        self._watcher: threading.Thread | None = None
        self._closed = False
        self._depth = 0
        self.generation = 0  # bumps on every (re)open: cached facts about the file expire with it
        self.opens = 0
        self.read_only = read_only
        self.read_only_reason: str | None = "opened with read_only=True" if read_only else None
        self._queue_fd: int | None = None  # see _waiter_present
        self._probe_fd_ok = True

    @contextmanager
    def connection(self, action: str, *, write: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Yield the held connection (opening it if needed); errors become StoreError naming `action`."""
        with self._mu:
            if self._closed:
                raise StoreError(self.path, f"cannot {action}: the store is closed")
            if write and self.read_only:
                raise self.read_only_error(action)
            if self._depth == 0 and self._con is not None and self._should_yield():
                self._release()
            if self._con is None:
                self._acquire(action)
            con = self._con
            assert con is not None
            self._depth += 1
            try:
                yield con
            except duckdb.Error as exc:
                if not isinstance(exc, _BENIGN):
                    self._release(broken=True)
                raise translate(self.path, exc, action) from exc
            except OSError as exc:
                self._release(broken=True)
                raise translate(self.path, exc, action) from exc
            finally:
                self._depth -= 1
                self._last_used = time.monotonic()

    @property
    def mutex(self) -> threading.RLock:
        """The lock every use of the connection holds (for a thread that must only try it)."""
        return self._mu

    def read_only_error(self, action: str) -> StoreError:
        """The sentence a refused write gets: why the file is read-only and what still works."""
        return StoreError(
            self.path,
            f"cannot {action}: the database is open read-only ({self.read_only_reason}). Reading works "
            "(sessions, transcripts, SQL); to write, copy the file to a writable folder and point "
            "MXCLAW_DB (or %agent config db=...) at the copy",
        )

    @property
    def held(self) -> bool:
        """True while this process holds the database file open."""
        return self._con is not None

    @property
    def closed(self) -> bool:
        """True once `close()` ran."""
        return self._closed

    def release(self) -> None:
        """Give the file back now (it is reopened on next use)."""
        with self._mu:
            self._release()

    def close(self) -> None:
        """Release the file and refuse further use."""
        with self._mu:
            self._closed = True
            try:
                self._release()
            finally:
                self._close_queue_fd()

    # -- internals -------------------------------------------------------------------------------

    def _waiter_present(self) -> bool:
        # Asked once per `poll` while the file is held past `max_hold`, i.e. about once per loop iteration: a
        # FileLock try opens, locks and closes the lock file (~0.25-0.6 ms); the same flock(2) try on a descriptor
        # kept open costs ~2 us (filelock's Unix locks are flock locks, so both see each other).
        fd = self._queue_probe_fd()
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:  # e.g. a filesystem without flock: filelock's own fallback decides from now on
                self._close_queue_fd()
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return False
        try:
            self._queue.acquire(blocking=False)
        except Timeout:
            return True
        except OSError:  # S1: no queue lock can be made here (a read-only folder), so no writer can have queued
            return False
        self._queue.release()
        return False

    def _queue_probe_fd(self) -> int | None:
        if self._queue_fd is None and self._probe_fd_ok and fcntl is not None and not self.read_only:
            try:
                self._queue_fd = os.open(self._queue.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                self._probe_fd_ok = False
        return self._queue_fd

    def _close_queue_fd(self) -> None:
        fd, self._queue_fd = self._queue_fd, None
        self._probe_fd_ok = False
        if fd is not None:
            with suppress(OSError):
                os.close(fd)

    def _should_yield(self) -> bool:
        now = time.monotonic()
        if now - self._held_since < self.max_hold or now - self._last_check < self.poll:
            return False
        self._last_check = now
        return self._waiter_present()

    def _take(self, lock: FileLock, deadline: float, action: str) -> None:
        probed = False
        while True:
            try:
                lock.acquire(blocking=False)
                return
            except Timeout:
                if not probed:  # a lock file that cannot be created looks like a busy lock to filelock
                    probed = True
                    reason = _probe_writable(lock.lock_file)
                    if reason is not None:
                        raise NotWritable(reason) from None
                if time.monotonic() >= deadline:
                    raise StoreError(
                        self.path,
                        f"cannot {action}: another mxclaw_nb process kept the database busy for "
                        f"{self.timeout:.0f} s; retry, or use a separate file via MXCLAW_DB",
                    ) from None
                time.sleep(self.poll)
            except OSError as exc:
                reason = _not_writable_reason(exc)
                if reason is not None:
                    raise NotWritable(reason) from exc
                raise translate(self.path, exc, action) from exc

    def _take_locks(self, deadline: float, action: str) -> None:
        """Queue, then the main lock; in read-only mode, lock files that cannot be created are skipped."""
        try:
            self._take(self._queue, deadline, action)
        except NotWritable as exc:
            self._go_read_only(str(exc), action)
            return
        try:
            self._take(self._main, deadline, action)
        except NotWritable as exc:
            self._go_read_only(str(exc), action)
        finally:
            self._queue.release()

    def _go_read_only(self, reason: str, action: str) -> None:
        if self.read_only:
            return
        if not self.path.exists():  # nothing to read either: the plain "not writable" error
            raise StoreError(self.path, f"cannot {action}: the folder or file is not writable ({reason}); {MOVE_HINT}.")
        self.read_only, self.read_only_reason = True, reason

    def _acquire(self, action: str) -> None:
        deadline = time.monotonic() + self.timeout
        self._take_locks(deadline, action)
        try:
            self._con = self._open(deadline, action)
            if self._on_open is not None:
                self._on_open(self._con, self.read_only)
        except BaseException as exc:
            self._release(broken=True)
            if isinstance(exc, duckdb.Error | OSError):
                raise translate(self.path, exc, action) from exc
            raise
        self.generation += 1
        self.opens += 1
        self._held_since = self._last_used = time.monotonic()
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="mxclaw-store-lease", daemon=True)
            self._watcher.start()

    def _open(self, deadline: float, action: str) -> duckdb.DuckDBPyConnection:
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=self.read_only)
            except duckdb.IOException as exc:
                reason = None if self.read_only else _not_writable_reason(exc)
                if reason is not None:  # e.g. the folder is writable (lock files) but the file is not
                    self._go_read_only(reason, action)
                    continue
                # A program outside our lock protocol holds the file: wait for it like for a waiter.
                if "lock" not in str(exc).lower() or time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def _release(self, broken: bool = False) -> None:
        con, self._con = self._con, None
        try:
            if con is not None:
                con.close()
        except duckdb.Error:
            if not broken:
                raise
        finally:
            if self._main.is_locked:
                self._main.release(force=True)

    def _watch(self) -> None:
        # Background thread: returns the file when idle or when another process is waiting.
        while True:
            time.sleep(max(self.poll * 2, 0.01))
            if not self._mu.acquire(blocking=False):
                continue
            try:
                if self._con is None:
                    self._watcher = None
                    return
                idle = time.monotonic() - self._last_used
                held = time.monotonic() - self._held_since
                # Idle means no call for two polls: a loop's burst of appends counts as one busy spell.
                yielding = idle >= 2 * self.poll or held >= self.max_hold
                if idle >= self.idle_release or (yielding and self._waiter_present()):
                    self._release()
            except Exception:  # noqa: BLE001 - a watcher must never crash the kernel
                self._release(broken=True)
            finally:
                self._mu.release()
