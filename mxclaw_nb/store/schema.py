"""Schema migrations for the store, as an ordered list recorded in the database (SPEC S1).

Why: users keep their database for months while the package changes. Each migration is a function
appended to `MIGRATIONS` in order; its 1-based position is its version. Opening a file applies the
missing ones, each in its own transaction, and records it in `schema_migrations`, so opening an old
file upgrades it and migrating twice changes nothing. A file recorded at a version this code does
not know came from a newer mxclaw_nb: we refuse it rather than guess (pattern: simonw/llm
`llm/migrations.py`). Migrations only ever add; they never rewrite transcript rows (SPEC S2).

The column meanings are documented in the README section "The store: tables and columns"; keep the two in step.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from mxclaw_nb.records import column_types
from mxclaw_nb.store.errors import StoreError
from mxclaw_nb.store.lease import first_row, transaction

Migration = Callable[[duckdb.DuckDBPyConnection], None]
MIGRATIONS: list[Migration] = []


def migration(fn: Migration) -> Migration:
    """Register `fn` as the next migration (its version is its position, starting at 1)."""
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(con: duckdb.DuckDBPyConnection) -> None:
    """Sessions, transcript, events, artifacts and per-call request records."""
    con.execute(
        """
        CREATE TABLE sessions (
            id VARCHAR PRIMARY KEY, created_at TIMESTAMP NOT NULL, workspace VARCHAR, model VARCHAR,
            source VARCHAR NOT NULL, title VARCHAR, meta JSON
        );
        CREATE TABLE messages (
            session_id VARCHAR NOT NULL, seq INTEGER NOT NULL, turn INTEGER NOT NULL, iteration INTEGER,
            created_at TIMESTAMP NOT NULL, role VARCHAR NOT NULL, content VARCHAR, content_type VARCHAR,
            tool_calls JSON, tool_call_id VARCHAR, name VARCHAR, is_error BOOLEAN, reasoning VARCHAR,
            attachments JSON, extra JSON,
            PRIMARY KEY (session_id, seq)
        );
        CREATE TABLE events (
            session_id VARCHAR NOT NULL, seq INTEGER NOT NULL, turn INTEGER, iteration INTEGER,
            created_at TIMESTAMP NOT NULL, type VARCHAR NOT NULL, payload JSON,
            PRIMARY KEY (session_id, seq)
        );
        CREATE TABLE artifacts (
            session_id VARCHAR NOT NULL, id VARCHAR NOT NULL, created_at TIMESTAMP NOT NULL,
            bytes BIGINT NOT NULL, chars BIGINT NOT NULL, text VARCHAR NOT NULL,
            PRIMARY KEY (session_id, id)
        );
        CREATE TABLE requests (
            session_id VARCHAR NOT NULL, seq INTEGER NOT NULL, turn INTEGER, iteration INTEGER,
            created_at TIMESTAMP NOT NULL, model VARCHAR, base_url VARCHAR, counter VARCHAR,
            estimate_tokens BIGINT, calibrated_tokens BIGINT, before_tokens BIGINT, after_tokens BIGINT,
            threshold BIGINT, window_tokens BIGINT, stage VARCHAR, prompt_tokens_reported BIGINT,
            completion_tokens_reported BIGINT, latency_ms DOUBLE, error VARCHAR, summary VARCHAR,
            provenance JSON, retry BOOLEAN NOT NULL DEFAULT false, extra JSON,
            PRIMARY KEY (session_id, seq)
        );
        """
    )



def add_request_columns(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """Add columns of the `requests` table, each with the type its RequestRecord field declares (SPEC S1: the
    record is the one declaration of the table's columns; `tests/test_store_files.py` checks the table a
    migrated file has against it)."""
    types = column_types()
    for name in names:
        con.execute(f"ALTER TABLE requests ADD COLUMN IF NOT EXISTS {name} {types[name]}")


@migration
def m002_request_cache_columns(con: duckdb.DuckDBPyConnection) -> None:
    """E1/E2: the provider's reported cache figures and the prefix shared with the previous call, per call."""
    add_request_columns(con, "cached_tokens_reported", "cache_write_tokens_reported", "prefix_tokens")


@migration
def m003_request_purpose(con: duckdb.DuckDBPyConnection) -> None:
    """C11: which model calls are summary calls (NULL: a turn's call; 'summary': the call that wrote a summary)."""
    add_request_columns(con, "purpose")


@migration
def m004_engine_state(con: duckdb.DuckDBPyConnection) -> None:
    """C7/T3: what re-entry needs of the context engine, saved by the process that built it (one row per session,
    replaced; plain JSON, checked against the stored rows before use: never trusted blindly, S1 unchanged)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS engine_state (session_id VARCHAR PRIMARY KEY, engine_version INTEGER NOT NULL,"
        " rows BIGINT NOT NULL, boundary VARCHAR NOT NULL, state JSON NOT NULL, updated_at TIMESTAMP NOT NULL)")


def _ensure_ledger(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL)"
    )


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """Highest migration version recorded in the database (0 for a new file)."""
    found = first_row(
        con, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_migrations' AND schema_name = 'main'")
    if not found or not found[0]:
        return 0
    row = first_row(con, "SELECT coalesce(max(version), 0) FROM schema_migrations")
    return int(row[0]) if row else 0


def migrate(con: duckdb.DuckDBPyConnection, path: Path, migrations: list[Migration] | None = None) -> int:
    """Apply the migrations missing from the database; return the resulting version."""
    steps = MIGRATIONS if migrations is None else migrations
    version = current_version(con)
    if version > len(steps):
        raise StoreError(
            path,
            f"the database has schema version {version}, but this mxclaw_nb knows only up to "
            f"{len(steps)}: it was written by a newer mxclaw_nb. Upgrade mxclaw_nb "
            "(pip install -U mxclaw_nb), or set MXCLAW_DB to another file. The file was not changed.",
        )
    if version == len(steps):
        return version
    for number, step in enumerate(steps[version:], start=version + 1):
        with transaction(con):
            _ensure_ledger(con)
            step(con)
            con.execute(
                "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                [number, step.__name__, datetime.now(UTC).replace(tzinfo=None)],
            )
    return len(steps)
