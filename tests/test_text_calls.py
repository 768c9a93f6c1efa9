"""Tool calls a model writes as text, read back into `tool_calls` (SPEC L2, L7, S2).

Served by the shipped test server in each format as a quirk (fenced JSON, bare JSON, Hermes/Qwen `<tool_call>`
tags, Mistral `[TOOL_CALLS]`, Llama 3 `{"name", "parameters"}`), over real HTTP to the real `openai` client,
streamed and plain; then through whole `Agent` turns on a real DuckDB file. Negative cases (a JSON object naming
no offered tool, arguments that do not match the schema, prose that mentions a tool) stay text: no call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.provider.textcalls import read_text_calls

USER = [{"role": "user", "content": "what is in a.txt and b.txt?"}]
READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
               "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
                                           "parameters": READ_SCHEMA}},
         {"type": "function", "function": {"name": "list_files", "parameters": {"type": "object", "properties": {}}}}]
CALLS = [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})]
FORMATS = ["fenced", "bare", "hermes", "mistral", "llama3"]


def provider(srv: TestServer, stream: bool, **kw: Any) -> OpenAIProvider:
    return OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model", stream=stream, max_retries=0,
                          timeout=60, call_deadline=120, **kw)  # a busy machine


def parsed(message: dict) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls") or []]


# -- the reader itself ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "fmt"), [
    ('```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```', "fenced"),
    ('I will read it.\n```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```', "fenced"),
    ('```\n{"name": "read_file", "arguments": "{\\"path\\": \\"a.txt\\"}"}\n```', "fenced"),
    ('{"name": "read_file", "arguments": {"path": "a.txt"}}', "bare"),
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call>', "hermes"),
    ('[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a.txt"}}]', "mistral"),
    ('[TOOL_CALLS]read_file[ARGS]{"path": "a.txt"}', "mistral"),
    ('{"name": "read_file", "parameters": {"path": "a.txt"}}', "llama3"),
    ('<|python_tag|>{"name": "read_file", "parameters": {"path": "a.txt"}}', "llama3"),
])
def test_l2_each_format_is_read(text: str, fmt: str) -> None:
    found = read_text_calls(text, TOOLS)
    assert found is not None and found.format == fmt
    assert parsed({"tool_calls": found.calls}) == [("read_file", {"path": "a.txt"})]
    assert all(isinstance(c["function"]["arguments"], str) and c["id"] for c in found.calls)


@pytest.mark.parametrize("text", [
    '{"name": "delete_everything", "arguments": {"path": "a.txt"}}',  # names no offered tool
    '```json\n{"name": "run_shell", "arguments": {"command": "ls"}}\n```',
    '{"name": "read_file", "arguments": {"path": 5}}',  # arguments do not match the schema
    '{"name": "read_file", "arguments": {"file": "a.txt"}}',  # a required argument missing, an unknown one
    '<tool_call>{"name": "read_file", "arguments": {"path": ["a"]}}</tool_call>',
    '[TOOL_CALLS][{"name": "read_file", "arguments": {}}]',
    "I would use read_file on a.txt to see what it says.",  # prose that mentions a tool
    'To read a file, call read_file like {"name": "read_file", "arguments": {"path": "a.txt"}} in your code.',
    '{"name": "read_file", "arguments": {"path": "a.txt"}, "result": "alpha"}',  # data, not a call
    '```json\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n```\n```json\n{"name": "nope", '
    '"arguments": {}}\n```',  # one block of two is no call: the whole answer stays text
    '```json\n{"path": "a.txt"}\n```',
    "",
])
def test_l2_what_is_not_a_valid_offered_call_stays_text(text: str) -> None:
    assert read_text_calls(text, TOOLS) is None


def test_l2_no_tools_offered_means_nothing_is_read() -> None:
    assert read_text_calls('{"name": "read_file", "arguments": {"path": "a.txt"}}', None) is None
    assert read_text_calls('{"name": "read_file", "arguments": {"path": "a.txt"}}', []) is None


# -- over HTTP, through the provider ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_l2_text_calls_from_the_test_server_become_tool_calls(fmt: str, stream: bool) -> None:
    with TestServer(quirks={f"text_calls_{fmt}"}) as srv:
        srv.enqueue_tool_calls(CALLS, usage=(200, 20))
        srv.enqueue_tool_calls(CALLS[:1], usage=(210, 10))
        p = provider(srv, stream)
        live: list[str] = []
        done = p.complete(USER, TOOLS, on_delta=live.append)
        assert parsed(done.message) == CALLS
        ids = [c["id"] for c in done.message["tool_calls"]]
        assert len(set(ids)) == 2 and all(ids)
        text = done.message["content"]  # S2: the answer's text is kept as written
        assert text and "read_file" in text and "tool_calls" not in json.dumps(srv.requests[-1])
        assert done.finish_reason == "tool_calls"
        assert len(done.notes) == 1 and done.notes[0]["text_calls"] and done.notes[0]["shown"] is True
        assert "read_file" in done.notes[0]["note"] and "text_calls=off" in done.notes[0]["note"]
        if stream:
            assert "".join(live) == text  # the user saw what the model wrote
        again = p.complete(USER, TOOLS)
        assert parsed(again.message) == CALLS[:1]
        assert again.notes[0]["shown"] is False  # said once; stored every time


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("text", [
    '{"name": "delete_everything", "arguments": {"path": "a.txt"}}',
    '```json\n{"name": "read_file", "arguments": {"path": 5}}\n```',
    "I would call read_file on a.txt, but it is not needed: the answer is 42.",
])
def test_l2_negative_cases_over_http_stay_text(text: str, stream: bool) -> None:
    with TestServer() as srv:
        srv.enqueue_text(text)
        done = provider(srv, stream).complete(USER, TOOLS)
        assert done.message["content"] == text and "tool_calls" not in done.message and done.notes == []


def test_l2_text_calls_off_and_openai_default() -> None:
    with TestServer(quirks={"text_calls_fenced"}) as srv:
        srv.enqueue_tool_calls(CALLS)
        done = provider(srv, True, text_calls=False).complete(USER, TOOLS)
        assert "tool_calls" not in done.message and "```json" in done.message["content"]
    assert OpenAIProvider(base_url=None, api_key="k", model="gpt-4o").text_calls is False
    assert OpenAIProvider(base_url="http://127.0.0.1:1/v1", api_key="k", model="m").text_calls is True


# -- whole turns -------------------------------------------------------------------------------------------------------

def _agent(srv: TestServer, tmp_path: Path, **kw: Any) -> Any:
    from mxclaw_nb import Agent

    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\n", encoding="utf-8")
    (ws / "b.txt").write_text("beta\n", encoding="utf-8")
    return Agent(workspace=ws, db=str(tmp_path / "t.duckdb"), base_url=srv.base_url, api_key="k", model="test-model",
                 approval="allow", home=tmp_path / "home", **kw)


@pytest.mark.parametrize("fmt", FORMATS)
def test_l2_a_turn_goes_on_after_a_text_written_call(fmt: str, tmp_path: Path) -> None:
    """L1/L2/S2: the call runs, its result is paired with the read call's id, the turn continues to the answer;
    the stored assistant message keeps its text and the calls it yielded; each use is a stored provider.note."""
    with TestServer(quirks={f"text_calls_{fmt}"}) as srv:
        agent = _agent(srv, tmp_path)
        srv.enqueue_tool_calls(CALLS[:1])
        srv.enqueue_tool_calls(CALLS[1:])
        srv.enqueue_text("a.txt says alpha, b.txt says beta.")
        shown: list[dict] = []
        agent.subscribe(lambda kind, p: shown.append(p) if kind == "provider.note" else None)
        result = agent.run("what is in a.txt and b.txt?")
        assert result.text == "a.txt says alpha, b.txt says beta." and result.iterations == 3
        stored = agent.transcript()
        calls = [m for m in stored if m["role"] == "assistant" and m.get("tool_calls")]
        assert [parsed(m) for m in calls] == [CALLS[:1], CALLS[1:]]
        assert all("read_file" in (m.get("content") or "") for m in calls)  # the text as written
        results = [m for m in stored if m["role"] == "tool"]
        assert [r["tool_call_id"] for r in results] == [m["tool_calls"][0]["id"] for m in calls]
        assert "alpha" in results[0]["content"] and "beta" in results[1]["content"]
        notes = agent.store.events(agent.session_id)
        notes = notes[notes["type"] == "provider.note"]
        assert len(notes) == 2
        payloads = [json.loads(p) if isinstance(p, str) else p for p in notes["payload"]]
        assert [p["shown"] for p in payloads] == [True, False] and all(p["format"] == fmt for p in payloads)
        # what was sent back next: the assistant message with its calls and the paired results (C4 holds)
        sent = srv.requests[-1]["messages"]
        assert [m.get("tool_calls") is not None for m in sent if m["role"] == "assistant"] == [True, True]


def test_l2_negative_turn_stores_the_text_as_the_answer(tmp_path: Path) -> None:
    with TestServer() as srv:
        agent = _agent(srv, tmp_path)
        text = '{"name": "read_file", "arguments": {"path": 5}}'
        srv.enqueue_text(text)
        result = agent.run("read a.txt")
        assert result.text == text and result.iterations == 1
        last = agent.transcript()[-1]
        assert last["role"] == "assistant" and "tool_calls" not in last
        events = agent.store.events(agent.session_id)
        assert not (events["type"] == "provider.note").any()


def test_l2_text_calls_setting_off_in_the_agent(tmp_path: Path) -> None:
    with TestServer(quirks={"text_calls_hermes"}) as srv:
        agent = _agent(srv, tmp_path, text_calls="off")
        srv.enqueue_tool_calls(CALLS[:1])
        result = agent.run("read a.txt")
        assert result.iterations == 1 and "<tool_call>" in result.text
        with pytest.raises(ValueError, match="text_calls must be one of"):
            _agent(srv, tmp_path, text_calls="sometimes")
