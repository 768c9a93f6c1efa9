"""The pre-encoded request body (SPEC L2): the bytes on the wire, decoded, are what the openai client's own
`chat.completions.create` (stdlib `json.dumps`) sends for the same call, streamed and not.

Real parts only: the `openai` client over HTTP to the project's test server on 127.0.0.1; the bytes are taken
from the client's own HTTP transport (an httpx request hook), as they leave for the socket.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider import wire
from mxclaw_nb.provider.client import OpenAIProvider

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file 读文件",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]


def _client(srv: TestServer, seen: list[bytes]) -> openai.OpenAI:
    def capture(request: Any) -> None:
        seen.append(request.read())

    http = openai.DefaultHttpxClient(trust_env=False, event_hooks={"request": [capture]})
    return openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0, http_client=http)


def _messages() -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are terse. 简洁。"},
            {"role": "user", "content": "Read a.py — “quotes”, emoji 🙂, tab\t, newline\n, NUL-free \\ slash"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "x = 1\n" * 50},
            {"role": "user", "content": [{"type": "text", "text": "and this 图"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]


def _both(srv: TestServer, kwargs: dict[str, Any], stream: bool) -> tuple[bytes, bytes]:
    """(bytes the pre-encoded path sent, bytes `create` sent) for the same call."""
    mine: list[bytes] = []
    theirs: list[bytes] = []
    for seen, send in ((mine, wire.create), (theirs, lambda c, kw: c.chat.completions.create(**kw))):
        srv.enqueue_text("ok", usage=(10, 1))
        call = {**kwargs, "stream": True, "stream_options": {"include_usage": True}} if stream else dict(kwargs)
        result = send(_client(srv, seen), call)
        if stream:
            with result as chunks:
                assert [c for c in chunks]
        else:
            assert result.choices[0].message.content == "ok"
    assert len(mine) == 1 and len(theirs) == 1
    return mine[0], theirs[0]


@pytest.mark.parametrize("stream", [True, False])
def test_the_body_on_the_wire_decodes_to_what_create_sends(test_server: TestServer, stream: bool) -> None:
    """L2: messages in `extra_body` (merged last), tools, model; CJK and emoji kept as UTF-8 (not \\u escapes)."""
    kwargs = {"model": "test-model", "messages": [], "extra_body": {"messages": _messages()}, "tools": TOOLS}
    mine, theirs = _both(test_server, kwargs, stream)
    assert json.loads(mine) == json.loads(theirs)
    expected = {"model": "test-model", "messages": _messages(), "tools": TOOLS}
    if stream:
        expected |= {"stream": True, "stream_options": {"include_usage": True}}
    assert json.loads(mine) == json.loads(json.dumps(expected, ensure_ascii=False))
    assert "简洁".encode() in mine and b"\\u" not in mine  # UTF-8 on the wire, as the client's encoder sends it
    assert test_server.requests[-1] == test_server.requests[-2]  # the server read the same request both times


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                       "content": st.text(max_size=60)}), min_size=1, max_size=6),
       st.floats(0, 2, allow_nan=False), st.integers(1, 2**40))
def test_any_text_and_number_decode_alike(test_server: TestServer, messages: list[dict[str, Any]], temperature: float,
                                          seed: int) -> None:
    """Whatever text (any Unicode the encoders accept) and numbers the body holds, it decodes alike."""
    kwargs = {"model": "test-model", "messages": [], "extra_body": {"messages": messages},
              "temperature": temperature, "seed": seed}
    mine, theirs = _both(test_server, kwargs, stream=False)
    assert json.loads(mine) == json.loads(theirs)


def test_what_orjson_refuses_goes_the_clients_own_way(test_server: TestServer) -> None:
    """An integer past 64 bits: orjson cannot encode it, so the client's own encoder sends the body unchanged."""
    kwargs = {"model": "test-model", "messages": [], "extra_body": {"messages": _messages(), "seed": 2**70}}
    assert wire.encode(wire.request_body(kwargs)) is None
    mine, theirs = _both(test_server, kwargs, stream=False)
    assert mine == theirs and json.loads(mine)["seed"] == 2**70


@pytest.mark.parametrize("stream", [True, False])
def test_the_provider_sends_through_it(test_server: TestServer, stream: bool) -> None:
    """OpenAIProvider.complete uses the pre-encoded path: the server reads the messages as the loop gave them."""
    test_server.enqueue_text("done", usage=(5, 1))
    provider = OpenAIProvider(base_url=test_server.base_url, api_key="k", model="test-model", stream=stream)
    completion = provider.complete(_messages(), TOOLS)
    assert completion.message["content"] == "done" and completion.usage.prompt_tokens == 5
    body = test_server.requests[-1]
    assert body["messages"] == _messages() and body["tools"] == TOOLS and body["model"] == "test-model"
