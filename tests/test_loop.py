"""The query loop end to end (SPEC L1-L4, C7-C10, F1, T3): real DuckDB, real HTTP, real `openai` client.

Each test scripts the shipped TestServer, runs `Agent.run` and checks what was stored and what the
server received — the request view is asserted where it matters, on the wire.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import zlib
from pathlib import Path

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.context import lineage_messages, lineage_rows
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.loop import TurnFailed
from mxclaw_nb.messages import FALLBACK_PREFIX, SUMMARY_PREFIX
from mxclaw_nb.store.provenance import decode_lineage
from mxclaw_nb.store.writer import Store


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    (ws / "big.txt").write_text("x" * 6_000, encoding="utf-8")
    return ws


def make_agent(server: TestServer, workspace: Path, tmp_path: Path, **kw) -> Agent:
    kw.setdefault("approval", "allow")
    return Agent(workspace=workspace, db=str(tmp_path / "loop.duckdb"), base_url=server.base_url, api_key="k",
                 model="test-model", home=tmp_path / "home", **kw)


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


def test_multi_tool_turn_stores_every_step_and_sends_only_sent_keys(test_server, workspace, tmp_path):
    """L1/L4: user -> assistant(2 calls) -> 2 results -> answer, all stored; display-only keys never sent."""
    test_server.enqueue_tool_calls([("list_dir", {"path": "."}), ("read_file", {"path": "a.txt"})])
    test_server.enqueue_text("done: a.txt has two lines", reasoning="thinking about files")
    agent = make_agent(test_server, workspace, tmp_path)
    result = agent.run("what is in a.txt?")
    assert result.status == "ok" and result.text == "done: a.txt has two lines" and result.iterations == 2
    stored = agent.transcript()
    assert roles(stored)[-5:] == ["user", "assistant", "tool", "tool", "assistant"]
    assert "alpha" in stored[-2]["content"]
    assert stored[-1]["reasoning"] == "thinking about files"
    second = test_server.requests[1]["messages"]
    assert roles(second)[-4:] == ["user", "assistant", "tool", "tool"]
    for m in second:
        assert set(m) <= {"role", "content", "tool_calls", "tool_call_id", "name"}
    requests = agent.store.requests(agent.session_id)
    assert len(requests) == 2 and list(requests["stage"]) == ["unchanged", "unchanged"]
    assert requests["prompt_tokens_reported"].notna().all()
    kinds = list(agent.store.events(agent.session_id)["type"])
    assert kinds.count("tool.started") == 2 and kinds.count("tool.finished") == 2 and "turn.finished" in kinds


def test_reasoning_is_stored_but_never_sent(test_server, workspace, tmp_path):
    """SPEC 0 / C1: reasoning is display-only."""
    test_server.enqueue_text("first", reasoning="secret chain of thought")
    test_server.enqueue_text("second")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("one")
    agent.run("two")
    assert "secret chain of thought" not in json.dumps(test_server.requests[1])
    assert any(m.get("reasoning") == "secret chain of thought" for m in agent.transcript())
    row = agent.store.sessions().set_index("id").loc[agent.session_id]
    assert row["turns"] == 2 and row["model_calls"] == 2  # a turn is one user submission (SPEC 0)


def test_streamed_deltas_reach_subscribers(test_server, workspace, tmp_path):
    text = "streaming works across several chunks of text " * 3
    test_server.enqueue_text(text)
    agent = make_agent(test_server, workspace, tmp_path)
    deltas: list[str] = []
    agent.subscribe(lambda kind, p: deltas.append(p["text"]) if kind == "model.delta" else None)
    assert agent.run("stream please").text == text
    assert len(deltas) > 1 and "".join(deltas) == text


def test_compaction_happens_mid_turn_and_is_stored(test_server, workspace, tmp_path):
    """C7: the check runs before every call; compaction inside one turn, event stored with its iteration."""
    for _ in range(4):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("read it all")
    agent = make_agent(test_server, workspace, tmp_path, context_window_tokens=4_000, keep_recent_tokens=1_000,
                       counter="estimate")
    result = agent.run("read big.txt four times")
    assert result.status == "ok" and result.compactions
    events = agent.store.events(agent.session_id, type="context.compacted")
    assert len(events) >= 1 and (events["iteration"] > 1).all() and (events["turn"] == 1).all()
    payload = json.loads(events.iloc[0]["payload"]) if isinstance(events.iloc[0]["payload"], str) \
        else events.iloc[0]["payload"]
    assert payload["stage"] in ("micro", "summary") and payload["before_tokens"] > payload["after_tokens"]
    last = json.dumps(test_server.requests[-1]["messages"])
    assert "[old tool output compacted: 6000 characters; recall #" in last or SUMMARY_PREFIX in last  # C13
    # the transcript itself is untouched: every read result is stored in full
    stored = agent.transcript()
    assert sum(1 for m in stored if m.get("content") == "x" * 6_000) == 4
    # each stored request resolves to stored messages, even mid-turn (SPEC N3: the record's lineage)
    for _, row in agent.store.requests(agent.session_id).iterrows():
        extra = json.loads(row["extra"]) if isinstance(row["extra"], str) else row["extra"]
        assert row["provenance"] is None  # the lineage replaces the view's own O(input) table (bytes per call flat)
        lineage = decode_lineage(extra["lineage"], stored)
        for rec in lineage_rows(lineage, stored)["before"]:
            if rec["position"] is not None and rec["action"] in ("placeholder", "summarized") and rec["role"] == "tool":
                assert stored[rec["position"]]["content"] == "x" * 6_000
        assert lineage_messages(lineage, stored) == result.views[int(row["iteration"]) - 1].messages


@pytest.mark.parametrize("wording", [
    "This model's maximum context length is 8192 tokens (context length exceeded)",  # OpenAI
    "The decoder prompt (length 9254) is longer than the maximum model length of 8192. Make sure that "
    "`max_model_len` is no smaller than the number of text tokens.",  # vLLM V1
])
def test_prompt_too_long_retries_once_with_the_fallback_window(test_server, workspace, tmp_path, wording):
    """C9: one retry per turn with the C8 window; the event says prompt_too_long_retry."""
    test_server.enqueue_error(400, wording)
    test_server.enqueue_text("answer after retry")
    agent = make_agent(test_server, workspace, tmp_path)
    result = agent.run("hello")
    assert result.status == "ok" and result.retried and result.text == "answer after retry"
    retry_request = test_server.requests[1]["messages"]
    assert any(FALLBACK_PREFIX in (m.get("content") or "") for m in retry_request)
    events = agent.store.events(agent.session_id, type="context.compacted")
    assert list(events["type"]) == ["context.compacted"]
    assert "prompt_too_long_retry" in str(events.iloc[0]["payload"])
    requests = agent.store.requests(agent.session_id)
    assert requests["error"].notna().sum() == 1 and requests["retry"].sum() == 1


def test_an_answer_cut_at_the_output_limit_is_said(test_server, workspace, tmp_path):
    """L7: finish_reason "length" (the server's max_tokens bound) is not a silent full answer: the text is stored as
    sent and a provider.note says it stopped at the output limit, so a cut tool call's "Invalid arguments" failure
    has its cause beside it."""
    from mxclaw_nb.demo.model import Reply, ToolCall

    test_server.enqueue(Reply(text="The answer is cut mid-sent", finish_reason="length"))
    agent = make_agent(test_server, workspace, tmp_path)
    result = agent.run("hello")
    assert result.status == "ok" and result.text == "The answer is cut mid-sent"
    test_server.enqueue(Reply(tool_calls=[ToolCall("write_file", '{"path": "b.txt", "content": "ab')],
                              finish_reason="length"))
    test_server.enqueue_text("done")
    assert agent.run("write b.txt").text == "done"
    notes = agent.store.events(agent.session_id, type="provider.note")
    assert len(notes) == 2
    for payload in notes["payload"]:
        note = (json.loads(payload) if isinstance(payload, str) else payload)["note"]
        assert "finish_reason 'length'" in note and "output limit" in note


def test_a_tool_call_with_broken_json_arguments_does_not_poison_the_session(workspace, tmp_path):
    """L2, L7, S2: a model's tool call whose arguments are not JSON (cut at the output limit, or badly escaped) is
    stored as written and fails as invalid arguments; the call is then sent with JSON arguments that carry the
    text, because vLLM and llama-server parse every historical call's arguments and refuse the whole request
    (HTTP 400, on every later turn) when one is not JSON."""
    with TestServer(quirks={"history_args_parsed"}) as srv:
        broken = '{"path": "a.txt", "note": "cut here'
        srv.enqueue_raw_tool_call("read_file", broken)
        srv.enqueue_text("The call was cut; nothing read.")
        srv.enqueue_text("next turn works")
        agent = make_agent(srv, workspace, tmp_path)
        assert agent.run("read a.txt").text == "The call was cut; nothing read."
        assert agent.run("and now?").text == "next turn works"
        stored = [m for m in agent.transcript() if m.get("tool_calls")]
        assert stored[0]["tool_calls"][0]["function"]["arguments"] == broken  # S2: stored as the model wrote it
        sent = [m for m in srv.requests[-1]["messages"] if m.get("tool_calls")]
        args = json.loads(sent[0]["tool_calls"][0]["function"]["arguments"])
        assert isinstance(args, dict) and broken in json.dumps(args, ensure_ascii=False).replace('\\"', '"')


def test_second_prompt_too_long_fails_the_turn_visibly(test_server, workspace, tmp_path):
    test_server.enqueue_error(400, "prompt too long")
    test_server.enqueue_error(400, "prompt too long")
    agent = make_agent(test_server, workspace, tmp_path)
    with pytest.raises(TurnFailed, match="(?i)prompt too long|context"):
        agent.run("hello")
    stored = agent.transcript()
    assert stored[-1] == {"role": "user", "content": "hello"}  # the user's message is kept
    assert "turn.failed" in set(agent.store.events(agent.session_id)["type"])
    assert len(test_server.requests) == 2


def test_compactor_error_takes_the_fallback_path(test_server, workspace, tmp_path):
    """C8: a summariser that raises does not stop the turn."""
    def broken(_messages):
        raise RuntimeError("summariser exploded")

    for _ in range(4):
        test_server.enqueue_tool_calls([("bash", {"command": "printf 'y%.0s' $(seq 1 3000); exit 3"})])
    test_server.enqueue_text("still going")
    agent = make_agent(test_server, workspace, tmp_path, context_window_tokens=3_000, keep_recent_tokens=500,
                       counter="estimate", summarize=broken)
    result = agent.run("run it")
    assert result.status == "ok"
    assert any(v.stage == "fallback" and "summariser exploded" in (v.error or "") for v in result.views)
    last = test_server.requests[-1]["messages"]
    assert any(FALLBACK_PREFIX in (m.get("content") or "") for m in last)
    assert last[len([m for m in last if m["role"] == "system"])]["role"] != "tool"


def test_frozen_context_is_injected_once_and_frozen(test_server, workspace, tmp_path):
    """F1: AGENTS.md etc. become stored system messages on the first turn; later edits affect new sessions only."""
    (workspace / "AGENTS.md").write_text("Always run the tests.", encoding="utf-8")
    (workspace / ".mx-claw").mkdir()
    (workspace / ".mx-claw" / "project.json").write_text('{"verification": {"command": "pytest"}}', encoding="utf-8")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("hi")
    first = test_server.requests[0]["messages"]
    assert first[0]["content"].startswith("[system prompt]")
    assert any(m["content"].startswith("[project instructions] AGENTS.md") and "Always run the tests." in m["content"]
               for m in first)
    assert any(m["content"].startswith("[verification policy]") for m in first)
    (workspace / "AGENTS.md").write_text("Never run the tests.", encoding="utf-8")
    agent.run("again")
    second = json.dumps(test_server.requests[1])
    assert "Never run" not in second and "Always run" in second
    n_system = len([m for m in first if m["role"] == "system"])
    assert sum(1 for m in agent.transcript() if m["role"] == "system") == n_system
    agent.new_session()
    agent.run("fresh")
    assert "Never run the tests." in json.dumps(test_server.requests[2])


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/hostname", "link/secret.txt"])
def test_workspace_escapes_are_permission_denied(test_server, workspace, tmp_path, path):
    """L3: file tools stay inside the workspace; escapes are failures the model sees."""
    outside = tmp_path / "outside_dir"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("top secret", encoding="utf-8")
    os.symlink(outside, workspace / "link")
    test_server.enqueue_tool_calls([("read_file", {"path": path})])
    test_server.enqueue_text("ok")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("read it")
    tool = [m for m in agent.transcript() if m["role"] == "tool"][-1]
    assert tool["content"].startswith("Permission denied") and tool.get("is_error")
    assert "top secret" not in json.dumps(test_server.requests[1])


def test_forbidden_command_is_a_recorded_failure(test_server, workspace, tmp_path):
    test_server.enqueue_tool_calls([("bash", {"command": "sudo rm -rf /"})])
    test_server.enqueue_text("ok")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("clean up")
    tool = [m for m in agent.transcript() if m["role"] == "tool"][-1]
    assert tool["content"].startswith("Forbidden") and tool.get("is_error")
    decided = agent.store.events(agent.session_id, type="approval.decided")
    assert len(decided) == 1


def test_headless_ask_denies_and_records_the_decision(test_server, workspace, tmp_path):
    test_server.enqueue_tool_calls([("bash", {"command": "echo hi"})])
    test_server.enqueue_text("ok")
    agent = make_agent(test_server, workspace, tmp_path, approval="ask", approver=lambda _cmd: None)
    agent.run("say hi")
    tool = [m for m in agent.transcript() if m["role"] == "tool"][-1]
    assert tool["content"].startswith("Permission denied")
    assert "deny" in str(agent.store.events(agent.session_id, type="approval.decided").iloc[0]["payload"])


def test_invalid_tool_json_and_unknown_tool_go_back_to_the_model(test_server, workspace, tmp_path):
    test_server.enqueue_raw_tool_call("read_file", '{"path": bro')
    test_server.enqueue_tool_calls([("teleport", {"to": "mars"})])
    test_server.enqueue_tool_calls([("read_file", {})])
    test_server.enqueue_text("gave up")
    agent = make_agent(test_server, workspace, tmp_path)
    result = agent.run("try")
    assert result.status == "ok" and result.iterations == 4
    tools = [m for m in agent.transcript() if m["role"] == "tool"]
    assert all(m["content"].startswith("Invalid") and m.get("is_error") for m in tools)


def test_max_iterations_ends_the_turn_visibly(test_server, workspace, tmp_path):
    for _ in range(5):
        test_server.enqueue_tool_calls([("list_dir", {"path": "."})])
    agent = make_agent(test_server, workspace, tmp_path, max_iterations=3)
    result = agent.run("loop forever")
    assert result.status == "max_iterations" and result.iterations == 3 and "max-iterations" in result.text
    assert "turn.max_iterations" in set(agent.store.events(agent.session_id)["type"])


def test_interrupt_keeps_everything_and_the_next_turn_repairs(test_server, workspace, tmp_path):
    """L4 + C4: KeyboardInterrupt during a tool; the dangling call gets a synthetic result next turn."""
    test_server.enqueue_tool_calls([("read_file", {"path": "a.txt"})])
    test_server.enqueue_text("resumed fine")
    agent = make_agent(test_server, workspace, tmp_path)

    def interrupt(kind, _payload):
        if kind == "tool.started":
            raise KeyboardInterrupt

    unsubscribe = agent.subscribe(interrupt)
    with pytest.raises(KeyboardInterrupt):
        agent.run("read a.txt")
    unsubscribe()
    stored = agent.transcript()
    assert stored[-1]["role"] == "assistant" and stored[-1]["tool_calls"]
    agent.close()
    resumed = Agent.resume(agent.session_id, db=str(tmp_path / "loop.duckdb"), base_url=test_server.base_url,
                           api_key="k", model="test-model", approval="allow")
    assert resumed.run("go on").text == "resumed fine"
    sent = test_server.requests[-1]["messages"]
    call_at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[call_at + 1]["role"] == "tool" and "interrupted" in sent[call_at + 1]["content"]
    assert "turn.interrupted" in set(resumed.store.events(resumed.session_id)["type"])


def test_provider_down_gives_a_clear_error_and_keeps_the_message(workspace, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = Agent(workspace=workspace, db=str(tmp_path / "down.duckdb"), base_url=f"http://127.0.0.1:{port}/v1",
                  api_key="k", model="m")
    agent.provider.max_retries = 0
    with pytest.raises(TurnFailed) as info:
        agent.run("anyone there?")
    assert f"127.0.0.1:{port}" in str(info.value)
    assert agent.transcript()[-1]["content"] == "anyone there?"


def test_wrong_key_is_reported(workspace, tmp_path):
    with TestServer(api_key="right") as srv:
        agent = Agent(workspace=workspace, db=str(tmp_path / "key.duckdb"), base_url=srv.base_url, api_key="wrong",
                      model="m")
        with pytest.raises(TurnFailed, match="(?i)key|auth|401"):
            agent.run("hi")


def _png(path: Path) -> Path:
    raw = b"\x00\xff\x00\x00"
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return path


def test_images_are_sent_as_data_urls_and_recorded(test_server, workspace, tmp_path):
    image = _png(tmp_path / "dot.png")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("what is this?", images=[image])
    user = test_server.requests[0]["messages"][-1]
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert agent.transcript()[-2]["attachments"][0]["path"] == str(image)
    assert agent.store.requests(agent.session_id).iloc[0]["estimate_tokens"] >= 2_000
    with pytest.raises(ValueError, match="not found"):
        agent.run("again", images=[tmp_path / "missing.png"])


def test_calibration_switches_on_after_usage_is_reported(test_server, workspace, tmp_path):
    """T3: estimate first, calibrated once the provider reported usage; both stored per request."""
    test_server.usage_scale = 1.3
    test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("done")
    agent = make_agent(test_server, workspace, tmp_path)
    agent.run("read")
    req = agent.store.requests(agent.session_id)
    assert list(req["counter"]) == ["estimate", "calibrated"]
    assert req.iloc[1]["calibrated_tokens"] > req.iloc[1]["estimate_tokens"]


def test_demo_model_runs_offline_through_the_same_path(workspace, tmp_path):
    """L2: nothing configured -> the demo model, labelled, on a fresh copy of the sample workspace."""
    agent = Agent(db=str(tmp_path / "demo.duckdb"), approval="allow", env={})
    assert agent.is_demo and "demo" in agent.label
    result = agent.run("The unit tests of the inventory package fail. Find out why and fix them.")
    assert result.status == "ok" and "[demo model]" in result.text
    store = Store(tmp_path / "demo.duckdb")
    assert len(store.requests(agent.session_id)) == result.iterations
    assert store.sql("SELECT count(*) AS n FROM artifacts").iloc[0]["n"] >= 1


@pytest.mark.parametrize("counter", ["estimate", "auto"])
def test_usage_above_the_estimate_needs_calibration(workspace, tmp_path, counter):
    """T3: the provider counts 1.3x the C1 estimate and rejects prompts over its window.

    With the estimate alone the threshold (0.8 of the window, in est. tokens) lets real prompts exceed the window,
    so the C9 retry fires. With the calibrated counter (auto) compaction happens in time and no retry fires.
    """
    (workspace / "note.txt").write_text("n" * 300, encoding="utf-8")
    with TestServer(usage_counter="estimate") as srv:
        srv.usage_scale = 1.3
        srv.context_limit = 4_000
        for _ in range(32):
            srv.enqueue_tool_calls([("read_file", {"path": "note.txt"})])
        srv.enqueue_text("read them all")
        agent = make_agent(srv, workspace, tmp_path, context_window_tokens=4_000, keep_recent_tokens=800,
                           counter=counter, max_iterations=60)
        try:
            result = agent.run("read note.txt many times")
        except TurnFailed:
            result = None
        requests = agent.store.requests(agent.session_id)
        rejected = requests["error"].fillna("").str.contains("maximum context length")
        compactions = agent.store.events(agent.session_id, type="context.compacted")
    if counter == "estimate":
        assert rejected.any(), "the C1 estimate alone should let a prompt exceed the provider's window"
        assert requests["retry"].any()
    else:
        assert result is not None and result.status == "ok" and not result.retried
        assert not rejected.any() and not requests["retry"].any()
        assert len(compactions) >= 1
        assert (requests["counter"].iloc[1:] == "calibrated").all()
        assert (requests["prompt_tokens_reported"] <= 4_000).all()


def test_a_session_row_is_written_with_the_first_turn_only(test_server, workspace, tmp_path):
    """Looking around (dry run, transcript) leaves no empty sessions behind; the first turn stores the session."""
    agent = make_agent(test_server, workspace, tmp_path)
    agent.dry_run("what would be sent?")
    assert agent.transcript() == [] and agent.store.sessions().empty
    agent.run("hi")
    sessions = agent.store.sessions()
    assert list(sessions["id"]) == [agent.session_id] and sessions.iloc[0]["turns"] == 1
    agent.new_session()
    assert len(agent.store.sessions()) == 1


def test_turns_read_only_new_rows_and_reuse_the_session_plan(test_server, workspace, tmp_path, monkeypatch):
    """Flat cost (L1, C7, T2): the Agent keeps the stored transcript across turns and reads only the rows after
    the last seq it saw (never the whole transcript again, once per turn at most); another writer's rows are
    picked up; the engine's session cache re-plans only what is new, and the views equal cold builds."""
    import json as _json

    from mxclaw_nb.context import build_request_view
    from mxclaw_nb.demo.examples import synthetic_transcript
    from mxclaw_nb.store.rows import StoredRows

    agent = make_agent(test_server, workspace, tmp_path, context_window_tokens=1_000_000)  # nothing compacted
    agent.store.create_session(session_id=agent.session_id, source="test")
    agent.store.append_messages(agent.session_id, synthetic_transcript(200), turn=0)
    full, after = [], []
    load, load_after = agent.store.load_transcript, agent.store.load_transcript_after
    agent.store.load_transcript = lambda sid: full.append(sid) or load(sid)  # type: ignore[method-assign]
    agent.store.load_transcript_after = (  # type: ignore[method-assign]
        lambda sid, seq: after.append((seq, len(rows := load_after(sid, seq)))) or rows)
    from mxclaw_nb.context import incremental

    planned: list[int] = []  # messages (re)planned per build
    plan = incremental.plan_counted
    monkeypatch.setattr(incremental, "plan_counted", lambda msgs, start=0: planned.append(len(msgs) - start)
                        or plan(msgs, start))
    for turn in range(3):
        test_server.enqueue_tool_calls([("list_dir", {"path": "."})])
        test_server.enqueue_text(f"done {turn}")
        result = agent.run(f"look around {turn}")
        assert result.status == "ok"
        if turn == 0:  # another process adds to the session between turns (S3)
            agent.store.append_message(agent.session_id, {"role": "user", "content": "from elsewhere"}, turn=1)
    assert full == []
    seen = [seq for seq, _ in after]
    # the first read is lazy (C7, N2: `StoredRows`, rows read where used); then only what is new, by seq
    assert isinstance(agent._stored, StoredRows) and seen[0] == 199 and all(n <= 6 for _, n in after)
    stored = load(agent.session_id)
    assert agent._sync_transcript() == stored and agent._users == sum(m["role"] == "user" for m in stored)
    assert {"role": "user", "content": "from elsewhere"} in agent._stored
    # the last turn's first call saw exactly the stored transcript; the cache reused its plan (no full re-plan)
    first = test_server.requests[-2]["messages"]
    cold = build_request_view(stored[:-3], agent.current_policy())
    assert _json.dumps(first) == _json.dumps(cold.messages)
    # a fresh Agent plans once; then only what is new (the last entry is the cold build just above)
    assert planned[0] == 201 and max(planned[1:-1]) <= 8, planned


def _interrupted_run(agent, prompt, interrupt):
    """Run `prompt` with both live logs subscribed and `interrupt` raising KeyboardInterrupt; the two logs."""
    from mxclaw_nb.notebook.livelog import LiveLog
    from mxclaw_nb.widgets import LiveTurnView

    live, log = LiveTurnView(), LiveLog(agent.label, agent.session_id, mode="off")
    stops = [agent.subscribe(live.handle), agent.subscribe(log.handle), agent.subscribe(interrupt)]
    with pytest.raises(KeyboardInterrupt):
        agent.run(prompt)
    for stop in stops:
        stop()
    return live, log


def test_l4_l7_interrupt_mid_stream_stores_the_shown_text_as_partial(test_server, workspace, tmp_path):
    """L4, L7: KeyboardInterrupt while the answer streams: what was shown is stored, labelled partial; the
    live logs label it so; the next turn's view stays valid (C4) and sends the text without the label."""
    test_server.stream_chunk_chars = 4
    test_server.enqueue_text("The answer is long and it streams in small pieces.")
    test_server.enqueue_text("resumed")
    agent = make_agent(test_server, workspace, tmp_path)
    seen: list[str] = []

    def interrupt(kind, payload):
        if kind == "model.delta":
            seen.append(payload["text"])
            if len(seen) == 3:
                raise KeyboardInterrupt

    live, log = _interrupted_run(agent, "answer at length", interrupt)
    shown = "".join(seen)
    stored = agent.transcript()
    assert stored[-1]["role"] == "assistant" and stored[-1]["content"] == shown and stored[-1]["partial"] is True
    events = agent.store.events(agent.session_id)
    interrupted = json.loads(events[events["type"] == "turn.interrupted"]["payload"].iloc[-1])
    assert interrupted["partial_chars"] == len(shown)
    assert live.status == "interrupted" and "partial: interrupted" in live.to_html()
    assert log.to_text().splitlines()[-2:] == ["  (partial: interrupted)", "  (interrupted)"]
    assert agent.run("go on").text == "resumed"
    sent = test_server.requests[-1]["messages"]
    assert {"role": "assistant", "content": shown} in sent and all("partial" not in m for m in sent)


def test_l7_interrupt_mid_tool_ends_the_tool_line_interrupted(test_server, workspace, tmp_path):
    """L7: an interrupt while a tool runs ends its line `interrupted` in both live logs (never `running…`)."""
    test_server.enqueue_tool_calls([("read_file", {"path": "a.txt"})])
    agent = make_agent(test_server, workspace, tmp_path)

    def interrupt(kind, _payload):
        if kind == "tool.started":
            raise KeyboardInterrupt

    live, log = _interrupted_run(agent, "read a.txt", interrupt)
    assert [ln for ln in live.log_lines() if ln.startswith("→ read_file")] == ["→ read_file a.txt  interrupted"]
    assert "running" not in live.to_html().split("mx-live-log", 1)[1]
    assert "  → read_file a.txt  interrupted" in log.to_text().splitlines()
