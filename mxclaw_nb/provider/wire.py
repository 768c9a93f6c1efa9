"""The Chat Completions request body, encoded once with orjson and sent through the client's own `post` (SPEC L2).

Why: `client.chat.completions.create` serialises the body with the standard library's `json.dumps` (about 30 ms
for a 4.5 MB body of 10k messages, more than the loop's own work per call), after walking the typed
parameters. The messages are already in wire form (`messages.sanitize`), so this module encodes the same
body with orjson (a C encoder, ~10x faster) and hands the bytes to the `openai` client's lower-level
`post(path, content=..., stream=..., stream_cls=...)` (its documented way of sending a raw body): the client's
retries, timeouts, headers, error classification and stream parsing stay the client's.

The body is what `create(**kwargs)` would send, decoded: the keyword parameters (NOT_GIVEN ones left out),
then `extra_body` merged last, as the client merges it. A body orjson cannot encode the way `json.dumps`
would (a non-string key, an integer past 64 bits, a lone surrogate) is left to the client's own encoder, so
nothing is sent differently (`tests/test_provider_wire.py` compares the bytes on the wire, decoded). One
difference remains: a NaN float, which the client refuses, is sent as null (messages and tool schemas hold
no floats).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai
import orjson
from openai.types.chat import ChatCompletion, ChatCompletionChunk

PATH = "/chat/completions"
# request options of `create`, not body fields
_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def request_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body `client.chat.completions.create(**kwargs)` sends, as a dict (before encoding): the given
    parameters (NOT_GIVEN ones left out), `extra_body` merged over them last, as the client merges it."""
    body = {k: v for k, v in kwargs.items() if k not in _OPTIONS and not isinstance(v, openai.NotGiven)}
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def encode(body: Mapping[str, Any]) -> bytes | None:
    """`body` as UTF-8 JSON bytes (orjson), or None when orjson cannot encode it as `json.dumps` would."""
    try:
        return orjson.dumps(body)
    except (orjson.JSONEncodeError, TypeError):
        return None


def create(client: openai.OpenAI, kwargs: Mapping[str, Any]) -> Any:
    """`client.chat.completions.create(**kwargs)` with the body pre-encoded: a `ChatCompletion`, or with
    `stream=True` a `Stream[ChatCompletionChunk]` (a context manager, as `create` returns)."""
    content = encode(request_body(kwargs))
    if content is None:  # what orjson refuses goes the client's own way, unchanged
        return client.chat.completions.create(**kwargs)
    stream = bool(kwargs.get("stream"))
    options: dict[str, Any] = {"security": {"bearer_auth": True}}
    headers = dict(kwargs.get("extra_headers") or {})
    headers.setdefault("Content-Type", "application/json")
    options["headers"] = headers
    if kwargs.get("extra_query"):
        options["params"] = kwargs["extra_query"]
    if "timeout" in kwargs and not isinstance(kwargs["timeout"], openai.NotGiven):
        options["timeout"] = kwargs["timeout"]
    return client.post(PATH, cast_to=ChatCompletion, content=content, options=options,  # type: ignore[arg-type]
                       stream=stream, stream_cls=openai.Stream[ChatCompletionChunk])
