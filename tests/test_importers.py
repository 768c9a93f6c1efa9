"""Importers (SPEC S4): OpenAI chat JSONL, Claude Code session logs, Codex CLI rollouts -> store sessions (S1, S2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mxclaw_nb.analysis import (
    import_claude_code,
    import_codex,
    import_openai_jsonl,
    parse_claude_code,
    parse_codex,
    read_openai_jsonl,
)
from mxclaw_nb.analysis.importers import parse_openai_row, session_id_for, turn_plan
from mxclaw_nb.store.writer import Store
from tests.conftest import SHARED_TRANSCRIPTS

DATA = Path(__file__).parent / "data"


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "imports.duckdb")
    yield s
    s.close()


def test_openai_jsonl_imports_good_lines_and_reports_bad_ones_by_number(store: Store) -> None:
    """Bad lines are reported with line numbers; the rest are imported as sessions (S1)."""
    report = import_openai_jsonl(store, DATA / "openai_mixed.jsonl", progress=False)
    assert [n for n, _ in report.errors] == [4, 6, 7, 8]
    reasons = dict(report.errors)
    assert "not JSON" in reasons[4] and "'robot'" in reasons[6] and "no messages" in reasons[8]
    # line 9's object content is a real shape (a tool's JSON result): stored as JSON, read back equal (S2)
    assert len(report.sessions) == 4 and report.messages == 7 + 2 + 2 + 1 and not report.ok
    sessions = store.sessions().set_index("id")
    assert set(sessions.loc[report.sessions, "source"]) == {"import:openai_mixed.jsonl"}
    assert list(sessions.loc[report.sessions, "title"]) == ["conv-a", "openai_mixed.jsonl:2", "openai_mixed.jsonl:5",
                                                            "bad-content"]
    assert store.load_transcript(report.sessions[3]) == [{"role": "user", "content": {"text": "x"}}]
    assert "line 4" in str(report) and "4 sessions" in str(report)


def test_openai_import_round_trips_messages_and_numbers_turns_by_user_messages(store: Store) -> None:
    """The stored transcript is exactly the file's (CJK included); turns count user messages (S2)."""
    report = import_openai_jsonl(store, DATA / "openai_mixed.jsonl", progress=False)
    first = json.loads((DATA / "openai_mixed.jsonl").read_text(encoding="utf-8").splitlines()[0])
    sid = report.sessions[0]
    assert store.load_transcript(sid) == first["messages"]
    rows = store.transcript(sid)
    assert list(rows["turn"]) == [0, 1, 1, 1, 1, 2, 2]
    assert [None if pd.isna(v) else int(v) for v in rows["iteration"]] == [None, None, 1, 1, 2, None, 1]
    meta = json.loads(store.sql("SELECT meta FROM sessions WHERE id = ?", [sid])["meta"][0])
    assert meta["conversation_id"] == "conv-a" and meta["line"] == 1 and meta["meta"] == {"task": 1}


def test_reimporting_the_same_file_adds_nothing(store: Store) -> None:
    """Session ids come from content, so a second import skips every conversation."""
    import_openai_jsonl(store, DATA / "openai_mixed.jsonl", progress=False)
    again = import_openai_jsonl(store, DATA / "openai_mixed.jsonl", progress=False)
    assert again.sessions == [] and len(again.skipped) == 4
    assert len(store.sessions()) == 4


def test_missing_file_is_a_clear_error(store: Store, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such transcript file"):
        import_openai_jsonl(store, tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        import_claude_code(store, tmp_path / "nope")


def test_turn_plan_groups_by_turn_and_iteration() -> None:
    msgs = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "tool"},
            {"role": "assistant"}, {"role": "user"}, {"role": "assistant"}]
    plan = [(t, i, len(run)) for t, i, run in turn_plan(msgs)]
    assert plan == [(0, None, 1), (1, None, 1), (1, 1, 3), (1, 2, 1), (2, None, 1), (2, 1, 1)]


