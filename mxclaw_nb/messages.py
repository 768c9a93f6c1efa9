"""Message shapes and small pure helpers shared by the engine, the store and the UI.

Messages are plain dicts in the OpenAI Chat Completions shape, because that is what users load from
JSONL, what the provider takes and what the store round-trips. Keeping them as values (not classes)
means a transcript read from DuckDB, a file or a notebook cell can go straight into the engine. The
helpers here answer the few questions everybody asks of a message (its text, its images, whether it
is a failure, which tool it belongs to) in one place, so the gauge, the summary and the analysis
cannot disagree. The sent form (`sanitize`) is also where the text policy meets the provider (SPEC L7):
text that is not valid Unicode is sent in its `text_policy` escaped form, which every server accepts
and the C1 estimate counts as sent. Standard library only.
"""

from __future__ import annotations

import json
import re
import zlib
from typing import Any

from mxclaw_nb.text_policy import display, display_value, json_text, value_is_valid

Message = dict[str, Any]

ROLES = ("system", "user", "assistant", "tool")
# Roles that behave like `system` for compaction (OpenAI's newer name for the same layer).
SYSTEM_ROLES = frozenset({"system", "developer"})
# Only these keys are ever sent to a provider; everything else (reasoning, is_error, ...) is display-only.
SENT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
# SPEC L10: on an assistant message, {tool call id: failure text} for calls whose arguments were over the bound
# (not kept, not run; the loop answers each with its failure text). Stored, never sent.
REFUSED_CALLS_KEY = "refused_calls"

SUMMARY_PREFIX = "[compressed conversation context]"
MICRO_PREFIX = "[microcompaction]"
FALLBACK_PREFIX = "[fallback context window]"

# SPEC C5: failure evidence is never compacted; matched case-insensitively anywhere in the text.
FAILURE_RE = re.compile(r"tool failed|invalid|permission denied|forbidden", re.IGNORECASE)


