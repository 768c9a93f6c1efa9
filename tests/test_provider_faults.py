"""Fault injection over real HTTP: every turn ends cleanly (SPEC L7, L4, C4, S2).

Each case drives real turns through `mxclaw_nb.Agent` (the real `openai` client, a real DuckDB file in
tmp_path) against a server this module starts on 127.0.0.1: the shipped `TestServer` for what it can
script (HTTP errors, delays, 1,000 tool calls), and `RawServer` below, which writes raw bytes to the
socket, for what no well-behaved server sends (a malformed SSE line, a stream cut without
`finish_reason` or `[DONE]`, a non-JSON 200, empty `choices`, content None, keep-alive comments or
header lines trickled forever). For every case the same checks run (`assert_clean_end`): the user's
message is stored, the turn gives a correct answer or one paragraph with a stored `turn.failed` event
(and a request record with `error`), no stored row is lost, and the next turn works with no
unanswered tool call in what is sent (C4). The tally (cases tried / turns aborted without
`turn.failed` / rows lost) is printed at the end of the module's run.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.loop import TurnFailed
from mxclaw_nb.provider.client import DEFAULT_CALL_DEADLINE, OpenAIProvider
from mxclaw_nb.provider.errors import ProviderError

Handler = Callable[[socket.socket, dict], None]
PROMPT = "please fix the failing test"
NEXT_ANSWER = "next turn works"


# -- a raw HTTP/1.1 server: each request pops the next handler, which writes whatever bytes it likes ------------

class RawServer:
    """HTTP on 127.0.0.1 from a plain socket; an empty queue answers NEXT_ANSWER as a proper SSE stream."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.queue: deque[Handler] = deque()
        self.requests: list[dict] = []
        self._closing = threading.Event()
        threading.Thread(target=self._accept, name="raw-http", daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *handlers: Handler) -> None:
        self.queue.extend(handlers)

    def wait(self, seconds: float) -> bool:
        """Sleep; False once the server is closing (so trickling handlers stop)."""
        return not self._closing.wait(seconds)

    def close(self) -> None:
        self._closing.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    return
                data += piece
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            request = json.loads(body or b"{}")
            self.requests.append(request)
            handler = self.queue.popleft() if self.queue else (
                answer(NEXT_ANSWER) if request.get("stream") else
                send(completion_body({"role": "assistant", "content": NEXT_ANSWER})))
            with contextlib.suppress(OSError):  # the client gave up (deadline, timeout): the trickling cases
                handler(conn, request)


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"


def chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "chatcmpl-raw", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def event(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return b"data: " + text.encode() + b"\n\n"


def send(raw: bytes) -> Handler:
    return lambda conn, _request: conn.sendall(raw)


def answer(text: str | None, *, finish: str | None = "stop", done: bool = True,
           tool_calls: Sequence[tuple[str, str, dict]] = ()) -> Handler:
    """A streamed answer; finish=None and done=False cut it like a dropped connection would."""
    events = [event(chunk({"role": "assistant", "content": text}))]
    for index, (call_id, name, args) in enumerate(tool_calls):
        events.append(event(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                   "function": {"name": name, "arguments": json.dumps(args)}}]})))
    if finish:
        events.append(event(chunk({}, finish)))
    if done:
        events.append(event("[DONE]"))
    return send(SSE_HEAD + b"".join(events))


def completion_body(message: dict | None, *, choices: bool = True) -> bytes:
    body = {"id": "chatcmpl-raw", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}] if choices else []}
    return JSON_HEAD + json.dumps(body).encode()