def test_claude_code_mapping() -> None:
    """Claude Code: split assistant lines merge, thinking -> reasoning, tool_use -> tool_calls,
    tool_result -> tool messages with is_error, sidechains skipped, images -> image_url parts."""
    conv, errors = parse_claude_code(DATA / "claude_code_session.jsonl")
    assert conv is not None
    assert errors == [(11, errors[0][1])] and "not JSON" in errors[0][1]
    roles = [m["role"] for m in conv.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant", "tool", "assistant",
                     "user", "assistant"]
    first = conv.messages[1]
    assert first["reasoning"] == "Run the test first to see the failure."
    assert first["content"] == "Let me run the failing test."
    assert json.loads(first["tool_calls"][0]["function"]["arguments"])["command"].startswith("python -m pytest")
    assert conv.messages[2]["is_error"] is True and "AssertionError" in conv.messages[2]["content"]
    assert [c["id"] for c in conv.messages[3]["tool_calls"]] == ["toolu_02", "toolu_03"]
    assert conv.messages[4]["content"].startswith("     1\tfrom inventory")  # list of text blocks -> text
    assert "is_error" not in conv.messages[4]
    assert all("sub-agent" not in str(m.get("content")) for m in conv.messages)
    image = conv.messages[9]["content"][1]
    assert image == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    assert conv.title == "Fix failing stock report test" and conv.workspace == "/home/ana/proj/inventory"
    assert conv.model == "claude-sonnet-4-20250514" and "报告" in conv.messages[0]["content"]


def test_claude_code_folder_import(store: Store, tmp_path: Path) -> None:
    """A projects folder imports every session file; a sub-agent-only file yields no session."""
    project = tmp_path / "projects" / "-home-ana-proj-inventory"
    project.mkdir(parents=True)
    shutil.copy(DATA / "claude_code_session.jsonl", project / "3f2b1c9e.jsonl")
    side = {"type": "user", "isSidechain": True, "message": {"role": "user", "content": "sub task"}}
    (project / "agent-1.jsonl").write_text(json.dumps(side) + "\n", encoding="utf-8")
    report = import_claude_code(store, tmp_path / "projects", progress=False)
    assert len(report.sessions) == 1 and report.messages == 11
    assert report.errors[0][0] == 11 and report.errors[0][1].startswith("-home-ana-proj-inventory/3f2b1c9e.jsonl:")
    row = store.sessions().iloc[0]
    assert row["source"] == "import:projects" and row["workspace"] == "/home/ana/proj/inventory"
    stored = store.load_transcript(report.sessions[0])
    assert stored[1]["usage"]["cache_read_input_tokens"] == 11022  # kept for analysis, never sent
    assert stored == parse_claude_code(DATA / "claude_code_session.jsonl")[0].messages


