"""Store behaviour on real DuckDB files (SPEC S1, S2, S4, A1 storage): round trips, append-only, DataFrames."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import platformdirs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb.store.writer import Store, StoreError, default_db_path

T0 = datetime(2026, 1, 2, 3, 4, 5)


class FixedClock:
    """A clock that advances one second per call, so created_at values are exact."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "db" / "m.duckdb", clock=FixedClock())
    yield s
    s.close()


MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are helpful. 你是助手。"},
    {"role": "user", "content": [{"type": "text", "text": "看这张图"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
     "attachments": [{"kind": "image", "name": "a.png"}]},
    {"role": "assistant", "content": None, "reasoning": "think first",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": "x"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "read", "content": "Permission denied", "is_error": True},
    {"role": "tool", "tool_call_id": "c2", "content": "", "is_error": False},
    {"role": "assistant", "content": "done", "refusal": "kept in extra"},
    {"role": "assistant",
     "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
]


def test_s1_default_path_env_override_and_platformdirs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "x" / "env.duckdb"))
    assert default_db_path() == tmp_path / "x" / "env.duckdb"
    monkeypatch.delenv("MXCLAW_DB")
    assert default_db_path() == Path(platformdirs.user_data_dir("mxclaw_nb")) / "mxclaw.duckdb"


def test_s1_store_creates_folder_and_file_on_first_use(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "mx.duckdb"
    monkeypatch.setenv("MXCLAW_DB", str(target))
    with Store() as s:
        assert s.path == target
        assert target.is_file()
        tables = set(s.sql("SELECT table_name FROM duckdb_tables()").table_name)
    assert {"sessions", "messages", "events", "artifacts", "requests", "schema_migrations"} <= tables


def test_s2_transcript_round_trip_is_lossless_and_numbered(store: Store) -> None:
    sid = store.create_session(workspace="/w", model="m", title="t")
    seqs = [store.append_message(sid, m, turn=1, iteration=None if i < 2 else 0) for i, m in enumerate(MESSAGES)]
    assert seqs == list(range(len(MESSAGES)))
    assert store.load_transcript(sid) == MESSAGES
    assert store.append_messages(sid, MESSAGES[:2], turn=2) == [7, 8]
    assert store.load_transcript(sid) == MESSAGES + MESSAGES[:2]


def test_s2_none_valued_keys_come_back_as_given(store: Store) -> None:
    """Real logs carry explicit nulls (`refusal: None` from the openai package's model_dump): kept, not dropped."""
    sid = store.create_session()
    message = {"role": "user", "content": "hi", "name": None, "reasoning": None, "refusal": None}
    store.append_message(sid, message, turn=0)
    store.append_message(sid, {"role": "user", "content": "plain"}, turn=0)
    assert store.load_transcript(sid) == [message, {"role": "user", "content": "plain"}]
    extras = store.sql("SELECT extra FROM messages WHERE session_id = ? ORDER BY seq", [sid])["extra"]
    assert json.loads(extras[0]) == {"name": None, "reasoning": None, "refusal": None} and pd.isna(extras[1])


def test_s2_sessions_are_separate(store: Store) -> None:
    a, b = store.create_session(), store.create_session()
    store.append_message(a, {"role": "user", "content": "a"}, turn=0)
    assert store.append_message(b, {"role": "user", "content": "b"}, turn=0) == 0
    assert store.load_transcript(a) == [{"role": "user", "content": "a"}]
    assert store.load_transcript("no-such-session") == []


_text = st.text(max_size=40)
_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": _text}),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(
        st.fixed_dictionaries({"type": st.just("text"), "text": _text}), max_size=3)}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": _text, "content": _text,
                           "is_error": st.booleans()}),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(messages=st.lists(_message, min_size=1, max_size=6))
def test_s2_property_any_messages_round_trip(store: Store, messages: list[dict[str, Any]]) -> None:
    sid = store.create_session()
    store.append_messages(sid, messages, turn=0)
    assert store.load_transcript(sid) == messages


