"""Read side of the store: transcripts, artifacts, DataFrames, read-only SQL, Parquet (SPEC S4, A2).

Why a separate module: `Store` in writer.py owns the write path (numbering, append-only inserts);
everything here only reads (or, for import, only inserts rows whose keys are new), so it is kept
apart as a mixin that uses the same lease and path. `sql()` accepts a single SELECT/EXPLAIN so
that the pass-through cannot be used to rewrite the transcript (SPEC S2).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from mxclaw_nb.store.codec import MESSAGE_COLUMNS, row_to_message
from mxclaw_nb.store.errors import StoreError, translate
from mxclaw_nb.store.lease import Lease, first_row
from mxclaw_nb.store.parquet import export_partitioned, export_tables, import_tables
from mxclaw_nb.store.rows import StoredRows

if TYPE_CHECKING:  # DuckDB's .df() imports pandas when a DataFrame is asked for, not at import
    import pandas as pd

_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
_SESSIONS_SQL = """
SELECT s.id, s.created_at, s.workspace, s.model, s.source, s.title,
       coalesce(m.turns, 0) AS turns, coalesce(m.messages, 0) AS messages,
       coalesce(r.model_calls, 0) AS model_calls, coalesce(e.compactions, 0) AS compactions,
       CAST(coalesce(r.saved, 0) AS BIGINT) AS tokens_saved_est
FROM sessions s
LEFT JOIN (SELECT session_id, count(*) FILTER (WHERE role = 'user') AS turns, count(*) AS messages
           FROM messages GROUP BY session_id) m ON m.session_id = s.id
LEFT JOIN (SELECT session_id, count(*) AS model_calls,
                  sum(greatest(coalesce(before_tokens, 0) - coalesce(after_tokens, 0), 0)) AS saved
           FROM requests GROUP BY session_id) r ON r.session_id = s.id
LEFT JOIN (SELECT session_id, count(*) AS compactions FROM events WHERE type = 'context.compacted'
           GROUP BY session_id) e ON e.session_id = s.id