def chunked_then_cut(conn: socket.socket, _request: dict) -> None:
    """Chunked SSE with one event, then the connection drops mid-body (no terminating chunk)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    data = event(chunk({"role": "assistant", "content": "I will now run the "}))
    conn.sendall(b"%X\r\n%s\r\n" % (len(data), data))


def trickle(server: RawServer, first: bytes, line: bytes, every: float = 0.1) -> Handler:
    """Send `first`, then `line` every `every` seconds for up to 60 s: never an answer, never a stall."""
    def handler(conn: socket.socket, _request: dict) -> None:
        conn.sendall(first)
        for _ in range(int(60 / every)):
            if not server.wait(every):
                return
            conn.sendall(line)
    return handler


def late(server: RawServer, seconds: float, then: Handler) -> Handler:
    def handler(conn: socket.socket, request: dict) -> None:
        if server.wait(seconds):
            then(conn, request)
    return handler


# -- the checks every case goes through --------------------------------------------------------------------------

@dataclass
class Tally:
    cases: int = 0
    aborted_without_turn_failed: int = 0
    rows_lost: int = 0
    names: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    counts = Tally()
    yield counts
    line = (f"provider faults: {counts.cases} cases tried / {counts.aborted_without_turn_failed} turns aborted "
            f"without turn.failed / {counts.rows_lost} rows lost")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print("\n" + line)


@pytest.fixture
def raw_server() -> Iterator[RawServer]:
    srv = RawServer()
    yield srv
    srv.close()


def make_agent(base_url: str, tmp_path: Path, *, stream: bool = True, timeout: float = 5.0,
               call_deadline: float = 5.0, max_retries: int = 0, **kw: Any) -> Agent:
    provider = OpenAIProvider(base_url=base_url, api_key="k", model="test-model", stream=stream, timeout=timeout,
                              call_deadline=call_deadline, max_retries=max_retries)
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    return Agent(workspace=ws, db=str(tmp_path / "faults.duckdb"), provider=provider, approval="allow",
                 home=tmp_path / "home", **kw)


def stored_rows(agent: Agent) -> set[tuple]:
    """Every stored row of the session (messages, events, requests), as comparable tuples."""
    rows: set[tuple] = set()
    for table in ("messages", "events", "requests"):
        frame = agent.store.sql(f"SELECT seq, CAST(t AS VARCHAR) AS row FROM {table} AS t WHERE session_id = ?",
                                [agent.session_id])
        rows |= {(table, int(seq), row) for seq, row in frame.itertuples(index=False)}
    return rows


def payload(row: Any) -> dict:
    value = row["payload"]
    return json.loads(value) if isinstance(value, str) else value


def drive(agent: Agent, prompt: str) -> tuple[str, str, TurnFailed | None]:
    """Run one turn as a user would: ('answer', text, None) or ('failed', paragraph, error)."""
    try:
        return "answer", agent.run(prompt).text, None
    except TurnFailed as exc:
        return "failed", str(exc), exc


def assert_one_paragraph(text: str) -> None:
    assert text.strip() and "\n" not in text and "Traceback" not in text and len(text) < 1_200, text


def assert_no_dangling_calls(sent: list[dict]) -> None:
    """C4 on the wire: each assistant tool_calls is followed by exactly one tool message per id, no others."""
    i = 0
    while i < len(sent):
        message = sent[i]
        assert message["role"] != "tool", f"orphan tool message at {i}"
        ids = [c["id"] for c in message.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in sent[i + 1:i + 1 + len(ids)] if m["role"] == "tool"]
        assert sorted(results) == sorted(ids), f"unanswered calls at {i}"
        i += 1 + len(ids)


def assert_clean_end(agent: Agent, outcome: tuple[str, str, TurnFailed | None], before: set[tuple], tally: Tally,
                     name: str, requests: list[dict], *, expect: str) -> None:
    """The L7 contract for one faulty turn, then a next turn that works."""
    kind, text, error = outcome
    turn = max(int(t) for t in agent.store.sql(
        "SELECT turn FROM messages WHERE session_id = ? AND role = 'user'", [agent.session_id])["turn"])
    events = agent.store.events(agent.session_id)
    failed = events[(events["type"] == "turn.failed") & (events["turn"] == turn)]
    finished = events[(events["type"] == "turn.finished") & (events["turn"] == turn)]
    tally.cases += 1
    tally.names.append(name)
    if not ((kind == "answer" and len(finished) == 1) or (kind == "failed" and len(failed) == 1)):
        tally.aborted_without_turn_failed += 1
    users = [m for m in agent.transcript() if m["role"] == "user"]
    after = stored_rows(agent)
    lost = len(before - after) + (0 if users and users[-1]["content"] == PROMPT else 1)
    tally.rows_lost += lost
    assert lost == 0, "a stored row or the user's message is missing"
    assert_one_paragraph(text)
    if expect.startswith("failed:"):
        assert kind == "failed", f"expected a provider error, got the answer {text!r}"
        assert error is not None and error.kind == expect.removeprefix("failed:"), (error and error.kind, text)
        assert len(failed) == 1 and payload(failed.iloc[0])["error"] == text
        assert error.user_seq is not None and "could not be stored" not in text
        records = agent.store.sql("SELECT error FROM requests WHERE session_id = ? AND turn = ?",
                                  [agent.session_id, turn])
        assert records["error"].notna().any(), "no request record with error for the failed call"
    else:
        assert kind == "answer" and text == expect.removeprefix("answer:"), (kind, text)
    served = len(requests)
    nxt = agent.run("are you there?")
    assert nxt.status == "ok" and nxt.text == NEXT_ANSWER
    assert len(requests) == served + 1
    assert_no_dangling_calls(requests[-1]["messages"])
    assert requests[-1]["messages"][-1] == {"role": "user", "content": "are you there?"}
    assert PROMPT in json.dumps(requests[-1]["messages"])  # as a message, or a goal of a summary (C6)


# -- the raw cases ------------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    handlers: Callable[[RawServer], list[Handler]]
    expect: str  # "failed:<ProviderError kind>" or "answer:<text>"
    stream: bool = True
    served: int = 1  # requests the faulty turn makes
    agent: dict[str, Any] = field(default_factory=dict)
    says: str = ""  # the paragraph names the fault


CASES = [
    Case("bad SSE line", lambda s: [send(SSE_HEAD + b"data: {not json\n\n")], "failed:bad_response",
         says="not JSON ("),
    Case("SSE line not UTF-8", lambda s: [send(SSE_HEAD + b"data: \xff\xfe{\n\n")], "failed:bad_response"),
    Case("SSE event that is a JSON list", lambda s: [send(SSE_HEAD + event("[1, 2]"))], "failed:bad_response"),
    Case("error object in the stream", lambda s: [send(SSE_HEAD + event({"error": {"message": "overloaded"}}))],
         "failed:server"),
    Case("HTTP 500 with a multi-line HTML page", lambda s: [send(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n"
        b"<html>\n<body>\n<h1>502 Bad Gateway</h1>\n</body>\n</html>\n")], "failed:server", says="(500)"
        " after 0 retries: Error code: 500: 502 Bad Gateway. Try again later."),
    Case("stream cut without finish_reason or [DONE], twice",
         lambda s: [answer("I will now run the ", finish=None, done=False)] * 2, "failed:bad_response", served=2,
         says="cut off twice (no finish_reason after 1 event and 19 characters)"),
    Case("stream cut once, then a full answer",
         lambda s: [answer("I will now run the ", finish=None, done=False), answer("Fixed it.")],
         "answer:Fixed it.", served=2),
    Case("tool call cut before its finish_reason, then a full answer",
         lambda s: [answer(None, finish=None, done=False, tool_calls=[("c1", "read_file", {"path": "a.txt"})]),
                    answer("No tools needed.")], "answer:No tools needed.", served=2),
    Case("chunked stream dropped mid-body, twice", lambda s: [chunked_then_cut] * 2, "failed:bad_response", served=2),
    Case("headers, then the connection closes, twice", lambda s: [send(SSE_HEAD)] * 2, "failed:bad_response",
         served=2),
    Case("non-JSON 200 (HTML) to a stream",
         lambda s: [send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>hi</html>")],
         "failed:bad_response"),
    Case("non-JSON 200 (HTML)", lambda s: [send(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>proxy error</html>")],
        "failed:bad_response", stream=False, says="not a JSON completion ('<html>proxy error</html>')"),
    # L7, C9: some gateways (LiteLLM, OpenRouter, small proxies) answer with status 200 and an error object as the
    # whole body: its words reach the user, and a prompt-too-long one drives the C9 retry
    Case("error object as a 200 JSON body", lambda s: [send(JSON_HEAD + json.dumps(
        {"error": {"message": "The upstream model is overloaded", "code": 503}}).encode())], "failed:server",
        stream=False, says="The upstream model is overloaded"),
    Case("error object as a 200 JSON body to a stream", lambda s: [send(JSON_HEAD + json.dumps(
        {"error": {"message": "The upstream model is overloaded", "code": 503}}).encode())], "failed:server",
        says="The upstream model is overloaded"),
    Case("prompt-too-long error object as a 200 body, then the C9 retry fits", lambda s: [send(JSON_HEAD + json.dumps(
        {"error": {"message": "This model's maximum context length is 4096 tokens", "code": 400}}).encode()),
        answer("Fits now.")], "answer:Fits now.", served=2),
    # L2: an event stream labelled `application/json` (a mislabelling proxy) is still read as the stream it is
    Case("an event stream labelled application/json", lambda s: [send(JSON_HEAD + b"".join(
        event(chunk(d, f)) for d, f in (({"role": "assistant", "content": "Streamed "}, None),
                                        ({"content": "anyway."}, "stop"))) + event("[DONE]"))],
        "answer:Streamed anyway."),
    # L2: a server that ignores `stream: true` and answers with one whole JSON completion
    Case("a whole JSON completion to a stream", lambda s: [send(completion_body(
        {"role": "assistant", "content": "Whole, not streamed."}))], "answer:Whole, not streamed."),
    Case("200 with a JSON body that is no completion (FastAPI style)", lambda s: [send(
        JSON_HEAD + b'{"detail": "Not Found"}')], "failed:bad_response", stream=False,
        says="""a body that is not a JSON completion ('{"detail": "Not Found"}')"""),
    Case("200 with a JSON body that is no completion, to a stream", lambda s: [send(
        JSON_HEAD + b'{"detail": "Not Found"}')], "failed:bad_response",
        says="""a JSON body that is not a completion ('{"detail": "Not Found"}')"""),
    Case("200 with malformed JSON", lambda s: [send(JSON_HEAD + b'{"id": "x", "choices": [')],
         "failed:bad_response", stream=False),
    Case("empty choices (stream)", lambda s: [send(SSE_HEAD + event({**chunk({}), "choices": []}) + event("[DONE]"))],
         "failed:bad_response"),
    Case("empty choices", lambda s: [send(completion_body(None, choices=False))], "failed:bad_response",
         stream=False, says="an empty `choices` list"),
    # L7: an empty answer is a model outcome (small models): asked once more, then blamed on the model
    Case("content None, no tool calls (stream), twice", lambda s: [answer(None), answer(None)], "failed:bad_response",
         served=2, says="answered twice with nothing: an empty answer: no text and no tool calls"),
    Case("content None, no tool calls, twice", lambda s: [send(completion_body({"role": "assistant", "content": None}))
                                                          ] * 2, "failed:bad_response", stream=False, served=2,
         says="the model itself is the likely cause"),
    Case("content None once, then an answer", lambda s: [answer(None), answer("Second time lucky.")],
         "answer:Second time lucky.", served=2),
    Case("choice with message null", lambda s: [send(completion_body(None))], "failed:bad_response", stream=False),
    Case("tool call, then a bad SSE line mid-turn",
         lambda s: [answer(None, finish="tool_calls", tool_calls=[("c1", "read_file", {"path": "a.txt"})]),
                    send(SSE_HEAD + b"data: {not json\n\n")], "failed:bad_response", served=2),
    Case("keep-alive comments every 0.1 s (deadline 1 s, read timeout 5 s)",
         lambda s: [trickle(s, SSE_HEAD + event(chunk({"role": "assistant", "content": "thinking"})),
                            b": keepalive\n\n")], "failed:timeout", agent={"call_deadline": 1.0},
         says="within the 1 s call deadline"),
    Case("header lines trickled every 0.1 s (deadline 1 s)",
         lambda s: [trickle(s, b"HTTP/1.1 200 OK\r\n", b"X-Wait: 1\r\n")], "failed:timeout",
         agent={"call_deadline": 1.0, "max_retries": 1}),
    Case("JSON body trickled as whitespace (deadline 1 s)",
         lambda s: [trickle(s, JSON_HEAD, b" ")], "failed:timeout", stream=False, agent={"call_deadline": 1.0}),
    Case("headers later than the read timeout", lambda s: [late(s, 3.0, answer("too late"))], "failed:timeout",
         agent={"timeout": 0.5}),
    Case("headers slow but within the timeout", lambda s: [late(s, 0.3, answer("Slow but fine."))],
         "answer:Slow but fine.", agent={"timeout": 2.0}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_raw_fault_ends_the_turn_cleanly(case: Case, raw_server: RawServer, tmp_path: Path, tally: Tally) -> None:
    """L7 for a response no well-behaved server sends: a correct answer or one paragraph + turn.failed."""
    agent = make_agent(raw_server.base_url, tmp_path, stream=case.stream, **case.agent)
    assert agent.run("warm up").text == NEXT_ANSWER  # rows that must survive the faulty turn
    before = stored_rows(agent)
    raw_server.push(*case.handlers(raw_server))
    served = len(raw_server.requests)
    started = time.perf_counter()
    outcome = drive(agent, PROMPT)
    elapsed = time.perf_counter() - started
    assert len(raw_server.requests) - served == case.served
    limit = case.agent.get("call_deadline", 5.0) * case.served + 2.0
    assert elapsed < limit, f"the call took {elapsed:.1f} s (deadline {limit - 2:.1f} s)"
    assert case.says in outcome[1]
    assert_clean_end(agent, outcome, before, tally, case.name, raw_server.requests, expect=case.expect)


def test_a_cut_stream_is_retried_once_and_the_live_text_says_so(raw_server: RawServer, tmp_path: Path) -> None:
    """The retry is visible in the streamed text; only the complete answer is stored."""
    agent = make_agent(raw_server.base_url, tmp_path)
    raw_server.push(answer("I will now run the ", finish=None, done=False), answer("Done: 3 tests pass."))
    pieces: list[str] = []
    agent.subscribe(lambda kind, payload: pieces.append(payload["text"]) if kind == "model.delta" else None)
    assert agent.run(PROMPT).text == "Done: 3 tests pass."
    assert "asking the provider again" in "".join(pieces)
    assistant = [m for m in agent.transcript() if m["role"] == "assistant"]
    assert [m["content"] for m in assistant] == ["Done: 3 tests pass."]
    records = agent.store.sql("SELECT error FROM requests WHERE session_id = ?", [agent.session_id])
    assert len(records) == 1 and records["error"].isna().all()


def test_keepalive_trickle_is_ended_by_the_agents_call_deadline(raw_server: RawServer, tmp_path: Path) -> None:
    """Agent(call_deadline=...) bounds a call the per-read timeout never ends (default timeout, 120 s)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    agent = Agent(workspace=ws, db=str(tmp_path / "d.duckdb"), base_url=raw_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", call_deadline=0.8)
    assert agent.provider.call_deadline == 0.8 and agent.provider.timeout == 120
    raw_server.push(trickle(raw_server, SSE_HEAD, b": keepalive\n\n", every=0.2))
    started = time.perf_counter()
    kind, text, error = drive(agent, PROMPT)
    assert kind == "failed" and error is not None and error.kind == "timeout"
    assert time.perf_counter() - started < 2.5 and "0.8 s call deadline" in text and "call_deadline" in text
    assert agent.run("again").text == NEXT_ANSWER


def test_call_deadline_default_and_validation() -> None:
    """The documented default (README settings table) is the provider's; non-positive values are refused."""
    import inspect

    assert inspect.signature(Agent).parameters["call_deadline"].default == DEFAULT_CALL_DEADLINE == 600
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert f"| `call_deadline` | `{DEFAULT_CALL_DEADLINE:g}` |" in readme
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(ValueError, match=r"call_deadline must be a number of seconds > 0"):
            OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="k", model="m", call_deadline=bad)


