"""OpenAI-compatible provider: one model call, streamed, with usage, retries and clear errors (SPEC L2, C9).

Why: the loop needs a single `complete(messages, tools)` that works against OpenAI, vLLM, llama.cpp,
Ollama and our own local demo/test server alike, so it goes through the `openai` package's client
(which already retries 429/5xx/connection errors with exponential backoff and honours Retry-After).
This module adds what the client leaves to us: assembling streamed text and tool-call deltas into one
assistant message, asking for usage while streaming (and dropping `stream_options` for servers that
reject it), keeping raw tool-call argument strings (malformed JSON is the loop's business), and
turning every failure into a `ProviderError` with a `kind` the loop can act on (`prompt_too_long`
drives the C9 retry) and one paragraph a user can act on. Model context windows live here too.

SPEC L2: servers other than OpenAI bend the wire format (usage with zeros, tool-call deltas without `index` or all
at index 0, arguments as an object, no finish_reason, `<think>` reasoning, ...); `_Answer` normalises every
answer, streamed or plain, in one place (README, "Other servers: wire quirks").

SPEC L7: a response the client accepts is not yet an answer. A malformed SSE line, a 200 whose body is
not a completion, an empty `choices` list or an answer with neither text nor tool calls is a
`bad_response`; a stream that stops before a `finish_reason` is truncated and asked once more. Besides
the client's per-read `timeout`, every call has a total `call_deadline`: a watchdog shuts the call's
sockets when it passes, so a server trickling `: keepalive` comments or header lines cannot hold a
turn forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse
from weakref import WeakSet

import openai

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.context.errors import is_prompt_too_long  # one classifier (SPEC C9), re-exported
from mxclaw_nb.messages import REFUSED_CALLS_KEY, SENT_KEYS, sanitize
from mxclaw_nb.provider import wire
from mxclaw_nb.provider.limits import AnswerMeter, Limits, ProviderRefusal, guard_request, guard_response
from mxclaw_nb.provider.textcalls import apply_text_calls
from mxclaw_nb.secrets import display_url, redact, register
from mxclaw_nb.settings import DEFAULT_CALL_DEADLINE, DEFAULT_MAX_TOKENS, DEMO_MODEL  # one owner: the settings table

__all__ = ["DEFAULT_CALL_DEADLINE", "DEFAULT_CONTEXT_WINDOW", "KNOWN_CONTEXT_WINDOWS", "Completion", "OpenAIProvider",
           "ProviderError", "Usage", "context_window_for", "is_prompt_too_long"]

OPENAI_URL = "https://api.openai.com/v1"
DEMO_LABEL = "demo model (offline)"

_SENT = frozenset(SENT_KEYS)
DEFAULT_TIMEOUT = 120.0  # seconds the client waits for each read (a stall), per attempt
RETRY_NOTICE = "\n[the stream was cut off; asking the provider again]\n"
EMPTY_NOTICE = "\n[the model answered with nothing; asking it once more]\n"


@dataclass
class Usage:
    """Provider-reported token usage (None where the server did not say)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None = None  # E1: prompt tokens the server read from its prompt cache
    cache_write_tokens: int | None = None  # E1: prompt tokens written to the cache (Anthropic-style servers)


@dataclass
class Completion:
    """One model call's result: the assistant message (OpenAI shape) plus usage and timing."""

    message: dict
    usage: Usage | None
    finish_reason: str | None
    latency_ms: float
    model: str
    notes: list[str] = field(default_factory=list)  # what the adapter did about this server (a provider.note event)


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