ORDER BY s.created_at, s.id
"""


# What `%agent timeline` draws: no JSON columns (the provenance and extra are the bulk of a record).
TIMELINE_COLUMNS = ("session_id", "seq", "turn", "iteration", "created_at", "stage", "retry", "counter",
                    "estimate_tokens", "calibrated_tokens", "prompt_tokens_reported", "threshold", "window_tokens",
                    "before_tokens", "after_tokens", "error", "model", "completion_tokens_reported",
                    "cached_tokens_reported", "prefix_tokens", "purpose")  # E1-E3; C11 summary calls


def _column(name: str) -> str:
    if not name.isidentifier():
        raise ValueError(f"not a column name: {name!r}")
    return f'"{name}"'


class StoreReads:
    """Read methods shared by Store; expects `path`, `_lease`, `_next` and `_next_gen` (the seq cache)."""

    path: Path
    _lease: Lease
    _next: dict[tuple[str, str], int]
    _next_gen: int

    # -- reads ----------------------------------------------------------------------------------

    def get_artifact(self, session_id: str, artifact_id: str) -> str | None:
        """The artifact's whole text, or None if it does not exist in this session."""
        with self._lease.connection("read an artifact") as con:
            row = first_row(con, "SELECT text FROM artifacts WHERE session_id = ? AND id = ?",
                            [session_id, artifact_id])
        return None if row is None else str(row[0])

    def load_transcript(self, session_id: str) -> list[dict[str, Any]]:
        """The session's messages in order, as the dicts that were appended."""
        with self._lease.connection("load a transcript") as con:
            rows = con.execute(
                f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE session_id = ? ORDER BY seq", [session_id]
            ).fetchall()
        return [row_to_message(r) for r in rows]

    def load_transcript_after(self, session_id: str, after_seq: int) -> list[dict[str, Any]]:
        """The session's messages with seq > `after_seq`, in order (-1: all): what a cached transcript lacks."""
        with self._lease.connection("load a transcript") as con:
            rows = con.execute(
                f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq",
                [session_id, after_seq],
            ).fetchall()
        return [row_to_message(r) for r in rows]

    def transcript_rows(self, session_id: str) -> StoredRows | None:
        """C7, N2: the session's stored messages as a lazily read sequence (`StoredRows`: one COUNT now, rows read
        where they are used), or None when its seqs are not 0..n-1 or it holds OpenAI's legacy function results (then
        `load_transcript` it: a role `function` result is read as the tool result of the call in the row before it,
        `messages.modernize_legacy_calls`, which a row read alone cannot say; C4). A legacy call that no `function`
        row answers is not looked for (its JSON test costs 3 ms at 300k rows): such a session reads lazily, and the
        call goes out as the text of its message."""
        with self._lease.connection("load a transcript") as con:
            # with the next event seq: the turn about to start appends to both tables (one query, not three)
            row = first_row(con, "SELECT count(*), min(seq), max(seq), count(*) FILTER (WHERE role = 'user'), "
                            "(SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = $1), "
                            "count(*) FILTER (WHERE role = 'function') "  # +0.2 ms at 300k rows (a JSON test: +3 ms)
                            "FROM messages WHERE session_id = $1", [session_id])
            if row is not None:
                self._know_next(session_id, {"messages": 0 if row[2] is None else int(row[2]) + 1,
                                             "events": int(row[4])})
        count = 0 if row is None else int(row[0])
        if not count or row is None or row[1] != 0 or row[2] != count - 1 or row[5]:
            return None

        columns = ", ".join(MESSAGE_COLUMNS)

        def fetch(start: int, stop: int, head: int = 0) -> list[dict[str, Any]]:
            """Rows of seq start..stop-1, after those of seq 0..head-1 when `head` (one query: its fixed cost, a scan
            of the session's seqs, is most of a short read's)."""
            with self._lease.connection("load a transcript") as con:
                if not head:
                    rows = con.execute(f"SELECT {columns} FROM messages WHERE session_id = ? AND seq >= ? AND seq < ? "
                                       "ORDER BY seq", [session_id, start, stop]).fetchall()
                    return [row_to_message(r) for r in rows]
                # two seq ranges as a UNION ALL: an OR of them would not prune by the seq column's min/max
                rows = con.execute(
                    f"SELECT seq, {columns} FROM messages WHERE session_id = $1 AND seq < $2 UNION ALL "
                    f"SELECT seq, {columns} FROM messages WHERE session_id = $1 AND seq >= $3 AND seq < $4 "
                    "ORDER BY seq", [session_id, head, start, stop]).fetchall()
            return [row_to_message(r[1:]) for r in rows]

        return StoredRows(fetch, count, int(row[3]))

    def _know_next(self, session_id: str, nexts: dict[str, int]) -> None:
        """Keep the next seqs of a session's tables, read while the file is held (the writer's cache, `_seq`: valid
        until the lease is given back); never over a value already kept or while appends are queued."""
        if self._next_gen != self._lease.generation:
            self._next.clear()
            self._next_gen = self._lease.generation
        if getattr(self, "_pending", None) is None:
            for table, nxt in nexts.items():
                self._next.setdefault((table, session_id), nxt)

    def load_engine_state(self, session_id: str) -> tuple[int, int, str, Any] | None:
        """C7: (engine version, rows, boundary, state) saved for the session by `save_engine_state`, or None. The
        state is parsed JSON (never code): the caller checks it against the stored rows before using it."""
        with self._lease.connection("load the engine state") as con:
            row = first_row(con, "SELECT engine_version, rows, boundary, state FROM engine_state WHERE session_id = ?",
                            [session_id])
        if row is None:
            return None
        try:
            state = json.loads(row[3])
        except (TypeError, ValueError):
            state = None
        return int(row[0]), int(row[1]), str(row[2]), state

    def _df(self, query: str, params: list[Any] | None = None, action: str = "run a query") -> pd.DataFrame:
        with self._lease.connection(action) as con:
            return con.execute(query, params or []).df()

    def sessions(self) -> pd.DataFrame:
        """One row per session with counts of turns, messages, model calls and compactions."""
        return self._df(_SESSIONS_SQL, action="list sessions")

    def transcript(self, session_id: str) -> pd.DataFrame:
        """The session's messages table rows, in order."""
        return self._df("SELECT * FROM messages WHERE session_id = ? ORDER BY seq", [session_id])

    def events(self, session_id: str | None = None, type: str | None = None) -> pd.DataFrame:
        """Events, optionally of one session and/or one type, oldest first."""
        return self._df(
            "SELECT * FROM events WHERE (?::VARCHAR IS NULL OR session_id = ?) AND (?::VARCHAR IS NULL OR type = ?) "
            "ORDER BY created_at, session_id, seq",
            [session_id, session_id, type, type],
        )

    def requests(self, session_id: str | None = None, *, columns: Sequence[str] | None = None,
                 turn: int | None = None, iteration: int | None = None, last: int | None = None,
                 summary_calls: bool = False) -> pd.DataFrame:
        """Model-call records, optionally of one session (and one turn/call), oldest first.

        C11: a summary call is stored like any call, with `purpose = 'summary'`; readers of a turn's calls (the
        inspector, per-call figures) get only the turn's calls, `summary_calls=True` adds them (timeline, cost).

        Readers load only what they show: `columns` picks columns (e.g. TIMELINE_COLUMNS, no JSON), `last=n`
        only the n most recent records.
        """
        cols = "*" if columns is None else ", ".join(_column(c) for c in columns)
        where = ("(?::VARCHAR IS NULL OR session_id = ?) AND (?::INTEGER IS NULL OR turn = ?) "
                 "AND (?::INTEGER IS NULL OR iteration = ?) AND (? OR purpose IS NULL)")
        params: list[Any] = [session_id, session_id, turn, turn, iteration, iteration, bool(summary_calls)]
        if last is None:
            return self._df(f"SELECT {cols} FROM requests WHERE {where} ORDER BY created_at, session_id, seq", params)
        return self._df(
            f"SELECT {cols} FROM (SELECT * FROM requests WHERE {where} "
            "ORDER BY created_at DESC, session_id DESC, seq DESC LIMIT ?) ORDER BY created_at, session_id, seq",
            [*params, int(last)],
        )

    # -- small questions the agent, the magics and the kernel ask (SQL stays inside the store) ------------
    def _one(self, query: str, params: list[Any]) -> Any:
        with self._lease.connection("read the store") as con:
            row = first_row(con, query, params)
        return None if row is None else row[0]

    def has_session(self, session_id: str) -> bool:
        """True once the session's row exists (its first turn has started)."""
        return bool(self._one("SELECT count(*) FROM sessions WHERE id = ?", [session_id]))

    def session_workspace(self, session_id: str) -> str | None:
        """The workspace folder the session was started in, or None."""
        found = self._one("SELECT workspace FROM sessions WHERE id = ?", [session_id])
        return None if found is None else str(found)

    def session_ids(self, source: str | None = None) -> set[str]:
        """Ids of the stored sessions, optionally only those imported from `source`."""
        with self._lease.connection("list sessions") as con:
            rows = con.execute("SELECT id FROM sessions WHERE (?::VARCHAR IS NULL OR source = ?)",
                               [source, source]).fetchall()
        return {str(r[0]) for r in rows}

    def turn_count(self, session_id: str) -> int:
        """How many prompts (user messages) the session has stored."""
        return int(self._one("SELECT count(*) FROM messages WHERE session_id = ? AND role = 'user'", [session_id]))

    def message_count(self, session_id: str) -> int:
        """How many messages the session's transcript holds."""
        return int(self._one("SELECT count(*) FROM messages WHERE session_id = ?", [session_id]))

    def last_user_seq(self, session_id: str) -> int | None:
        """The seq of the session's last stored prompt, or None."""
        found = self._one("SELECT max(seq) FROM messages WHERE session_id = ? AND role = 'user'", [session_id])
        return None if found is None else int(found)

    def event_fields(self, type: str, keys: Sequence[str]) -> list[tuple[Any, ...]]:
        """(session_id, payload[key] as text for each key) of every event of `type`, oldest first (e.g. the
        agent kernel's notebook bindings, N4); a missing key or JSON null is None."""
        cols = ", ".join("json_extract_string(payload, ?)" for _ in keys)
        with self._lease.connection("read events") as con:
            return [tuple(row) for row in con.execute(
                f"SELECT session_id, {cols} FROM events WHERE type = ? ORDER BY created_at, seq",
                [*(f"$.{k}" for k in keys), type]).fetchall()]

    def session_for_event(self, type: str, key: str, value: str) -> str | None:
        """The session of the newest event of `type` whose payload has `key` = `value` (e.g. a notebook binding)."""
        found = self._one("SELECT session_id FROM events WHERE type = ? AND json_extract_string(payload, ?) = ? "
                          "ORDER BY created_at DESC, seq DESC LIMIT 1", [type, f"$.{key}", value])
        return None if found is None else str(found)

    def turn_events(self, session_ids: Sequence[str] | None = None) -> pd.DataFrame:
        """session_id, turn, type, created_at of every event that belongs to a turn, in order (for exports)."""
        where, params = self._in("session_id", session_ids)
        return self._df(f"SELECT session_id, turn, type, created_at FROM events WHERE turn IS NOT NULL{where} "
                        "ORDER BY session_id, seq", params)

    def call_records(self, columns: Sequence[str], session_ids: Sequence[str] | None = None, *,
                     extra: Sequence[str] = ()) -> pd.DataFrame:
        """The given request-record columns of the sessions (all when None), by session and seq (for exports);
        `extra`: keys of the `extra` JSON column read as text columns of their own (None where absent)."""
        where, params = self._in("session_id", session_ids)
        cols = ", ".join([*(_column(c) for c in columns),
                          *(f"json_extract_string(extra, '$.{k}') AS {_column(k)}" for k in extra)])
        return self._df(f"SELECT {cols} FROM requests WHERE true{where} ORDER BY session_id, seq", params)

    @staticmethod
    def _in(column: str, values: Sequence[str] | None) -> tuple[str, list[Any]]:
        if values is None:
            return "", []
        vals = list(values)
        return (f" AND {column} IN ({', '.join('?' * len(vals))})" if vals else " AND false"), vals

    def sql(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> pd.DataFrame:
        """Run one read-only SQL query (SELECT/EXPLAIN) and return a DataFrame."""
        try:
            statements = duckdb.extract_statements(query)
        except duckdb.Error as exc:
            raise translate(self.path, exc, "parse the query") from exc
        if len(statements) != 1:
            raise StoreError(self.path, f"store.sql runs exactly one statement, got {len(statements)}")
        if statements[0].type not in _READ_ONLY:
            raise StoreError(
                self.path,
                f"store.sql is read-only (got {statements[0].type.name}): the transcript is append-only "
                "(SPEC S2). Use the Store methods to add rows.",
            )
        with self._lease.connection("run a query") as con:
            return con.execute(query, params).df() if params is not None else con.execute(query).df()

    # -- Parquet --------------------------------------------------------------------------------

    def export_parquet(self, folder: str | os.PathLike[str],
                       partition_by: Sequence[str] | None = None) -> list[Path]:
        """Write each public table to `folder/<table>.parquet`; return the files. With ``partition_by``
        (e.g. ``("source", "date")``): hive-style `folder/<table>/source=../date=../part-0.parquet` (S4)."""
        target = Path(folder).expanduser()
        with self._lease.connection(f"export Parquet to {target}") as con:
            try:
                if partition_by is not None:
                    return export_partitioned(con, target, partition_by)
                return export_tables(con, target)
            except OSError as exc:
                raise translate(self.path, exc, f"export Parquet to {target}") from exc

    def import_parquet(self, folder: str | os.PathLike[str]) -> dict[str, int]:
        """Import a folder written by export_parquet; rows whose keys exist are skipped."""
        source = Path(folder).expanduser()
        with self._lease.connection(f"import Parquet from {source}", write=True) as con:
            try:
                counts = import_tables(con, source)
            except FileNotFoundError as exc:
                raise StoreError(self.path, str(exc)) from exc
            finally:
                self._next.clear()
        return counts

