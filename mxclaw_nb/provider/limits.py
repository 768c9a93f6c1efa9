"""Bounds on what a provider sends back, and where a request may be redirected (SPEC L10).

Why: the provider is outside the machine, and a broken or hostile server (or a proxy in between) can send
anything: a single 800 MB SSE line, a 1 MB gzip body that inflates to gigabytes, a 50 MB tool-call argument,
an answer that never ends, a 307 that re-posts the whole transcript to another host. Without bounds each of
these drove the kernel to gigabytes. Here, in one place:

- ``guard_response`` is an httpx *response* event hook (it runs for every response, direct or through a
  proxy transport, before its body is read). A redirect to another origin is refused with the target named
  (same-origin redirects are followed as before). The body stream is replaced by ``_BoundedStream``, which
  decodes ``gzip``/``deflate`` itself in pieces of at most 64 KB (``zlib``'s ``max_length``: a bomb never
  inflates past the limit) and counts: one SSE line may hold at most ``max_stream_line_bytes``, a body that
  is not an event stream (a plain completion, an error) at most ``max_answer_bytes``. Other encodings are
  not asked for (``guard_request`` sends ``Accept-Encoding: gzip, deflate``) and refused if sent anyway.
- ``AnswerMeter`` counts one answer as it is assembled (text, reasoning, every tool call's arguments, as
  received): past ``max_answer_bytes`` the call stops reading; one tool call's arguments past
  ``max_tool_args_bytes`` are not kept, and the loop answers that call with a failure result instead of
  running it (``REFUSED_CALLS_KEY`` on the stored assistant message; the sent form drops it).

Refusals raise ``ProviderRefusal`` (an ``openai.OpenAIError``: the client re-raises those without retrying);
the provider turns it into a ``ProviderError`` of kind ``bad_response`` with one paragraph, stored as the
turn's ``turn.failed``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import openai

try:  # the transport under the openai client: httpx2 in recent releases, httpx before
    import httpx2 as _httpx
except ImportError:  # pragma: no cover - older openai releases
    import httpx as _httpx  # type: ignore[no-redef]

from mxclaw_nb.settings import MAX_ANSWER_BYTES, MAX_STREAM_LINE_BYTES, MAX_TOOL_ARGS_BYTES, human_bytes

if TYPE_CHECKING:
    from mxclaw_nb.settings import Settings

ACCEPT_ENCODING = "gzip, deflate"  # what _BoundedStream can inflate in bounded pieces
_PIECE = 64 * 1024


class ProviderRefusal(openai.OpenAIError):
    """A response refused by a bound (L10); `what` is the sentence for the user."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass(frozen=True)
