"""Imported sessions resumed against OpenAI's own API (SPEC L2, S2, S4, C1, C10).

An import keeps the transcript as the other harness wrote it (S2, S4): a Claude Code or Codex tool result may carry
a screenshot, a chat export may carry a `name` with spaces or CJK, another harness's call ids may be longer than
OpenAI's 40 characters, a function name may hold a dot. OpenAI refuses each with a 400 `invalid_request_error`
(the test server's `openai_history_rules` quirk answers with its wording). The provider adapter reshapes what is
sent, never what is stored, and says once per session what it changed (a `provider.note`); every request record
keeps the figures of what was reshaped. Real parts: the importers, a DuckDB file, `Agent.resume`, the real `openai`
client over HTTP to the test server.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.analysis import import_claude_code, import_openai_jsonl
from mxclaw_nb.context import estimate_messages
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.store.writer import Store

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40).decode()  # 10,248 bytes
IMAGE_URL = f"data:image/png;base64,{PNG}"


def _cc(uid: str, parent: str | None, kind: str, content: Any, msg_id: str | None = None) -> str:
    message: dict[str, Any] = {"role": kind, "content": content}
    if msg_id:
        message.update(id=msg_id, model="claude-sonnet-4-20250514")
    return json.dumps({"type": kind, "uuid": uid, "parentUuid": parent, "isSidechain": False, "sessionId": "cc-1",
                       "cwd": "/nowhere", "message": message})


def claude_code_log(path: Path) -> Path:
    """A Claude Code session whose Read tool returned a screenshot (a tool_result with an image block)."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    lines = [
        _cc("u1", None, "user", "what does the login page look like?"),
        _cc("a1", "u1", "assistant", [{"type": "tool_use", "id": "toolu_01", "name": "Read",
                                       "input": {"file_path": "shot.png"}}], "msg_1"),
        _cc("u2", "a1", "user", [{"type": "tool_result", "tool_use_id": "toolu_01",
                                  "content": [{"type": "text", "text": "shot.png (1280x800)"}, image]}]),
        _cc("a2", "u2", "assistant", [{"type": "text", "text": "A login form with two fields."}], "msg_2"),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def resumed(store: Store, sid: str, srv: TestServer, tmp_path: Path) -> Agent:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return Agent.resume(sid, db=store, workspace=ws, base_url=srv.base_url, api_key="k", model="test-model",
                        approval="allow", home=tmp_path / "home")


def notes(agent: Agent) -> list[dict[str, Any]]:
    df = agent.store.events(agent.session_id, type="provider.note")
    return [json.loads(p) if isinstance(p, str) else p for p in df["payload"]]


def extras(agent: Agent) -> list[dict[str, Any]]:
    df = agent.store.sql("SELECT extra FROM requests WHERE session_id = ? AND error IS NULL ORDER BY seq",
                         [agent.session_id])
    return [json.loads(e) if isinstance(e, str) else (e or {}) for e in df["extra"]]


