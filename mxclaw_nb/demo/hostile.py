"""Hostile replies of the shipped test server: what a broken or malicious endpoint sends (SPEC L10).

Why: the client's bounds (`mxclaw_nb.provider.limits`) must be shown against real bytes over real HTTP through
the real `openai` client, not a mock. Each mode here writes one reply to the socket, generated lazily so the
server itself stays small however large the reply is (an 800 MB line, a gzip bomb that inflates to 1 GB):

- `long_line`: one SSE `data:` line of `size` bytes that never ends (streamed), or a one-line body of `size`
  bytes (plain);
- `gzip_bomb`: the same, `Content-Encoding: gzip`, about 1 KB per MB inflated (a 1 MB body inflates to ~1 GB);
- `long_answer`: a well-formed answer whose text is `size` bytes (SSE chunks of 16 KB, or one JSON body);
- `huge_tool_args`: a well-formed `write_file` call whose arguments are `size` bytes (64 KB argument deltas, or
  one JSON body);
- `redirect`: HTTP `status` (307 by default) with `Location: target`.

Queue one with `TestServer.enqueue_hostile(mode, size=..., target=...)`; it answers the next request.
"""

from __future__ import annotations

import functools
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["MODES", "Hostile", "gzip_bomb", "write_hostile"]

_BLOCK = 1 << 20
_PIECE = 64 * 1024


@dataclass(frozen=True)
class Hostile:
    """One queued hostile reply: `mode` (a name of HOSTILE), its size in bytes, a redirect's target and status."""

    mode: str
    size: int = 0
    target: str = ""
    status: int = 307


@functools.lru_cache(maxsize=8)
def gzip_bomb(prefix: bytes, megabytes: int) -> bytes:
    """A gzip body that inflates to `prefix` + `megabytes` MB of `a`: each MB after a full flush compresses to the
    same ~1 KB, so it is built in milliseconds; the trailer's CRC and size are right (a complete, valid file)."""
    block = b"a" * _BLOCK
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(prefix) + c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()[:-8]
    crc = zlib.crc32(prefix)
    for _ in range(megabytes):
        crc = zlib.crc32(block, crc)
    size = (len(prefix) + megabytes * _BLOCK) & 0xFFFFFFFF
    return head + again * (megabytes - 1) + end + struct.pack("<II", crc, size)


def _filler(size: int) -> Iterator[bytes]:
    piece = b"a" * _PIECE
    while size > 0:
        yield piece[:size]
        size -= _PIECE


def _chunks(base: dict[str, Any], deltas: Iterator[dict[str, Any]], finish: str) -> Iterator[bytes]:
    for delta in deltas:
        yield b"data: " + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                                     ).encode() + b"\n\n"
    yield b"data: " + json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
                                 ).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


_ARGS_HEAD = '{"path": "big.txt", "content": "'


def _body(reply: Hostile, stream: bool) -> tuple[str, Iterator[bytes], int | None]:
    """(content type, body pieces, length or None for chunked) of a mode other than redirect and gzip_bomb."""
    model = "test-model"
    base = {"id": "chatcmpl-hostile", "object": "chat.completion.chunk", "created": 0, "model": model}
    if reply.mode == "long_line":
        head = b'data: {"pad": "' if stream else b'{"pad": "'
        return ("text/event-stream" if stream else "application/json",
                iter([head, *_filler(reply.size - len(head))]), None if stream else reply.size)
    if reply.mode == "long_answer" and stream:
        text = "a" * 16_384
        count = max(1, reply.size // len(text))
        return "text/event-stream", _chunks(base, iter([{"role": "assistant", "content": text}] * count), "stop"), None
    if reply.mode == "huge_tool_args" and stream:
        call = {"index": 0, "id": "call_huge", "type": "function", "function": {"name": "write_file", "arguments": ""}}
        piece = "a" * _PIECE

        def deltas() -> Iterator[dict[str, Any]]:
            yield {"role": "assistant", "content": None, "tool_calls": [call]}
            yield {"tool_calls": [{"index": 0, "function": {"arguments": _ARGS_HEAD}}]}
            for _ in range(max(1, reply.size // _PIECE)):
                yield {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            yield {"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]}
        return "text/event-stream", _chunks(base, deltas(), "tool_calls"), None
    # plain bodies of long_answer / huge_tool_args: one JSON completion written in pieces, its length known
    text_head: str
    if reply.mode == "long_answer":
        text_head = ('{"id": "chatcmpl-hostile", "object": "chat.completion", "created": 0, "model": "' + model + '", '
                '"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "')
        tail = '"}}]}'
    else:
        text_head = ('{"id": "chatcmpl-hostile", "object": "chat.completion", "created": 0, "model": "' + model + '", '
                '"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", '
                '"content": null, "tool_calls": [{"id": "call_huge", "type": "function", "function": {"name": '
                '"write_file", "arguments": "' + _ARGS_HEAD.replace('"', '\\"'))
        tail = '\\""}}]}}]}'
    pieces = [text_head.encode(), *_filler(reply.size), tail.encode()]
    return "application/json", iter(pieces), len(text_head) + reply.size + len(tail)


def write_hostile(handler: Any, reply: Hostile, stream: bool) -> None:
    """Write one hostile reply on `handler` (a `BaseHTTPRequestHandler` of the test server)."""
    if reply.mode == "redirect":
        handler.send_response(reply.status)
        handler.send_header("Location", reply.target)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return
    encoding = None
    length: int | None
    if reply.mode == "gzip_bomb":
        prefix = b'data: {"pad": "' if stream else b'{"pad": "'
        body = gzip_bomb(prefix, max(1, reply.size // _BLOCK))
        ctype, pieces, length = ("text/event-stream" if stream else "application/json",
                                 iter([body[i:i + _PIECE] for i in range(0, len(body), _PIECE)]), len(body))
        encoding = "gzip"
    else:
        ctype, pieces, length = _body(reply, stream)
    handler.send_response(200)
    handler.send_header("Content-Type", ctype)
    if encoding:
        handler.send_header("Content-Encoding", encoding)
    if length is None:
        handler.send_header("Transfer-Encoding", "chunked")
    else:
        handler.send_header("Content-Length", str(length))
    handler.end_headers()
    try:
        for piece in pieces:
            handler.wfile.write(b"%X\r\n%s\r\n" % (len(piece), piece) if length is None else piece)
        if length is None:
            handler.wfile.write(b"0\r\n\r\n")
    except OSError:  # the client stopped reading (what a bounded client does): done
        handler.close_connection = True


MODES = ("long_line", "gzip_bomb", "long_answer", "huge_tool_args", "redirect")
