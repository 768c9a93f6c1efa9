"""Real-world OpenAI chat-log shapes through every path a transcript takes (SPEC C2, C4, C5, C9, C10, S2, L7, N2,
N3): import, the context engine, the store round trip, replay/compare, the widgets' data, Parquet export and a
resumed ``%agent`` turn. The shapes and where they were seen are listed in ``corpus.py``.

Named cases pin each bug these shapes found (each failed before its fix); the Hypothesis properties run the
whole path over generated transcripts mixing all of them.
"""

from __future__ import annotations

import gzip
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.utils.capture import capture_output

from mxclaw_nb.analysis import compare, import_openai_jsonl, read_openai_jsonl, replay
from mxclaw_nb.analysis.replay import call_positions
from mxclaw_nb.context import ContextPolicy, build_request_view, estimate_messages
from mxclaw_nb.messages import content_text
from mxclaw_nb.store.codec import message_to_row, row_to_message
from mxclaw_nb.store.writer import Store
from mxclaw_nb.widgets import CompactionInspector
from mxclaw_nb.widgets.data import after_frame, before_frame, from_view
from tests.context.oracle import build_and_check, check_pairing
from tests.helpers.shell import agent_shell

from .corpus import huge_message, message_st, transcript_st

SHAPES = settings(max_examples=120, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.function_scoped_fixture])
SLOW = settings(SHAPES, max_examples=15)
SENT_ROLES = {"system", "developer", "user", "assistant", "tool"}


def as_json(value: Any) -> Any:
    """What a JSON file holding `value` reads back as (a surrogate pair written as two escapes is one char)."""
    return json.loads(json.dumps(value))


def write_jsonl(path: Path, transcripts: list[list[dict[str, Any]]]) -> Path:
    path.write_text("".join(json.dumps({"id": f"c{k}", "messages": t}) + "\n" for k, t in enumerate(transcripts)),
                    encoding="utf-8")
    return path


def usable(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and m.get("role") in ("system", "developer", "user", "assistant") for m in messages)


# ---------------------------------------------------------------------------------------------------------------
# Named shapes: each of these failed before its fix.

REAL_ASSISTANT = {  # ChatCompletionMessage.model_dump() of the openai package, appended to history as is
    "role": "assistant", "content": None, "refusal": None, "audio": None, "function_call": None, "annotations": [],
    "tool_calls": [{"id": "call_abc", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}],
}


@pytest.mark.parametrize("message", [
    REAL_ASSISTANT,
    {"role": "tool", "tool_call_id": None, "content": "x"},  # an explicit null id
    {"role": "tool", "tool_call_id": 7, "content": "x", "name": 3},  # numbers where strings are expected
    {"role": "assistant", "content": "x", "reasoning": {"effort": "high", "summary": ["s"]}, "is_error": 0},
    {"role": "user", "content": {"text": "an object as content"}},
    {"role": "tool", "tool_call_id": "c", "content": 42},
    {"role": "developer", "content": "You are terse."},
    {"role": "function", "name": "get_weather", "content": '{"t": 21}'},
])
def test_s2_store_keeps_real_message_shapes_exactly(tmp_path: Path, message: dict[str, Any]) -> None:
    """S2: what goes in comes out equal, through the codec and through DuckDB (before: `refusal: None` and
    every explicit null were dropped, `7` came back as `"7"`, developer/function roles and object content raised)."""
    assert row_to_message(message_to_row(message)) == message
    with Store(tmp_path / "s.duckdb") as store:
        sid = store.create_session()
        store.append_message(sid, message, turn=1)
        assert store.load_transcript(sid) == [message]


def test_s4_import_accepts_developer_legacy_function_and_object_content(tmp_path: Path) -> None:
    """A conversation with `developer`, legacy `function_call` / `role: "function"` and object content imports
    whole (before: the line was rejected); the engine drops the legacy result from the view with a reason."""
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "get_weather", "arguments": "{}"}},
        {"role": "function", "name": "get_weather", "content": {"t": 21}},
        {"role": "assistant", "content": "21 degrees"},
    ]
    with Store(tmp_path / "s.duckdb") as store:
        report = import_openai_jsonl(store, write_jsonl(tmp_path / "f.jsonl", [messages]), progress=False)
        assert report.ok and report.messages == 5
        stored = store.load_transcript(report.sessions[0])
    assert stored == messages
    view = build_and_check(stored, ContextPolicy(10_000))
    assert [m["role"] for m in view.messages] == ["developer", "user", "assistant", "assistant"]
    dropped = [r for r in view.provenance.before if r.action == "dropped"]
    assert [r.position for r in dropped] == [3]