def _asked_wait(exc: Exception) -> str:
    """` (it asked to wait 3600 s)` from a response's Retry-After / retry-after-ms, else ''."""
    headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else {}
    try:
        ms = headers.get("retry-after-ms")
        wait = float(ms) / 1000 if ms else float(headers.get("retry-after") or "")
    except ValueError:
        return ""
    return f" (it asked to wait {wait:g} s)"


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
        tried = (f"still after {retries} retries" if retries else  # the count of requests really sent (L7)
                 "on the first request, which was not retried" + _asked_wait(exc))
        kind, msg = "rate_limit", (f"{where} is rate limiting requests{code}, {tried}: "
                                   f"{short} Wait a moment and try again, or check the account's quota.")
    elif status is None or status >= 500:
        kind, msg = "server", (f"{where} failed{code or ' during the response'} after {retries} retries: {short} "
                               "Try again later.")
    else:
        kind, msg = "bad_request", f"{where} rejected the request{code}: {short}"
    return ProviderError(kind, msg, status_code=status, base_url=base_url, detail=text, remedy=remedy)


def _sendable(messages: list[dict]) -> list[dict]:
    """The sent form of each message (`messages.sanitize`, the one owner); the engine's views already are."""
    return [m if m.keys() <= _SENT else sanitize(m) for m in messages]


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


class _DeadlinePassed(BaseException):
    """Raised from the request hook once the call deadline passed: a BaseException, so no client retry runs."""


class _EmptyAnswer(Exception):
    """An answer with neither text nor tool calls (L7): asked once more, then a provider error naming the model."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


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


# -- one answer, assembled from whatever an OpenAI-compatible server sent (SPEC L2, L7, T3) ---------------------------
# Every server quirk the adapter knows is normalised here, the same way for streamed chunks and plain bodies, so
# the rest of the code sees one shape: text, reasoning kept apart, whole tool calls with string arguments and
# unique ids, usage only when it is a real count. The README's "Server quirks" table lists what each does.

_REFUSED_FIELD = re.compile(r"stream_options|include_usage|extra (inputs|fields)|extra_forbidden|not permitted|"
                            r"unrecogni[sz]ed|unknown (field|parameter|argument|key)|unsupported (field|parameter)|"
                            r"additional propert", re.IGNORECASE)
_THINK = re.compile(r"\A\s*<think>(.*?)</think>\s*", re.DOTALL)  # leading inline reasoning (no reasoning parser)


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number >= 0, else None (null, missing, a string, a bool)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage_of(raw: Any) -> Usage | None:
    """T3: usage only when it is a count. prompt_tokens null but total and completion given: their difference; a
    prompt of 0 tokens (servers that count nothing) is no report, so calibration never anchors on it."""
    if raw is None:
        return None
    get = raw.get if isinstance(raw, dict) else lambda key: getattr(raw, key, None)
    prompt, completion, total = (_count(get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if prompt is None and total is not None and completion is not None and total >= completion:
        prompt = total - completion
    if not prompt:  # 0 or None: nothing was counted
        prompt = None
        completion = completion or None
    if prompt is None and completion is None:
        return None
    return Usage(prompt, completion, *_cache_of(get))


def _cache_of(get: Any) -> tuple[int | None, int | None]:
    """E1: cached / cache-written prompt tokens as reported: OpenAI, vLLM and OpenRouter
    `prompt_tokens_details.cached_tokens`; Anthropic-style `cache_read_input_tokens` / `cache_creation_input_tokens`."""
    details = get("prompt_tokens_details")
    cached = (details.get("cached_tokens") if isinstance(details, dict)
              else getattr(details, "cached_tokens", None))
    cached = _count(cached)
    return (cached if cached is not None else _count(get("cache_read_input_tokens")),
            _count(get("cache_creation_input_tokens")))


def _last(new: int | None, old: int | None) -> int | None:
    return new if new is not None else old


def _text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts (Mistral-style)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") if isinstance(p, dict) else str(getattr(p, "text", "") or "")
                       for p in content)
    return ""


def _reasoning_of(obj: Any) -> str:
    """DeepSeek/vLLM `reasoning_content`, OpenRouter/vLLM `reasoning`; one of them when a server sends both."""
    for key in ("reasoning_content", "reasoning"):
        value = getattr(obj, key, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _arguments_of(raw: Any) -> str:
    """Tool-call arguments as the string the wire format specifies; a JSON object (llama.cpp) is serialised."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(raw, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(raw)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    size: int = 0  # bytes of arguments received (L10)
    refused: bool = False  # over max_tool_args_bytes: not kept, not run

    def complete(self) -> bool:
        """The arguments so far are one whole JSON value (checked only when they end like one: O(1) mostly)."""
        return bool(self.arguments) and self.arguments[-1].rstrip().endswith(("}", "]")) and _is_json(
            "".join(self.arguments))


