"""Partitioned Parquet export (SPEC S4): hive-style source=/date= folders that DuckDB and Arrow read as is.

A real DuckDB store file with sessions from two sources over two days; the export is read back by a
separate in-memory DuckDB with ``read_parquet(..., hive_partitioning=true)`` (the README recipe), by
pyarrow's dataset reader (what Spark-style engines do with the same layout), and imported into a fresh
store, which must end up with the same rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pytest

from mxclaw_nb.store.parquet import TABLE_KEYS
from mxclaw_nb.store.writer import Store

DAY1 = datetime(2026, 12, 3, 23, 59, 50)


class Clock:
    """Advances a second per call; ``jump`` moves it to another day."""

    def __init__(self) -> None:
        self.now = DAY1

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _session(store: Store, source: str, n: int) -> str:
    sid = store.create_session(source=source, model="m")
    store.append_messages(sid, [{"role": "user", "content": f"q{k}"} if k % 2 == 0 else
                                {"role": "assistant", "content": f"a{k}"} for k in range(n)], turn=1)
    store.append_event(sid, "context.compacted", {"stage": "micro", "before_tokens": 10, "after_tokens": 5}, turn=1)
    store.append_request(sid, {"seq": 0, "turn": 1, "model": "m", "after_tokens": 5, "retry": False})
    store.put_artifact(sid, f"artifact of {sid}")
    return sid


@pytest.fixture
def store(tmp_path: Path) -> Store:
    clock = Clock()
    s = Store(tmp_path / "db" / "a.duckdb", clock=clock)
    _session(s, "agent", 4)          # 2026-12-03 (23:59:5x)
    _session(s, "claude-code", 6)    # crosses midnight: the session's own date decides its partition
    clock.now = datetime(2026, 12, 4, 10, 0, 0)
    _session(s, "agent", 3)          # 2026-12-04
    yield s
    s.close()


def _counts(store: Store, table: str) -> pd.DataFrame:
    join = "t.id" if table == "sessions" else "t.session_id"
    return store.sql(
        f"SELECT s.source, CAST(s.created_at AS DATE) AS date, count(*) AS n FROM {table} t "
        f"JOIN sessions s ON s.id = {join} GROUP BY ALL ORDER BY ALL")


def test_partitioned_export_reads_back_in_duckdb_and_arrow(store: Store, tmp_path: Path) -> None:
    """S4: every table is split by source and date; DuckDB reads each table folder with hive_partitioning."""
    out = tmp_path / "out"
    files = store.export_parquet(out, partition_by=("source", "date"))
    rel = sorted(str(f.relative_to(out)) for f in files if f.parent.parent.parent.name == "messages")
    assert rel == [
        "messages/source=agent/date=2026-12-03/part-0.parquet",
        "messages/source=agent/date=2026-12-04/part-0.parquet",
        "messages/source=claude-code/date=2026-12-03/part-0.parquet",
    ]
    con = duckdb.connect()
    for table in TABLE_KEYS:
        glob = str(out / table / "**" / "*.parquet")
        got = con.execute(
            "SELECT source, date, count(*) AS n FROM read_parquet(?, hive_partitioning = true) "
            "GROUP BY ALL ORDER BY ALL", [glob]).df()
        want = _counts(store, table)
        assert got["n"].tolist() == want["n"].tolist(), table
        assert got["source"].tolist() == want["source"].tolist()
        assert [str(d)[:10] for d in got["date"]] == [str(d)[:10] for d in want["date"]]
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet(?, "
                             "hive_partitioning = true))", [str(out / "messages" / "**" / "*.parquet")]).fetchall())
    assert types["source"] == "VARCHAR" and types["date"] == "DATE" and types["seq"] == "INTEGER"
    # the files hold the table's own columns; the partition values live only in the paths
    one = pd.read_parquet(out / "messages" / "source=agent" / "date=2026-12-04" / "part-0.parquet")
    assert "source" not in one and "date" not in one and one["seq"].tolist() == [0, 1, 2]
    arrow = ds.dataset(out / "events", format="parquet", partitioning="hive").to_table().to_pandas()
    assert sorted(arrow["source"].unique()) == ["agent", "claude-code"] and len(arrow) == 3


def test_partitioned_export_imports_into_a_fresh_store_and_reexports_cleanly(store: Store, tmp_path: Path) -> None:
    """S2/S4: import reads the partitioned layout (same rows, twice adds nothing); a re-export replaces folders."""
    out = tmp_path / "out"
    store.export_parquet(out, partition_by=("source", "date"))
    with Store(tmp_path / "other.duckdb") as other:
        counts = other.import_parquet(out)
        assert counts == {"sessions": 3, "messages": 13, "events": 3, "artifacts": 3, "requests": 3}
        for table, keys in TABLE_KEYS.items():
            order = ", ".join(keys)
            pd.testing.assert_frame_equal(store.sql(f"SELECT * FROM {table} ORDER BY {order}"),
                                          other.sql(f"SELECT * FROM {table} ORDER BY {order}"))
        assert other.import_parquet(out) == dict.fromkeys(counts, 0)
    files = store.export_parquet(out, partition_by=["source"])  # by source only: the date folders go away
    assert not any("date=" in str(f) for f in files) and not list(out.rglob("date=*"))
    assert duckdb.connect().execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = true)",
                                    [f"{out}/messages/**/*.parquet"]).fetchone() == (13,)
    with pytest.raises(ValueError, match="partition_by"):
        store.export_parquet(out, partition_by=("model",))
