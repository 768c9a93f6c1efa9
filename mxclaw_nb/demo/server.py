"""A local OpenAI-compatible HTTP server: scripted replies for tests, and the offline demo model.

Why: the provider, the loop and the notebooks must be exercised through the real `openai` client over
real HTTP, not through a mock of it, and users without a key still need a model that behaves like one.
This server speaks just enough of the Chat Completions API (`POST /v1/chat/completions`, plain and SSE
streaming with a final usage chunk, `GET /v1/models`) on 127.0.0.1. Like a real server it streams text
token by token (word pieces of a few characters, `stream_tokens`); the demo server paces them
(`DEMO_TOKEN_DELAY`, env `MXCLAW_DEMO_TOKEN_DELAY`) so the live log can be watched as it fills.
Tests queue replies, tool calls, usage figures, delays and HTTP errors; `srv.requests` records exactly
what was sent. `answers` scripts replies by question text instead of by order (SPEC S4 probe recall,
see `TestServer.answer_for`): when the queue is empty, the first key contained in the request's last
user message picks the reply. With an empty queue and no matching key the server answers "ok", or,
in demo mode, asks `mxclaw_nb.demo.model` for the next step of its small coding-agent script.
Reported usage is computed from the request when not scripted (`mxclaw_nb.demo.usage`: an exact
o200k_base count in OpenAI's chat framing when the offline encoding is available, else the C1-style
estimate), times `usage_scale`, so token calibration (SPEC T2/T3) can be shown and tested offline.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mxclaw_nb.demo import model as demo_model
from mxclaw_nb.demo.hostile import MODES as HOSTILE_MODES
from mxclaw_nb.demo.hostile import Hostile, write_hostile
from mxclaw_nb.demo.model import DEMO_MODEL, Reply, ToolCall
from mxclaw_nb.demo.quirks import QUIRKS, truncated_usage
from mxclaw_nb.demo.usage import cached_prefix_tokens, count_completion_tokens, count_prompt_tokens, o200k_encoding
from mxclaw_nb.messages import content_text

__all__ = ["DEFAULT_TEST_MODEL", "DEMO_MODEL", "DEMO_TOKEN_DELAY", "QUIRKS", "Reply", "TestServer", "ToolCall",
           "count_completion_tokens", "count_prompt_tokens", "stream_tokens"]

DEFAULT_TEST_MODEL = "test-model"
DEMO_KEEP_REQUESTS = 4  # request bodies the demo server remembers (each holds a whole request view)
DEMO_TOKEN_DELAY = 0.004  # seconds between the demo model's streamed tokens (~250 tokens/s)
# A token as servers stream them: leading white space plus a word piece of at most 4 characters, or one
# other character; trailing white space on its own. Every character of the text is in exactly one piece.
_TOKEN = re.compile(r"\s*(?:\w{1,4}|[^\w\s])|\s+")
# A scripted answer: one text (every time), texts in the order the question is asked (the last repeats),
# or a function of the request's messages.
Answer = str | Sequence[str] | Callable[[list[dict]], str]


def stream_tokens(text: str) -> list[str]:
    """`text` cut into token-sized pieces, as a real server streams them (`"".join(pieces) == text`)."""
    return _TOKEN.findall(text)


def _demo_token_delay() -> float:
    try:
        return max(0.0, float(os.environ.get("MXCLAW_DEMO_TOKEN_DELAY", DEMO_TOKEN_DELAY)))
    except ValueError:
        return DEMO_TOKEN_DELAY


@dataclass
class _Error:
    status: int
    message: str
    retry_after: float | None
    code: str | None


@dataclass
class _Delay:
    seconds: float


class TestServer:
    """OpenAI-compatible server on 127.0.0.1 in a daemon thread; use as a context manager or start()/close()."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, demo: bool = False, api_key: str | None = None, model: str | None = None,
                 known_models: list[str] | None = None, accept_stream_options: bool = True,
                 report_usage: bool = True, usage_counter: str = "auto", port: int = 0,
                 keep_requests: int | None = None, answers: Mapping[str, Answer] | None = None,
                 quirks: Iterable[str] = ()) -> None:
        """`keep_requests`: how many recent request bodies `requests` keeps (None: all; the demo default
        keeps DEMO_KEEP_REQUESTS, since the offline demo serves inside a kernel for a whole session).
        `answers`: replies scripted by question text (see `answer_for`); may also be set later.
        `quirks`: names from `mxclaw_nb.demo.quirks.QUIRKS`: wire behaviours of other servers (vLLM, llama.cpp,
        Ollama, OpenRouter, ...) this server then shows in every reply (SPEC L2); `quirks` may also be set later."""
        self.demo = demo
        self.api_key = api_key
        self.model = model or (DEMO_MODEL if demo else DEFAULT_TEST_MODEL)
        self.known_models = known_models
        self.accept_stream_options = accept_stream_options
        self.report_usage = report_usage
        self.quirks = frozenset(quirks)
        self.usage_counter = usage_counter
        self.usage_scale = 1.0
        # E1: like a provider with prefix caching, counted usage reports `prompt_tokens_details.cached_tokens`: the
        # tokens of the leading messages equal to the previous request's, if it came less than cache_ttl seconds
        # ago (quirks move it where other servers put it, or drop it). Scripted usage reports none.
        self.report_cache = True
        self.cache_ttl = 300.0
        self.cache_minimum, self.cache_block = 0, 1  # OpenAI: 1,024 and 128
        self._cache_prompt: list[dict] | None = None
        self._cache_at = 0.0
        # Like a real server: refuse requests whose prompt (counted as for usage, times usage_scale) is longer
        # than this many tokens, with OpenAI's "context length exceeded" 400 (SPEC C9). None = no limit.
        self.context_limit: int | None = None
        # The `prompt_truncated` quirk (Ollama): a prompt over this many tokens is answered as if cut to it, and its
        # usage reports at most this many prompt tokens (Ollama's num_ctx; 2,048 was its default before 0.6).
        self.num_ctx = 2048
        self.stream_chunk_chars = 0  # 0: text is streamed token by token; n > 0: in pieces of n characters
        # seconds between streamed chunks (to watch, time out or interrupt a stream); the demo is paced like a model
        self.stream_delay = _demo_token_delay() if demo else 0.0
        self.keep_requests = keep_requests if keep_requests is not None or not demo else DEMO_KEEP_REQUESTS
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self._queue: deque[Reply | _Error | _Delay | Hostile] = deque()
        self.answers: dict[str, Answer] = dict(answers or {})
        self.asked: Counter[str] = Counter()  # answers key -> times it answered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> TestServer:
        """Bind 127.0.0.1 (port 0 = a free port) and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        self._stop.clear()
        handler = type("_BoundHandler", (_Handler,), {"server_obj": self})
        self._httpd = _Server(("127.0.0.1", self._port), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"mxclaw-testserver:{self.port}", daemon=True)
        self._thread.start()
        if self.usage_counter != "estimate":  # load the tokenizer now, not during the first request
            threading.Thread(target=o200k_encoding, name="mxclaw-testserver-tokenizer", daemon=True).start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (slow replies in progress are cut short)."""
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> TestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        if self._httpd is None:
            raise RuntimeError("TestServer is not started; call start() or use it as a context manager")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """Base URL for the openai client, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def quirks(self) -> frozenset[str]:
        """The server quirks in effect (names of `QUIRKS`), applied in the table's order."""
        return self._quirks

    @quirks.setter
    def quirks(self, names: Iterable[str]) -> None:
        names = frozenset([names] if isinstance(names, str) else names)
        unknown = sorted(names - QUIRKS.keys())
        if unknown:
            raise ValueError(f"unknown server quirk(s) {unknown}; known: {', '.join(QUIRKS)}")
        self._quirks = names

    def _quirk_list(self) -> list[Any]:
        return [q for name, q in QUIRKS.items() if name in self._quirks]

    # -- scripting ----------------------------------------------------------------------------------
    def enqueue_text(self, text: str, usage: tuple[int, int] | None = None, *, reasoning: str | None = None,
                     finish_reason: str = "stop") -> None:
        """Queue a plain assistant answer (usage = (prompt_tokens, completion_tokens) overrides the count)."""
        self._push(Reply(text=text, usage=usage, reasoning=reasoning, finish_reason=finish_reason))

    def enqueue_tool_calls(self, calls: list[tuple[str, dict]], text: str | None = None,
                           usage: tuple[int, int] | None = None) -> list[str]:
        """Queue an assistant message with tool calls; returns the generated call ids."""
        tcs = [ToolCall(name, json.dumps(args, ensure_ascii=False)) for name, args in calls]
        self._push(Reply(text=text, tool_calls=tcs, usage=usage, finish_reason="tool_calls"))
        return [tc.id for tc in tcs]

    def enqueue_raw_tool_call(self, name: str, arguments: str, text: str | None = None) -> str:
        """Queue one tool call whose arguments string is sent verbatim (e.g. malformed JSON)."""
        tc = ToolCall(name, arguments)
        self._push(Reply(text=text, tool_calls=[tc], finish_reason="tool_calls"))
        return tc.id

    def enqueue_error(self, status: int, message: str, *, retry_after: float | None = 0.01,
                      code: str | None = None) -> None:
        """Queue an HTTP error reply; 429/5xx carry retry-after-ms so client retries stay fast."""
        if not 400 <= status <= 599:
            raise ValueError(f"enqueue_error needs an HTTP error status (400-599), got {status}")
        self._push(_Error(status, message, retry_after, code))

    def enqueue_delay(self, seconds: float) -> None:
        """Make the next reply wait `seconds` before the server answers."""
        self._push(_Delay(float(seconds)))

    def enqueue_hostile(self, mode: str, *, size: int = 0, target: str = "", status: int = 307) -> None:
        """Queue a hostile reply (SPEC L10; `mxclaw_nb.demo.hostile`): an endless line, a gzip bomb, a huge answer or
        tool-call argument of `size` bytes, or a redirect (`status`) to `target`."""
        if mode not in HOSTILE_MODES:
            raise ValueError(f"unknown hostile mode {mode!r}; known: {', '.join(HOSTILE_MODES)}")
        self._push(Hostile(mode, size, target, status))

    def enqueue(self, reply: Reply) -> None:
        """Queue a prepared Reply (full control over text, tool calls, usage, reasoning)."""
        self._push(reply)

    @property
    def pending(self) -> int:
        """Number of queued items not yet served."""
        with self._lock:
            return len(self._queue)

    def _push(self, item: Reply | _Error | _Delay | Hostile) -> None:
        with self._lock:
            self._queue.append(item)

    def _record(self, body: dict) -> None:
        with self._lock:
            self._remember(body)

    def _remember(self, body: dict) -> None:
        """Append to `requests` (caller holds the lock), dropping the oldest beyond `keep_requests`."""
        self.requests.append(body)
        keep = self.keep_requests
        if keep is not None and len(self.requests) > keep:
            del self.requests[: len(self.requests) - keep]
        if keep is not None and len(self.headers) > keep:
            del self.headers[: len(self.headers) - keep]

    def _next(self, body: dict) -> tuple[float, Reply | _Error | Hostile]:
        """Pop delays and the next reply; an empty queue gives "ok" or the demo model's next step."""
        delay = 0.0
        with self._lock:
            self._remember(body)
            while self._queue and isinstance(self._queue[0], _Delay):
                delay += self._queue.popleft().seconds  # type: ignore[union-attr]
            item = self._queue.popleft() if self._queue else None
        if item is None:
            text = self.answer_for(body.get("messages") or [])
            if text is not None:
                item = Reply(text=text)
        if item is None:
            item = (demo_model.next_reply(body.get("messages") or [], body.get("tools")) if self.demo
                    else Reply(text="ok"))
        return delay, item  # type: ignore[return-value]

    def answer_for(self, messages: list[dict]) -> str | None:
        """The scripted answer to a request, or None (SPEC S4: offline probe recall).

        Keys of `answers` are tried in order; the first one contained in the last user message's text
        answers. Its value is a text (always that), a list of texts (the n-th time this key answers it
        gives the n-th text; after the last, the last again), or a function of the request's messages.
        """
        if not self.answers:
            return None
        last = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
        if last is None:
            return None
        question = content_text(last.get("content"))
        with self._lock:
            key = next((k for k in self.answers if k in question), None)
            if key is None:
                return None
            value, n = self.answers[key], self.asked[key]
            self.asked[key] += 1
        if isinstance(value, str):
            return value
        if callable(value):
            return str(value(messages))
        texts = list(value)
        if not texts:
            raise ValueError(f"answers[{key!r}] is an empty list")
        return texts[min(n, len(texts) - 1)]

    def usage_for(self, body: dict, reply: Reply) -> dict[str, Any]:
        """Usage figures reported for a reply: scripted, else counted from the request and scaled (with the
        prompt-cache figure, E1)."""
        messages = body.get("messages") or []
        cached = self._cached(messages)
        if reply.usage is not None:  # scripted: the cache figure only where the prefix cache served something
            prompt, completion = reply.usage
            scripted: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                        "total_tokens": prompt + completion}
            if self.report_cache and cached and prompt:
                scripted["prompt_tokens_details"] = {"cached_tokens": min(prompt, cached)}
            return self._truncated(scripted)
        counted, _ = count_prompt_tokens(messages, self.usage_counter, body.get("tools"))
        prompt = math.ceil(counted * self.usage_scale)
        out = {"role": "assistant", "content": reply.text,
               "tool_calls": [tc.as_dict() for tc in reply.tool_calls] or None}
        completion = count_completion_tokens(out, self.usage_counter)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if self.report_cache:
            usage["prompt_tokens_details"] = {"cached_tokens": min(prompt, math.floor(cached * self.usage_scale))}
        return self._truncated(usage)

    def _truncated(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The `prompt_truncated` quirk: usage as Ollama reports a prompt it cut to `num_ctx` tokens."""
        return truncated_usage(usage, self.num_ctx) if "prompt_truncated" in self._quirks else usage

    def _cached(self, messages: list[dict]) -> int:
        """E1: prompt tokens this request reads from the server's prefix cache; the request then becomes it."""
        with self._lock:
            previous, at = self._cache_prompt, self._cache_at
            self._cache_prompt, self._cache_at = list(messages), time.monotonic()
        if previous is None or time.monotonic() - at > self.cache_ttl:
            return 0
        return cached_prefix_tokens(previous, messages, self.usage_counter, self.cache_minimum, self.cache_block)

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; False when the server is closing."""
        return not self._stop.wait(seconds)


def _wire(payload: dict) -> bytes:
    """JSON bytes as servers send them: UTF-8, and a scripted lone surrogate as a `\\udcff` escape (SPEC L7)."""
    try:
        return json.dumps(payload, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(payload).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a slow reply in progress must not block close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # client closed a kept-alive connection: routine
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Request handler; `server_obj` is bound per server by TestServer.start()."""

    server_obj: TestServer
    protocol_version = "HTTP/1.1"  # keep-alive: the openai client reuses connections
    disable_nagle_algorithm = True  # small SSE writes must not wait for delayed ACKs

    def log_message(self, format: str, *args: Any) -> None:  # silence per-request logging
        return

    def do_GET(self) -> None:  # http.server naming
        if not self._authorized():
            return
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            models = self.server_obj.known_models or [self.server_obj.model]
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "mxclaw_nb"} for m in models]
            self._json(200, {"object": "list", "data": data})
        else:
            self._error(404, f"Unknown path {self.path}", "not_found")

    def do_POST(self) -> None:  # http.server naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"Unknown path {self.path}", "not_found")
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            self._error(400, f"Request body is not valid JSON: {exc}", "invalid_json")
            return
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            self._error(400, "'messages' is a required property and must be a list", "invalid_request")
            return
        srv = self.server_obj
        with srv._lock:
            srv.headers.append({k.lower(): v for k, v in self.headers.items()})
        if "stream_options" in body and not srv.accept_stream_options:
            srv._record(body)
            self._error(400, "Unrecognized request argument supplied: stream_options", "invalid_request")
            return
        refusal = next((msg for q in srv._quirk_list() if q.reject and (msg := q.reject(body))), None)
        if refusal is not None:
            srv._record(body)
            message, code, param = refusal if isinstance(refusal, tuple) else (refusal, "invalid_request", None)
            self._error(400, message, code, param=param)
            return
        known = srv.known_models
        if known is not None and body.get("model") not in known:
            srv._record(body)
            self._error(404, f"The model `{body.get('model')}` does not exist or you do not have access to it.",
                        "model_not_found")
            return
        if srv.context_limit is not None:
            counted, _ = count_prompt_tokens(body["messages"], srv.usage_counter, body.get("tools"))
            prompt = math.ceil(counted * srv.usage_scale)
            if prompt > srv.context_limit:
                srv._record(body)
                self._error(400, f"This model's maximum context length is {srv.context_limit} tokens. However, your "
                            f"messages resulted in {prompt} tokens. Please reduce the length of the messages.",
                            "context_length_exceeded")
                return
        delay, item = srv._next(body)
        if delay and not srv.wait(delay):
            return
        if isinstance(item, _Error):
            self._error(item.status, item.message, item.code, item.retry_after)
        elif isinstance(item, Hostile):
            write_hostile(self, item, bool(body.get("stream")))
        elif body.get("stream"):
            self._stream(body, item)
        else:
            self._json(200, self._completion(body, item))

    # -- responses ----------------------------------------------------------------------------------
    def _authorized(self) -> bool:
        key = self.server_obj.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        shown = (given[:3] + "***" + given[-2:]) if len(given) > 6 else "***"
        self._error(401, f"Incorrect API key provided: {shown}.", "invalid_api_key")
        return False

    def _completion(self, body: dict, reply: Reply) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool_calls:
            message["tool_calls"] = [tc.as_dict() for tc in reply.tool_calls]
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        out = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
               "model": body.get("model") or self.server_obj.model,
               "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}]}
        if self.server_obj.report_usage:
            out["usage"] = self.server_obj.usage_for(body, reply)
        for quirk in self.server_obj._quirk_list():
            out = quirk.plain(out) if quirk.plain else out
        return out

    def _stream(self, body: dict, reply: Reply) -> None:
        srv = self.server_obj
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
                "created": int(time.time()), "model": body.get("model") or srv.model}

        def chunk(delta: dict, finish: str | None = None, **extra: Any) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

        events: list[Any] = [chunk({"role": "assistant", "content": ""})]
        if reply.reasoning:
            events.append(chunk({"reasoning_content": reply.reasoning}))
        text, step = reply.text or "", srv.stream_chunk_chars
        pieces = [text[i:i + step] for i in range(0, len(text), step)] if step > 0 else stream_tokens(text)
        events += [chunk({"content": piece}) for piece in pieces]
        for index, tc in enumerate(reply.tool_calls):
            head = {"index": index, "id": tc.id, "type": "function", "function": {"name": tc.name, "arguments": ""}}
            events.append(chunk({"tool_calls": [head]}))
            cut = max(1, len(tc.arguments) // 3)
            for i in range(0, len(tc.arguments), cut):
                events.append(chunk({"tool_calls": [{"index": index, "function": {"arguments":
                                                                                  tc.arguments[i:i + cut]}}]}))
        events.append(chunk({}, reply.finish_reason))
        if srv.report_usage and (body.get("stream_options") or {}).get("include_usage"):
            events.append({**base, "choices": [], "usage": srv.usage_for(body, reply)})
        for quirk in srv._quirk_list():
            events = quirk.stream(events) if quirk.stream else events
        try:
            for event in events:
                if srv.stream_delay and not srv.wait(srv.stream_delay):
                    self.close_connection = True  # closing: leave the stream unfinished
                    return
                self._write_chunk(event if isinstance(event, bytes) else b"data: " + _wire(event) + b"\n\n")
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away (timeout, interrupt): nothing left to do
            self.close_connection = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def _json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = _wire(payload)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _error(self, status: int, message: str, code: str | None = None, retry_after: float | None = None, *,
               param: str | None = None) -> None:
        kind = {401: "invalid_request_error", 404: "invalid_request_error", 429: "rate_limit_error"}
        err = {"message": message, "type": kind.get(status, "server_error" if status >= 500 else
                                                    "invalid_request_error"), "param": param, "code": code}
        headers = {}
        if retry_after is not None and (status == 429 or status >= 500):
            headers["retry-after-ms"] = str(max(1, round(retry_after * 1000)))
        self._json(status, {"error": err}, headers)