class _Answer:
    """One assistant answer as it arrives: `add` a streamed chunk or a whole (non-streamed) response."""

    def __init__(self, model: str, start: float, limits: Limits | None = None) -> None:
        self.model, self.start = model, start
        self.meter = AnswerMeter(limits or Limits())  # L10: the answer's bytes and each call's arguments
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[_Call] = []
        self._at: dict[int, _Call] = {}  # a tool-call index -> the call it now continues
        self.usage: Usage | None = None
        self.finish: str | None = None
        self.choices = 0
        self.text_chars = 0
        self.notes: list[str] = []
        self._held: str | None = ""  # leading text held back from the live view while it is (or may be) <think>
        self._trim = False

    def add(self, resp: Any, *, whole: bool = False) -> str:
        """Take one chunk (or, `whole`, a plain response); returns the new answer text, to show live."""
        self.model = getattr(resp, "model", None) or self.model
        usage = _usage_of(getattr(resp, "usage", None))
        if usage is not None:  # the last report wins field by field (vLLM sends a running count on every chunk)
            old = self.usage or Usage(None, None)
            self.usage = Usage(usage.prompt_tokens or old.prompt_tokens,
                               usage.completion_tokens if usage.completion_tokens is not None
                               else old.completion_tokens, _last(usage.cached_tokens, old.cached_tokens),
                               _last(usage.cache_write_tokens, old.cache_write_tokens))
        timings = getattr(resp, "timings", None)  # E1: llama.cpp's server reports its prompt cache here
        if isinstance(timings, dict) and _count(timings.get("cache_n")) is not None and self.usage is not None:
            self.usage.cached_tokens = _count(timings.get("cache_n"))
        shown = ""
        for choice in getattr(resp, "choices", None) or ():
            if getattr(choice, "index", None) not in (None, 0):
                continue  # only the first choice is the answer
            self.choices += 1
            self.finish = getattr(choice, "finish_reason", None) or self.finish
            part = getattr(choice, "message" if whole else "delta", None)
            if part is None:
                continue
            reasoning = _reasoning_of(part)
            self.meter.add(reasoning)
            self.reasoning.append(reasoning)
            text = _text_of(getattr(part, "content", None))
            self.meter.add(text)
            self.text.append(text)
            self.text_chars += len(text)
            shown += self._visible(text)
            for n, tc in enumerate(getattr(part, "tool_calls", None) or ()):
                self._add_call(tc, n if whole else getattr(tc, "index", None))
        return shown

    def _visible(self, text: str) -> str:
        """The part of `text` to show live: a leading <think> block (reasoning inline) is not the answer."""
        if self._held is None or not text:
            if self._trim:  # white space after </think> is not part of the answer either
                text = text.lstrip()
                self._trim = not text
            return text
        before = len(self._held)
        self._held += text
        head = self._held.lstrip()
        if not head or "<think>".startswith(head):
            return ""  # undecided: it may become a <think> block
        if not head.startswith("<think>"):
            shown, self._held = self._held, None
            return shown
        end = self._held.find("</think>", max(0, before - len("</think>")))
        if end < 0:
            return ""  # inside the block
        shown, self._held = self._held[end + len("</think>"):].lstrip(), None
        self._trim = not shown
        return shown

    def _add_call(self, tc: Any, index: int | None) -> None:
        """A tool-call delta to the call it continues, or a new call (SPEC L2). A delta without `index` continues
        the last call; a delta whose id differs from its call's, or that names a tool again after that call's
        arguments are complete JSON (all calls at index 0, whole calls without index), starts a new one."""
        fn = getattr(tc, "function", None)
        call_id = getattr(tc, "id", None) or ""
        name = getattr(fn, "name", None) or ""
        raw = getattr(fn, "arguments", None)
        arguments = _arguments_of(raw)
        call = self._at.get(index) if index is not None else (self.calls[-1] if self.calls else None)
        if call is None or (call_id and call.id and call_id != call.id) or (
                name and call.name and call.complete()):
            call = _Call()
            self.calls.append(call)
            if index is not None:
                self._at[index] = call
        call.id = call.id or call_id
        if name and not call.name.endswith(name):  # llama.cpp repeated the whole name on every delta
            call.name += name
        self.meter.add(arguments)
        call.size += len(arguments.encode("utf-8", "surrogatepass")) if not arguments.isascii() else len(arguments)
        if call.refused or self.meter.over_call(call.size):  # L10: not kept, answered with a failure by the loop
            call.refused, call.arguments = True, []
            return
        if raw is not None and not isinstance(raw, str):  # an object is the whole arguments
            call.arguments = [arguments]
        elif arguments:
            call.arguments.append(arguments)

    def message(self) -> dict[str, Any]:
        """The assistant message (OpenAI shape, plus `reasoning` kept apart from the answer)."""
        text = "".join(self.text)
        reasoning = "".join(self.reasoning)
        think = _THINK.match(text)
        if think:  # reasoning inline in the answer (Ollama, llama.cpp without a reasoning parser): kept apart
            reasoning = "\n\n".join(r for r in (reasoning, think.group(1).strip()) if r)
            text = text[think.end():]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            seen: set[str] = set()
            calls = []
            refused: dict[str, str] = {}
            for n, call in enumerate(self.calls):
                call_id = call.id
                if not call_id or call_id in seen:  # empty or repeated ids would mix up the results (C4)
                    call_id = f"call_{n}_{int(self.start * 1e6) % 10**9}"
                seen.add(call_id)
                if call.refused:
                    refused[call_id] = self.meter.refusal(call.name, call.size)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": call.name,
                                           "arguments": "{}" if call.refused else "".join(call.arguments)}})
            message["tool_calls"] = calls
            if refused:
                message[REFUSED_CALLS_KEY] = refused
        if reasoning:
            message["reasoning"] = reasoning
        return message