def test_codex_rollout_mapping(store: Store) -> None:
    """Codex: response items -> messages; reasoning summaries attach to the next assistant message;
    a non-zero exit code marks the tool result as an error; unknown items are reported by line."""
    conv, errors = parse_codex(DATA / "codex_rollout.jsonl")
    assert conv is not None and conv.model == "gpt-5-codex"
    assert [n for n, _ in errors] == [14, 15] and "mystery_item" in errors[1][1]
    roles = [m["role"] for m in conv.messages]
    assert roles == ["user", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert conv.messages[2]["reasoning"] == "**Inspecting the script**"
    assert conv.messages[3]["content"].startswith("import argparse") and "is_error" not in conv.messages[3]
    assert conv.messages[7]["is_error"] is True and "NameError" in conv.messages[7]["content"]
    assert conv.title == "Add a --json flag to tools/gen_log.py and run it."
    report = import_codex(store, DATA / "codex_rollout.jsonl", progress=False)
    assert len(report.sessions) == 1 and store.load_transcript(report.sessions[0]) == conv.messages


def test_shared_swe_agent_transcripts_import_unrepaired(store: Store) -> None:
    """All 23 SWE-agent conversations import with no errors and come back exactly as in the file (S2)."""
    path = SHARED_TRANSCRIPTS / "swe-agent.jsonl"
    if not path.is_file():
        pytest.skip(f"shared transcripts not found at {SHARED_TRANSCRIPTS}")
    report = import_openai_jsonl(store, path, progress=False)
    assert report.ok and len(report.sessions) == 23
    good, _ = read_openai_jsonl(path)
    assert report.messages == sum(len(c.messages) for _, c in good)
    for sid, (_, conv) in zip(report.sessions, good, strict=True):
        assert store.load_transcript(sid) == conv.messages


def test_codex_plain_text_exec_output_and_old_layout(tmp_path: Path) -> None:
    """Old rollouts (first line with instructions, bare items) and plain-text outputs with an exit code."""
    lines = [
        {"id": "old-1", "timestamp": "2025-05-01T10:00:00Z", "instructions": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}]},
        {"type": "function_call", "name": "shell", "arguments": '{"command": ["pytest"]}', "call_id": "c1"},
        {"record_type": "state"},
        {"type": "function_call_output", "call_id": "c1", "output": "Exit code: 2\nOutput:\nerrors during collection"},
    ]
    path = tmp_path / "rollout-old.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    conv, errors = parse_codex(path)
    assert errors == [] and conv is not None and conv.id == "old-1"
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "tool"]
    assert conv.messages[0]["content"] == "Be brief." and conv.messages[3]["is_error"] is True


def test_codex_images_are_kept_as_image_parts(tmp_path: Path, store: Store) -> None:
    """C1, S4: a Codex rollout's `input_image` (a pasted screenshot) becomes an `image_url` part, as Claude Code's
    image blocks do, so the estimate counts it (2,000 per image) instead of the image vanishing from the import."""
    from mxclaw_nb.context.tokens import estimate_tokens

    url = "data:image/png;base64,iVBORw0KGgo="
    lines = [
        {"type": "session_meta", "payload": {"id": "img-1", "cwd": "/w"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "what is wrong in this screenshot?"},
            {"type": "input_image", "image_url": url}]}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": "The total is off."}]}},
    ]
    path = tmp_path / "rollout-img.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    conv, errors = parse_codex(path)
    assert errors == [] and conv is not None
    assert conv.messages[0]["content"] == [{"type": "text", "text": "what is wrong in this screenshot?"},
                                           {"type": "image_url", "image_url": {"url": url}}]
    assert conv.messages[1]["content"] == "The total is off."  # text only: a string, as before
    assert estimate_tokens(conv.messages[0]) >= 2_000 and conv.title == "what is wrong in this screenshot?"
    report = import_codex(store, path)
    assert store.load_transcript(report.sessions[0])[0]["content"] == conv.messages[0]["content"]


def _cc_line(uid: str, parent: str | None, kind: str, content: Any, msg_id: str | None = None) -> str:
    message: dict[str, Any] = {"role": kind, "content": content}
    if msg_id:
        message.update(id=msg_id, model="claude-sonnet-4-20250514")
    return json.dumps({"type": kind, "uuid": uid, "parentUuid": parent, "isSidechain": False, "sessionId": "s-1",
                       "message": message})