class Limits:
    """The byte bounds of one provider (settings `max_tool_args_bytes`, `max_answer_bytes`,
    `max_stream_line_bytes`)."""

    tool_args: int = MAX_TOOL_ARGS_BYTES
    answer: int = MAX_ANSWER_BYTES
    line: int = MAX_STREAM_LINE_BYTES

    def __post_init__(self) -> None:
        for name, value in (("max_tool_args_bytes", self.tool_args), ("max_answer_bytes", self.answer),
                            ("max_stream_line_bytes", self.line)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1 (got {value!r})")

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The bounds a `Settings` names (N1: read here, not copied by the caller)."""
        return cls(settings.max_tool_args_bytes, settings.max_answer_bytes, settings.max_stream_line_bytes)

    def as_settings(self) -> dict[str, int]:
        """These bounds as `Settings` fields (the `limits=` keyword of `OpenAIProvider` overrides them)."""
        return {"max_tool_args_bytes": self.tool_args, "max_answer_bytes": self.answer,
                "max_stream_line_bytes": self.line}


def _origin(url: Any) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


def guard_request(request: Any) -> None:
    """Ask only for encodings `_BoundedStream` inflates in bounded pieces."""
    request.headers["Accept-Encoding"] = ACCEPT_ENCODING


def guard_response(response: Any, limits: Limits) -> None:
    """httpx response hook: refuse a redirect to another origin; bound and decode the body (L10)."""
    request = response.request
    if response.has_redirect_location:
        target = request.url.join(response.headers["location"])
        if _origin(target) != _origin(request.url):
            shown = str(target.copy_with(username=None, password=None, query=None))
            raise ProviderRefusal(
                f"the provider redirected the request (HTTP {response.status_code}) to {shown}, another origin than "
                f"{request.url.scheme}://{request.url.netloc.decode('ascii', 'replace')}; a redirect is followed "
                "only to the same origin, so the conversation was not sent there. If that is the right server, "
                "set it as the base URL")
        return  # same origin: httpx follows it (its body is not read)
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    sse = "event-stream" in response.headers.get("content-type", "")
    response.stream = _BoundedStream(response.stream, encoding, limits, sse)
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]  # decoded here, in bounded pieces


def _decoder(encoding: str) -> Any:
    if encoding in ("identity", ""):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj()  # zlib-wrapped; a raw deflate stream is retried below
    raise ProviderRefusal(f"the provider sent a body with Content-Encoding {encoding!r}, which was not asked for "
                          f"(Accept-Encoding: {ACCEPT_ENCODING}) and is not decoded")


class _BoundedStream(_httpx.SyncByteStream):
    """The response body, decoded in bounded pieces and counted against the limits as it is read."""

    def __init__(self, raw: Any, encoding: str, limits: Limits, sse: bool) -> None:
        self._raw, self._limits, self._sse = raw, limits, sse
        self._inflate = _decoder(encoding)
        self._encoding = encoding
        self._line = 0  # bytes since the last line end (SSE)
        self._total = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._raw:
            for piece in self._decode(chunk):
                self._count(piece)
                yield piece
        if self._inflate is not None:
            rest = self._inflate.flush(_PIECE)
            self._count(rest)
            if rest:
                yield rest

    def _decode(self, data: bytes) -> Iterator[bytes]:
        if self._inflate is None:
            yield data
            return
        while data:
            try:
                out = self._inflate.decompress(data, _PIECE)
            except zlib.error as exc:
                if self._encoding == "deflate" and self._total == 0:  # raw deflate without the zlib header
                    self._inflate, self._encoding = zlib.decompressobj(-zlib.MAX_WBITS), "deflate (raw)"
                    continue
                raise ProviderRefusal(f"the provider sent a {self._encoding} body that does not decode ({exc})") \
                    from None
            data = self._inflate.unconsumed_tail
            if out:
                yield out
            elif not data:
                break

    def _count(self, piece: bytes) -> None:
        self._total += len(piece)
        if not self._sse:
            if self._total > self._limits.answer:
                raise ProviderRefusal(f"a response body over {human_bytes(self._limits.answer)} (max_answer_bytes); "
                                      "the rest was not read")
            return
        end = max(piece.rfind(b"\n"), piece.rfind(b"\r"))
        self._line = len(piece) - end - 1 if end >= 0 else self._line + len(piece)
        if self._line > self._limits.line:
            raise ProviderRefusal(f"one stream line over {human_bytes(self._limits.line)} "
                                  "(max_stream_line_bytes); the rest was not read")

    def close(self) -> None:
        self._raw.close()


class AnswerMeter:
    """Counts one answer as it is assembled: the whole (L10 `max_answer_bytes`) and each tool call's arguments
    (`max_tool_args_bytes`)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.received = 0

    def add(self, text: str) -> None:
        """Count text, reasoning or arguments as received; past the answer bound the call stops reading."""
        if not text:
            return
        self.received += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if self.received > self.limits.answer:
            raise ProviderRefusal(f"an answer over {human_bytes(self.limits.answer)} (max_answer_bytes: text, "
                                  "reasoning and tool-call arguments together); the rest was not read")

    def over_call(self, size: int) -> bool:
        """True when one tool call's arguments of `size` bytes are past `max_tool_args_bytes`."""
        return size > self.limits.tool_args

    def refusal(self, name: str, size: int) -> str:
        """Why a tool call with too large arguments is not run (its failure result, L10)."""
        return (f"Tool failed: not run: the arguments of this {name or 'tool'} call are over "
                f"{human_bytes(self.limits.tool_args)} (max_tool_args_bytes; at least {human_bytes(size)} arrived) "
                "and were not kept. Split the work into smaller calls (e.g. write a large file in parts).")