def test_s2_bad_messages_and_unknown_session_are_refused_without_storing(store: Store) -> None:
    sid = store.create_session()
    with pytest.raises(StoreError, match="role"):
        store.append_message(sid, {"role": "robot", "content": "x"}, turn=0)
    with pytest.raises(StoreError, match="content"):
        store.append_message(sid, {"role": "user", "content": {"when": datetime.now()}}, turn=0)
    with pytest.raises(StoreError, match="JSON"):
        store.append_event(sid, "x", {"when": datetime.now()})
    with pytest.raises(StoreError, match="unknown session"):
        store.append_message("nope", {"role": "user", "content": "x"}, turn=0)
    with pytest.raises(StoreError, match="already exists"):
        store.create_session(session_id=sid)
    # A batch with one bad message stores none of it.
    with pytest.raises(StoreError):
        store.append_messages(sid, [{"role": "user", "content": "ok"}, {"role": "nobody"}], turn=0)
    assert store.load_transcript(sid) == []
    assert store.append_message(sid, {"role": "user", "content": "first"}, turn=0) == 0


def test_s2_store_sql_is_read_only(store: Store) -> None:
    sid = store.create_session()
    store.append_message(sid, {"role": "user", "content": "keep me"}, turn=0)
    for query in ("DELETE FROM messages", "UPDATE messages SET content = 'x'", "DROP TABLE messages",
                  "INSERT INTO messages SELECT * FROM messages", "TRUNCATE messages",
                  "SELECT 1; DELETE FROM messages", "ALTER TABLE messages ADD COLUMN z INT"):
        with pytest.raises(StoreError, match="read-only|exactly one"):
            store.sql(query)
    assert store.load_transcript(sid) == [{"role": "user", "content": "keep me"}]
    df = store.sql("SELECT content FROM messages WHERE session_id = ?", [sid])
    assert list(df.content) == ["keep me"]


def _workload(store: Store, tmp_path: Path) -> str:
    sid = store.create_session(meta={"k": "v"})
    store.append_messages(sid, MESSAGES, turn=0)
    store.append_message(sid, {"role": "user", "content": "again"}, turn=1)
    store.append_event(sid, "context.compacted", {"before": 10, "after": 5}, turn=1, iteration=0)
    store.append_request(sid, {"turn": 1, "iteration": 0, "before_tokens": 10, "after_tokens": 5})
    art = store.put_artifact(sid, "z" * 60_000)
    store.get_artifact(sid, art)
    store.sessions(), store.transcript(sid), store.events(sid), store.requests(sid)
    store.export_parquet(tmp_path / "pq")
    store.import_parquet(tmp_path / "pq")
    return sid