# -- the shipped test server: HTTP errors, 1,000 tool calls ---------------------------------------------------

def test_persistent_server_error_fails_the_turn_with_a_record(test_server: TestServer, tmp_path: Path,
                                                              tally: Tally) -> None:
    agent = make_agent(test_server.base_url, tmp_path, max_retries=1)
    test_server.enqueue_text(NEXT_ANSWER)
    agent.run("warm up")
    before = stored_rows(agent)
    test_server.enqueue_error(503, "upstream overloaded")
    test_server.enqueue_error(503, "upstream overloaded")
    outcome = drive(agent, PROMPT)
    test_server.enqueue_text(NEXT_ANSWER)
    assert_clean_end(agent, outcome, before, tally, "HTTP 503 after retries", test_server.requests,
                     expect="failed:server")


def test_a_thousand_tool_calls_in_one_response_end_cleanly(test_server: TestServer, tmp_path: Path,
                                                           tally: Tally) -> None:
    """1,000 calls in one response: the turn ends (answer or turn.failed) and every call has one stored result."""
    # the bounds only have to show the turn cannot hang: the server counts the 1,000 calls' tokens before its first
    # byte and streams ~100k characters, which a loaded 2-core machine once took past the 5 s read timeout and the
    # 30 s deadline
    agent = make_agent(test_server.base_url, tmp_path, timeout=60.0, call_deadline=120.0)
    test_server.enqueue_text(NEXT_ANSWER)
    agent.run("warm up")
    before = stored_rows(agent)
    test_server.enqueue_tool_calls([("read_file", {"path": "a.txt"})] * 1_000)
    test_server.enqueue_text("Read it a thousand times.")
    started = time.perf_counter()
    outcome = drive(agent, PROMPT)
    elapsed = time.perf_counter() - started
    stored = agent.transcript()
    answered = [m for m in stored if m.get("tool_calls")]
    assert answered, f"the 1,000-call answer was not stored: {outcome} after {elapsed:.1f} s"
    calls = answered[-1]["tool_calls"]
    results = [m for m in stored if m["role"] == "tool"]
    assert len(calls) == 1_000 and sorted(m["tool_call_id"] for m in results) == sorted(c["id"] for c in calls)
    test_server.enqueue_text(NEXT_ANSWER)
    assert_clean_end(agent, outcome, before, tally, "1,000 tool calls", test_server.requests,
                     expect="answer:Read it a thousand times.")
    print(f"\n1,000 tool calls in one response: turn took {elapsed:.1f} s")