def test_an_imported_tool_result_with_an_image_is_sent_as_openai_takes_it(tmp_path: Path) -> None:
    """L2, S2, C1: the screenshot a Claude Code tool result holds goes in a user message right after the tool block
    (OpenAI takes images only there); the tool result says where it went; the stored transcript is unchanged; the
    user is told once per session; the C1 estimate of what is sent stays that of the view (the image still counts
    2,000 est. tokens, it is still sent). Before: every turn of the resumed session failed with OpenAI's 400."""
    store = Store(str(tmp_path / "s.duckdb"))
    sid = import_claude_code(store, claude_code_log(tmp_path / "cc.jsonl"), progress=False).sessions[0]
    stored_before = store.load_transcript(sid)
    with TestServer(quirks={"openai_history_rules"}) as srv:
        srv.enqueue_text("It has a login form.")
        srv.enqueue_text("Still a login form.")
        agent = resumed(store, sid, srv, tmp_path)
        assert agent.run("describe it again").text == "It has a login form."
        assert agent.run("and once more").text == "Still a login form."
        sent = srv.requests[-1]["messages"]
    roles = [m["role"] for m in sent]
    tool_at = roles.index("tool")
    assert roles[tool_at + 1] == "user", roles  # right after the tool block, before the assistant's answer
    moved = sent[tool_at + 1]["content"]
    assert [p for p in moved if p["type"] == "image_url"] == [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]
    tool_text = sent[tool_at]["content"]
    assert isinstance(tool_text, str) and "shot.png (1280x800)" in tool_text
    assert "image/png" in tool_text and "10,248 bytes" in tool_text and "next user message" in tool_text
    assert not any(isinstance(m["content"], list) and any(p.get("type") == "image_url" for p in m["content"])
                   for m in sent if m["role"] != "user")
    # S2: the stored rows are as imported (the image still in the tool message)
    assert agent.store.load_transcript(sid)[: len(stored_before)] == stored_before
    assert any(isinstance(m.get("content"), list) for m in stored_before if m["role"] == "tool")
    told = notes(agent)
    assert len(told) == 1, told  # once per session, not once per call
    assert "1 image" in told[0]["note"] and "stored transcript is unchanged" in told[0]["note"]
    assert all(e.get("sent_shaped", {}).get("images_moved") == 1 for e in extras(agent))  # every call's record
    # C1: what is sent is estimated as the view was (the image still counts; only the short notes are added), and
    # the record says by how much
    from mxclaw_nb.provider.shape import shape_history

    view = agent.dry_run()
    shaped, what = shape_history(view.messages)
    added = estimate_messages(shaped) - estimate_messages(view.messages)
    assert what is not None and what.added_tokens == added and 0 < added <= 60
    assert extras(agent)[-1]["sent_shaped"]["added_tokens_est"] == added
    assert f"{added:+,} est. tokens" in told[0]["note"]


def test_names_long_call_ids_and_dotted_function_names_from_an_export(tmp_path: Path) -> None:
    """L2, S2: a chat export's `name` with a space is sanitised and a CJK one dropped; a 64-character call id (another
    harness's) is shortened the same way in the call and its result, so C4's pairing holds on the wire; a function
    name with a dot is sanitised. Before: OpenAI refused the first of them with its 400."""
    long_id = "toolu_vrtx_" + "9" * 53
    conv = [
        {"role": "system", "content": "You help a team."},
        {"role": "user", "name": "Ana Lima", "content": "open an issue about the login bug"},
        {"role": "user", "name": "张三", "content": "请也加上截图"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": long_id, "type": "function", "function": {"name": "github.create_issue",
                                                             "arguments": '{"title": "login bug"}'}}]},
        {"role": "tool", "tool_call_id": long_id, "content": "issue #12 created"},
        {"role": "assistant", "content": "Opened issue #12."},
    ]
    path = tmp_path / "export.jsonl"
    path.write_text(json.dumps({"messages": conv}, ensure_ascii=False) + "\n", encoding="utf-8")
    store = Store(str(tmp_path / "s.duckdb"))
    sid = import_openai_jsonl(store, path, progress=False).sessions[0]
    with TestServer(quirks={"openai_history_rules"}) as srv:
        srv.enqueue_text("Done.")
        agent = resumed(store, sid, srv, tmp_path)
        assert agent.run("thanks").text == "Done."
        sent = srv.requests[-1]["messages"]
    from mxclaw_nb.provider.shape import MAX_CALL_ID

    users = [m for m in sent if m["role"] == "user"]
    assert users[0]["name"] == "Ana_Lima" and "name" not in users[1]
    call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    result = next(m for m in sent if m["role"] == "tool")
    assert len(call["id"]) <= MAX_CALL_ID and result["tool_call_id"] == call["id"]
    assert call["function"]["name"] == "github_create_issue"
    assert agent.store.load_transcript(sid)[: len(conv)] == conv  # S2
    told = notes(agent)
    assert len(told) == 1 and "Ana Lima" not in told[0]["note"]  # counts, not the people's names
    shaped = extras(agent)[0]["sent_shaped"]
    assert shaped == {"names_fixed": 1, "names_dropped": 1, "call_ids_shortened": 1, "function_names_fixed": 1,
                      "added_tokens_est": shaped["added_tokens_est"]} and shaped["added_tokens_est"] < 0  # shorter id