def test_s2_no_statement_the_store_runs_updates_or_deletes(tmp_path: Path) -> None:
    """DuckDB's own query log over a whole workload: only CREATE/INSERT/SELECT/COPY and transactions."""
    with Store(tmp_path / "q.duckdb", idle_release=600) as store:
        with store._lease.connection("test") as con:
            con.execute("CALL enable_logging('QueryLog')")
        _workload(store, tmp_path)
        with store._lease.connection("test") as con:
            logged = [r[0] for r in con.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'").fetchall()]
    assert any(q.lstrip().upper().startswith("INSERT INTO MESSAGES") for q in logged)
    writes = [q for q in logged if re.search(r"\b(UPDATE|DELETE|TRUNCATE|DROP|ALTER|REPLACE)\b", q, re.I)
              and "enable_logging" not in q]
    assert writes == []


def test_s2_source_has_no_update_or_delete_sql() -> None:
    root = Path(__file__).resolve().parents[1] / "mxclaw_nb"
    for path in root.glob("store*.py"):
        code = path.read_text(encoding="utf-8")
        assert not re.search(r"\b(UPDATE|DELETE FROM|TRUNCATE|DROP TABLE|INSERT OR REPLACE|ON CONFLICT)\b", code), path


def test_s2_stored_rows_never_change_as_more_is_appended(store: Store, tmp_path: Path) -> None:
    sid = _workload(store, tmp_path)
    before = store.sql("SELECT * FROM messages ORDER BY session_id, seq")
    _workload(store, tmp_path / "again")
    store.append_messages(sid, MESSAGES, turn=5)
    after = store.sql("SELECT * FROM messages ORDER BY session_id, seq")
    same_keys = after.merge(before[["session_id", "seq"]], on=["session_id", "seq"])
    pd.testing.assert_frame_equal(same_keys, before)
    assert len(after) == len(before) + 8 + len(MESSAGES)


def test_a1_artifacts_are_whole_and_session_scoped(store: Store) -> None:
    a, b = store.create_session(), store.create_session()
    text = "第一行\n" + "x" * 70_000 + "\nlast"
    art = store.put_artifact(a, text)
    assert re.fullmatch(r"artifact-[0-9a-f]{12}", art)
    assert store.get_artifact(a, art) == text
    assert store.get_artifact(b, art) is None
    assert store.get_artifact(a, "artifact-000000000000") is None
    row = store.sql("SELECT bytes, chars FROM artifacts WHERE id = ?", [art]).iloc[0]
    assert (row.bytes, row.chars) == (len(text.encode()), len(text))
    with pytest.raises(StoreError, match="unknown session"):
        store.put_artifact("nope", "x")


def test_s4_dataframes_and_counts(store: Store) -> None:
    sid = store.create_session(workspace="/w", model="m1", title="demo")
    other = store.create_session()
    store.append_messages(sid, MESSAGES[:3], turn=1)
    store.append_message(sid, {"role": "user", "content": "2"}, turn=2)
    store.append_event(sid, "context.compacted", {"saved": 1}, turn=2)
    store.append_event(sid, "turn.started", {}, turn=2)
    store.append_event(other, "turn.started", {}, turn=1)
    from mxclaw_nb.context import ContextPolicy, build_request_view

    rows = build_request_view(MESSAGES[:3], ContextPolicy()).provenance.to_records()  # a view's own rows (C10)
    store.append_request(sid, {"turn": 1, "iteration": 0, "before_tokens": 900, "after_tokens": 300, "stage": "summary",
                               "provenance": rows, "latency_ms": 12.5, "custom": 1})
    store.append_request(sid, {"turn": 2, "iteration": 0, "before_tokens": 100, "after_tokens": 100, "retry": True})
    sessions = store.sessions().set_index("id")
    assert list(sessions.columns) == ["created_at", "workspace", "model", "source", "title", "turns", "messages",
                                      "model_calls", "compactions", "tokens_saved_est"]
    row = sessions.loc[sid]
    assert (row.turns, row.messages, row.model_calls, row.compactions, row.tokens_saved_est) == (2, 4, 2, 1, 600)
    assert (sessions.loc[other].messages, sessions.loc[other].model_calls) == (0, 0)
    transcript = store.transcript(sid)
    assert list(transcript.seq) == [0, 1, 2, 3] and list(transcript.role) == ["system", "user", "assistant", "user"]
    assert len(store.events()) == 3 and len(store.events(sid)) == 2
    assert list(store.events(type="turn.started").session_id) == [sid, other]
    reqs = store.requests(sid)
    assert list(reqs.seq) == [0, 1] and list(reqs.retry) == [False, True]
    assert reqs.extra[0] == '{"custom": 1}'  # unknown keys of a record given as a dict are kept in `extra`
    assert store.sql("SELECT provenance->>'$.format' AS f, provenance->'$.before.action'->>0 AS a FROM requests "
                     "WHERE seq = 0").iloc[0].tolist() == ["3", "kept"]  # stored in its one form, readable by SQL


def test_s1_clock_injection_sets_created_at(tmp_path: Path) -> None:
    aware = datetime(2030, 5, 6, 9, 0, tzinfo=UTC)
    with Store(tmp_path / "c.duckdb", clock=lambda: aware) as s:
        sid = s.create_session()
        s.append_message(sid, {"role": "user", "content": "x"}, turn=0)
        assert s.transcript(sid).created_at[0] == pd.Timestamp("2030-05-06 09:00")
        assert s.sessions().created_at[0] == pd.Timestamp("2030-05-06 09:00")


def test_s4_parquet_export_import_round_trip_and_skip_existing(store: Store, tmp_path: Path) -> None:
    sid = _workload(store, tmp_path / "w")
    files = store.export_parquet(tmp_path / "out")
    assert sorted(f.name for f in files) == sorted(f"{t}.parquet" for t in
                                                   ("sessions", "messages", "events", "artifacts", "requests"))
    assert len(pd.read_parquet(tmp_path / "out" / "messages.parquet")) == len(MESSAGES) + 1
    with Store(tmp_path / "other.duckdb") as other:
        mine = other.create_session()
        other.append_message(mine, {"role": "user", "content": "local"}, turn=0)
        counts = other.import_parquet(tmp_path / "out")
        assert counts == {"sessions": 1, "messages": len(MESSAGES) + 1, "events": 1, "artifacts": 1, "requests": 1}
        assert other.import_parquet(tmp_path / "out") == dict.fromkeys(counts, 0)
        assert other.load_transcript(sid) == store.load_transcript(sid)
        # Appending after an import continues the imported numbering.
        assert other.append_message(sid, {"role": "user", "content": "more"}, turn=9) == len(MESSAGES) + 1
        assert len(other.sessions()) == 2
        with pytest.raises(StoreError, match="no such folder"):
            other.import_parquet(tmp_path / "missing")


def test_s1_closed_store_refuses_use(tmp_path: Path) -> None:
    s = Store(tmp_path / "x.duckdb")
    s.close()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.create_session()


def test_s3_two_stores_in_one_process_hand_the_file_over(tmp_path: Path) -> None:
    a = Store(tmp_path / "x.duckdb")
    b = Store(tmp_path / "x.duckdb")
    sid = a.create_session()
    for i in range(20):
        (a if i % 2 else b).append_message(sid, {"role": "user", "content": str(i)}, turn=i)
    assert [m["content"] for m in a.load_transcript(sid)] == [str(i) for i in range(20)]
    a.close()
    b.close()


def test_l4_batch_is_one_transaction_all_or_nothing(store: Store) -> None:
    sid = store.create_session()
    with store.batch():
        assert store.append_message(sid, {"role": "assistant", "content": "a"}, turn=0, iteration=0) == 0
        store.append_request(sid, {"turn": 0, "iteration": 0, "estimate_tokens": 5})
        store.append_event(sid, "loop.iteration", {"i": 0}, turn=0)
        with store.batch():  # nested batches join the outer one
            assert store.append_messages(sid, MESSAGES[:2], turn=0) == [1, 2]
    assert len(store.load_transcript(sid)) == 3 and len(store.requests(sid)) == 1
    with pytest.raises(RuntimeError, match="boom"), store.batch():
        store.append_message(sid, {"role": "user", "content": "lost"}, turn=1)
        store.append_event(sid, "x", {}, turn=1)
        raise RuntimeError("boom")
    assert [m.get("content") for m in store.load_transcript(sid)][-1] == MESSAGES[1]["content"]
    assert len(store.events(sid)) == 1
    assert store.append_message(sid, {"role": "user", "content": "next"}, turn=1) == 3


def test_s1_request_created_at_may_be_given_aware(store: Store) -> None:
    sid = store.create_session()
    when = datetime(2031, 1, 1, 12, 0, tzinfo=UTC)
    store.append_request(sid, {"turn": 0, "created_at": when})
    assert store.requests(sid).created_at[0] == pd.Timestamp("2031-01-01 12:00")


def test_l4_deferred_writes_one_iteration_in_one_commit(store: Store) -> None:
    """Appends inside deferred() are numbered at once, written together at the end, in queue order."""
    sid = store.create_session()
    store.append_message(sid, {"role": "user", "content": "hi"}, turn=1)
    with store.deferred():
        store.append_request(sid, {"turn": 1, "iteration": 1, "stage": "unchanged"})
        seq = store.append_message(sid, {"role": "assistant", "content": "a"}, turn=1, iteration=1)
        store.append_event(sid, "tool.started", {"n": 1}, turn=1, iteration=1)
        seqs = store.append_messages(sid, [{"role": "tool", "tool_call_id": "c", "content": "r"}], turn=1, iteration=1)
        store.append_event(sid, "tool.finished", {"n": 2}, turn=1, iteration=1)
        with store.deferred():  # nested blocks join the outer one
            store.append_event(sid, "turn.finished", {"n": 3}, turn=1)
        assert store.sql("SELECT count(*) AS n FROM messages").n[0] == 1  # nothing written yet
    assert (seq, seqs) == (1, [2])
    assert [m["content"] for m in store.load_transcript(sid)] == ["hi", "a", "r"]
    assert list(store.events(sid)["type"]) == ["tool.started", "tool.finished", "turn.finished"]
    assert list(store.events(sid)["seq"]) == [0, 1, 2] and len(store.requests(sid)) == 1
    assert store.append_message(sid, {"role": "user", "content": "next"}, turn=2) == 3


def test_l4_deferred_block_that_raises_still_writes_what_was_done(store: Store) -> None:
    sid = store.create_session()
    with pytest.raises(KeyboardInterrupt), store.deferred():
        store.append_message(sid, {"role": "assistant", "content": "done before the interrupt"}, turn=1)
        raise KeyboardInterrupt
    assert [m["content"] for m in store.load_transcript(sid)] == ["done before the interrupt"]


def test_l4_deferred_block_is_all_or_none_when_the_write_fails(store: Store) -> None:
    sid = store.create_session()
    store.append_message(sid, {"role": "user", "content": "kept"}, turn=1)
    with pytest.raises(StoreError), store.deferred():
        store.append_event(sid, "tool.started", {}, turn=1)
        store.append_message(sid, {"role": "assistant", "content": "x"}, turn=1)
        store._pending_next[("messages", sid)] = 0  # simulate a clash: the next seq is already taken
        store.append_message(sid, {"role": "assistant", "content": "y"}, turn=1)
    assert [m["content"] for m in store.load_transcript(sid)] == ["kept"] and store.events(sid).empty
    assert store.append_message(sid, {"role": "assistant", "content": "after"}, turn=1) == 1


def test_s1_bulk_append_round_trips_every_shape(store: Store) -> None:
    """Many rows at once take the Arrow path: the same dicts come back, in order, with consecutive seqs."""
    sid = store.create_session()
    shapes: list[dict[str, Any]] = [
        {"role": "user", "content": "plain 中文"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "bad \udc80 bytes", "is_error": True},
        {"role": "user", "content": [{"type": "text", "text": "parts"}], "refusal": "kept in extra"},
        {"role": "assistant"},
    ]
    messages = [dict(shapes[k % len(shapes)], n=k) for k in range(300)]
    assert store.append_messages(sid, messages, turn=1) == list(range(300))
    assert store.load_transcript(sid) == messages
    with store.batch(), store.deferred():  # queued inside a batch: written in the batch's transaction
        store.append_messages(sid, messages[:100], turn=2)
    assert len(store.load_transcript(sid)) == 400


def test_s1_s4_import_sessions_writes_many_sessions_in_one_go_all_or_none(store: Store) -> None:
    """The bulk path of imports: sessions and transcripts as Arrow tables, one transaction (S1, S4, S2)."""
    runs = [(0, None, [{"role": "system", "content": "be brief"}]),
            (1, None, [{"role": "user", "content": "你好 " * 3}]),
            (1, 1, [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "a.txt", "is_error": True}])]
    items = [{"session_id": f"imp-{k}", "source": "import:x", "title": f"t{k}", "meta": {"line": k},
              "runs": runs[: k + 1]} for k in range(3)]
    assert store.import_sessions(items) == ["imp-0", "imp-1", "imp-2"]
    flat = [m for _, _, ms in runs for m in ms]
    for k in range(3):
        assert store.load_transcript(f"imp-{k}") == flat[: [1, 2, 4][k]]
    sessions = store.sessions().set_index("id")
    assert list(sessions.loc[["imp-0", "imp-2"], "title"]) == ["t0", "t2"]
    got = store.sql("SELECT seq, turn, iteration FROM messages WHERE session_id = 'imp-2' ORDER BY seq")
    assert [tuple(None if pd.isna(v) else int(v) for v in r) for r in got.itertuples(index=False)] == \
        [(0, 0, None), (1, 1, None), (2, 1, 1), (3, 1, 1)]
    # appends after a bulk import continue the numbering
    assert store.append_message("imp-1", {"role": "user", "content": "more"}, turn=2) == 2
    # all or none: an existing id, or one bad message, refuses the whole call and stores nothing of it
    with pytest.raises(StoreError, match="already exists"):
        store.import_sessions([{"session_id": "new-a", "runs": runs}, {"session_id": "imp-0", "runs": runs}])
    with pytest.raises(StoreError, match="new-b"):
        store.import_sessions([{"session_id": "new-a", "runs": runs},
                               {"session_id": "new-b", "runs": [(0, None, [{"role": "robot"}])]}])
    assert not {"new-a", "new-b"} & set(store.sessions()["id"])


