"""OpenAI-compatible provider: one model call, streamed, with usage, retries and clear errors (SPEC L2, C9).

Why: the loop needs a single `complete(messages, tools)` that works against OpenAI, vLLM, llama.cpp,
Ollama and our own local demo/test server alike, so it goes through the `openai` package's client
(which already retries 429/5xx/connection errors with exponential backoff and honours Retry-After).
This module adds what the client leaves to us: assembling streamed text and tool-call deltas into one
assistant message, asking for usage while streaming (and dropping `stream_options` for servers that
reject it), keeping raw tool-call argument strings (malformed JSON is the loop's business), and
turning every failure into a `ProviderError` with a `kind` the loop can act on (`prompt_too_long`
drives the C9 retry) and one paragraph a user can act on. Model context windows live here too.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import openai

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.demo_model import DEMO_MODEL
from mxclaw_nb.secrets import display_url, redact, register

__all__ = ["DEFAULT_CONTEXT_WINDOW", "KNOWN_CONTEXT_WINDOWS", "Completion", "OpenAIProvider", "ProviderError",
           "Usage", "context_window_for", "demo_provider", "is_prompt_too_long", "resolve_provider"]

OPENAI_URL = "https://api.openai.com/v1"
DEMO_LABEL = "demo model (offline)"
# SPEC C9's pattern, plus spellings of the same condition by other servers (Anthropic-style, llama.cpp).
PROMPT_TOO_LONG = re.compile(r"prompt too long|context length|too many tokens", re.IGNORECASE)
_PROMPT_TOO_LONG_EXTRA = re.compile(
    r"prompt is too long|context_length_exceeded|exceeds? the (available )?context (size|window)", re.IGNORECASE)
_STORED_ONLY = ("is_error", "reasoning", "attachments")


def is_prompt_too_long(text: str) -> bool:
    """True when a provider error text says the request is over the model's context (SPEC C9)."""
    return bool(PROMPT_TOO_LONG.search(text) or _PROMPT_TOO_LONG_EXTRA.search(text))


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


class ProviderError(Exception):
    """A failed model call: `kind` for the loop, `message` (one paragraph) for the user."""

    KINDS = ("prompt_too_long", "auth", "not_found", "rate_limit", "server", "connection", "timeout", "bad_request")

    def __init__(self, kind: str, message: str, *, status_code: int | None = None, base_url: str = "",
                 detail: str = "") -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown ProviderError kind {kind!r}")
        message, detail = redact(message), redact(detail)  # servers echo headers and keys back (L6)
        super().__init__(message)
        self.kind, self.message, self.status_code = kind, message, status_code
        self.base_url, self.detail = display_url(base_url) if base_url else base_url, detail


def _server_text(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if inner.get("message"):
            return str(inner["message"])
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
        return ProviderError("connection", f"Could not connect to the provider at {base_url} ({cause}). Check "
                             "that the server is running and OPENAI_BASE_URL is right.", base_url=base_url,
                             detail=str(cause))
    text = _server_text(exc) if isinstance(exc, openai.APIError) else str(exc)
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    code = f" ({status})" if status else ""
    short = text if len(text) <= 400 else text[:400] + "..."
    if is_prompt_too_long(text):
        kind, msg = "prompt_too_long", (f"{where} rejected the request as longer than model {model}'s context "
                                        f"window{code}: {short} Send fewer tokens (compact the context) or use a "
                                        "model with a larger window.")
    elif status in (401, 403):
        kind, msg = "auth", (f"{where} refused the key{code}: {short} Set OPENAI_API_KEY (or pass api_key=...) "
                             "to a valid key for this endpoint.")
    elif status == 404:
        kind, msg = "not_found", (f"{where} does not know model '{model}' or this endpoint{code}: {short} Check "
                                  f"MXCLAW_MODEL (the server's models: GET {base_url}/models) and OPENAI_BASE_URL.")
    elif status == 429:
        kind, msg = "rate_limit", (f"{where} is rate limiting requests{code}, still after {retries} retries: "
                                   f"{short} Wait a moment and try again, or check the account's quota.")
    elif status is None or status >= 500:
        kind, msg = "server", (f"{where} failed{code or ' during the response'} after {retries} retries: {short} "
                               "Try again later.")
    else:
        kind, msg = "bad_request", f"{where} rejected the request{code}: {short}"
    return ProviderError(kind, msg, status_code=status, base_url=base_url, detail=text)


def _sendable(messages: list[dict]) -> list[dict]:
    """Messages without stored-only keys (normally already stripped by the context engine)."""
    return [{k: v for k, v in m.items() if k not in _STORED_ONLY} if any(k in m for k in _STORED_ONLY) else m
            for m in messages]


def _is_loopback(url: str) -> bool:
    return (urlparse(url).hostname or "") in ("127.0.0.1", "localhost", "::1")


class OpenAIProvider:
    """A model behind any OpenAI-compatible Chat Completions endpoint."""

    def __init__(self, *, base_url: str | None, api_key: str | None, model: str, timeout: float = 120,
                 max_retries: int = 2, stream: bool = True, label: str | None = None, is_demo: bool = False) -> None:
        register(api_key)  # L6: never stored, shown or sent beyond the Authorization header
        real_url = (base_url or OPENAI_URL).rstrip("/")
        self.base_url = display_url(real_url)  # what is stored and shown: no URL password (L6)
        self.model, self.timeout, self.max_retries, self.stream = model, timeout, max_retries, stream
        self.is_demo = is_demo
        self.label = label or f"{model or '(server default model)'} @ {self.base_url}"
        self._stream_options = True
        # Loopback servers (demo, vLLM, llama.cpp, Ollama) must not be sent through an HTTP(S)_PROXY.
        http_client = openai.DefaultHttpxClient(trust_env=False) if _is_loopback(self.base_url) else None
        self._client = openai.OpenAI(base_url=real_url, api_key=api_key or "not-needed", timeout=timeout,
                                     max_retries=max_retries, http_client=http_client)

    def __repr__(self) -> str:
        return f"OpenAIProvider({self.label!r})"

    def complete(self, messages: list[dict], tools: list[dict] | None,
                 on_delta: Callable[[str], None] | None = None) -> Completion:
        """One model call; streamed text pieces go to `on_delta`. Raises ProviderError."""
        start = time.perf_counter()
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
                return self._streamed(kwargs, on_delta, start)
            except openai.BadRequestError as exc:
                if not (self._stream_options and "stream_options" in _server_text(exc)):
                    raise
                self._stream_options = False  # this server rejects stream_options: stream without usage
                return self._streamed(kwargs, on_delta, start)
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
                                "none. Set MXCLAW_MODEL (or pass model=...).", base_url=self.base_url)
        self.model = models[0]
        if self.label.startswith("(server default model) @ "):
            self.label = f"{self.model} @ {self.base_url}"
        return self.model

    def _plain(self, kwargs: dict[str, Any], start: float) -> Completion:
        resp = self._client.chat.completions.create(**kwargs)
        choice = resp.choices[0] if resp.choices else None
        msg = choice.message if choice else None
        message: dict[str, Any] = {"role": "assistant", "content": msg.content if msg else None}
        if msg and msg.tool_calls:
            message["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                "name": tc.function.name, "arguments": tc.function.arguments}} for tc in msg.tool_calls]
        reasoning = msg and (getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None))
        if isinstance(reasoning, str) and reasoning:
            message["reasoning"] = reasoning
        usage = Usage(resp.usage.prompt_tokens, resp.usage.completion_tokens) if resp.usage else None
        return Completion(message, usage, choice.finish_reason if choice else None,
                          (time.perf_counter() - start) * 1000, resp.model or kwargs["model"])

    def _streamed(self, kwargs: dict[str, Any], on_delta: Callable[[str], None] | None, start: float) -> Completion:
        extra = {"stream_options": {"include_usage": True}} if self._stream_options else {}
        text: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage: Usage | None = None
        finish: str | None = None
        model = kwargs["model"]
        with self._client.chat.completions.create(**kwargs, stream=True, **extra) as stream:
            for chunk in stream:
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for choice in chunk.choices:
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
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            message["tool_calls"] = [
                {"id": c["id"] or f"call_{i}_{int(start * 1e6) % 10**9}", "type": "function",
                 "function": {"name": c["name"], "arguments": "".join(c["arguments"])}}
                for i, c in sorted(calls.items())]
        if reasoning:
            message["reasoning"] = "".join(reasoning)
        return Completion(message, usage, finish, (time.perf_counter() - start) * 1000, model)


_demo_lock = threading.Lock()
_demo_server: Any = None


def demo_server_url() -> str:
    """Base URL of this process's demo server, started on first use (127.0.0.1, daemon thread)."""
    global _demo_server
    with _demo_lock:
        if _demo_server is None:
            from mxclaw_nb.testserver import TestServer

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