def test_l7_lone_surrogates_in_ids_meta_and_text_import_and_show(tmp_path: Path) -> None:
    """L7: a lone surrogate in a conversation id, a call id, a tool name and text imports (before: the session id
    hash raised UnicodeEncodeError) and the widgets' DataFrames build (before: pyarrow raised on the preview)."""
    messages = [{"role": "user", "content": "bad \udcff byte"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c\ud800", "type": "function", "function": {"name": "ed\udc80", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c\ud800", "content": "ok \udcfe"}]
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps({"id": "conv\ud800", "meta": {"k": "\udcff"}, "messages": messages}) + "\n")
    with Store(tmp_path / "s.duckdb") as store:
        report = import_openai_jsonl(store, path, progress=False)
        assert report.ok
        stored = store.load_transcript(report.sessions[0])
    assert stored == messages
    view = build_request_view(stored, ContextPolicy(10_000))  # (the oracle pairs by sent id: not for these ids)
    check_pairing(view.messages)
    assert view.messages[2]["tool_call_id"] == "c\\ud800" and not view.repaired  # paired by the stored id
    data = from_view(view)
    before, after = before_frame(data), after_frame(data)
    assert "bad \\xff byte" in before["preview"].iloc[0] and before["tool"].iloc[2] == "ed\\x80"
    assert len(after) == 3
    CompactionInspector(view)
    json.dumps(view.messages, ensure_ascii=False).encode("utf-8")  # what is sent is valid UTF-8


def test_l7_invalid_utf8_bytes_in_a_file_are_kept_reversibly(tmp_path: Path) -> None:
    """L7: a byte that is not UTF-8 inside a JSON string is stored as its reversible escape (before: it became
    U+FFFD and the byte was lost); the content column shows ``\\xff`` and the loaded message holds the byte."""
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9 \xff"}, '
                     b'{"role": "assistant", "content": "ok"}]}\n')
    with Store(tmp_path / "s.duckdb") as store:
        report = import_openai_jsonl(store, path, progress=False)
        assert report.ok
        sid = report.sessions[0]
        loaded = store.load_transcript(sid)[0]["content"]
        shown = store.sql("SELECT content FROM messages WHERE session_id = ? AND seq = 0", [sid])["content"][0]
    assert loaded.encode("utf-8", "surrogateescape") == b"caf\xe9 \xff" and shown == "caf\\xe9 \\xff"
    view = build_request_view([{"role": "user", "content": loaded}], ContextPolicy(1_000))
    assert view.messages[0]["content"] == "caf\\xe9 \\xff"  # sent escaped, valid UTF-8