def _watch_done(stream: Any) -> list[bool]:
    """A list that gets True when the stream's `data: [DONE]` arrives: a stream that ends with it is whole even
    without a finish_reason. Watches the client's SSE events (a private hook; without it, nothing is seen)."""
    seen: list[bool] = []
    events = getattr(stream, "_iter_events", None)
    if callable(events):
        def watched() -> Iterator[Any]:
            for sse in events():
                if str(getattr(sse, "data", "")).startswith("[DONE]"):
                    seen.append(True)
                yield sse
        stream._iter_events = watched
    return seen


class OpenAIProvider:
    """A model behind any OpenAI-compatible Chat Completions endpoint."""

    def __init__(self, *, base_url: str | None, api_key: str | None, model: str, timeout: float = DEFAULT_TIMEOUT,
                 max_retries: int = 2, stream: bool = True, label: str | None = None, is_demo: bool = False,
                 call_deadline: float = DEFAULT_CALL_DEADLINE, limits: Limits | None = None,
                 max_tokens: int | None = DEFAULT_MAX_TOKENS, text_calls: bool | None = None) -> None:
        for name, value in (("timeout", timeout), ("call_deadline", call_deadline)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0 (got {value!r})")
        register(api_key)  # L6: never stored, shown or sent beyond the Authorization header
        real_url = (base_url or OPENAI_URL).rstrip("/")
        self.base_url = display_url(real_url)  # what is stored and shown: no URL password (L6)
        self.model, self.timeout, self.max_retries, self.stream = model, timeout, max_retries, stream
        self.call_deadline = float(call_deadline)
        self.is_demo = is_demo
        # L2: at most this many tokens per answer (None: the server's own limit); text calls read unless off
        # (default: on for every endpoint but OpenAI's own, whose tool calls always come in `tool_calls`)
        self.max_tokens = max_tokens
        self.text_calls = (urlparse(real_url).hostname or "") != "api.openai.com" if text_calls is None \
            else bool(text_calls)
        self._text_calls_shown = False
        self.label = label or f"{model or '(server default model)'} @ {self.base_url}"
        self._stream_options = True
        self._sockets: WeakSet[socket.socket] = WeakSet()  # every connection this client opened (for the watchdog)
        self._watch: _Watchdog | None = None
        self.limits = limits or Limits()  # L10: byte bounds on what the provider sends back
        self._attempts = 0  # requests sent by the current create() (the client's retries included)
        # Loopback servers (demo, vLLM, llama.cpp, Ollama) must not be sent through an HTTP(S)_PROXY.
        http_client = openai.DefaultHttpxClient(trust_env=not _is_loopback(self.base_url),
                                                event_hooks={"request": [self._on_request],
                                                             "response": [self._on_response]})
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
        self._attempts += 1
        guard_request(request)

    def _on_response(self, response: Any) -> None:
        """httpx response hook (L10): redirects only to the same origin, the body bounded as it is read."""
        if response.has_redirect_location:
            self._attempts -= 1  # a followed redirect is the same attempt
        guard_response(response, self.limits)

    def _retries(self) -> int:
        """How many times the client really asked again in the last create() (SPEC L7: a truthful count)."""
        return max(0, self._attempts - 1)

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

    def _empty_error(self, what: str) -> ProviderError:
        return ProviderError("bad_response", f"Model {self.model} at {self.base_url} answered twice with nothing: "
                             f"{what}. The server answered correctly, so the model itself is the likely cause: "
                             "small or quantised models sometimes stop at once, especially with many tools or a "
                             "long prompt. Try again, rephrase or shorten the request, or use a larger model; if "
                             "it keeps happening with several models, check the server's chat template (llama.cpp: "
                             "--jinja).", base_url=self.base_url, detail=what)

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
                try:
                    completion = self._complete(messages, tools, on_delta, start)
                except _EmptyAnswer:  # L7: with a small model an empty answer is a model outcome; ask once more
                    if watch.expired:
                        raise _DeadlinePassed from None
                    if on_delta is not None:
                        on_delta(EMPTY_NOTICE)
                    try:
                        completion = self._complete(messages, tools, on_delta, start)
                    except _EmptyAnswer as again:
                        raise self._empty_error(again.what) from None
            if self.text_calls and apply_text_calls(completion, tools, shown=not self._text_calls_shown):
                self._text_calls_shown = True  # L2: the live log says it once; every use is stored
            return completion
        except _DeadlinePassed:
            raise self._deadline_error() from None
        except ProviderRefusal as exc:  # L10: a bound on what comes back, or a redirect elsewhere
            raise ProviderError("bad_response", f"Provider at {self.base_url} (model {self.model}) sent {exc.what}. "
                                "Nothing more of this response was used; the turn stops here. If the server is "
                                "right to send that much, raise the limit (%agent config key=value, "
                                "Agent(key=...)).", base_url=self.base_url, detail=exc.what) from None
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
            if self.max_tokens is not None:  # L2: OpenAI's own API takes the newer name (o-series refuse the old)
                key = "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
                kwargs[key] = self.max_tokens
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
                           retries=self._retries()) from exc
        except _httpx.TimeoutException as exc:  # raised while reading a stream: not wrapped by the client
            raise classify(openai.APITimeoutError(request=exc.request), base_url=self.base_url, model=self.model,
                           timeout=self.timeout, retries=self._retries()) from exc
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
        self._attempts = 0
        try:
            resp = wire.create(self._client, kwargs)  # the body encoded once, by orjson (L2)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a 200 whose JSON body is malformed
            raise self._bad_response(_bad_data(exc)) from None
        if not isinstance(getattr(resp, "choices", None), list):  # the client hands back a non-JSON body as text
            shown = str(resp)[:120]
            raise self._bad_response(f"a body that is not a JSON completion ({shown!r})")
        if not resp.choices or resp.choices[0].message is None:
            raise self._bad_response("an empty `choices` list" if not resp.choices else "a choice without a message")
        answer = _Answer(kwargs["model"], start, self.limits)
        answer.add(resp, whole=True)
        return self._finish(answer, done=True)

    def _finish(self, answer: _Answer, *, done: bool) -> Completion:
        """The Completion of an assembled answer; L7: neither text nor tool calls is a provider error."""
        if answer.finish == "error":  # OpenRouter: the upstream failed mid-answer, without an error object
            raise ProviderError("server", f"Provider at {self.base_url} (model {self.model}) ended the answer "
                                "with finish_reason 'error' (the model's server failed while answering). Try "
                                "again later.", base_url=self.base_url)
        message = answer.message()
        finish = answer.finish
        if finish is None and done:  # a whole answer without a finish_reason: say what it is
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        if not message.get("content") and not message.get("tool_calls"):
            why = f"finish_reason {answer.finish!r}" + (", reasoning only" if message.get("reasoning") else "")
            raise _EmptyAnswer(f"an empty answer: no text and no tool calls ({why})")
        return Completion(message, answer.usage, finish, (time.perf_counter() - answer.start) * 1000,
                          answer.model, notes=answer.notes)

    def _streamed_once(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None,
                       start: float) -> Completion:
        try:
            return self._streamed(kwargs, on_delta, start)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            text = _server_text(exc)
            if not (self._stream_options and _REFUSED_FIELD.search(text)) or is_prompt_too_long(text):
                raise
            self._stream_options = False  # a strict server: ask once more without stream_options (SPEC L2)
            try:
                completion = self._streamed(kwargs, on_delta, start)
            except (openai.BadRequestError, openai.UnprocessableEntityError):
                self._stream_options = True  # it was not stream_options the server refused
                raise
            shown = " ".join(text.split())[:200]
            completion.notes.append(f"The provider at {self.base_url} refused the request with `stream_options` "
                                    f"(HTTP {exc.status_code}: {shown}); mxclaw_nb asked again without it and "
                                    "streams without it from now on, so this server's usage is reported only if "
                                    "it sends usage anyway; token counts stay estimates (est.) otherwise (T3).")
            return completion

    def _streamed(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None, start: float) -> Completion:
        extra = {"stream_options": {"include_usage": True}} if self._stream_options else {}
        answer = _Answer(kwargs["model"], start, self.limits)
        self._attempts = 0
        events = 0
        with wire.create(self._client, {**kwargs, "stream": True, **extra}) as stream:
            done = _watch_done(stream)
            try:
                for chunk in stream:
                    events += 1
                    piece = answer.add(chunk)
                    if piece and on_delta is not None:
                        on_delta(piece)
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
        if not answer.choices:
            raise self._bad_response(f"{_n(events, 'streamed chunk')}, all with an empty `choices` list")
        if answer.finish is None and not done:  # [DONE] without a finish_reason is a whole answer (L2)
            raise _Truncated(f"no finish_reason after {_n(events, 'event')} and "
                             f"{_n(answer.text_chars, 'character')}")
        return self._finish(answer, done=bool(done))


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
