"""OpenAI-compatible provider: one model call, streamed, with usage, retries and clear errors (SPEC L2, C9).

Why: the loop needs a single `complete(messages, tools)` that works against OpenAI, vLLM, llama.cpp,
Ollama and our own local demo/test server alike, so it goes through the `openai` package's client
(which already retries 429/5xx/connection errors with exponential backoff and honours Retry-After).
This module adds what the client leaves to us: assembling streamed text and tool-call deltas into one
assistant message, asking for usage while streaming (and dropping `stream_options` for servers that
reject it), keeping raw tool-call argument strings (malformed JSON is the loop's business), and
turning every failure into a `ProviderError` with a `kind` the loop can act on (`prompt_too_long`
drives the C9 retry) and one paragraph a user can act on. Model context windows live here too.

SPEC L7: a response the client accepts is not yet an answer. A malformed SSE line, a 200 whose body is
not a completion, an empty `choices` list or an answer with neither text nor tool calls is a
`bad_response`; a stream that stops before a `finish_reason` is truncated and asked once more. Besides
the client's per-read `timeout`, every call has a total `call_deadline`: a watchdog shuts the call's
sockets when it passes, so a server trickling `: keepalive` comments or header lines cannot hold a
turn forever.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse
from weakref import WeakSet

import openai

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.context.errors import is_prompt_too_long  # one classifier (SPEC C9), re-exported
from mxclaw_nb.demo.model import DEMO_MODEL
from mxclaw_nb.secrets import display_url, redact, register
from mxclaw_nb.settings import DEFAULT_CALL_DEADLINE  # one owner: the settings table

__all__ = ["DEFAULT_CALL_DEADLINE", "DEFAULT_CONTEXT_WINDOW", "KNOWN_CONTEXT_WINDOWS", "Completion", "OpenAIProvider",
           "ProviderError", "Usage", "context_window_for", "demo_provider", "is_prompt_too_long", "resolve_provider"]

OPENAI_URL = "https://api.openai.com/v1"
DEMO_LABEL = "demo model (offline)"
_STORED_ONLY = ("is_error", "reasoning", "attachments", "facts")  # facts: K2 tool facts

DEFAULT_TIMEOUT = 120.0  # seconds the client waits for each read (a stall), per attempt
RETRY_NOTICE = "\n[the stream was cut off; asking the provider again]\n"


@dataclass
class Usage:
    """Provider-reported token usage (None where the server did not say)."""

    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass
class Completion:
    """One model call's result: the assistant message (OpenAI shape) plus usage and timing."""

    message: dict
    usage: Usage | None
    finish_reason: str | None
    latency_ms: float
    model: str


# How a remedy names each setting when nothing better is known: the environment, as `Agent` reads it. The
# magics reword the remedy with the setting the user actually used (`%config AgentMagics.base_url`, ...).
SETTING_NAMES = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY (or pass api_key=...)",
                 "model": "MXCLAW_MODEL"}
_SETTING = re.compile(r"\{(base_url|api_key|model)\}")


def _name_settings(remedy: str, names: Mapping[str, str]) -> str:
    return _SETTING.sub(lambda m: names.get(m.group(1)) or SETTING_NAMES[m.group(1)], remedy)


