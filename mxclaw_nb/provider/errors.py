"""Provider errors: the one failure type the loop sees, and how a failed call is classified (SPEC C9, L6, L7).

Why: every way a model call can fail (the server's status, a broken connection, a timeout, a body that is not
an answer) reaches the loop as one `ProviderError` whose `kind` it can act on (`prompt_too_long` drives the C9
retry, with the engine's own classifier) and whose message is one paragraph a user can act on, with no key
echoed (L6). The control-flow exceptions of one call (deadline passed, empty answer, cut stream) live here too,
so the client and the answer assembly raise the same ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlparse

import openai

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.context.errors import is_prompt_too_long  # one classifier (SPEC C9), re-exported
from mxclaw_nb.secrets import display_url, redact

__all__ = ["SETTING_NAMES", "ProviderError", "bad_data", "classify", "is_prompt_too_long", "server_text"]

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


def server_text(exc: openai.APIError) -> str:
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


# L2: how servers say they take no tool definitions as the model is served (Ollama, vLLM, llama.cpp's llama-server)
_NO_TOOLS = re.compile(r"does not support tools|enable-auto-tool-choice|requires --jinja|tools? (?:are|is) not "
                       r"supported", re.IGNORECASE)


def _error_codes(exc: Exception) -> str:
    """The `code` and `type` of an error body (`context_length_exceeded`, `exceed_context_size_error`): some servers
    say what went wrong only there (Groq's message is "Please reduce the length of the messages or completion.")."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return ""
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return " ".join(str(inner[k]) for k in ("code", "type") if isinstance(inner.get(k), str))


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
    text = server_text(exc) if isinstance(exc, openai.APIError) else str(exc)
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    code = f" ({status})" if status else ""
    short = " ".join(text.split())
    short = short if len(short) <= 400 else short[:400] + "..."
    short = short if short.endswith((".", "!", "?", "...")) else short + "."
    remedy = ""
    if is_prompt_too_long(text) or is_prompt_too_long(_error_codes(exc)):  # C9
        kind, msg = "prompt_too_long", (f"{where} rejected the request as longer than model {model}'s context "
                                        f"window{code}: {short} Send fewer tokens (compact the context) or use a "
                                        "model with a larger window.")
    elif status in (401, 403):
        kind, msg = "auth", f"{where} refused the key{code}: {short}"
        remedy = "Set {api_key} to a valid key for this endpoint."
    elif status == 404:
        kind, msg = "not_found", f"{where} does not know model '{model}' or this endpoint{code}: {short}"
        remedy = f"Check {{model}} (the server's models: GET {base_url}/models) and {{base_url}}."
        if "/v1" not in urlparse(base_url).path:  # e.g. Ollama's root: its OpenAI API is under /v1
            remedy += f" OpenAI-compatible servers usually serve the API under /v1 (e.g. {base_url.rstrip('/')}/v1)."
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
        if _NO_TOOLS.search(text):  # L2: the server or model takes no tool definitions as served
            msg += (" The model is not served with tool calling: Ollama needs a model whose template has tools, "
                    "vLLM --enable-auto-tool-choice --tool-call-parser <parser>, llama.cpp's llama-server --jinja "
                    '(README, "Local models").')
    return ProviderError(kind, msg, status_code=status, base_url=base_url, detail=text, remedy=remedy)


class DeadlinePassed(BaseException):
    """Raised from the request hook once the call deadline passed: a BaseException, so no client retry runs."""


class EmptyAnswer(Exception):
    """An answer with neither text nor tool calls (L7): asked once more, then a provider error naming the model."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Truncated(Exception):
    """A stream that stopped before its finish_reason (retried once); `what` says how, for the user."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def bad_data(exc: Exception) -> str:
    """What was wrong with a response body the client could not read, in a few words."""
    doc = getattr(exc, "doc", None)  # json.JSONDecodeError keeps the text it failed on
    if isinstance(doc, str):
        shown = doc if len(doc) <= 120 else doc[:120] + "..."
        return f"data that is not JSON ({exc.msg} in {shown!r})"  # type: ignore[attr-defined]
    return f"data that is not a Chat Completions response ({type(exc).__name__}: {str(exc)[:200]})"