def test_the_refusals_are_openais_own_400(tmp_path: Path) -> None:
    """The quirk answers as OpenAI does (400 invalid_request_error, its wording, the param it names), so a turn
    the adapter did not reshape fails visibly, and the shaping is what makes the difference (L7)."""
    with TestServer(quirks={"openai_history_rules"}) as srv:
        ws = tmp_path / "ws"
        ws.mkdir()
        agent = Agent(workspace=ws, db=str(tmp_path / "d.duckdb"), base_url=srv.base_url, api_key="k",
                      model="test-model", approval="allow", home=tmp_path / "home")
        body = {"model": "m", "messages": [{"role": "tool", "tool_call_id": "c", "content": [
            {"type": "image_url", "image_url": {"url": IMAGE_URL}}]}]}
        req = urllib.request.Request(srv.base_url + "/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        error = json.loads(err.value.read())["error"]
        assert err.value.code == 400 and error["type"] == "invalid_request_error"
        assert error["message"] == ("Invalid 'messages[0]'. Image URLs are only allowed for messages with role "
                                    "'user', but this message with role 'tool' contains an image URL.")
        srv.enqueue_text("fine")
        assert agent.run("plain turn").text == "fine"  # an ordinary session is not refused


def test_shaping_leaves_an_ordinary_history_as_it_is() -> None:
    """L2: a history OpenAI takes is sent as the same list (no copy, no note): the usual case costs one pass."""
    from mxclaw_nb.provider.shape import shape_history

    history = [{"role": "system", "content": "s"}, {"role": "user", "content": [
        {"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": IMAGE_URL}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "read_file", "content": "x"}]
    out, shaped = shape_history(history)
    assert out is history and shaped is None


def test_a_codex_tool_block_with_an_image_keeps_its_results_together(tmp_path: Path) -> None:
    """L2, C4: a Codex rollout whose assistant called two tools at once, the first returning a screenshot (an MCP
    tool's content items): the image goes after BOTH results (a user message inside the tool block would orphan the
    second result), and each result still follows its call."""
    from mxclaw_nb.analysis import import_codex

    lines = [
        {"type": "session_meta", "payload": {"id": "shot-1", "cwd": "/nowhere"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "screenshot and list"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "screenshot", "arguments": "{}",
                                              "call_id": "c1"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell",
                                              "arguments": '{"command": ["ls"]}', "call_id": "c2"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "captured 1 window"}, {"type": "input_image", "image_url": IMAGE_URL}]}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c2", "output": "a.txt"}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": "One window; a.txt."}]}},
    ]
    path = tmp_path / "rollout-shot.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    store = Store(str(tmp_path / "s.duckdb"))
    sid = import_codex(store, path, progress=False).sessions[0]
    with TestServer(quirks={"openai_history_rules"}) as srv:
        srv.enqueue_text("The window shows a.txt.")
        agent = resumed(store, sid, srv, tmp_path)
        assert agent.run("what was in the window?").text == "The window shows a.txt."
        sent = srv.requests[-1]["messages"]
    roles = [m["role"] for m in sent]
    at = roles.index("tool")
    assert roles[at - 1: at + 4] == ["assistant", "tool", "tool", "user", "assistant"], roles
    assert [m["tool_call_id"] for m in sent[at: at + 2]] == ["c1", "c2"]
    assert sent[at + 2]["content"][1] == {"type": "image_url", "image_url": {"url": IMAGE_URL}}
    assert sent[at]["content"].startswith("captured 1 window") and "image/png" in sent[at]["content"]


@pytest.mark.parametrize(("message", "words"), [
    ({"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]},
     "Image URLs are only allowed for messages with role 'user'"),
    ({"role": "user", "name": "a.b", "content": "x"}, "'messages[0].name': string does not match pattern"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "x" * 41, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
     "string too long. Expected a string with maximum length 40, but got a string with length 41 instead."),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "mcp.fetch", "arguments": "{}"}}]},
     "'messages[0].tool_calls[0].function.name': string does not match pattern"),
], ids=["image", "name", "call-id", "function-name"])
def test_each_shape_is_refused_alone_and_shaped_alone(message: dict[str, Any], words: str) -> None:
    """L2: the quirk refuses each shape on its own (OpenAI's wording), and the shaped history passes it."""
    from mxclaw_nb.demo.quirks import QUIRKS
    from mxclaw_nb.provider.shape import shape_history

    reject = QUIRKS["openai_history_rules"].reject
    assert reject is not None
    refusal = reject({"messages": [message]})
    assert isinstance(refusal, tuple) and words in refusal[0]
    before = copy.deepcopy(message)
    shaped, what = shape_history([message])
    assert what is not None and reject({"messages": shaped}) is None
    assert message == before  # S2: the input (a stored row's sent form) is not changed in place