class ProviderError(Exception):
    """A failed model call: `kind` for the loop, `message` (one paragraph) for the user.

    `remedy` is the "what to do" sentence with `{base_url}`, `{api_key}` and `{model}` where it names a
    setting; `message` names them as environment variables, `worded(names)` as the caller's settings.
    """

    KINDS = ("prompt_too_long", "auth", "not_found", "rate_limit", "server", "connection", "timeout", "bad_request",
             "bad_response")

    def __init__(self, kind: str, message: str, *, status_code: int | None = None, base_url: str = "",
                 detail: str = "", remedy: str = "") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown ProviderError kind {kind!r}")
        what = " ".join(redact(message).split())  # one paragraph, no echoed key (L6, L7)
        message = f"{what} {_name_settings(remedy, SETTING_NAMES)}" if remedy else what
        detail = redact(detail)
        super().__init__(message)
        self.kind, self.message, self.status_code = kind, message, status_code
        self.what, self.remedy = what, remedy
        self.base_url, self.detail = display_url(base_url) if base_url else base_url, detail

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with its remedy naming settings as `names` says (e.g. base_url -> %config ...)."""
        return f"{self.what} {_name_settings(self.remedy, names)}" if self.remedy else self.message


def _server_text(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if inner.get("message"):
            return str(inner["message"])
    if isinstance(body, str) and body.strip():  # e.g. a proxy's HTML error page: its words, without the tags
        text = " ".join(re.sub(r"<[^>]*>", " ", body).split())
        if text:
            return f"{exc.message}: {text[:300]}"
    return str(exc.message)


def classify(exc: Exception, *, base_url: str, model: str, timeout: float, retries: int) -> ProviderError:
    """Turn an openai exception into a ProviderError with a clear, actionable message."""
    where = f"Provider at {base_url}"
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError("timeout", f"{where} did not answer within {timeout:g} s (model {model}, "
                             f"{retries} retries). The server may be busy or the request large; try again or "
                             "raise the timeout (OpenAIProvider(timeout=...)).", base_url=base_url)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        if isinstance(cause, _httpx.TransportError) and not isinstance(cause, _httpx.ConnectError):
            return ProviderError("connection", f"The connection to the provider at {base_url} broke during the "
                                 f"response ({cause}), still after {retries} retries. Try again.", base_url=base_url,
                                 detail=str(cause))
        return ProviderError("connection", f"Could not connect to the provider at {base_url} ({cause}).",
                             remedy="Check that the server is running and {base_url} is right.", base_url=base_url,
                             detail=str(cause))
    text = _server_text(exc) if isinstance(exc, openai.APIError) else str(exc)
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    code = f" ({status})" if status else ""
    short = " ".join(text.split())
    short = short if len(short) <= 400 else short[:400] + "..."
    short = short if short.endswith((".", "!", "?", "...")) else short + "."
    remedy = ""
    if is_prompt_too_long(text):
        kind, msg = "prompt_too_long", (f"{where} rejected the request as longer than model {model}'s context "
                                        f"window{code}: {short} Send fewer tokens (compact the context) or use a "
                                        "model with a larger window.")
    elif status in (401, 403):
        kind, msg = "auth", f"{where} refused the key{code}: {short}"
        remedy = "Set {api_key} to a valid key for this endpoint."
    elif status == 404:
        kind, msg = "not_found", f"{where} does not know model '{model}' or this endpoint{code}: {short}"
        remedy = f"Check {{model}} (the server's models: GET {base_url}/models) and {{base_url}}."
    elif status == 429:
        kind, msg = "rate_limit", (f"{where} is rate limiting requests{code}, still after {retries} retries: "
                                   f"{short} Wait a moment and try again, or check the account's quota.")
    elif status is None or status >= 500:
        kind, msg = "server", (f"{where} failed{code or ' during the response'} after {retries} retries: {short} "
                               "Try again later.")
    else:
        kind, msg = "bad_request", f"{where} rejected the request{code}: {short}"
    return ProviderError(kind, msg, status_code=status, base_url=base_url, detail=text, remedy=remedy)


def _sendable(messages: list[dict]) -> list[dict]:
    """Messages without stored-only keys (normally already stripped by the context engine)."""
    return [{k: v for k, v in m.items() if k not in _STORED_ONLY} if any(k in m for k in _STORED_ONLY) else m
            for m in messages]


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


class _DeadlinePassed(BaseException):
    """Raised from the request hook once the call deadline passed: a BaseException, so no client retry runs."""


class _Truncated(Exception):
    """A stream that stopped before its finish_reason (retried once); `what` says how, for the user."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _Watchdog:
    """The total deadline of one call: when it passes, shut the provider's sockets so blocked reads return."""

    def __init__(self, seconds: float, sockets: WeakSet[socket.socket]) -> None:
        self.seconds, self.sockets, self.expired = seconds, sockets, False
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def expire(self) -> None:
        self.expired = True
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)  # unlike close(), wakes a thread blocked in recv()


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _content_type(stream: Any) -> str:
    response = getattr(stream, "response", None)
    return str(response.headers.get("content-type", "")) if response is not None else ""