# -- the loop: failures that are not the provider's -------------------------------------------------------------

def test_a_store_failure_mid_tool_block_stores_turn_failed_and_the_next_turn_repairs(
        test_server: TestServer, tmp_path: Path, tally: Tally, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected exception while storing a tool result: turn.failed, then C4 heals the dangling calls."""
    agent = make_agent(test_server.base_url, tmp_path)
    test_server.enqueue_text(NEXT_ANSWER)
    agent.run("warm up")
    before = stored_rows(agent)
    ids = test_server.enqueue_tool_calls([("read_file", {"path": "a.txt"}), ("list_dir", {"path": "."})])
    real = agent.store.append_message

    def flaky(session_id: str, message: dict, **kw: Any) -> int:
        if message.get("role") == "tool" and message["tool_call_id"] == ids[1]:
            raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
        return real(session_id, message, **kw)

    monkeypatch.setattr(agent.store, "append_message", flaky)
    outcome = drive(agent, PROMPT)
    monkeypatch.setattr(agent.store, "append_message", real)
    assert outcome[0] == "failed" and "running tool call 2 of 2 (list_dir)" in outcome[1]
    assert "UnicodeEncodeError" in outcome[1] and outcome[2] is not None and outcome[2].kind == "UnicodeEncodeError"
    test_server.enqueue_text(NEXT_ANSWER)
    kind, text, error = outcome
    turn_failed = agent.store.events(agent.session_id).query("type == 'turn.failed'")
    assert len(turn_failed) == 1 and payload(turn_failed.iloc[0])["kind"] == "UnicodeEncodeError"
    tally.cases += 1
    lost = len(before - stored_rows(agent))
    tally.rows_lost += lost
    assert lost == 0
    assert_one_paragraph(text)
    nxt = agent.run("are you there?")
    assert nxt.text == NEXT_ANSWER
    sent = test_server.requests[-1]["messages"]
    assert_no_dangling_calls(sent)
    synthetic = [m for m in sent if m["role"] == "tool" and "interrupted" in m["content"]]
    assert len(synthetic) == 1  # the call whose result could not be stored (C4)


def test_an_unexpected_provider_exception_is_a_failed_turn_with_a_request_record(
        test_server: TestServer, tmp_path: Path, tally: Tally, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug below the provider (not a ProviderError) still ends the turn with turn.failed and a record."""
    agent = make_agent(test_server.base_url, tmp_path)
    test_server.enqueue_text(NEXT_ANSWER)
    agent.run("warm up")
    before = stored_rows(agent)

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("socket gremlin\nwith a second line")

    monkeypatch.setattr(agent.provider, "complete", broken)
    kind, text, error = drive(agent, PROMPT)
    monkeypatch.undo()
    assert kind == "failed" and error is not None and error.kind == "RuntimeError"
    assert "calling the model (call 1)" in text and "socket gremlin with a second line" in text
    assert_one_paragraph(text)
    records = agent.store.sql("SELECT error FROM requests WHERE session_id = ? AND error IS NOT NULL",
                              [agent.session_id])
    assert len(records) == 1 and "RuntimeError" in records.iloc[0]["error"]
    tally.cases += 1
    assert before <= stored_rows(agent)
    test_server.enqueue_text(NEXT_ANSWER)
    assert agent.run("are you there?").text == NEXT_ANSWER


def test_keyboard_interrupt_stays_an_interruption(raw_server: RawServer, tmp_path: Path) -> None:
    """Ctrl-C during a trickling call: turn.interrupted (not turn.failed), re-raised; the next turn works."""
    agent = make_agent(raw_server.base_url, tmp_path, call_deadline=30.0)
    raw_server.push(trickle(raw_server, SSE_HEAD + event(chunk({"role": "assistant", "content": "hm"})),
                            b": keepalive\n\n"))

    def interrupt(kind: str, _payload: dict) -> None:
        if kind == "model.delta":
            raise KeyboardInterrupt

    stop = agent.subscribe(interrupt)
    with pytest.raises(KeyboardInterrupt):
        agent.run(PROMPT)
    stop()
    types = set(agent.store.events(agent.session_id)["type"])
    assert "turn.interrupted" in types and "turn.failed" not in types
    # L4/L7: the user's message is stored, then the part of the answer already streamed, marked partial
    assert agent.transcript()[-2:] == [{"role": "user", "content": PROMPT},
                                       {"role": "assistant", "content": "hm", "partial": True}]
    assert agent.run("again").text == NEXT_ANSWER


# -- the magic: one paragraph, not a traceback wall ----------------------------------------------------------

def test_the_magic_shows_one_paragraph_for_a_malformed_response(raw_server: RawServer, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    monkeypatch.setenv("OPENAI_BASE_URL", raw_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("MXCLAW_MODEL", "test-model")
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "magic.duckdb"))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.config.pop("AgentMagics", None)
    shell.run_line_magic("load_ext", "mxclaw_nb")
    try:
        shell.run_line_magic("config", "AgentMagics.live = False")
        raw_server.push(send(SSE_HEAD + b"data: {not json\n\n"))
        with capture_output() as cap:
            shell.run_line_magic("agent", PROMPT)
        err = cap.stderr.strip()
        assert_one_paragraph(err)
        assert "not JSON" in err and "Your message is stored" in err and cap.stdout.strip() == ""
        with capture_output() as cap:
            shell.run_line_magic("agent", "are you there?")
        assert cap.stdout.strip() == NEXT_ANSWER and cap.stderr.strip() == ""
        with capture_output():
            shell.run_line_magic("agent", "config call_deadline=2.5")
        registry = shell.magics_manager.registry["AgentMagics"]
        assert registry.call_deadline == 2.5 and registry.get_agent().provider.call_deadline == 2.5
    finally:
        shell.run_line_magic("unload_ext", "mxclaw_nb")
        shell.config.pop("AgentMagics", None)


def test_a_base_url_without_v1_that_gets_a_404_says_where_the_api_usually_is(raw_server: RawServer) -> None:
    """L2: `OPENAI_BASE_URL=http://127.0.0.1:11434` (Ollama's root, not its `/v1`) answers 404 "404 page not found":
    the paragraph says that such servers serve the API under /v1, beside the model/endpoint remedy."""
    root = raw_server.base_url.removesuffix("/v1")
    raw_server.push(send(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
                         b"404 page not found"))
    provider = OpenAIProvider(base_url=root, api_key="k", model="test-model", max_retries=0)
    with pytest.raises(ProviderError) as err:
        provider.complete([{"role": "user", "content": "hi"}], None)
    assert err.value.kind == "not_found" and f"{root}/v1" in err.value.message
    assert_one_paragraph(err.value.message)
    raw_server.push(send(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nnope"))
    with pytest.raises(ProviderError) as err:  # with /v1 already: no such hint
        OpenAIProvider(base_url=raw_server.base_url, api_key="k", model="m", max_retries=0).complete(
            [{"role": "user", "content": "hi"}], None)
    assert "under /v1" not in err.value.message


def test_no_model_and_no_models_list_asks_for_a_model(raw_server: RawServer) -> None:
    """L2: with no model configured the provider asks GET /models; a server without that endpoint (404) gets a
    paragraph that asks for the model setting (before: "does not know model 'None'")."""
    raw_server.push(send(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
                         b'{"error": {"message": "Not Found"}}'))
    provider = OpenAIProvider(base_url=raw_server.base_url, api_key="k", model=None, max_retries=0)
    with pytest.raises(ProviderError) as err:
        provider.complete([{"role": "user", "content": "hi"}], None)
    message = err.value.message
    assert err.value.kind == "not_found" and "'None'" not in message and "No model is configured" in message
    assert "MXCLAW_MODEL" in message and "404" in message and "Not Found" in message
    assert_one_paragraph(message)


@pytest.mark.parametrize("url", ["localhost:11434/v1", "http//127.0.0.1:9/v1", "ftp://127.0.0.1:9/v1"])
def test_a_base_url_without_http_scheme_is_refused_up_front(url: str) -> None:
    """L2: a base URL that is no http(s) URL is a setting error said at once, not "the connection broke during the
    response ... Try again" on the first turn."""
    with pytest.raises(ValueError, match=r"base_url must be an http:// or https:// URL"):
        OpenAIProvider(base_url=url, api_key="k", model="m")


def test_a_base_url_with_surrounding_spaces_works(raw_server: RawServer) -> None:
    """L2: `OPENAI_BASE_URL=" http://.../v1 "` (pasted with spaces) is the URL inside them."""
    provider = OpenAIProvider(base_url=f"  {raw_server.base_url}\n", api_key="k", model="test-model")
    assert provider.complete([{"role": "user", "content": "hi"}], None).message["content"] == NEXT_ANSWER
