"""DuckDB store: append-only transcript, events, artifacts and request records (SPEC S1-S4, A1).

Why: the transcript is the single source of truth of a session and must survive kernel restarts,
crashes and several notebooks at once, while analysts query it with SQL and pandas. This module is
the adapter the loop talks to: it only ever INSERTs rows (SPEC S2; `sql()` refuses anything but
queries), assigns each message its position (`seq`) while holding the database exclusively, and
commits every append immediately so a killed process loses nothing already appended — or, inside
`deferred()`, queues a group of appends (one loop iteration) and writes them in one commit, because
DuckDB's fixed cost per INSERT statement (~0.4-0.7 ms) and per commit (~0.6-1.5 ms) dominate a row's (a
committer thread commits what waits longer than `commit_after`, L4). Bulk appends (seed, `import_sessions`) go in
as Arrow tables.

Shape: `store_lease` shares the file between processes, `store_schema` holds the migrations,
`store_codec` encodes messages losslessly, `store_parquet` exports/imports. Column meanings are in
the README section "The store: tables and columns". Text that is not valid Unicode never makes an
append fail: it is stored under the one text policy of `text_policy` (SPEC L7). The artifact preview
text (A1 format) and `read_artifact` live elsewhere; this store keeps whole artifact texts, scoped to
their session.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import platformdirs

from mxclaw_nb.records import RequestRecord
from mxclaw_nb.secrets import redact, redact_obj
from mxclaw_nb.store.codec import MESSAGE_COLUMNS, dumps_text, message_to_row, text
from mxclaw_nb.store.errors import StoreError, translate
from mxclaw_nb.store.lease import Lease, first_row, transaction
from mxclaw_nb.store.reader import StoreReads
from mxclaw_nb.store.records import REQUEST_FIELDS, as_record, row_values
from mxclaw_nb.store.schema import MIGRATIONS, current_version, migrate
from mxclaw_nb.store.turnlock import turn_lock
from mxclaw_nb.text_policy import display

__all__ = ["Store", "StoreError", "default_db_path", "open_stores", "REQUEST_FIELDS"]
_OPEN: weakref.WeakSet[Store] = weakref.WeakSet()

# Every append SQL lists created_at last: _insert fills it from the clock unless given.
_MSG_SQL = (
    f"INSERT INTO messages (session_id, seq, turn, iteration, {', '.join(MESSAGE_COLUMNS)}, created_at) "
    f"VALUES ({', '.join('?' * (5 + len(MESSAGE_COLUMNS)))})"
)
_REQ_SQL = (
    f"INSERT INTO requests (session_id, seq, {', '.join(REQUEST_FIELDS)}, extra, created_at) "
    f"VALUES ({', '.join('?' * (4 + len(REQUEST_FIELDS)))})"
)
_SESSION_SQL = "INSERT INTO sessions (id, created_at, workspace, model, source, title, meta) VALUES (?,?,?,?,?,?,?)"
_EVENT_SQL = "INSERT INTO events (session_id, seq, turn, iteration, type, payload, created_at) VALUES (?,?,?,?,?,?,?)"
_CHUNK = 64  # rows per multi-row INSERT: one statement's fixed cost (~0.6 ms) shared, the statement stays short


def _insert_rows(con: duckdb.DuckDBPyConnection, sql: str, rows: list[list[Any]], *, bulk: bool = False) -> None:
    """INSERT `rows`: multi-row VALUES for a few rows, an Arrow table for many or when `bulk` (executemany
    runs one statement per row, ~0.7 ms each)."""
    head, marks = sql.split(" VALUES ")
    if not bulk and len(rows) <= _CHUNK:
        head, marks, rows = _without_null_columns(head, rows)
    if len(rows) > _CHUNK or (bulk and len(rows) > 1):
        import pyarrow as pa  # only bulk paths (seed, import) pay for it

        names = head[head.index("(") + 1:head.rindex(")")].split(", ")
        try:
            table = pa.table({name: [r[k] for r in rows] for k, name in enumerate(names)})
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            table = None  # values Arrow cannot type as one column: the VALUES path below takes any
        if table is not None:
            con.register("mxclaw_bulk_rows", table)
            try:  # fetched: DuckDB 2 streams this INSERT's result, and an unfinished result blocks the connection
                con.execute(f"{head} SELECT * FROM mxclaw_bulk_rows").fetchall()
            finally:
                con.unregister("mxclaw_bulk_rows")
            return
    for i in range(0, len(rows), _CHUNK):
        part = rows[i:i + _CHUNK]
        con.execute(f"{head} VALUES {', '.join([marks] * len(part))}", [v for r in part for v in r]).fetchall()


def _without_null_columns(head: str, rows: list[list[Any]]) -> tuple[str, str, list[list[Any]]]:
    # Leave out the columns that are NULL in every row (their default, NULL, applies): DuckDB binds and casts
    # every listed value, ~0.03 ms a column, and a request record or a message leaves most columns empty.
    names = head[head.index("(") + 1:head.rindex(")")].split(", ")
    keep = [k for k in range(len(names)) if any(r[k] is not None for r in rows)]
    if len(keep) == len(names):
        return head, f"({', '.join('?' * len(names))})", rows
    head = f"{head[:head.index('(')]}({', '.join(names[k] for k in keep)})"
    return head, f"({', '.join('?' * len(keep))})", [[r[k] for k in keep] for r in rows]


_COMMIT_TICK = 0.1  # s: how often the committer thread looks at an open deferred(commit_after=) block
_COMMITTER_IDLE = 10.0  # s without such a block before the committer thread ends


def _committer(ref: weakref.ref[Store]) -> None:
    """The committer thread of a Store (held weakly: it must not keep the Store alive)."""
    while True:
        store = ref()
        if store is None or store._lease.closed or not store._commit_due():
            return
        del store
        time.sleep(_COMMIT_TICK)


def default_db_path() -> Path:
    """The database file: $MXCLAW_DB if set, else mxclaw.duckdb in the per-user data folder."""
    env = os.environ.get("MXCLAW_DB")
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("mxclaw_nb")) / "mxclaw.duckdb"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _on_open(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
    # A read-only file can be read only if it is already at this code's schema version.
    if read_only and current_version(con) < len(MIGRATIONS):
        raise StoreError(path, f"the database is read-only and at schema version {current_version(con)}, but this "
                               f"mxclaw_nb needs {len(MIGRATIONS)}: open it once where it is writable to upgrade it")
    migrate(con, path)


def open_stores() -> list[Store]:
    """The Store objects of this process that are open (N3: a stored request row found by
    SQL opens its inspector with the transcript of whichever open store holds its session)."""
    return [s for s in list(_OPEN) if s._finalizer.alive]


class Store(StoreReads):
    """Append-only DuckDB store shared safely by several processes (SPEC S1-S4)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        timeout: float = 30.0,
        idle_release: float = 3.0,
        read_only: bool = False,
    ) -> None:
        self.path = (Path(path).expanduser() if path is not None else default_db_path()).absolute()
        self._clock = clock or _utcnow
        if self.path.is_dir():
            raise StoreError(self.path, "is a folder, not a database file; give a file name inside it")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise translate(self.path, exc, "create the database folder") from exc
        path = self.path  # not self: the lease (and its watcher thread) must not keep the Store alive
        self._lease = Lease(path, timeout=timeout, idle_release=idle_release, read_only=read_only,
                            on_open=lambda con, ro: _on_open(con, path, ro))
        self._next: dict[tuple[str, str], int] = {}
        self._next_gen = -1
        self._known_sessions: set[str] = set()
        self._batch_depth = 0
        self._pending: list[tuple[str, str, str, list[Any]]] | None = None  # queued rows inside deferred()
        self._pending_next: dict[tuple[str, str], int] = {}
        self._pending_mu = threading.RLock()  # the queue, against the committer thread (deferred)
        self._commit_after: float | None = None  # of the open deferred() block
        self._oldest: float | None = None  # monotonic time of the oldest row queued while a commit_after applies
        self._committer: threading.Thread | None = None
        self._committer_used = 0.0  # monotonic time a block with commit_after last ran
        self._cursor: tuple[int, duckdb.DuckDBPyConnection] | None = None  # see _write_cursor
        self._finalizer = weakref.finalize(self, self._lease.close)
        with self._lease.connection("open the database"):
            pass
        _OPEN.add(self)

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """True when the file is open read-only (asked for, or the file or folder is not writable)."""
        return self._lease.read_only

    @property
    def read_only_reason(self) -> str | None:
        """Why the store is read-only (e.g. `Read-only file system`), or None."""
        return self._lease.read_only_reason

    def read_only_error(self, action: str) -> StoreError:
        """The error a write gets on a read-only store (one sentence: why, and what still works)."""
        return self._lease.read_only_error(action)

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A DuckDB cursor for reading, inside one read-only transaction (a consistent snapshot).

        Use this (or `sql()`) from the kernel that runs the agent: a second `duckdb.connect(path,
        read_only=True)` in the same process fails with DuckDB's "different configuration than existing
        connections" while this store holds the file. The file is held for the block only.
        """
        with self._lease.connection("read the database") as con:
            cursor = con.cursor()
            try:
                cursor.execute("BEGIN TRANSACTION READ ONLY")
                yield cursor
            finally:
                with suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
                cursor.close()

    def turn_lock(self, session_id: str, *, on_wait: Callable[[str], None] | None = None,
                  timeout: float | None = None) -> contextlib.AbstractContextManager[None]:
        """Hold the session for one turn, across processes: one turn at a time per session (see store_turnlock)."""
        return turn_lock(self.path, session_id, on_wait=on_wait, timeout=timeout)

    def close(self) -> None:
        """Close the database file; the Store cannot be used afterwards."""
        self._finalizer()

    def release(self) -> None:
        """Give the file back to other processes now (it reopens on next use)."""
        self._lease.release()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group appends into one transaction and one commit (e.g. one loop iteration): all or none."""
        with self._lease.connection("write a batch", write=True) as con:
            if self._batch_depth:
                yield
                return
            self._batch_depth += 1
            try:
                with transaction(con):
                    yield
            except BaseException:
                self._next.clear()  # seqs handed out inside the rolled-back batch are free again
                raise
            finally:
                self._batch_depth -= 1

    @contextmanager
    def deferred(self, commit_after: float | None = None) -> Iterator[None]:
        """Queue the block's appends and write them at its end in one transaction (one loop iteration, L4).

        Why: DuckDB pays ~0.6 ms per INSERT statement and ~1 ms per commit, so a row per commit made the
        store the loop's largest fixed cost. Inside the block appends are encoded and numbered at once
        (message seqs are returned as usual) but written at the end, one multi-row INSERT per table, in
        one commit: all or none. The block ends the same way when it raises (an interrupt keeps what was
        done), then the exception propagates. No database lock is held while the block runs, so other
        processes are not kept waiting (S3). Nested blocks join the outer one; seqs rely on the turn lock
        (one writer per session) and are checked by the primary keys when written.

        `commit_after` (seconds): nothing queued waits much longer than that — the Store's committer thread
        (it looks every 0.1 s) commits what is queued while the block still runs (a slow tool, an approval
        prompt), so a killed process loses at most the last ~`commit_after` seconds of appends; a quick block
        still makes one commit (L4).
        """
        if self._pending is not None:
            yield
            return
        self._pending, self._pending_next = [], {}
        self._commit_after, self._oldest = commit_after, None
        if commit_after is not None:
            self._start_committer()
        try:
            yield
        finally:
            with self._pending_mu:  # after a commit in flight on the committer thread, so seqs keep queue order
                self._commit_after, self._oldest = None, None
                pending, self._pending = self._pending, None
                try:
                    if pending:
                        self._flush(pending)
                finally:
                    self._pending_next = {}

    def _start_committer(self) -> None:
        # One thread per Store commits what waited too long (see deferred); a thread per block cost ~1 ms.
        self._committer_used = time.monotonic()
        if self._committer is not None and self._committer.is_alive():
            return
        self._committer = threading.Thread(target=_committer, args=(weakref.ref(self),), daemon=True,
                                           name="mxclaw-store-commit")
        self._committer.start()

    def _commit_due(self) -> bool:
        # On the committer thread: commit what is queued once its oldest row waited `commit_after`; on failure the
        # rows go back to the front of the queue and the block's end retries them (and raises there). Returns
        # False when no block with commit_after ran for a while (the thread ends; the next block starts one).
        # Both locks are only tried, never waited for: the caller's thread may hold the connection (a batch()
        # inside the block) and want the queue, or hold the queue (the block's end) and want the connection.
        # A busy tick is skipped; the next one (0.1 s later) tries again.
        if not self._lease.mutex.acquire(blocking=False):
            return True
        try:
            if not self._pending_mu.acquire(blocking=False):
                return True
            try:
                if self._commit_after is None:
                    return time.monotonic() - self._committer_used < _COMMITTER_IDLE
                self._committer_used = time.monotonic()
                if self._oldest is None or time.monotonic() - self._oldest < self._commit_after or not self._pending:
                    return True
                pending, self._pending, self._oldest = self._pending, [], None
                try:
                    self._flush(pending)
                except BaseException:
                    if self._pending is not None:
                        self._pending[:0] = pending
                return True
            finally:
                self._pending_mu.release()
        finally:
            self._lease.mutex.release()

    def _flush(self, pending: list[tuple[str, str, str, list[Any]]]) -> None:
        # One multi-row INSERT per table and session, in queue order within each, one transaction.
        groups: dict[tuple[str, str], tuple[str, list[list[Any]]]] = {}
        for table, session_id, sql, row in pending:
            groups.setdefault((table, session_id), (sql, []))[1].append(row)
        with self._lease.connection("write an iteration", write=True) as con:
            if not self._batch_depth:  # inside Store.batch() the batch's transaction holds these rows too
                con = self._write_cursor(con)
            try:
                with transaction(con) if not self._batch_depth else contextlib.nullcontext():
                    for (table, session_id), (sql, rows) in groups.items():
                        if table != "messages":  # seqs nobody has seen yet: numbered now, under the lease
                            start = self._seq(con, table, session_id)
                            rows = [[session_id, start + k, *r[2:]] for k, r in enumerate(rows)]
                        _insert_rows(con, sql, rows)
                        self._next[(table, session_id)] = int(rows[-1][1]) + 1
            except BaseException:
                self._next.clear()
                raise

    def _write_cursor(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        # A second connection to the open file, for the iteration's INSERT ... VALUES only, with DuckDB's query
        # optimizer off (it has nothing to optimize there and costs ~0.3 ms a statement); reads keep theirs.
        # It dies with the lease's connection (closing that closes its cursors), so it never holds the file.
        if self._cursor is None or self._cursor[0] != self._lease.generation:
            cursor = con.cursor()
            cursor.execute("PRAGMA disable_optimizer")
            self._cursor = (self._lease.generation, cursor)
        return self._cursor[1]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- helpers --------------------------------------------------------------------------------

    def _now(self, given: datetime | None = None) -> datetime:
        # Stored times are naive UTC; an aware time (from the clock or a record) is converted.
        now = self._clock() if given is None else given
        return now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now

    def _seq(self, con: duckdb.DuckDBPyConnection, table: str, session_id: str) -> int:
        # Next position in a session. Cached only while we hold the file: nobody else can append then.
        if self._next_gen != self._lease.generation:
            self._next.clear()
            self._next_gen = self._lease.generation
        key = (table, session_id)
        if key not in self._next:
            row = first_row(con, f"SELECT coalesce(max(seq) + 1, 0) FROM {table} WHERE session_id = ?", [session_id])
            self._next[key] = int(row[0])  # type: ignore[index]
        return self._next[key]

    def _check_session(self, con: duckdb.DuckDBPyConnection, session_id: str) -> None:
        if session_id in self._known_sessions:
            return
        if not con.execute("SELECT 1 FROM sessions WHERE id = ?", [session_id]).fetchall():
            raise StoreError(self.path, f"unknown session {session_id!r}; create it with Store.create_session()")
        self._known_sessions.add(session_id)

    def _queue(self, table: str, session_id: str, action: str, sql: str, rows: list[list[Any]]) -> list[int]:
        # Inside deferred(): number message rows now (the loop needs their seqs), queue everything.
        assert self._pending is not None
        key = (table, session_id)
        if self.read_only:
            raise self.read_only_error(action)
        start = self._pending_next.get(key, 0 if table != "messages" else None)
        if start is None or session_id not in self._known_sessions:
            with self._lease.connection(action, write=True) as con:
                self._check_session(con, session_id)
                start = self._seq(con, table, session_id) if start is None else start
        seqs = list(range(start, start + len(rows)))
        self._pending_next[key] = start + len(rows)
        now = self._now()
        with self._pending_mu:
            for seq, row in zip(seqs, rows, strict=True):
                self._pending.append((table, session_id, sql,
                                      [session_id, seq, *row[:-1], now if row[-1] is None else self._now(row[-1])]))
            if self._commit_after is not None and self._oldest is None:
                self._oldest = time.monotonic()
        return seqs

    def _insert(self, table: str, session_id: str, action: str, sql: str, rows: list[list[Any]]) -> list[int]:
        # Shared path of every append: check the session, number the rows, insert them atomically.
        if self._pending is not None:
            return self._queue(table, session_id, action, sql, rows)
        with self._lease.connection(action, write=True) as con:
            self._check_session(con, session_id)
            start = self._seq(con, table, session_id)
            seqs = list(range(start, start + len(rows)))
            now = self._now()
            values = [[session_id, seq, *row[:-1], now if row[-1] is None else self._now(row[-1])]
                      for seq, row in zip(seqs, rows, strict=True)]
            try:
                if len(values) <= _CHUNK:
                    _insert_rows(con, sql, values)  # one statement: atomic on its own
                elif self._batch_depth:
                    _insert_rows(con, sql, values)
                else:
                    with transaction(con):
                        _insert_rows(con, sql, values)
            except BaseException:
                self._next.pop((table, session_id), None)
                raise
            self._next[(table, session_id)] = start + len(rows)
            return seqs

    def _bad_input(self, exc: ValueError, action: str) -> StoreError:
        return StoreError(self.path, f"cannot {action}: {exc}")

    # -- writes (append only) -------------------------------------------------------------------

    def create_session(
        self,
        *,
        workspace: str | None = None,
        model: str | None = None,
        source: str = "agent",
        title: str | None = None,
        meta: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> str:
        """Create a session row and return its id (uuid4 hex unless `session_id` is given)."""
        sid = session_id or uuid.uuid4().hex
        try:
            meta_json = None if meta is None else dumps_text(redact_obj(meta), "session meta")
        except ValueError as exc:
            raise self._bad_input(exc, "create a session") from exc
        with self._lease.connection("create a session", write=True) as con:
            if con.execute("SELECT 1 FROM sessions WHERE id = ?", [sid]).fetchall():
                raise StoreError(self.path, f"a session with id {sid!r} already exists")
            con.execute(
                "INSERT INTO sessions (id, created_at, workspace, model, source, title, meta) VALUES (?,?,?,?,?,?,?)",
                [sid, self._now(), text(workspace), text(model), text(source), text(title), meta_json],
            )
        self._known_sessions.add(sid)
        return sid

    def import_sessions(self, sessions: Sequence[Mapping[str, Any]]) -> list[str]:
        """Create several new sessions with their transcripts in one transaction, all or none (SPEC S1, S4).

        The bulk path of imports: each item has `session_id` and optionally `workspace`, `model`, `source`
        (default "import"), `title`, `meta` (the `create_session` arguments) and `runs`, a list of
        `(turn, iteration, messages)` in transcript order. Sessions and messages go in as one Arrow table
        per table (one INSERT each instead of a transaction, a session check and an INSERT per session).
        Raises StoreError (naming the session) when an id exists already or a message cannot be encoded;
        nothing is written then. Returns the session ids.
        """
        now = self._now()
        session_rows: list[list[Any]] = []
        message_rows: list[list[Any]] = []
        ids: list[str] = []
        for item in sessions:
            sid = str(item["session_id"])
            try:
                meta = item.get("meta")
                meta_json = None if meta is None else dumps_text(redact_obj(meta), "session meta")
                session_rows.append([sid, now, text(item.get("workspace")), text(item.get("model")),
                                     text(item.get("source") or "import"), text(item.get("title")), meta_json])
                seq = 0
                for turn, iteration, messages in item.get("runs") or []:
                    for m in messages:
                        message_rows.append([sid, seq, turn, iteration, *message_to_row(redact_obj(m)), now])
                        seq += 1
            except ValueError as exc:
                raise self._bad_input(exc, f"import session {sid!r}") from exc
            ids.append(sid)
        if len(set(ids)) != len(ids):
            raise StoreError(self.path, "cannot import sessions: a session id is given twice")
        if not ids:
            return []
        with self._lease.connection("import sessions", write=True) as con:
            taken = con.execute("SELECT id FROM sessions WHERE list_contains(?, id) LIMIT 1", [ids]).fetchall()
            if taken:
                raise StoreError(self.path, f"a session with id {taken[0][0]!r} already exists")
            with transaction(con) if not self._batch_depth else contextlib.nullcontext():
                _insert_rows(con, _SESSION_SQL, session_rows, bulk=True)
                if message_rows:
                    _insert_rows(con, _MSG_SQL, message_rows, bulk=True)
        self._known_sessions.update(ids)
        for sid in ids:
            self._next.pop(("messages", sid), None)
        return ids

    def append_message(
        self, session_id: str, message: dict[str, Any], *, turn: int, iteration: int | None = None
    ) -> int:
        """Append one message to the transcript; return its seq (0-based position in the session)."""
        return self.append_messages(session_id, [message], turn=turn, iteration=iteration)[0]

    def append_messages(
        self, session_id: str, messages: list[dict[str, Any]], *, turn: int, iteration: int | None = None
    ) -> list[int]:
        """Append several messages in one transaction (all or none); return their seqs."""
        try:
            rows = [[turn, iteration, *message_to_row(redact_obj(m)), None] for m in messages]
        except ValueError as exc:
            raise self._bad_input(exc, "append a message") from exc
        if not rows:
            return []
        return self._insert("messages", session_id, "append a message", _MSG_SQL, rows)

    def append_event(
        self,
        session_id: str,
        type: str,
        payload: dict[str, Any],
        *,
        turn: int | None = None,
        iteration: int | None = None,
    ) -> None:
        """Append one event (e.g. context.compacted) with its JSON payload."""
        try:
            payload_json = dumps_text(redact_obj(payload), f"payload of event {type!r}")
        except ValueError as exc:
            raise self._bad_input(exc, "append an event") from exc
        row = [turn, iteration, text(type), payload_json, None]
        self._insert("events", session_id, "append an event", _EVENT_SQL, [row])

    def append_request(self, session_id: str, record: RequestRecord | Mapping[str, Any]) -> None:
        """Append one model-call record (a RequestRecord; a mapping of its fields is taken too, unknown keys
        kept in the `extra` JSON column). Provenance is stored as what happened (store.provenance, N3)."""
        try:
            rec = as_record(record)
            row = row_values(rec, redact=redact_obj)
        except ValueError as exc:
            raise self._bad_input(exc, "append a request record") from exc
        values = [row[k] for k in REQUEST_FIELDS] + [row["extra"], rec.created_at]
        self._insert("requests", session_id, "append a request record", _REQ_SQL, [values])

    def save_engine_state(self, session_id: str, engine_version: int, rows: int, boundary: str,
                          state: Mapping[str, Any]) -> None:
        """C7: replace the session's saved engine state (see `load_engine_state`); `rows` stored messages it was
        made from, `boundary` a fingerprint of the last of them. Plain JSON only."""
        # ASCII escapes: any text (a lone surrogate too) round-trips exactly through json.loads
        payload = json.dumps(dict(state), ensure_ascii=True, allow_nan=False)
        with self._lease.connection("save the engine state", write=True) as con:
            con.execute("INSERT OR REPLACE INTO engine_state VALUES (?, ?, ?, ?, ?, ?)",
                        [session_id, int(engine_version), int(rows), str(boundary), payload, self._now()])

    def put_artifact(self, session_id: str, text: str) -> str:
        """Store a whole tool result for this session; return its id ("artifact-<12 hex>")."""
        if not isinstance(text, str):
            raise StoreError(self.path, f"cannot store an artifact: text must be str, not {type(text).__name__}")
        text = redact(text)
        artifact_id = f"artifact-{uuid.uuid4().hex[:12]}"
        text = display(text)  # SPEC L7: what read_artifact serves is what the model could have been shown
        with self._lease.connection("store an artifact", write=True) as con:
            self._check_session(con, session_id)
            con.execute(
                "INSERT INTO artifacts (session_id, id, created_at, bytes, chars, text) VALUES (?,?,?,?,?,?)",
                [session_id, artifact_id, self._now(), len(text.encode("utf-8")), len(text), text],
            )
        return artifact_id