def _bad_data(exc: Exception) -> str:
    """What was wrong with a response body the client could not read, in a few words."""
    doc = getattr(exc, "doc", None)  # json.JSONDecodeError keeps the text it failed on
    if isinstance(doc, str):
        shown = doc if len(doc) <= 120 else doc[:120] + "..."
        return f"data that is not JSON ({exc.msg} in {shown!r})"  # type: ignore[attr-defined]
    return f"data that is not a Chat Completions response ({type(exc).__name__}: {str(exc)[:200]})"


class OpenAIProvider:
    """A model behind any OpenAI-compatible Chat Completions endpoint."""

    def __init__(self, *, base_url: str | None, api_key: str | None, model: str, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = 2, stream: bool = True, label: str | None = None, is_demo: bool = False,
                 call_deadline: float = DEFAULT_CALL_DEADLINE) -> None:
        for name, value in (("timeout", timeout), ("call_deadline", call_deadline)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0 (got {value!r})")
        register(api_key)  # L6: never stored, shown or sent beyond the Authorization header
        real_url = (base_url or OPENAI_URL).rstrip("/")
        self.base_url = display_url(real_url)  # what is stored and shown: no URL password (L6)
        self.model, self.timeout, self.max_retries, self.stream = model, timeout, max_retries, stream
        self.call_deadline = float(call_deadline)
        self.is_demo = is_demo
        self.label = label or f"{model or '(server default model)'} @ {self.base_url}"
        self._stream_options = True
        self._sockets: WeakSet[socket.socket] = WeakSet()  # every connection this client opened (for the watchdog)
        self._watch: _Watchdog | None = None
        # Loopback servers (demo, vLLM, llama.cpp, Ollama) must not be sent through an HTTP(S)_PROXY.
        http_client = openai.DefaultHttpxClient(trust_env=not _is_loopback(self.base_url),
                                                event_hooks={"request": [self._on_request]})
        self._client = openai.OpenAI(base_url=real_url, api_key=api_key or "not-needed", timeout=timeout,
                                     max_retries=max_retries, http_client=http_client)

    def __repr__(self) -> str:
        return f"OpenAIProvider({self.label!r})"

    # -- the call deadline -------------------------------------------------------------------------
    def _on_request(self, request: Any) -> None:
        """httpx request hook: no new attempt after the deadline; trace new connections for the watchdog."""
        if self._watch is not None and self._watch.expired:
            raise _DeadlinePassed
        request.extensions["trace"] = self._trace

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith(("connect_tcp.complete", "start_tls.complete")):
            sock = getattr(info.get("return_value"), "get_extra_info", lambda _: None)("socket")
            if isinstance(sock, socket.socket):
                self._sockets.add(sock)
                if self._watch is not None and self._watch.expired:
                    self._watch.expire()

    def _deadline_error(self) -> ProviderError:
        return ProviderError("timeout", f"Provider at {self.base_url} did not finish the call within the "
                             f"{self.call_deadline:g} s call deadline (model {self.model}); it may be stuck, or "
                             "sending keep-alive comments or headers without an answer. Try again, or raise "
                             "call_deadline (%agent config call_deadline=..., Agent(call_deadline=...)).",
                             base_url=self.base_url)

    def _bad_response(self, what: str) -> ProviderError:
        return ProviderError("bad_response", f"Provider at {self.base_url} (model {self.model}) answered with "
                             f"{what}, so there is no answer to use. Try again; if it keeps happening, "
                             "the server or a proxy in between is not speaking the Chat Completions API.",
                             base_url=self.base_url, detail=what)

    # -- one call --------------------------------------------------------------------------------------
    def complete(self, messages: list[dict], tools: list[dict] | None,
                 on_delta: Callable[[str], None] | None = None) -> Completion:
        """One model call; streamed text pieces go to `on_delta`. Raises ProviderError."""
        start = time.perf_counter()
        watch = self._watch = _Watchdog(self.call_deadline, self._sockets)
        try:
            with watch:
                return self._complete(messages, tools, on_delta, start)
        except _DeadlinePassed:
            raise self._deadline_error() from None
        except ProviderError as exc:
            if watch.expired and exc.kind in ("connection", "timeout", "server", "bad_response"):
                raise self._deadline_error() from exc
            raise
        finally:
            self._watch = None

    def _complete(self, messages: list[dict], tools: list[dict] | None, on_delta: Callable[[str], None] | None,
                  start: float) -> Completion:
        try:
            model = self.model or self._discover_model()
            # Messages go in `extra_body` (documented: merged into the JSON body last) rather than `messages=`:
            # they are already in wire format, and the client's TypedDict transform of `messages` costs ~125 ms
            # per call at 1k messages — more than the whole loop's own work. `messages=[]` keeps the call typed.
            kwargs: dict[str, Any] = {"model": model, "messages": [], "extra_body": {"messages": _sendable(messages)}}
            if tools:
                kwargs["tools"] = tools
            if not self.stream:
                return self._plain(kwargs, start)
            try:
                return self._streamed_once(kwargs, on_delta, start)
            except _Truncated:
                if self._watch is not None and self._watch.expired:
                    raise _DeadlinePassed from None
                if on_delta is not None:
                    on_delta(RETRY_NOTICE)
            try:  # L7: a truncated stream is asked once more
                return self._streamed_once(kwargs, on_delta, start)
            except _Truncated as again:
                if self._watch is not None and self._watch.expired:
                    raise _DeadlinePassed from None
                raise self._bad_response(f"a stream that was cut off twice ({again.what})") from None
        except openai.APIError as exc:
            raise classify(exc, base_url=self.base_url, model=self.model, timeout=self.timeout,
                           retries=self.max_retries) from exc
        except _httpx.TimeoutException as exc:  # raised while reading a stream: not wrapped by the client
            raise classify(openai.APITimeoutError(request=exc.request), base_url=self.base_url, model=self.model,
                           timeout=self.timeout, retries=self.max_retries) from exc
        except _httpx.TransportError as exc:
            raise ProviderError("connection", f"The connection to the provider at {self.base_url} broke during "
                                f"the response ({exc!r}). Try again.", base_url=self.base_url, detail=str(exc)) from exc

    def _discover_model(self) -> str:
        """First model the server lists (for local servers configured without MXCLAW_MODEL)."""
        models = [m.id for m in self._client.models.list()]
        if not models:
            raise ProviderError("not_found", f"No model is configured and the provider at {self.base_url} lists "
                                "none.", remedy="Set {model}.", base_url=self.base_url)
        self.model = models[0]
        if self.label.startswith("(server default model) @ "):
            self.label = f"{self.model} @ {self.base_url}"
        return self.model

    def _plain(self, kwargs: dict[str, Any], start: float) -> Completion:
        try:
            resp = self._client.chat.completions.create(**kwargs)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a 200 whose JSON body is malformed
            raise self._bad_response(_bad_data(exc)) from None
        if not isinstance(getattr(resp, "choices", None), list):  # the client hands back a non-JSON body as text
            shown = str(resp)[:120]
            raise self._bad_response(f"a body that is not a JSON completion ({shown!r})")
        if not resp.choices or resp.choices[0].message is None:
            raise self._bad_response("an empty `choices` list" if not resp.choices else "a choice without a message")
        choice = resp.choices[0]
        msg = choice.message
        message: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            message["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                "name": tc.function.name, "arguments": tc.function.arguments}} for tc in msg.tool_calls]
        reasoning = getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None)
        if isinstance(reasoning, str) and reasoning:
            message["reasoning"] = reasoning
        self._check_answer(message, choice.finish_reason)
        usage = Usage(resp.usage.prompt_tokens, resp.usage.completion_tokens) if resp.usage else None
        return Completion(message, usage, choice.finish_reason, (time.perf_counter() - start) * 1000,
                          resp.model or kwargs["model"])

    def _check_answer(self, message: dict[str, Any], finish: str | None) -> None:
        """L7: an answer with neither text nor tool calls is a provider error, not a silent empty answer."""
        if not message.get("content") and not message.get("tool_calls"):
            why = f"finish_reason {finish!r}" + (", reasoning only" if message.get("reasoning") else "")
            raise self._bad_response(f"an empty answer: no text and no tool calls ({why})")

    def _streamed_once(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None,
                       start: float) -> Completion:
        try:
            return self._streamed(kwargs, on_delta, start)
        except openai.BadRequestError as exc:
            if not (self._stream_options and "stream_options" in _server_text(exc)):
                raise
            self._stream_options = False  # this server rejects stream_options: stream without usage
            return self._streamed(kwargs, on_delta, start)

    def _streamed(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None, start: float) -> Completion:
        extra = {"stream_options": {"include_usage": True}} if self._stream_options else {}
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Usage | None = None
        finish: str | None = None
        model = kwargs["model"]
        events = choices = 0
        with self._client.chat.completions.create(**kwargs, stream=True, **extra) as stream:
            try:
                for chunk in stream:
                    events += 1
                    model = chunk.model or model
                    if chunk.usage is not None:
                        usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                    for choice in chunk.choices or ():
                        choices += 1
                        finish = choice.finish_reason or finish
                        delta = choice.delta
                        piece = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
                        if isinstance(piece, str) and piece:
                            reasoning.append(piece)
                        if delta.content:
                            text.append(delta.content)
                            if on_delta is not None:
                                on_delta(delta.content)
                        for tc in delta.tool_calls or []:
                            slot = calls.setdefault(tc.index if tc.index is not None else len(calls),
                                                    {"id": None, "name": "", "arguments": []})
                            slot["id"] = tc.id or slot["id"]
                            if tc.function is not None:
                                name = tc.function.name or ""
                                if not slot["name"].endswith(name):  # some servers repeat the whole name
                                    slot["name"] += name
                                slot["arguments"].append(tc.function.arguments or "")
            except (openai.APIConnectionError, _httpx.TransportError) as exc:
                if isinstance(exc, openai.APITimeoutError | _httpx.TimeoutException):
                    raise  # a stall: the per-read timeout, not a cut (asking again would wait as long)
                if self._watch is not None and self._watch.expired:
                    raise _DeadlinePassed from None
                cause = exc.__cause__ or exc
                raise _Truncated(f"the connection broke after {_n(events, 'event')}: {cause}") from None
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                raise self._bad_response(f"a streamed event carrying {_bad_data(exc)}") from None
        if not events:
            ctype = _content_type(stream) or "none"
            if "event-stream" not in ctype:  # e.g. an HTML error page from a proxy, sent with status 200
                raise self._bad_response(f"status 200 but a body that is not an event stream (Content-Type {ctype})")
            raise _Truncated("no stream events at all")
        if not choices:
            raise self._bad_response(f"{_n(events, 'streamed chunk')}, all with an empty `choices` list")
        if finish is None:
            raise _Truncated(f"no finish_reason after {_n(events, 'event')} and {_n(sum(map(len, text)), 'character')}")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            message["tool_calls"] = [
                {"id": c["id"] or f"call_{i}_{int(start * 1e6) % 10**9}", "type": "function",
                 "function": {"name": c["name"], "arguments": "".join(c["arguments"])}}
                for i, c in sorted(calls.items())]
        if reasoning:
            message["reasoning"] = "".join(reasoning)
        self._check_answer(message, finish)
        return Completion(message, usage, finish, (time.perf_counter() - start) * 1000, model)


_demo_lock = threading.Lock()
_demo_server: Any = None


def demo_server_url() -> str:
    """Base URL of this process's demo server, started on first use (127.0.0.1, daemon thread)."""
    global _demo_server
    with _demo_lock:
        if _demo_server is None:
            from mxclaw_nb.demo.server import TestServer

            _demo_server = TestServer(demo=True).start()
        return _demo_server.base_url


def demo_provider(**kw: Any) -> OpenAIProvider:
    """Provider for the offline demo model (served once per process on 127.0.0.1), labelled as a demo."""
    kw.setdefault("label", DEMO_LABEL)
    return OpenAIProvider(base_url=demo_server_url(), api_key="demo", model=DEMO_MODEL, is_demo=True, **kw)


def resolve_provider(*, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                     env: Mapping[str, str] = os.environ, **kw: Any) -> OpenAIProvider:
    """Provider from arguments, else OPENAI_API_KEY / OPENAI_BASE_URL / MXCLAW_MODEL; nothing set -> demo."""
    model = model or env.get("MXCLAW_MODEL") or None
    base_url = base_url or env.get("OPENAI_BASE_URL") or None
    api_key = api_key or env.get("OPENAI_API_KEY") or None
    if model == DEMO_MODEL or (api_key is None and base_url is None):
        return demo_provider(**kw)
    if model is None and base_url is None:
        model = "gpt-4o-mini"
    return OpenAIProvider(base_url=base_url, api_key=api_key, model=model or "", **kw)


DEFAULT_CONTEXT_WINDOW = 32_000  # stated default for models not in the table
KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    DEMO_MODEL: 16_000,
    "gpt-4o": 128_000, "gpt-4o-mini": 128_000, "gpt-4-turbo": 128_000, "gpt-4": 8_192, "gpt-3.5-turbo": 16_385,
    "gpt-4.1": 1_047_576, "gpt-4.1-mini": 1_047_576, "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000, "gpt-5-mini": 400_000, "gpt-5-nano": 400_000,
    "o1": 200_000, "o3": 200_000, "o3-mini": 200_000, "o4-mini": 200_000,
    "llama3": 8_192, "llama3.1": 131_072, "llama3.2": 131_072, "llama3.3": 131_072,
    "qwen2.5": 32_768, "qwen2.5-coder": 32_768, "qwen3": 40_960, "mistral": 32_768, "mistral-nemo": 131_072,
    "deepseek-chat": 65_536, "deepseek-reasoner": 65_536, "gemma2": 8_192, "gemma3": 131_072, "phi3": 4_096,
}


def context_window_for(model: str, env: Mapping[str, str] = os.environ) -> int:
    """Context window in tokens: MXCLAW_CONTEXT_WINDOW, else the table (longest prefix), else the default."""
    raw = env.get("MXCLAW_CONTEXT_WINDOW")
    if raw:
        try:
            value = int(raw.replace("_", "").strip())
        except ValueError:
            value = 0
        if value <= 0:
            raise ValueError(f"MXCLAW_CONTEXT_WINDOW must be a positive whole number of tokens (got {raw!r})")
        return value
    name = (model or "").lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" -> "gpt-4o"
    best = ""
    for known in KNOWN_CONTEXT_WINDOWS:
        if name == known or (name.startswith(known) and name[len(known)] in "-:@." and len(known) > len(best)):
            if name == known:
                return KNOWN_CONTEXT_WINDOWS[known]
            best = known
    return KNOWN_CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW
