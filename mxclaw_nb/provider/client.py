"""OpenAI-compatible provider: one model call, streamed, with usage, retries and clear errors (SPEC L2, C9).

Why: the loop needs a single `complete(messages, tools)` that works against OpenAI, vLLM, llama.cpp,
Ollama and our own local demo/test server alike, so it goes through the `openai` package's client
(which already retries 429/5xx/connection errors with exponential backoff and honours Retry-After).
This module adds what the client leaves to us: asking for usage while streaming (and dropping
`stream_options` for servers that reject it), feeding what arrives to the answer assembly
(`provider/answer.py`, which reads each server quirk back as `provider/quirks.py` registers), and turning
every failure into a `ProviderError` (`provider/errors.py`) with a `kind` the loop can act on. Model context
windows are `provider/windows.py`; the request body's encoding `provider/wire.py`; the L10 bounds
`provider/limits.py`.

SPEC L7: a response the client accepts is not yet an answer. A malformed SSE line, a 200 whose body is
not a completion, an empty `choices` list or an answer with neither text nor tool calls is a
`bad_response`; a stream that stops before a `finish_reason` is truncated and asked once more. Besides
the client's per-read `timeout`, every call has a total `call_deadline`: a watchdog shuts the call's
sockets when it passes, so a server trickling `: keepalive` comments or header lines cannot hold a
turn forever.
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal
from urllib.parse import urlparse
from weakref import WeakSet

import openai
from openai.types.chat import ChatCompletion

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.messages import SENT_KEYS, sanitize
from mxclaw_nb.provider import wire
from mxclaw_nb.provider.answer import Answer, Completion
from mxclaw_nb.provider.errors import (
    DeadlinePassed,
    EmptyAnswer,
    ProviderError,
    Truncated,
    bad_data,
    classify,
    is_prompt_too_long,
    server_text,
)
from mxclaw_nb.provider.limits import Limits, ProviderRefusal, guard_request, guard_response
from mxclaw_nb.provider.shape import Shaped, shape_history
from mxclaw_nb.provider.textcalls import apply_text_calls
from mxclaw_nb.secrets import display_url, register
from mxclaw_nb.settings import DEFAULT_CALL_DEADLINE, Settings  # one owner: the settings table

__all__ = ["DEFAULT_CALL_DEADLINE", "DEMO_LABEL", "OpenAIProvider"]

OPENAI_URL = "https://api.openai.com/v1"
DEMO_LABEL = "demo model (offline)"

_SENT = frozenset(SENT_KEYS)
DEFAULT_TIMEOUT = 120.0  # seconds the client waits for each read (a stall), per attempt
RETRY_NOTICE = "\n[the stream was cut off; asking the provider again]\n"
EMPTY_NOTICE = "\n[the model answered with nothing; asking it once more]\n"


def _sendable(messages: list[dict]) -> list[dict]:
    """The sent form of each message (`messages.sanitize`, the one owner); the engine's views already are. Tool
    calls whose arguments are not a JSON object go with `_json_arguments`."""
    out = [m if m.keys() <= _SENT else sanitize(m) for m in messages]
    known = _ARGS_OK
    for k, m in enumerate(out):
        calls = m.get("tool_calls")
        if calls.__class__ is not list:
            continue
        for call in calls:  # the usual case: every arguments string already known to be a JSON object
            try:
                if call["function"]["arguments"] in known:
                    continue
            except (KeyError, TypeError):  # a shape `sanitize` sends as it is
                pass
            out[k] = _json_arguments(m)
            break
    return out


_ARGS_OK: set[str] = set()  # arguments strings known to be JSON objects (bounded: cleared when it grows past this)
_ARGS_OK_MAX = 50_000
RAW_ARGUMENTS_KEY = "_raw_arguments"


def _is_json_object(text: str) -> bool:
    if text in _ARGS_OK:
        return True
    try:
        ok = isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False
    if ok:
        if len(_ARGS_OK) >= _ARGS_OK_MAX:
            _ARGS_OK.clear()
        _ARGS_OK.add(text)
    return ok


def _args_fine(call: Any) -> bool:
    """True unless `call` is a well-formed call whose arguments string is not a JSON object (other shapes are
    `sanitize`'s to send; the engine's views hold only well-formed calls)."""
    fn = call.get("function") if isinstance(call, dict) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    return not isinstance(args, str) or _is_json_object(args)


def _json_arguments(message: dict) -> dict:
    """`message` with each tool call's arguments a JSON object: as stored when they are one (the usual case, the
    message itself), `{}` when empty, else `{"_raw_arguments": <the text>}`. Why (L2, L7): vLLM and llama-server
    parse every historical call's arguments to render the chat template and refuse the whole request when one is
    not JSON, so a model's one cut or badly escaped call (stored as written, S2; it failed as invalid arguments)
    would fail every later turn of the session. The model still sees what it wrote."""
    calls = message["tool_calls"]
    if not isinstance(calls, list) or all(_args_fine(c) for c in calls):
        return message
    fixed = []
    for call in calls:
        if not _args_fine(call):
            args = call["function"]["arguments"]
            args = "{}" if not args.strip() else json.dumps({RAW_ARGUMENTS_KEY: args}, ensure_ascii=False)
            call = {**call, "function": {**call["function"], "arguments": args}}
        fixed.append(call)
    return {**message, "tool_calls": fixed}


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


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


def _keep_body(stream: Any, bound: int) -> bytearray:
    """The first `bound` + 1 bytes of the stream's body, kept as the stream reads them (the stream is read as
    usual: an event stream under another label still streams). Over `bound` (the stream-line bound, L10, as a JSON
    document is one line), the kept bytes are no whole document."""
    kept = bytearray()
    response = getattr(stream, "response", None)
    if response is None:
        return kept
    original = response.iter_bytes

    def iter_bytes(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        for piece in original(*args, **kwargs):
            if len(kept) <= bound:
                kept.extend(piece[: bound + 1 - len(kept)])
            yield piece

    response.iter_bytes = iter_bytes
    return kept


def _json_of(data: bytearray, bound: int) -> Any:
    """`data` as JSON, or None (not JSON, or cut at the bound)."""
    if len(data) > bound:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def _content_type(stream: Any) -> str:
    response = getattr(stream, "response", None)
    return str(response.headers.get("content-type", "")) if response is not None else ""


# SPEC L2 (the strict_params quirk): a 400/422 that refuses a request field we sent
_REFUSED_FIELD = re.compile(r"stream_options|include_usage|extra (inputs|fields)|extra_forbidden|not permitted|"
                            r"unrecogni[sz]ed|unknown (field|parameter|argument|key)|unsupported (field|parameter)|"
                            r"additional propert", re.IGNORECASE)
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


class _Unset(enum.Enum):
    FROM_SETTINGS = "from settings"


FROM_SETTINGS = _Unset.FROM_SETTINGS  # a keyword left out: its value is the `settings` object's
_From = Literal[_Unset.FROM_SETTINGS]


def _with_keywords(settings: Settings | None, *, stream: bool | _From, call_deadline: float | _From,
                   limits: Limits | None | _From, max_tokens: int | None | _From,
                   text_calls: bool | None | _From) -> Settings:
    """`settings` (default: the table's defaults) with the keywords callers pass (`stream=False`, `limits=...`,
    `text_calls=True`), in their `Settings` form and checked by it (N1)."""
    given: dict[str, Any] = {k: v for k, v in (("stream", stream), ("call_deadline", call_deadline),
                                               ("max_tokens", max_tokens)) if v is not FROM_SETTINGS}
    if isinstance(limits, Limits):
        given.update(limits.as_settings())
    if text_calls is not FROM_SETTINGS:
        given["text_calls"] = "auto" if text_calls is None else "on" if text_calls else "off"
    return replace(settings, **given) if settings is not None and given else settings or Settings(**given)


class OpenAIProvider:
    """A model behind any OpenAI-compatible Chat Completions endpoint.

    Its settings are the settings table's (N1): `OpenAIProvider(..., settings=agent.settings)` reads `stream`,
    `call_deadline`, `max_tokens`, `text_calls` and the L10 byte bounds from it (`self.settings`); the keywords of
    the same names (and `limits=`) override them. A new provider setting is a `Settings` field, its README line
    and the line here that reads `self.settings.<name>`."""

    def __init__(self, *, base_url: str | None, api_key: str | None, model: str, settings: Settings | None = None,
                 timeout: float = DEFAULT_TIMEOUT, max_retries: int = 2, label: str | None = None,
                 is_demo: bool = False, stream: bool | _From = FROM_SETTINGS,
                 call_deadline: float | _From = FROM_SETTINGS, limits: Limits | None | _From = FROM_SETTINGS,
                 max_tokens: int | None | _From = FROM_SETTINGS, text_calls: bool | None | _From = FROM_SETTINGS
                 ) -> None:
        for name, value in (("timeout", timeout), ("call_deadline", call_deadline)):
            if value is FROM_SETTINGS:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0 (got {value!r})")
        s = self.settings = _with_keywords(settings, stream=stream, call_deadline=call_deadline, limits=limits,
                                           max_tokens=max_tokens, text_calls=text_calls)
        register(api_key)  # L6: never stored, shown or sent beyond the Authorization header
        real_url = ((base_url or "").strip() or OPENAI_URL).rstrip("/")  # pasted with spaces: the URL inside
        if urlparse(real_url).scheme not in ("http", "https") or not urlparse(real_url).hostname:
            shown = display_url(real_url)  # L6: no URL password in the message
            raise ValueError(f"base_url must be an http:// or https:// URL, e.g. http://127.0.0.1:11434/v1 "
                             f"(got {shown!r})")
        self.base_url = display_url(real_url)  # what is stored and shown: no URL password (L6)
        self.model, self.timeout, self.max_retries, self.stream = model, timeout, max_retries, bool(s.stream)
        self.call_deadline = float(s.call_deadline)
        self.is_demo = is_demo
        # L2: at most this many tokens per answer (None: the server's own limit); text calls read unless off
        # (auto: on for every endpoint but OpenAI's own, whose tool calls always come in `tool_calls`)
        self.max_tokens = s.max_tokens
        self.text_calls = (urlparse(real_url).hostname or "") != "api.openai.com" if s.text_calls == "auto" \
            else s.text_calls == "on"
        self._text_calls_shown = False
        self._shaped: Shaped | None = None  # what the last request's history needed reshaped (provider/shape.py)
        self.label = label or f"{model or '(server default model)'} @ {self.base_url}"
        self._stream_options = True
        self._sockets: WeakSet[socket.socket] = WeakSet()  # every connection this client opened (for the watchdog)
        self._watch: _Watchdog | None = None
        self.limits = Limits.of(s)  # L10: byte bounds on what the provider sends back
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
            raise DeadlinePassed
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
                except EmptyAnswer:  # L7: with a small model an empty answer is a model outcome; ask once more
                    if watch.expired:
                        raise DeadlinePassed from None
                    if on_delta is not None:
                        on_delta(EMPTY_NOTICE)
                    try:
                        completion = self._complete(messages, tools, on_delta, start)
                    except EmptyAnswer as again:
                        raise self._empty_error(again.what) from None
            if self.text_calls and apply_text_calls(completion, tools, shown=not self._text_calls_shown):
                self._text_calls_shown = True  # L2: the live log says it once; every use is stored
            if self._shaped is not None:  # L2, C10: kept with every call's record; the loop says it once a session
                counts = dict(self._shaped.counts)
                completion.notes.append({"note": self._shaped.note(), "once": "sent_shaped:" + ",".join(sorted(counts)),
                                         "sent_shaped": {**counts, "added_tokens_est": self._shaped.added_tokens}})
            return completion
        except DeadlinePassed:
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
            # L2, S2: what OpenAI refuses in a history (images outside user messages, names, long call ids) is
            # reshaped in what is sent, never in what is stored; `complete` says what (once per session, via the loop)
            sent, self._shaped = shape_history(_sendable(messages))
            kwargs: dict[str, Any] = {"model": model, "messages": [], "extra_body": {"messages": sent}}
            if tools:
                kwargs["tools"] = tools
            if self.max_tokens is not None:  # L2: OpenAI's own API takes the newer name (o-series refuse the old)
                key = "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
                kwargs[key] = self.max_tokens
            if not self.stream:
                return self._plain(kwargs, start)
            try:
                return self._streamed_once(kwargs, on_delta, start)
            except Truncated:
                if self._watch is not None and self._watch.expired:
                    raise DeadlinePassed from None
                if on_delta is not None:
                    on_delta(RETRY_NOTICE)
            try:  # L7: a truncated stream is asked once more
                return self._streamed_once(kwargs, on_delta, start)
            except Truncated as again:
                if self._watch is not None and self._watch.expired:
                    raise DeadlinePassed from None
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
        try:
            models = [m.id for m in self._client.models.list()]
        except openai.APIStatusError as exc:  # a server without GET /models: ask for the setting, not "model None"
            raise ProviderError("not_found", f"No model is configured and the provider at {self.base_url} does not "
                                f"list its models (GET /models: {exc.status_code} {server_text(exc)}).",
                                remedy="Set {model}.", status_code=exc.status_code, base_url=self.base_url,
                                detail=server_text(exc)) from None
        if not models:
            raise ProviderError("not_found", f"No model is configured and the provider at {self.base_url} lists "
                                "none.", remedy="Set {model}.", base_url=self.base_url)
        self.model = models[0]
        if self.label.startswith("(server default model) @ "):
            self.label = f"{self.model} @ {self.base_url}"
        return self.model

    def _error_in_body(self, body: Any) -> ProviderError | None:
        """L7, C9: a 200 whose whole body is an error object (`{"error": {"message", "code"}}`, as LiteLLM, OpenRouter
        and small proxies send): classified as the same error with a status would be, so its words reach the user
        and a prompt-too-long one drives the C9 retry. None when the body is no such object."""
        err = body.get("error") if isinstance(body, dict) and not isinstance(body.get("choices"), list) else None
        if not err or not isinstance(err, dict | str):
            return None
        message = str(err.get("message") or err) if isinstance(err, dict) else err
        request = _httpx.Request("POST", f"{self.base_url.rstrip('/')}{wire.PATH}")
        exc = openai.APIError(message, request, body=err if isinstance(err, dict) else None)
        return classify(exc, base_url=self.base_url, model=self.model, timeout=self.timeout, retries=self._retries())

    def _plain(self, kwargs: dict[str, Any], start: float) -> Completion:
        self._attempts = 0
        try:
            resp = wire.create(self._client, kwargs)  # the body encoded once, by orjson (L2)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:  # a 200 whose JSON body is malformed
            raise self._bad_response(bad_data(exc)) from None
        failed = self._error_in_body(getattr(resp, "model_extra", None))
        if failed is not None:
            raise failed
        if not isinstance(getattr(resp, "choices", None), list):  # the client hands back a non-JSON body as text
            extra = getattr(resp, "model_extra", None)  # a JSON object that is no completion: its own keys
            shown = (json.dumps(extra, ensure_ascii=False, default=str) if isinstance(extra, dict) and extra
                     else str(resp))[:120]
            raise self._bad_response(f"a body that is not a JSON completion ({shown!r})")
        if not resp.choices or resp.choices[0].message is None:
            raise self._bad_response("an empty `choices` list" if not resp.choices else "a choice without a message")
        answer = Answer(kwargs["model"], start, self.limits)
        answer.add(resp, whole=True)
        return self._finish(answer, done=True)

    def _finish(self, answer: Answer, *, done: bool) -> Completion:
        """The Completion of an assembled answer; L7: neither text nor tool calls is a provider error."""
        if answer.finish == "error":  # OpenRouter: the upstream failed mid-answer, without an error object
            raise ProviderError("server", f"Provider at {self.base_url} (model {self.model}) ended the answer "
                                "with finish_reason 'error' (the model's server failed while answering). Try "
                                "again later.", base_url=self.base_url)
        message = answer.message()
        finish = answer.finish
        if finish is None and done:  # a whole answer without a finish_reason: say what it is
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        if finish == "length" and (message.get("content") or message.get("tool_calls")):  # L7: cut, not whole
            bound = f" (max_tokens {self.max_tokens})" if self.max_tokens is not None else ""
            answer.notes.append(f"Model {self.model} stopped at its output limit{bound}: finish_reason 'length'. "
                                "The answer is stored as sent and may end mid-sentence; a tool call it was writing "
                                "may have incomplete arguments (such a call fails as invalid arguments). Raise "
                                "max_tokens or the server's output limit if this repeats.")
        if not message.get("content") and not message.get("tool_calls"):
            why = f"finish_reason {answer.finish!r}" + (", reasoning only" if message.get("reasoning") else "")
            raise EmptyAnswer(f"an empty answer: no text and no tool calls ({why})")
        return Completion(message, answer.usage, finish, (time.perf_counter() - answer.start) * 1000,
                          answer.model, notes=answer.notes)

    def _streamed_once(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None,
                       start: float) -> Completion:
        try:
            return self._streamed(kwargs, on_delta, start)
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            text = server_text(exc)
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
        answer = Answer(kwargs["model"], start, self.limits)
        self._attempts = 0
        events = 0
        with wire.create(self._client, {**kwargs, "stream": True, **extra}) as stream:
            # labelled JSON: an error object or a whole answer, or an event stream under the wrong label (L2, L7)
            kept = _keep_body(stream, self.limits.line) if "json" in _content_type(stream) else None
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
                    raise DeadlinePassed from None
                cause = exc.__cause__ or exc
                raise Truncated(f"the connection broke after {_n(events, 'event')}: {cause}") from None
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
                raise self._bad_response(f"a streamed event carrying {bad_data(exc)}") from None
        if not events and kept is not None:  # no event in a JSON body: the document itself
            body = _json_of(kept, self.limits.line)
            failed = self._error_in_body(body)
            if failed is not None:
                raise failed
            if isinstance(body, dict) and isinstance(body.get("choices"), list) and body["choices"]:
                # a server that ignores `stream: true` and answers whole: the same answer, shown at once
                piece = answer.add(ChatCompletion.construct(**body), whole=True)
                if piece and on_delta is not None:
                    on_delta(piece)
                return self._finish(answer, done=True)
            if body is not None:  # JSON, but neither: quoted as sent
                shown = json.dumps(body, ensure_ascii=False, default=str)[:120]
                raise self._bad_response(f"status 200 and a JSON body that is not a completion ({shown!r})")
        if not events:
            ctype = _content_type(stream) or "none"
            if "event-stream" not in ctype:  # e.g. an HTML error page from a proxy, sent with status 200
                raise self._bad_response(f"status 200 but a body that is not an event stream (Content-Type {ctype})")
            raise Truncated("no stream events at all")
        if not answer.choices:
            raise self._bad_response(f"{_n(events, 'streamed chunk')}, all with an empty `choices` list")
        if answer.finish is None and not done:  # [DONE] without a finish_reason is a whole answer (L2)
            raise Truncated(f"no finish_reason after {_n(events, 'event')} and "
                             f"{_n(answer.text_chars, 'character')}")
        return self._finish(answer, done=bool(done))

