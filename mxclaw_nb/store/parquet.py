"""Parquet export and import of the store's public tables (SPEC S4).

Why: analysts combine many users' sessions in other engines (pandas, Spark, another DuckDB), and
Parquet is what they all read. Export writes one `<table>.parquet` per public table; import reads
such a folder back, matching columns by name (so a folder from an older schema still imports) and
skipping rows whose key already exists, so importing the same folder twice adds nothing. Import
only inserts: existing rows are never touched (SPEC S2).

Partitioned layout (``partition_by=("source", "date")``): one folder per table, split hive style by the
session's source and the UTC date it was created, e.g. ``messages/source=claude-code/date=2026-12-04/
part-0.parquet``. Every row of a session lands in its session's partition, so engines that prune by
partition (DuckDB, Spark, a DuckLake catalog fed with ``ducklake_add_data_files``) read one source or one
day without opening the rest. The partition columns live in the paths, not in the files: read with
``read_parquet('out/messages/**/*.parquet', hive_partitioning=true, hive_types={'source': VARCHAR,
'date': DATE})``. Import reads both layouts.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import duckdb

from mxclaw_nb.store.lease import first_row, transaction

# Public tables and the columns that identify a row in each.
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",),
    "messages": ("session_id", "seq"),
    "events": ("session_id", "seq"),
    "artifacts": ("session_id", "id"),
    "requests": ("session_id", "seq"),
}


# What a table can be partitioned by: the SQL for its value, taken from the row's session (s) or the row (t).
PARTITION_COLUMNS: dict[str, str] = {
    "source": "coalesce(s.source, 'unknown')",
    "date": "CAST(coalesce(s.created_at, t.created_at) AS DATE)",
}
HIVE_TYPES = "{'source': VARCHAR, 'date': DATE}"


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


def export_partitioned(con: duckdb.DuckDBPyConnection, folder: Path,
                       partition_by: Sequence[str] = ("source", "date")) -> list[Path]:
    """Write every public table to `folder/<table>/<col>=<value>/.../part-0.parquet` (hive style); return the
    files. A table folder is replaced as a whole, so re-exporting leaves no stale partition behind."""
    by = list(partition_by)
    unknown = [c for c in by if c not in PARTITION_COLUMNS]
    if not by or unknown or len(set(by)) != len(by):
        raise ValueError(f"partition_by takes distinct names from {sorted(PARTITION_COLUMNS)}, got {partition_by!r}")
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for table, keys in TABLE_KEYS.items():
        target = folder / table
        _clear(target)
        columns = [name for (name,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = 'main' "
            "ORDER BY column_index", [table]).fetchall()]
        own = ", ".join(f"t.{c}" for c in columns if c not in by)
        parts = ", ".join(f"{PARTITION_COLUMNS[c]} AS {c}" for c in by)
        join = "t.id" if table == "sessions" else "t.session_id"
        order = ", ".join(f"t.{k}" for k in keys)
        con.execute(
            f"COPY (SELECT {own}, {parts} FROM {table} t LEFT JOIN sessions s ON s.id = {join} ORDER BY {order}) "
            f"TO {_literal(target)} (FORMAT parquet, PARTITION_BY ({', '.join(by)}), "
            "FILENAME_PATTERN 'part-{i}')"
        )
        written.extend(sorted(target.rglob("*.parquet")))
    return written


def _clear(target: Path) -> None:
    """Remove an earlier partitioned export of one table (DuckDB's OVERWRITE keeps stale partition folders).
    Refuses a folder holding anything but `<col>=<value>` folders and Parquet files: it is not ours."""
    if not target.exists():
        return
    for path in target.rglob("*"):
        ours = path.suffix == ".parquet" if path.is_file() else "=" in path.name
        if not ours or path.is_symlink():
            raise ValueError(f"{target} holds {path.name!r}, so it is not a partitioned export: "
                             "export to another folder")
    shutil.rmtree(target)


def _partitioned_source(con: duckdb.DuckDBPyConnection, table: str, folder: Path) -> str | None:
    """A SELECT over `folder/<table>/**/*.parquet` without the partition columns the table lacks, or None."""
    if not any(folder.rglob("*.parquet")):
        return None
    own = {name for (name,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = 'main'", [table]).fetchall()}
    glob = _literal(folder / "**" / "*.parquet")
    found = {name for (name,) in con.execute(
        f"SELECT column_name FROM (DESCRIBE SELECT * FROM read_parquet({glob}, hive_partitioning = true, "
        f"hive_types = {HIVE_TYPES}, union_by_name = true))").fetchall()}
    extra = sorted(found - own)
    exclude = f" EXCLUDE ({', '.join(extra)})" if extra else ""
    return (f"SELECT *{exclude} FROM read_parquet({glob}, hive_partitioning = true, hive_types = {HIVE_TYPES}, "
            "union_by_name = true)")


def import_tables(con: duckdb.DuckDBPyConnection, folder: Path) -> dict[str, int]:
    """Insert rows from `folder/<table>.parquet` (or a partitioned `folder/<table>/`) whose keys are new;
    return rows added per table."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no such folder to import Parquet from: {folder}")
    counts: dict[str, int] = {}
    with transaction(con):
        for table, keys in TABLE_KEYS.items():
            source = folder / f"{table}.parquet"
            if source.exists():
                select = f"SELECT * FROM read_parquet({_literal(source)})"
            elif (folder / table).is_dir():
                select = _partitioned_source(con, table, folder / table) or ""
            else:
                select = ""
            if not select:
                counts[table] = 0
                continue
            row = first_row(con, f"INSERT INTO {table} BY NAME SELECT p.* FROM ({select}) p "
                                 f"ANTI JOIN {table} t USING ({', '.join(keys)})")
            counts[table] = int(row[0]) if row else 0
    return counts
