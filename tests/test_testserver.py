"""The local OpenAI-compatible server (SPEC L2, T3): wire format, scripting, usage counts, errors.

Spoken to with raw HTTP (http.client) so the wire format itself is pinned; tests/test_provider.py
covers the same server through the real openai client.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import time

import pytest

from mxclaw_nb.context.tokens import estimate_tokens
from mxclaw_nb.demo import model as demo_model
from mxclaw_nb.demo.server import (
    DEMO_KEEP_REQUESTS,
    DEMO_TOKEN_DELAY,
    TestServer,
    count_completion_tokens,
    count_prompt_tokens,
    stream_tokens,
)

MESSAGES = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "修复测试 please: def f(x): return x + 1"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "print('héllo')\n" * 20},
    {"role": "user", "content": [{"type": "text", "text": "and this image"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
]


def post(srv: TestServer, body: object, headers: dict | None = None, path: str = "/v1/chat/completions"):
    """POST JSON; returns (status, headers, raw body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    conn.close()
    return out


def sse_events(raw: bytes) -> list:
    """Parse an SSE body into JSON events ('[DONE]' kept as a string)."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models_endpoint_lists_the_served_model(test_server):
    conn = http.client.HTTPConnection("127.0.0.1", test_server.port, timeout=5)
    conn.request("GET", "/v1/models")
    data = json.loads(conn.getresponse().read())
    assert [m["id"] for m in data["data"]] == ["test-model"]
    assert test_server.base_url == f"http://127.0.0.1:{test_server.port}/v1"


def test_scripted_text_reply_and_exact_request_record(test_server):
    """L2: a queued reply comes back in Chat Completions shape; srv.requests holds exactly what was sent."""
    test_server.enqueue_text("hello", usage=(11, 2))
    body = {"model": "test-model", "messages": MESSAGES}
    status, _, raw = post(test_server, body)
    data = json.loads(raw)
    assert status == 200
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "hello"}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
    assert test_server.requests == [body]
    # empty queue: plain "ok"
    assert json.loads(post(test_server, body)[2])["choices"][0]["message"]["content"] == "ok"


def test_estimate_usage_is_the_c1_estimate_times_scale(test_server):
    """T3: with usage_counter='estimate', reported prompt_tokens = ceil(scale * C1 sum)."""
    test_server.usage_counter = "estimate"
    test_server.usage_scale = 1.3
    c1 = sum(estimate_tokens(m) for m in MESSAGES)
    data = json.loads(post(test_server, {"model": "m", "messages": MESSAGES})[2])
    assert data["usage"]["prompt_tokens"] == math.ceil(1.3 * c1)
    assert count_prompt_tokens(MESSAGES, "estimate") == (c1, "estimate")


def test_exact_usage_counts_o200k_tokens_in_chat_framing():
    """T2/T3: the demo's usage comes from a real tokenizer: 4 per message + content + call JSON, + 3."""
    tok = pytest.importorskip("mxclaw_nb.tokenizers")
    enc = tok.exact_encoding("o200k_base")
    if enc is None:
        pytest.skip("o200k_base offline data not installed")
    texts = ["You are a coding agent.", "修复测试 please: def f(x): return x + 1", "", '[{"id":"call_1",'
             '"type":"function","function":{"name":"read_file","arguments":"{\\"path\\":\\"a.py\\"}"}}]',
             "print('héllo')\n" * 20, "and this image"]
    expected = 3 + 4 * len(MESSAGES) + sum(len(enc.encode_ordinary(t)) for t in texts) + 2000
    assert count_prompt_tokens(MESSAGES, "o200k_base") == (expected, "o200k_base")
    assert count_prompt_tokens(MESSAGES, "auto")[1] == "o200k_base"
    assert count_completion_tokens({"role": "assistant", "content": "hello world"}, "o200k_base") == 2
    with pytest.raises(ValueError, match="unknown usage counter"):
        count_prompt_tokens(MESSAGES, "words")


def test_streaming_sends_chunks_tool_call_deltas_and_a_final_usage_chunk(test_server):
    """SSE: role chunk, text in pieces, tool-call deltas (id+name first, then argument pieces), usage, [DONE]."""
    test_server.enqueue_tool_calls([("read_file", {"path": "a.py"})], text="Reading the file now, then grep.")
    body = {"model": "m", "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    status, headers, raw = post(test_server, body)
    events = sse_events(raw)
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"]["prompt_tokens"] > 0
    deltas = [e["choices"][0]["delta"] for e in events[:-2]]
    assert "".join(d.get("content") or "" for d in deltas) == "Reading the file now, then grep."
    assert sum(1 for d in deltas if d.get("content")) >= 2
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "read_file"
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"path": "a.py"}
    assert len(calls) >= 3  # arguments arrive in several deltas
    assert events[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_stream_without_include_usage_and_servers_without_usage():
    with TestServer(report_usage=False) as srv:
        body = {"model": "m", "messages": MESSAGES}
        assert "usage" not in json.loads(post(srv, body)[2])
        events = sse_events(post(srv, {**body, "stream": True, "stream_options": {"include_usage": True}})[2])
        assert all("usage" not in e for e in events[:-1])
    with TestServer() as srv:
        events = sse_events(post(srv, {"model": "m", "messages": MESSAGES, "stream": True})[2])
        assert all("usage" not in e for e in events[:-1])


def test_api_key_is_required_when_configured():
    with TestServer(api_key="k") as srv:
        status, _, raw = post(srv, {"model": "m", "messages": []}, {"Authorization": "Bearer wrong-key-123"})
        assert status == 401
        err = json.loads(raw)["error"]
        assert err["code"] == "invalid_api_key" and "wro***23" in err["message"]
        assert post(srv, {"model": "m", "messages": []}, {"Authorization": "Bearer k"})[0] == 200
        assert srv.requests == [{"model": "m", "messages": []}]  # the refused request is not recorded


@pytest.mark.parametrize("raw, needle", [(b"{not json", "not valid JSON"), (b'{"model": "m"}', "'messages'")])
def test_bad_request_bodies_get_clear_400s(test_server, raw, needle):
    status, _, body = post(test_server, raw)
    assert status == 400 and needle in json.loads(body)["error"]["message"]


def test_errors_are_served_in_order_with_retry_after(test_server):
    test_server.enqueue_error(429, "rate limited")
    test_server.enqueue_error(500, "boom", retry_after=None)
    test_server.enqueue_error(400, "This model's maximum context length is 8192 tokens", code="context_length_exceeded")
    body = {"model": "m", "messages": []}
    status, headers, raw = post(test_server, body)
    assert (status, headers["retry-after-ms"], json.loads(raw)["error"]["message"]) == (429, "10", "rate limited")
    status, headers, _ = post(test_server, body)
    assert status == 500 and "retry-after-ms" not in headers
    status, _, raw = post(test_server, body)
    assert status == 400 and json.loads(raw)["error"]["code"] == "context_length_exceeded"
    assert post(test_server, body)[0] == 200 and test_server.pending == 0
    with pytest.raises(ValueError, match="HTTP error status"):
        test_server.enqueue_error(200, "fine")


def test_unknown_model_and_rejected_stream_options():
    with TestServer(known_models=["a", "b"], accept_stream_options=False) as srv:
        status, _, raw = post(srv, {"model": "zzz", "messages": []})
        assert status == 404 and "`zzz` does not exist" in json.loads(raw)["error"]["message"]
        status, _, raw = post(srv, {"model": "a", "messages": [], "stream": True,
                                    "stream_options": {"include_usage": True}})
        assert status == 400 and "stream_options" in json.loads(raw)["error"]["message"]
        assert post(srv, {"model": "a", "messages": [], "stream": True})[0] == 200


def test_delay_slows_only_the_next_reply_and_close_is_prompt(test_server):
    test_server.enqueue_delay(0.3)
    t0 = time.perf_counter()
    post(test_server, {"model": "m", "messages": []})
    slow = time.perf_counter() - t0
    t0 = time.perf_counter()
    post(test_server, {"model": "m", "messages": []})
    assert slow >= 0.3 > time.perf_counter() - t0
    # a reply stuck in a long delay does not hold up close(), and the port is released
    srv = TestServer().start()
    srv.enqueue_delay(30)
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n"
                 b'{"model":"m","messages":[]}')
    time.sleep(0.1)
    port, t0 = srv.port, time.perf_counter()
    srv.close()
    assert time.perf_counter() - t0 < 2
    sock.close()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_demo_server_is_labelled_and_streams_demo_text(demo_server):
    """L2: the demo model answers as 'mxclaw-demo' and every text says it is a demo."""
    body = {"model": "mxclaw-demo", "messages": [{"role": "user", "content": "fix the failing test"}],
            "stream": True, "stream_options": {"include_usage": True}}
    events = sse_events(post(demo_server, body)[2])
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-2] if e["choices"])
    assert events[0]["model"] == "mxclaw-demo"
    assert text.startswith("[demo model]")
    assert sum(1 for e in events[:-2] if e["choices"] and e["choices"][0]["delta"].get("content")) >= 3
    calls = [tc for e in events[:-2] for tc in e["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0]["function"]["name"] == "list_dir"


def test_text_streams_token_by_token_like_a_real_server(test_server):
    """Text arrives in token-sized pieces (a word piece with its leading space), not in a few big chunks."""
    text = "Fixed. `total_value` in inventory/stock.py looped over `items[1:]`; 修复测试 done.\n\n    - a line\n"
    test_server.enqueue_text(text)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    events = sse_events(post(test_server, body)[2])
    pieces = [e["choices"][0]["delta"].get("content") for e in events[:-1] if e["choices"]]
    pieces = [p for p in pieces if p]
    assert "".join(pieces) == text
    assert len(pieces) >= len(text.split()) and max(len(p.strip()) for p in pieces) <= 4
    assert stream_tokens(text) == pieces


def test_the_demo_server_paces_its_tokens(monkeypatch):
    """The offline demo streams like a model (a delay between tokens); MXCLAW_DEMO_TOKEN_DELAY sets it."""
    monkeypatch.delenv("MXCLAW_DEMO_TOKEN_DELAY", raising=False)
    assert TestServer(demo=True).stream_delay == DEMO_TOKEN_DELAY > 0
    assert TestServer().stream_delay == 0
    monkeypatch.setenv("MXCLAW_DEMO_TOKEN_DELAY", "0.02")
    with TestServer(demo=True) as srv:
        body = {"model": "mxclaw-demo", "messages": [{"role": "user", "content": "fix the failing test"}],
                "stream": True}
        t0 = time.perf_counter()
        events = sse_events(post(srv, body)[2])
        elapsed = time.perf_counter() - t0
    n = sum(1 for e in events[:-1] if e["choices"] and e["choices"][0]["delta"].get("content"))
    assert n >= 20 and elapsed >= 0.02 * n * 0.8


def test_demo_plan_keeps_whole_sentences():
    """The plan line names each step by its first sentence; a period inside `.mx-claw/` does not cut it."""
    reply = demo_model.next_reply([{"role": "user", "content": "fix the failing test"}])
    assert "under .mx-claw/." in reply.text and "under . 2)" not in reply.text
    assert demo_model.first_sentence("Fix 4.50 in stock.py now. Then more.") == "Fix 4.50 in stock.py now."
    assert demo_model.first_sentence("no end") == "no end"


def test_the_demo_server_remembers_only_recent_requests():
    """The demo serves a whole notebook session in the kernel: it keeps the last few request bodies, not all."""
    with TestServer(demo=True, keep_requests=2) as srv:
        for i in range(4):
            post(srv, {"model": "mxclaw-demo", "messages": [{"role": "user", "content": f"hello {i}"}]})
        assert [r["messages"][0]["content"] for r in srv.requests] == ["hello 2", "hello 3"]
        assert len(srv.headers) == 2
    assert TestServer(demo=True).keep_requests == DEMO_KEEP_REQUESTS and TestServer().keep_requests is None
