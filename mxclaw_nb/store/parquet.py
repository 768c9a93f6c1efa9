"""Parquet export and import of the store's public tables (SPEC S4).

Why: analysts combine many users' sessions in other engines (pandas, Spark, another DuckDB), and
Parquet is what they all read. Export writes one `<table>.parquet` per public table; import reads
such a folder back, matching columns by name (so a folder from an older schema still imports) and
skipping rows whose key already exists, so importing the same folder twice adds nothing. Import
only inserts: existing rows are never touched (SPEC S2).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from mxclaw_nb.store.lease import transaction

# Public tables and the columns that identify a row in each.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",),
    "messages": ("session_id", "seq"),
    "events": ("session_id", "seq"),
    "artifacts": ("session_id", "id"),
    "requests": ("session_id", "seq"),
}


def _literal(path: Path) -> str:
    # COPY ... TO takes no bound parameters, so quote the path as a SQL string literal.
    return "'" + str(path).replace("'", "''") + "'"


def export_tables(con: duckdb.DuckDBPyConnection, folder: Path) -> list[Path]:
    """Write every public table to `folder/<table>.parquet`; return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for table, keys in TABLE_KEYS.items():
        target = folder / f"{table}.parquet"
        order = ", ".join(keys)
        con.execute(f"COPY (SELECT * FROM {table} ORDER BY {order}) TO {_literal(target)} (FORMAT parquet)")
        written.append(target)
    return written


def import_tables(con: duckdb.DuckDBPyConnection, folder: Path) -> dict[str, int]:
    """Insert rows from `folder/<table>.parquet` whose keys are new; return rows added per table."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder to import Parquet from: {folder}")
    counts: dict[str, int] = {}
    with transaction(con):
        for table, keys in TABLE_KEYS.items():
            source = folder / f"{table}.parquet"
            if not source.exists():
                counts[table] = 0
                continue
            row = con.execute(
                f"INSERT INTO {table} BY NAME SELECT p.* FROM read_parquet(?) p "
                f"ANTI JOIN {table} t USING ({', '.join(keys)})",
                [str(source)],
            ).fetchone()
            counts[table] = int(row[0]) if row else 0
    return counts