def content_text(content: Any) -> str:
    """Concatenated text of a content value (string, list of parts, or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                if part.get("type", "text") == "text":
                    texts.append("" if part.get("text") is None else str(part["text"]))
            elif part is not None:  # as `sanitize` sends it: a None part is empty text
                texts.append(str(part))
        return "".join(texts)
    if isinstance(content, dict):  # sent as JSON text by `sanitize`
        return json.dumps(content, ensure_ascii=False, sort_keys=True)
    return str(content)


def image_count(content: Any) -> int:
    """Number of image parts in a content value."""
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, dict) and p.get("type") in ("image_url", "image", "input_image"))


def tool_call_name(call: Any) -> str | None:
    """Function name of one tool call, tolerating malformed shapes."""
    if isinstance(call, dict):
        fn = call.get("function")
        # shown and quoted in summaries: lone surrogates escaped (SPEC L7), as `sanitize` sends the name
        if isinstance(fn, dict) and fn.get("name") is not None:
            return display(str(fn["name"]))
        if call.get("name") is not None:
            return display(str(call["name"]))
    return None


def tool_call_list(message: Message) -> list[Any]:
    """The tool calls of a message as a list (a lone call or odd value is wrapped, as `sanitize` sends it)."""
    calls = message.get("tool_calls")
    if not calls:
        return []
    return calls if isinstance(calls, list) else [calls]


def tool_call_args(call: Any) -> dict[str, Any] | None:
    """Parsed arguments of one tool call, or None when they are not a JSON object."""
    if not isinstance(call, dict):
        return None
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, dict) else call.get("arguments")
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        return None
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def is_failure(message: Message) -> bool:
    """True for a tool result that is failure evidence (flagged, or carrying a failure marker)."""
    if message.get("is_error"):
        return True
    text = message.get("content")
    if text.__class__ is not str:
        text = content_text(text)
    if text.isascii():  # same answer as FAILURE_RE, ~50x faster on long outputs (IGNORECASE regex is slow)
        low = text.lower()
        # A one-character test (memchr) of each marker's rarest letter first: a text without it cannot hold
        # the marker, and code or logs often lack 'v', 'b' or 'p', saving most of the substring scans.
        return (("v" in low and "invalid" in low) or ("b" in low and "forbidden" in low)
                or ("p" in low and "permission denied" in low) or ("f" in low and "tool failed" in low))
    return bool(FAILURE_RE.search(text))


def _normalize_content(content: Any) -> Any:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[Any] = []
        for part in content:
            if isinstance(part, dict):
                # A text part must say `"type": "text"` and carry a string, or providers reject the request.
                if part.get("type", "text") == "text" and (not isinstance(part.get("text"), str) or "type" not in part):
                    part = {**part, "type": "text", "text": "" if part.get("text") is None else str(part["text"])}
                if not value_is_valid(part):
                    part = display_value(part)
                parts.append(part)
            else:
                parts.append({"type": "text", "text": display("" if part is None else str(part))})
        return parts
    if isinstance(content, dict):
        return display(json.dumps(content, ensure_ascii=False, sort_keys=True))
    return display(str(content))


def fallback_call_id(call: Any, k: int) -> str:
    """Deterministic id for a tool call that arrived without one (position-independent)."""
    raw = json.dumps(call, sort_keys=True, ensure_ascii=False, default=str)
    return f"call_missing_{k}_{zlib.crc32(raw.encode('utf-8', 'surrogatepass')):08x}"


def _normalize_call(call: Any, k: int) -> dict[str, Any]:
    if call.__class__ is dict:  # the usual, well-formed shape: a plain copy (this runs for every call sent)
        fn = call.get("function")
        if fn.__class__ is dict:
            call_id, name, args = call.get("id"), fn.get("name"), fn.get("arguments")
            if call_id.__class__ is str and call_id and name.__class__ is str and args.__class__ is str:
                if not (args.isascii() and name.isascii() and call_id.isascii()):
                    call_id, name, args = display(call_id), display(name), json_text(args)
                return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
    if not isinstance(call, dict):
        return {"id": fallback_call_id(call, k), "type": "function",
                "function": {"name": "unknown", "arguments": json_text(str(call))}}
    fn = call.get("function")
    if not isinstance(fn, dict):
        fn = {}
    name = fn.get("name", call.get("name"))
    args = fn.get("arguments", call.get("arguments", ""))
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    call_id = call.get("id")
    return {
        "id": display(str(call_id) if call_id else fallback_call_id(call, k)),
        "type": "function",
        "function": {"name": display("unknown" if name is None else str(name)), "arguments": json_text(args)},
    }


def _is_legacy(message: Any) -> bool:
    return isinstance(message, dict) and (message.get("role") == "function" or (
        message.get("role") == "assistant" and bool(message.get("function_call")) and not message.get("tool_calls")))


def modernize_legacy_calls(messages: list[Any]) -> list[Any]:
    """OpenAI's legacy function calling (an assistant ``function_call``, answered by a role ``function`` message) as
    the ``tool_calls`` / ``tool`` messages it stands for, one message for one (positions unchanged); ``messages``
    itself when it holds none (the usual case: no copy).

    Why: the engine pairs results by ``tool_call_id`` (SPEC C4) and sends only the four roles, so left as it is a
    legacy transcript would lose every function result from its views (dropped as an unknown role) and never
    compact. The pairing the legacy shape leaves implicit (the result right after the call) is made explicit with
    the id ``legacy_<k>``, ``k`` the call's position; a ``function`` message that answers no call just before it gets
    an id no call has, so C4 drops it as it drops any orphan result.
    """
    if not any(_is_legacy(m) for m in messages):
        return messages
    out: list[Any] = []
    open_call: str | None = None  # the id of the call made by the message just before
    for k, m in enumerate(messages):
        if not _is_legacy(m):
            out.append(m)
            open_call = None
        elif m.get("role") == "assistant":
            fc = m["function_call"]
            fn = fc if isinstance(fc, dict) else {"name": "unknown", "arguments": str(fc)}
            open_call = f"legacy_{k}"
            rest = {key: v for key, v in m.items() if key != "function_call"}
            out.append({**rest, "tool_calls": [{"id": open_call, "type": "function", "function": fn}]})
        else:
            rest = {key: v for key, v in m.items() if key not in ("role", "tool_call_id")}
            out.append({"role": "tool", "tool_call_id": open_call or f"legacy_orphan_{k}", **rest})
            open_call = None
    return out


def sanitize(message: Message) -> Message:
    """The sent form of a message: only SENT_KEYS, content normalised, tool calls well-formed."""
    role = message.get("role")
    content = message.get("content")
    if content.__class__ is not str:  # the usual case skips the call: this runs for every message
        content = _normalize_content(content)
    elif not content.isascii():  # O(1); only non-ASCII text can hold a lone surrogate (SPEC L7)
        content = display(content)
    calls = message.get("tool_calls") if role == "assistant" else None
    if content is None and not calls:
        content = ""
    out: Message = {"role": role, "content": content}
    if calls:
        if not isinstance(calls, list):
            calls = [calls]
        out["tool_calls"] = [_normalize_call(c, k) for k, c in enumerate(calls)]
    if role == "tool":
        tcid = message.get("tool_call_id")
        out["tool_call_id"] = "" if tcid is None else display(str(tcid))
    name = message.get("name")
    if name is not None and role in ("user", "tool", "system", "developer", "assistant"):
        out["name"] = display(str(name))
    return out