def test_l4_deferred_commit_after_commits_what_waits_while_the_block_runs(store: Store) -> None:
    """A slow block (a tool, an approval prompt) does not keep its appends unstored much past `commit_after`
    (the committer thread looks every 0.1 s); later appends keep their order and the block's end commits the
    rest (L4)."""
    import time

    sid = store.create_session()
    with store.deferred(commit_after=0.05):
        assert store.append_message(sid, {"role": "assistant", "content": "a"}, turn=1) == 0
        store.append_event(sid, "tool.started", {"n": 1}, turn=1)
        deadline = time.monotonic() + 10
        while not store.load_transcript(sid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [m["content"] for m in store.load_transcript(sid)] == ["a"]  # committed by the timer
        assert store.append_message(sid, {"role": "tool", "tool_call_id": "c", "content": "b"}, turn=1) == 1
        store.append_event(sid, "tool.finished", {"n": 1}, turn=1)
    assert [m["content"] for m in store.load_transcript(sid)] == ["a", "b"]
    assert list(store.events(sid).sort_values("seq")["type"]) == ["tool.started", "tool.finished"]
    with store.deferred(commit_after=60):  # a quick block: one commit at its end
        store.append_message(sid, {"role": "user", "content": "c"}, turn=2)
    assert len(store.load_transcript(sid)) == 3


def test_l4_committer_and_a_batch_inside_a_deferred_block_never_wait_for_each_other(store: Store) -> None:
    """The committer thread only tries the connection and the queue: a batch() inside a deferred block (holding
    the connection while it appends to the queue) cannot deadlock with it; every row is stored in order (L4)."""
    import threading
    import time

    sid = store.create_session()
    done = threading.Event()

    def block() -> None:
        with store.deferred(commit_after=0.05):
            with store.batch():  # holds the connection while the committer's ticks come
                store.append_message(sid, {"role": "user", "content": "a"}, turn=1)
                time.sleep(0.4)  # the row is due: the committer wants the connection now
                store.append_message(sid, {"role": "assistant", "content": "b"}, turn=1)
                time.sleep(0.2)
            store.append_message(sid, {"role": "user", "content": "c"}, turn=1)
        done.set()

    worker = threading.Thread(target=block, daemon=True)
    worker.start()
    worker.join(20)
    assert done.is_set(), "the block and the committer thread deadlocked"
    assert [m["content"] for m in store.load_transcript(sid)] == ["a", "b", "c"]


def test_l4_an_iteration_with_many_rows_after_a_seq_lookup_commits(tmp_path: Path) -> None:
    # DuckDB 2 keeps a result that was not read to its end "unfinished", and registering an Arrow table on that
    # connection then fails: the seq lookup of a fresh table read one row, then 1,000 tool results (> the VALUES
    # chunk: the Arrow path) made the whole iteration fail (seen as turn.failed with 1,000 tool calls, L7).
    store = Store(tmp_path / "many.duckdb")
    sid = store.create_session()
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
             for i in range(1000)]
    with store.deferred(commit_after=0.5):
        store.append_request(sid, {"turn": 0, "iteration": 1, "stage": "unchanged", "estimate_tokens": 5})
        store.append_message(sid, {"role": "assistant", "content": None, "tool_calls": calls}, turn=0, iteration=1)
        for i in range(1000):
            store.append_event(sid, "tool.finished", {"i": i}, turn=0, iteration=1)
            store.append_message(sid, {"role": "tool", "tool_call_id": f"c{i}", "content": "alpha"}, turn=0,
                                 iteration=1)
    assert len(store.load_transcript(sid)) == 1001
    assert len(store.events(sid)) == 1000 and len(store.requests(sid)) == 1
    assert store.get_artifact(sid, "missing") is None  # a one-row read after it works too
    store.close()