def test_n3_replay_of_a_log_that_opens_with_results_before_their_call() -> None:
    """Results written before their call (an out-of-order log): replay simulates calls only once something is
    sendable (before: ValueError "nothing to send" from the first simulated call)."""
    messages = [{"role": "tool", "tool_call_id": "call_1", "content": "early result"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{"}}]},
                {"role": "user", "content": "and?"}, {"role": "assistant", "content": "done"}]
    assert call_positions(messages) == [3]
    df = replay(messages, ContextPolicy(2_000, 0.8, 300))
    assert list(df["n_messages"]) == [3] and int(df["synthetic"].iloc[0]) == 1  # the dangling call is repaired
    assert len(compare([messages], [ContextPolicy(2_000), ContextPolicy(100, 0.5, 0)], progress=False)) == 2


TAU_ROW = {"task_id": 3, "reward": 1.0, "traj": [{"role": "user", "content": "hi"},
                                                 {"role": "assistant", "content": "hello"}]}
SWE_ROW = {"environment": "swe", "history": [{"role": "system", "content": "s", "agent": "primary"},
                                            {"role": "user", "content": "fix it", "message_type": "observation"}]}


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("list.json", json.dumps([{"id": "a", "messages": TAU_ROW["traj"]}, TAU_ROW], indent=2), [(1, 2), (2, 2)]),
    ("one.json", json.dumps({"messages": TAU_ROW["traj"]}, indent=2), [(1, 2)]),
    ("bare.json", json.dumps(TAU_ROW["traj"]), [(1, 2)]),
    ("pretty.jsonl", json.dumps([TAU_ROW, SWE_ROW], indent=1), [(1, 2), (2, 2)]),
    ("nested.jsonl", json.dumps(TAU_ROW) + "\n" + json.dumps(SWE_ROW) + "\n", [(1, 2), (2, 2)]),
    # one message per line (a chat log written as it grew): the file is one conversation
    ("per-message.jsonl", "\n".join(json.dumps(m) for m in TAU_ROW["traj"] * 2) + "\n", [(1, 4)]),
    # files with a BOM each, concatenated (`cat a.jsonl b.jsonl`), CRLF line ends: a BOM on a later line too
    ("concatenated-boms.jsonl", "\r\n".join("\ufeff" + json.dumps(TAU_ROW) for _ in range(2)) + "\r\n",
     [(1, 2), (2, 2)]),
    # a list of conversations on one line, under a .jsonl name: one per item, as list.json reads
    ("one-line-list.jsonl", json.dumps([{"id": "a", "messages": TAU_ROW["traj"]}, TAU_ROW]), [(1, 2), (2, 2)]),
])
def test_s4_whole_file_shapes(tmp_path: Path, name: str, text: str, expected: list[tuple[int, int]]) -> None:
    """A JSON document (a list of conversations, one conversation, a bare message list; also pretty-printed under
    a .jsonl name) and nested trajectories (tau-bench `traj`, SWE-agent `history`) read as conversations
    (before: every line of a pretty-printed file was "not JSON", `traj`/`history` rows were rejected; each line of
    a one-message-per-line file was rejected as "expected {"messages": [...]}", a one-line list of conversations
    as "message 0 has role None")."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    good, bad = read_openai_jsonl(path)
    assert not bad and [(n, len(c.messages)) for n, c in good] == expected
    gz = tmp_path / f"{name}.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert [(n, len(c.messages)) for n, c in read_openai_jsonl(gz)[0]] == expected


def test_s4_sharegpt_and_broken_lines_are_named_and_the_rest_imports(tmp_path: Path) -> None:
    """A ShareGPT line gets a message saying what it is; a broken line is reported by number; others import."""
    lines = [json.dumps({"messages": [{"role": "user", "content": "ok 1"}]}),
             json.dumps({"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}),
             '{"messages": [{"role": "user", "content": "trunc',
             json.dumps({"messages": [{"role": "user", "content": "ok 4"}]})]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with Store(tmp_path / "s.duckdb") as store:
        report = import_openai_jsonl(store, path, progress=False)
        assert [n for n, _ in report.errors] == [2, 3] and "ShareGPT" in report.errors[0][1]
        assert "not JSON" in report.errors[1][1] and len(report.sessions) == 2


def test_c1_a_one_megabyte_message_goes_through_every_path(tmp_path: Path) -> None:
    """A 1 MB tool output (a cat of a log) imports, round-trips, is microcompacted (C5) and replays quickly."""
    big = huge_message()
    messages = [{"role": "user", "content": "show the log"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_big", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                big, {"role": "user", "content": "summarize"}, {"role": "assistant", "content": "it is fine"}]
    started = time.perf_counter()
    with Store(tmp_path / "s.duckdb") as store:
        report = import_openai_jsonl(store, write_jsonl(tmp_path / "big.jsonl", [messages]), progress=False)
        stored = store.load_transcript(report.sessions[0])
    assert stored == messages
    view = build_and_check(stored, ContextPolicy(20_000, 0.8, 1_000))
    assert view.stage == "micro" and view.messages[2]["content"].startswith("[old tool output compacted:")
    assert len(replay(stored, ContextPolicy(20_000, 0.8, 1_000))) == 2
    assert time.perf_counter() - started < 30


# ---------------------------------------------------------------------------------------------------------------
# Properties over generated real-world transcripts.

policies = st.builds(ContextPolicy, st.integers(200, 20_000), st.sampled_from([0.5, 0.8, 1.0]),
                     st.integers(0, 2_000))


@SHAPES
@given(transcript_st(), policies)
def test_c4_c5_engine_invariants_on_real_shapes(messages: list[dict[str, Any]], policy: ContextPolicy) -> None:
    """C0-C8 on real shapes: pairing, sendable keys, determinism, input not mutated (build_and_check); what is
    sent is valid UTF-8 JSON with known roles, and the C1 figure counts every sent character (conservative)."""
    if not usable(messages):
        with pytest.raises(ValueError, match="nothing to send"):
            build_request_view(messages, policy)
        return
    view = build_and_check(messages, policy)
    json.dumps(view.messages, ensure_ascii=False, allow_nan=False).encode("utf-8")
    assert {m["role"] for m in view.messages} <= SENT_ROLES
    assert view.after_tokens == estimate_messages(view.messages)
    sent_chars = sum(len(content_text(m.get("content"))) for m in view.messages)
    assert view.after_tokens >= math.ceil(sent_chars / 4) - len(view.messages)  # C1: ceil per message


@SHAPES
@given(st.lists(message_st, min_size=1, max_size=8))
def test_s2_codec_round_trip_is_exact(messages: list[dict[str, Any]]) -> None:
    """S2 at the codec: every generated message decodes to the dict that was encoded."""
    assert [row_to_message(message_to_row(m)) for m in messages] == messages


@settings(SHAPES, max_examples=40)
@given(st.lists(transcript_st(max_blocks=6), min_size=1, max_size=3))
def test_s2_s4_import_round_trip_replay_compare_and_widgets(tmp_path_factory: pytest.TempPathFactory,
                                                              transcripts: list[list[dict[str, Any]]]) -> None:
    """Import never fails on these shapes and stores each conversation exactly as the file holds it (S2); replay,
    compare and the widgets' data run over what was stored, one replay row per simulated call."""
    tmp = tmp_path_factory.mktemp("imp")
    path = write_jsonl(tmp / "t.jsonl", transcripts)
    with Store(tmp / "s.duckdb") as store:
        report = import_openai_jsonl(store, path, progress=False)
        assert report.ok, report.errors
        stored = [store.load_transcript(sid) for sid in report.sessions]
    assert stored == [as_json(t) for t in transcripts]  # one session per line (ids differ), in file order
    policy = ContextPolicy(1_500, 0.8, 200)
    for messages in stored:
        assert len(replay(messages, policy)) == len(call_positions(messages))
        if usable(messages):
            view = build_request_view(messages, policy)
            data = from_view(view)
            before = before_frame(data)  # one row per stored message, plus one per synthetic result (N2)
            assert before["position"].notna().sum() == len(messages) and len(after_frame(data)) == len(view.messages)
            CompactionInspector(view)
    df = compare(stored, [policy, ContextPolicy(400, 0.5, 0)], progress=False)
    assert len(df) == 2 * sum(len(call_positions(m)) for m in stored)


