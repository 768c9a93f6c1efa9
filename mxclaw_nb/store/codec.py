"""Message <-> row encoding for the `messages` table, lossless both ways.

Why: the transcript is the source of truth (SPEC S2), so `load_transcript` must give back exactly
the dicts that were appended: a list of content parts stays a list (JSON in `content`, with
`content_type = 'parts'`), an explicit `"content": None` stays distinguishable from a missing key,
`is_error=False` stays False, and keys this schema has no column for (e.g. `refusal`) travel in the
`extra` JSON column. Plain string content is stored as plain text so SQL users can read it directly.

Real logs have shapes a column cannot hold (SPEC S2: what goes in comes out equal), so a value goes to
`extra` instead of its column whenever the column would change it: an explicit `None` for any key
(`"refusal": null`, `"tool_call_id": null`: the key is kept, as a JSON null), a number or object where a text
column expects a string (`"tool_call_id": 7`, a `reasoning` object), a non-boolean `is_error`. Content that
is neither a string, a list of parts nor None (an object or a number) is stored as JSON with
`content_type = 'json'`. Roles are the four sent ones plus `developer` (OpenAI's newer system role) and the
legacy `function` (pre-tool-calls function results); the engine decides what is sent.

Text that is not valid Unicode (lone surrogates, e.g. a non-UTF-8 file name from `os.scandir`) follows
the one text policy of `mxclaw_nb.text_policy` (SPEC L7): it never raises here. A message holding any is
stored with every string escaped and `"mxclaw_text_escaped": true` in `extra`, and decoded back exactly;
`dumps_text` does the same for the other JSON columns and `text` for plain text columns.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from mxclaw_nb.text_policy import ESCAPED_KEY, display, escape_value, is_valid, unescape_value

ROLES = ("system", "user", "assistant", "tool", "developer", "function")
# Columns after (session_id, seq, turn, iteration, created_at), in table order.
MESSAGE_COLUMNS = (
    "role", "content", "content_type", "tool_calls", "tool_call_id", "name", "is_error", "reasoning",
    "attachments", "extra",
)
_COLUMN_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "is_error", "reasoning", "attachments")
_TEXT_KEYS = ("tool_call_id", "name", "reasoning")  # VARCHAR columns: DuckDB would turn 7 into "7"


def _column_value(key: str, value: Any) -> bool:
    """True when `value` of column key `key` survives its column unchanged (else it travels in `extra`)."""
    if value is None:
        return False
    if key in _TEXT_KEYS:
        return value.__class__ is str
    if key == "is_error":
        return value.__class__ is bool
    return True


def dumps(value: Any, what: str) -> str:
    """JSON text for `value` (CJK kept readable); ValueError naming `what` if it is not JSON-able."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable: {exc}") from exc


def dumps_text(value: Any, what: str) -> str:
    """`dumps`, under the text policy: a dict holding invalid text is stored escaped, with the marker key."""
    out = dumps(value, what)
    if is_valid(out):
        return out
    escaped = escape_value(value)
    if isinstance(escaped, dict):
        escaped[ESCAPED_KEY] = True
    return dumps(escaped, what)


def text(value: Any) -> Any:
    """A plain text column value under the text policy (`display`: escaped only when not valid)."""
    return display(value) if isinstance(value, str) else value


_LONG_DIGITS = re.compile(r"\d{19}").search


def loads(text: str) -> Any:
    """`json.loads(text)`, decoded by orjson (a C parser, several times faster on a stored transcript's JSON
    columns) when it accepts the text: for strict JSON both give equal values; what orjson refuses (NaN,
    Infinity, lone surrogates, ...) goes to `json.loads`, so every decoded value is the one `json.loads` gives
    (S2: a resumed transcript equals the stored one). orjson reads an integer past 64 bits as a float instead
    of refusing it, so a text with a run of 19 or more digits goes to `json.loads` too."""
    if _LONG_DIGITS(text) is not None:
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def message_to_row(message: dict[str, Any]) -> tuple[Any, ...]:
    """Encode one message dict as the values of MESSAGE_COLUMNS; ValueError on a malformed message."""
    row = _encode(message)
    if ESCAPED_KEY not in message and _all_valid(row):
        return row
    # SPEC L7: some text is not valid Unicode. Escape every string of the message (so the row decodes back
    # exactly) and mark the row; a message that already carries the reserved key takes this path too.
    escaped = escape_value(message)
    escaped[ESCAPED_KEY] = True
    return _encode(escaped)


def _all_valid(row: tuple[Any, ...]) -> bool:
    # The fast path of every append (~1 us a row): ASCII is O(1) to tell, other text is encoded once.
    for value in row:  # noqa: SIM110 - a plain loop: half the cost of all() over a generator here
        if value.__class__ is str and not value.isascii() and not is_valid(value):
            return False
    return True


def _encode(message: dict[str, Any]) -> tuple[Any, ...]:
    if not isinstance(message, dict):
        raise ValueError(f"a message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"message role must be one of {', '.join(ROLES)}, got {role!r}")
    content_type: str | None
    if "content" not in message:
        content, content_type = None, None
    else:
        raw = message["content"]
        if raw is None:
            content, content_type = None, "null"
        elif isinstance(raw, str):
            content, content_type = raw, "text"
        elif isinstance(raw, list):
            content, content_type = dumps(raw, "message content"), "parts"
        else:  # an object or a number (some logs store a tool's JSON result as is): kept as JSON
            content, content_type = dumps(raw, "message content"), "json"
    # A column keeps only values it gives back unchanged; any other value (and every explicit None but
    # content's) travels in `extra`, so the decoded dict equals the appended one (SPEC S2).
    columns = {k: v for k, v in message.items() if k in _COLUMN_KEYS and k not in ("role", "content")
               and _column_value(k, v)}
    extra = {k: v for k, v in message.items() if k not in ("role", "content") and k not in columns}
    return (
        role,
        content,
        content_type,
        None if "tool_calls" not in columns else dumps(columns["tool_calls"], "tool_calls"),
        columns.get("tool_call_id"),
        columns.get("name"),
        columns.get("is_error"),
        columns.get("reasoning"),
        None if "attachments" not in columns else dumps(columns["attachments"], "attachments"),
        dumps(extra, "extra message keys") if extra else None,
    )


def row_to_message(row: tuple[Any, ...]) -> dict[str, Any]:
    """Decode the values of MESSAGE_COLUMNS back into the message dict that was appended."""
    role, content, content_type, tool_calls, tool_call_id, name, is_error, reasoning, attachments, extra = row
    message: dict[str, Any] = {"role": role}
    if content_type == "text":
        message["content"] = content
    elif content_type in ("parts", "json"):
        message["content"] = loads(content)
    elif content_type == "null":
        message["content"] = None
    # the optional keys in their stored order, each only when present (one resume decodes every row: N2)
    if tool_calls is not None and (value := loads(tool_calls)) is not None:
        message["tool_calls"] = value
    if tool_call_id is not None:
        message["tool_call_id"] = tool_call_id
    if name is not None:
        message["name"] = name
    if is_error is not None:
        message["is_error"] = is_error
    if reasoning is not None:
        message["reasoning"] = reasoning
    if attachments is not None and (value := loads(attachments)) is not None:
        message["attachments"] = value
    if extra is not None:
        message.update(loads(extra))
        if message.pop(ESCAPED_KEY, None) is True:
            return unescape_value(message)  # type: ignore[no-any-return]
    return message