# -- a property over random histories ----------------------------------------------------------------------------------

def _histories() -> Any:
    from hypothesis import strategies as st

    image = st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    text = st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=8))
    content = st.one_of(st.text(max_size=8), st.lists(st.one_of(text, image), min_size=1, max_size=3))
    name = st.one_of(st.none(), st.sampled_from(["ok_name", "Ana Lima", "张三", "a.b", "", "x" * 70]))
    call_id = st.sampled_from(["c1", "call_" + "9" * 40, "toolu_vrtx_" + "7" * 50])
    fname = st.sampled_from(["read_file", "mcp.fetch", "", "a b"])

    @st.composite
    def block(draw: Any) -> list[dict[str, Any]]:
        role = draw(st.sampled_from(["system", "user", "assistant", "tool-block"]))
        if role != "tool-block":
            m: dict[str, Any] = {"role": role, "content": draw(content)}
            if (n := draw(name)) is not None:
                m["name"] = n
            return [m]
        ids = draw(st.lists(call_id, min_size=1, max_size=3, unique=True))
        calls = [{"id": i, "type": "function", "function": {"name": draw(fname), "arguments": "{}"}} for i in ids]
        return [{"role": "assistant", "content": None, "tool_calls": calls},
                *({"role": "tool", "tool_call_id": i, "content": draw(content)} for i in ids)]

    return st.lists(block(), max_size=6).map(lambda blocks: [m for b in blocks for m in b])


def test_shaping_any_history_gives_what_openai_takes_and_keeps_every_pairing() -> None:
    """L2, C4, C1 (Hypothesis): whatever the history, the shaped one passes OpenAI's checks; every tool result still
    follows its call block with the same (mapped) id; no image is lost (each is sent once, in a user message); the
    text of every message is kept; shaping twice changes nothing more; the input is not changed in place."""
    from hypothesis import HealthCheck, given, settings

    from mxclaw_nb.context.tokens import estimate_sent
    from mxclaw_nb.demo.quirks import QUIRKS
    from mxclaw_nb.messages import content_text, image_count
    from mxclaw_nb.provider.shape import shape_history

    reject = QUIRKS["openai_history_rules"].reject
    assert reject is not None

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_histories())
    def check(history: list[dict[str, Any]]) -> None:
        before = copy.deepcopy(history)
        shaped, what = shape_history(history)
        assert history == before
        assert reject({"messages": shaped}) is None
        assert sum(image_count(m.get("content")) for m in shaped) == sum(
            image_count(m.get("content")) for m in history)
        assert all(image_count(m.get("content")) == 0 for m in shaped if m["role"] != "user")
        originals = [m for m in shaped if not (isinstance(m.get("content"), list) and m["content"]
                                               and m["content"][0].get("text", "").startswith("[images from"))]
        assert len(originals) == len(history)
        for old, new in zip(history, originals, strict=True):  # the text as it was, an image's line in its place
            kept = re.sub(r"\n\[image: [^\n]*; sent in the next user message\]\n", "", content_text(new["content"]))
            assert new["role"] == old["role"] and kept == content_text(old.get("content"))
        for k, m in enumerate(shaped):  # each tool block: the results right after their calls, ids as sent
            if m.get("tool_calls"):
                ids = [c["id"] for c in m["tool_calls"]]
                results = shaped[k + 1: k + 1 + len(ids)]
                assert [r.get("tool_call_id") for r in results] == ids
        if what is not None:  # C1: the record's figure is the estimate's own difference
            assert what.added_tokens == sum(map(estimate_sent, shaped)) - sum(map(estimate_sent, history))
        again, more = shape_history(shaped)
        assert more is None and again is shaped
        assert (what is None) == (shaped is history)

    check()