@SLOW
@given(st.lists(transcript_st(max_blocks=6), min_size=1, max_size=3))
def test_s4_parquet_export_reimports_identically(tmp_path_factory: pytest.TempPathFactory,
                                                 transcripts: list[list[dict[str, Any]]]) -> None:
    """S4: a store of imported real shapes exported to Parquet (flat and partitioned) imports back identically."""
    tmp = tmp_path_factory.mktemp("pq")
    with Store(tmp / "a.duckdb") as a:
        report = import_openai_jsonl(a, write_jsonl(tmp / "t.jsonl", transcripts), progress=False)
        want = {sid: a.load_transcript(sid) for sid in report.sessions}
        a.export_parquet(tmp / "flat")
        a.export_parquet(tmp / "lake", partition_by=("source", "date"))
    for folder in ("flat", "lake"):
        with Store(tmp / f"{folder}.duckdb") as b:
            b.import_parquet(tmp / folder)
            assert {sid: b.load_transcript(sid) for sid in want} == want


@settings(SLOW, max_examples=8)
@given(transcript_st(max_blocks=6))
def test_l1_c4_a_resumed_agent_turn_on_an_imported_session(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path_factory: pytest.TempPathFactory,
                                                           messages: list[dict[str, Any]]) -> None:
    """L1, C4: `%agent resume` of an imported real-shaped session, then a turn on the offline demo model in a real
    IPython shell: the turn finishes, the imported rows are untouched and new rows follow them."""
    tmp = tmp_path_factory.mktemp("resume")
    with agent_shell(monkeypatch, tmp) as shell:
        store = shell.magics_manager.registry["AgentMagics"].store()
        report = import_openai_jsonl(store, write_jsonl(tmp / "t.jsonl", [messages]), progress=False)
        sid = report.sessions[0]
        before = store.load_transcript(sid)
        with capture_output() as cap:
            shell.run_line_magic("agent", f"resume {sid}")
            result = shell.run_cell("%agent continue where we left off")
        assert result.success, cap.stderr
        after = store.load_transcript(sid)
        assert after[:len(before)] == before and after[len(before)]["content"] == "continue where we left off"
        assert after[-1]["role"] == "assistant" and not after[-1].get("tool_calls")
        events = store.events(sid)
        assert "turn.finished" in set(events["type"]) and "turn.failed" not in set(events["type"])