def test_claude_code_follows_the_branch_the_session_ended_on(tmp_path: Path) -> None:
    """Claude Code logs are trees: an edited/rewound prompt or a regenerated reply leaves a branch behind.
    The import keeps the branch the session ended on; parallel tool results (parents on their own
    tool_use lines) and everything else stay, in file order."""
    def use(tid: str) -> list[dict]:
        return [{"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"echo {tid}"}}]

    def result(tid: str) -> list[dict]:
        return [{"type": "tool_result", "tool_use_id": tid, "content": f"out {tid}"}]

    lines = [
        _cc_line("u1", None, "user", "start"),
        _cc_line("a1", "u1", "assistant", [{"type": "text", "text": "first answer"}], "m1"),
        _cc_line("u2", "a1", "user", "do X"),                                   # rewound below
        _cc_line("a2", "u2", "assistant", use("t1"), "m2"),
        _cc_line("r1", "a2", "user", result("t1")),
        _cc_line("a3", "r1", "assistant", [{"type": "text", "text": "X done"}], "m3"),
        _cc_line("u2b", "a1", "user", "do Y instead"),                          # the edit: same parent as u2
        _cc_line("a4", "u2b", "assistant", use("t2"), "m4"),
        _cc_line("a4b", "a4", "assistant", use("t3"), "m4"),                   # parallel call, same message
        _cc_line("r2", "a4", "user", result("t2")),                            # parent: its own tool_use line
        _cc_line("r3", "a4b", "user", result("t3")),
        _cc_line("a5", "r3", "assistant", [{"type": "text", "text": "Y done"}], "m5"),
        _cc_line("u3", "a5", "user", "and now?"),
        _cc_line("a6", "u3", "assistant", [{"type": "text", "text": "API Error: overloaded"}], "m6"),
        _cc_line("a6b", "u3", "assistant", [{"type": "text", "text": "the real answer"}], "m7"),  # regenerated
    ]
    file = tmp_path / "s-1.jsonl"
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    conv, errors = parse_claude_code(file)
    assert conv is not None and errors == []
    flat = [(m["role"], m.get("content"), [c["id"] for c in m.get("tool_calls") or []]) for m in conv.messages]
    assert flat == [("user", "start", []), ("assistant", "first answer", []), ("user", "do Y instead", []),
                    ("assistant", None, ["t2", "t3"]), ("tool", "out t2", []), ("tool", "out t3", []),
                    ("assistant", "Y done", []), ("user", "and now?", []), ("assistant", "the real answer", [])]
    assert conv.meta["abandoned_lines"] == 5
    linear = tmp_path / "linear.jsonl"  # the same file without the left branches: nothing is dropped
    linear.write_text("\n".join(line for line in lines if json.loads(line)["uuid"] not in
                                {"u2", "a2", "r1", "a3", "a6"}) + "\n", encoding="utf-8")
    again, _ = parse_claude_code(linear)
    assert again is not None and again.messages == conv.messages and "abandoned_lines" not in again.meta


@pytest.mark.parametrize("window", [300, 1_000, 4_000, 64_000])
def test_imported_agent_logs_satisfy_the_engine_invariants(window: int, tmp_path: Path) -> None:
    """C0-C8 on what the importers produce from real agent-log shapes (Claude Code blocks and branches, Codex
    items): every DESIGN invariant holds at small to large windows, as for the shared OpenAI transcripts."""
    from mxclaw_nb.context import ContextPolicy

    from .context.oracle import build_and_check

    branchy = tmp_path / "branchy.jsonl"
    branchy.write_text("\n".join([
        _cc_line("u1", None, "user", "start 修复"), _cc_line("a1", "u1", "assistant", [
            {"type": "tool_use", "id": "t1", "name": "Edit", "input": {"file_path": "a.py"}}], "m1"),
        _cc_line("u2", "a1", "user", "rewound prompt"), _cc_line("u2b", "a1", "user", "edited prompt")]) + "\n",
        encoding="utf-8")  # a dangling tool_use (its result is on the abandoned branch): repair must add one
    convs = [parse_claude_code(DATA / "claude_code_session.jsonl")[0], parse_codex(DATA / "codex_rollout.jsonl")[0],
             parse_claude_code(branchy)[0]]
    for conv in convs:
        assert conv is not None
        for ratio, tail in ((0.8, window // 4), (0.5, 0)):
            build_and_check(conv.messages, ContextPolicy(window, ratio, tail))


def test_s4_a_refused_bulk_import_falls_back_to_one_conversation_at_a_time(store: Store, tmp_path: Path) -> None:
    """A conversation the store refuses is reported by line; the others of its bulk transaction still import."""
    path = tmp_path / "clash.jsonl"
    lines = [{"id": f"c{k}", "messages": [{"role": "user", "content": f"hello {k}"}]} for k in range(3)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    clash = session_id_for("import:clash.jsonl", parse_openai_row(lines[1], "clash.jsonl:2"))
    store.create_session(session_id=clash, source="elsewhere")  # an id the import does not know it owns
    report = import_openai_jsonl(store, path, progress=False)
    assert [n for n, _ in report.errors] == [2] and "already exists" in report.errors[0][1]
    assert len(report.sessions) == 2 and report.messages == 2
    assert [store.load_transcript(s)[0]["content"] for s in report.sessions] == ["hello 0", "hello 2"]


def _legacy_conversation() -> list[dict[str, Any]]:
    """OpenAI's legacy function calling (before `tools`): `function_call` on the assistant, role `function` after."""
    big = "def f():\n    return 1\n" * 400

    def call(path: str) -> dict[str, Any]:
        return {"name": "read_file", "arguments": json.dumps({"path": path})}

    return [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "read a.py and b.py"},
            {"role": "assistant", "content": None, "function_call": call("a.py")},
            {"role": "function", "name": "read_file", "content": big},
            {"role": "assistant", "content": None, "function_call": call("b.py")},
            {"role": "function", "name": "read_file", "content": big},
            {"role": "user", "content": "now summarise " + "them " * 600}, {"role": "assistant", "content": "Done."}]


def test_legacy_function_calls_replay_as_tool_calls(store: Store, tmp_path: Path) -> None:
    """C1, C4, C5, S4: a transcript in the legacy `function_call` / role `function` shape is replayed with its tool
    traffic: the results count in the estimate and compact like tool results, from a list and from the store,
    where the import keeps the file's messages exactly (S2). Before, replay and compare dropped every function
    result from the views (the estimate was that of a conversation without them; nothing compacted)."""
    from mxclaw_nb.analysis import compare, replay

    legacy = _legacy_conversation()
    policy = {"window": 4_000, "keep_recent": 1_000}
    row = replay(legacy, policy).iloc[-1]
    modern = replay(_as_tool_calls(legacy), policy).iloc[-1]
    assert row["full_tokens"] == modern["full_tokens"] > 4_000 * 0.8  # the results count
    assert row["stage"] == modern["stage"] == "micro" and row["placeholder"] == 2 and row["dropped"] == 0
    path = tmp_path / "legacy.jsonl"
    path.write_text(json.dumps({"messages": legacy}) + "\n", encoding="utf-8")
    report = import_openai_jsonl(store, path, progress=False)
    assert store.load_transcript(report.sessions[0]) == legacy  # stored as the file holds it (S2)
    assert replay(report.sessions[0], policy, store=store).iloc[-1]["placeholder"] == 2
    df = compare(store, [policy], progress=False, executor="inline")
    assert df.iloc[-1]["placeholder"] == 2 and df["dropped"].sum() == 0


def _as_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation written with `tool_calls` by hand (the expected reading of the legacy shape)."""
    out: list[dict[str, Any]] = []
    for k, m in enumerate(messages):
        if "function_call" in m:
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"legacy_{k}", "type": "function", "function": m["function_call"]}]})
        elif m["role"] == "function":
            out.append({"role": "tool", "tool_call_id": f"legacy_{k - 1}", "name": m["name"], "content": m["content"]})
        else:
            out.append(m)
    return out


def test_legacy_function_calls_in_the_policy_lab_and_orphans() -> None:
    """C4: `PolicyLab({...})` reads a legacy transcript as `replay` does; a `function` message that answers no call
    right before it stays an orphan (dropped from the view as any orphan result), one message for one."""
    from mxclaw_nb.messages import modernize_legacy_calls
    from mxclaw_nb.widgets.lab import PolicyLab

    legacy = _legacy_conversation()
    lab = PolicyLab({"legacy": legacy})
    assert lab.messages("legacy") == _as_tool_calls(legacy)
    orphan = [{"role": "user", "content": "q"}, {"role": "function", "name": "f", "content": "x"}]
    out = modernize_legacy_calls(orphan)
    assert len(out) == 2 and out[1]["role"] == "tool" and out[1]["tool_call_id"] == "legacy_orphan_1"
    assert modernize_legacy_calls(out) is out and modernize_legacy_calls(legacy[:2]) is not None


def test_a_cut_or_false_gzip_file_is_reported_and_its_whole_lines_import(store: Store, tmp_path: Path) -> None:
    """S4: a `.jsonl.gz` cut short (an interrupted download or copy) imports the conversations before the cut and
    reports the cut by line; a file named `.gz` that is not gzip is one reported error, not an exception (before:
    EOFError / BadGzipFile escaped and nothing was imported)."""
    import gzip

    lines = "".join(json.dumps({"id": f"c{k}", "messages": [{"role": "user", "content": f"hi {k} " + "x" * 200}]})
                    + "\n" for k in range(400))
    packed = gzip.compress(lines.encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    report = import_openai_jsonl(store, cut, progress=False)
    assert 0 < len(report.sessions) < 400 and len(report.errors) == 1
    line, message = report.errors[0]
    assert line == len(report.sessions) + 1 and "cut short" in message
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text(lines[:300], encoding="utf-8")
    report = import_openai_jsonl(store, fake, progress=False)
    assert report.sessions == [] and report.errors[0][0] == 1 and "not a gzip file" in report.errors[0][1]
    from mxclaw_nb.analysis import conversations

    with pytest.warns(UserWarning, match="cut short"):  # compare, replay: the same conversations, the cut warned
        assert len(conversations(cut)) == len(import_openai_jsonl(store, cut, progress=False).skipped)


def test_a_folder_of_json_and_jsonl_transcripts_compares_whole(tmp_path: Path) -> None:
    """S4: `compare(folder)` reads every transcript file the importer reads: `.jsonl`, `.json` documents and their
    `.gz` copies (before: a folder of `.json` exports was "no *.jsonl or *.jsonl.gz transcripts")."""
    import gzip

    from mxclaw_nb.analysis import compare, conversations

    folder = tmp_path / "exports"
    folder.mkdir()
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (folder / "a.json").write_text(json.dumps(chat), encoding="utf-8")
    (folder / "b.json.gz").write_bytes(gzip.compress(json.dumps({"messages": chat}).encode()))
    (folder / "c.jsonl").write_text(json.dumps({"id": "c", "messages": chat}) + "\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a transcript", encoding="utf-8")
    assert len(conversations(folder)) == 3
    assert len(compare(folder, [{"window": 2_000}], progress=False)) == 3


def test_codex_tool_output_as_content_items_is_read_as_text_and_images(tmp_path: Path) -> None:
    """S4, C1: newer Codex CLIs write a tool output that carries content items (an MCP tool's text and image) as a
    list instead of a string: its text is the result, an image stays an image part (before: the list was stored as
    its JSON text, image data and all, and counted as text)."""
    url = "data:image/png;base64,iVBORw0KGgo="
    lines = [
        {"type": "session_meta", "payload": {"id": "items-1", "cwd": "/w"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "take a screenshot"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "screenshot", "arguments": "{}",
                                              "call_id": "c1"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "captured 1 window"}, {"type": "input_image", "image_url": url}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "echo", "arguments": "{}",
                                              "call_id": "c2"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c2", "output": [
            {"type": "input_text", "text": "plain "}, {"type": "input_text", "text": "text"}]}},
    ]
    path = tmp_path / "rollout-items.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    conv, errors = parse_codex(path)
    assert errors == [] and conv is not None
    tools = [m for m in conv.messages if m["role"] == "tool"]
    assert tools[0]["content"] == [{"type": "text", "text": "captured 1 window"},
                                   {"type": "image_url", "image_url": {"url": url}}]
    assert tools[1]["content"] == "plain text" and not tools[1].get("is_error")
