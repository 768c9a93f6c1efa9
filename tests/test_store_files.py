"""Store files on disk (SPEC S1, S2): migrations, and bad input that must fail clearly without damage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

from mxclaw_nb.store.schema import MIGRATIONS, current_version, migrate
from mxclaw_nb.store.writer import Store, StoreError

WORKER = Path(__file__).parent / "helpers" / "store_worker.py"
README = Path(__file__).resolve().parents[1] / "README.md"


def run_worker(*args: str) -> list[dict]:
    out = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def documented_columns() -> dict[str, list[tuple[str, str]]]:
    tables: dict[str, list[tuple[str, str]]] = {}
    current = None
    section = README.read_text(encoding="utf-8").split("## The store: tables and columns", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        if line.startswith("### `"):
            current = line.split("`")[1]
            tables[current] = []
        elif current and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            tables[current].append((cells[0].strip("`"), cells[1]))
    return tables


def test_s1_every_column_is_documented_in_order(tmp_path: Path) -> None:
    with Store(tmp_path / "d.duckdb") as s:
        actual = s.sql("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                       "WHERE NOT internal AND schema_name = 'main' ORDER BY table_name, column_index")
    real = {t: list(zip(g.column_name, g.data_type, strict=True)) for t, g in actual.groupby("table_name")}
    assert documented_columns() == real


def test_s1_the_request_record_is_the_one_declaration_of_the_requests_table(tmp_path: Path) -> None:
    """S1: a migrated file's `requests` table, the README's table (name, type, meaning) and the store's writer
    and reader are all the RequestRecord's declared columns, in table order."""
    from mxclaw_nb.records import RequestRecord, column_meanings, column_types
    from mxclaw_nb.store.records import FRAME_COLUMNS, REQUEST_FIELDS, record_from_row, row_values

    with Store(tmp_path / "r.duckdb") as s:
        actual = s.sql("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'requests' "
                       "AND schema_name = 'main' ORDER BY column_index")
        sid = s.create_session()
        record = RequestRecord(turn=2, iteration=1, model="m", counter="calibrated", estimate_tokens=7, latency_ms=1.5,
                               retry=True, purpose="summary", tail_start=3, engine_ms=0.25, extra={"coverage": [1, 2]})
        s.append_request(sid, record)
        back = record_from_row(s.requests(sid, summary_calls=True).iloc[0])
    assert dict(zip(actual.column_name, actual.data_type, strict=True)) == column_types()
    assert list(FRAME_COLUMNS) == list(column_types())
    section = README.read_text(encoding="utf-8").split("### `requests`", 1)[1].split("\n### ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in section.splitlines()
            if line.startswith("| `")]
    assert {r[0].strip("`"): (r[1], " | ".join(r[2:])) for r in rows} == {
        name: (sql, column_meanings()[name]) for name, sql in column_types().items()}
    assert set(row_values(record)) == {*REQUEST_FIELDS, "extra"}
    assert (back.session_id, back.seq) == (sid, 0) and back.created_at is not None
    assert back == RequestRecord(**{**record.__dict__, "session_id": sid, "seq": 0, "created_at": back.created_at})


def test_s1_migrations_are_recorded_and_migrating_twice_changes_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "m.duckdb") as s:
        ledger = s.sql("SELECT version, name FROM schema_migrations ORDER BY version")
    assert list(ledger.version) == list(range(1, len(MIGRATIONS) + 1))
    assert list(ledger.name) == [m.__name__ for m in MIGRATIONS]
    con = duckdb.connect(str(tmp_path / "m.duckdb"))
    assert migrate(con, tmp_path / "m.duckdb") == len(MIGRATIONS)
    assert con.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)
    con.close()


def test_s1_opening_an_old_file_applies_only_the_missing_migrations(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    with Store(path) as s:  # a file at today's version plays the "old" file for a future migration
        sid = s.create_session()
        s.append_message(sid, {"role": "user", "content": "from v1"}, turn=0)

    def m_add_column(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("ALTER TABLE sessions ADD COLUMN tag VARCHAR")

    con = duckdb.connect(str(path))
    assert current_version(con) == len(MIGRATIONS)
    assert migrate(con, path, [*MIGRATIONS, m_add_column]) == len(MIGRATIONS) + 1
    assert migrate(con, path, [*MIGRATIONS, m_add_column]) == len(MIGRATIONS) + 1  # no second ALTER
    assert "tag" in [r[0] for r in con.execute("DESCRIBE sessions").fetchall()]
    assert con.execute("SELECT name FROM schema_migrations ORDER BY version DESC").fetchone()[0] == "m_add_column"
    con.close()
    # The file now claims a version this code does not know: refused, data left alone.
    with pytest.raises(StoreError, match=r"newer mxclaw_nb.*Upgrade") as err:
        Store(path)
    assert str(path) in str(err.value)
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT content FROM messages").fetchall() == [("from v1",)]
    con.close()


def test_s1_a_plain_duckdb_file_without_our_tables_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "plain.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE notes AS SELECT 'mine' AS x")
    con.close()
    with Store(path) as s:
        assert s.sql("SELECT x FROM notes").x[0] == "mine"
        assert s.sessions().empty


def test_bad_input_not_a_duckdb_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.duckdb"
    data = "这不是数据库\n".encode() * 500
    path.write_bytes(data)
    with pytest.raises(StoreError, match="not a DuckDB database") as err:
        Store(path)
    assert str(path) in str(err.value) and "MXCLAW_DB" in str(err.value)
    assert path.read_bytes() == data
    assert not Path(f"{path}.wal").exists()


def test_bad_input_folder_path_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the database folder") as err:
        Store(blocker / "sub" / "m.duckdb")
    assert str(blocker / "sub" / "m.duckdb") in str(err.value)


def test_bad_input_read_only_folder() -> None:
    """Run as an unprivileged user when we are root (root ignores permission bits)."""
    base = Path(tempfile.mkdtemp(prefix="mxclaw-ro-"))
    try:
        base.chmod(0o755)
        ro = base / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        args = ["open", str(ro / "m.duckdb")] + (["65534"] if os.geteuid() == 0 else [])
        facts = run_worker(*args)
        assert "error" in facts[0], facts
        assert str(ro / "m.duckdb") in facts[0]["error"] and "not writable" in facts[0]["error"]
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)
        shutil.rmtree(base)


def test_bad_input_full_disk_keeps_earlier_rows(tmp_path: Path) -> None:
    """A file-size limit in a child process stands in for a full disk (same write errors)."""
    path = tmp_path / "full.duckdb"
    with Store(path) as s:
        sid = s.create_session(session_id="s1")
        s.append_messages(sid, [{"role": "user", "content": f"m{i}"} for i in range(50)], turn=0)
    facts = run_worker("fill", str(path), "s1", str(path.stat().st_size + 1_000_000))
    assert "disk is full" in facts[0]["error"] and str(path) in facts[0]["error"]
    with Store(path) as s:
        assert [m["content"] for m in s.load_transcript("s1")] == [f"m{i}" for i in range(50)]
        assert s.sql("SELECT count(*) AS n FROM artifacts").n[0] == 0
        assert s.append_message("s1", {"role": "user", "content": "after"}, turn=1) == 50
