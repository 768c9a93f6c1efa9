"""A history in the shapes OpenAI's Chat Completions API takes, made as the request is sent (SPEC L2, S2, C1).

Why: an imported session (S4) keeps what the other harness wrote (S2): a Claude Code or Codex tool result may hold
a screenshot, a chat export a `name` with spaces or CJK, another harness's call ids may be longer than 40
characters, a function name may carry a dot (an MCP `server.tool`). OpenAI checks every message of the history and
refuses the whole request (HTTP 400 `invalid_request_error`) on the first of them, so every later turn of such a
session would fail. The stored transcript stays as it is; `shape_history` reshapes only the list that is sent, and
says what it changed (`Shaped`: counts, never the texts), which the provider turns into one note per session and
the loop keeps in every request record (C10).

Images outside `user` messages are MOVED, not dropped: each stays in its place as a one-line text saying what it
was and where it went, and the image itself goes into a `user` message inserted right after the tool block (or
after the message, when it is not a tool result). Why move rather than replace with a note: the model still sees
the screenshot it asked for, and the request's C1 estimate stays honest (the engine counts 2,000 est. tokens per
image, SPEC C1, and the image is still sent; only the short notes are added), so the T3 calibration learns from a
report about the request the engine counted. A `user` message between tool results and the next assistant
message is what OpenAI and the common OpenAI-compatible servers accept; inside the tool block it would break
C4's pairing, hence after it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from mxclaw_nb.context.tokens import estimate_sent

__all__ = ["MAX_CALL_ID", "Shaped", "shape_history"]

MAX_CALL_ID = 40  # OpenAI: "Expected a string with maximum length 40"
MAX_NAME = 64
_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_-]+")
_IMAGE_TYPES = frozenset({"image_url"})
MOVED_HEADER = ("[images from the messages just above, moved here: the API takes images only in user messages. "
                "They are what those messages returned, not a new request.]")
_NAMES_OK: set[str] = set()  # names known to match the pattern (a handful per session: no bound needed beyond this)
_NAMES_OK_MAX = 10_000


@dataclass
class Shaped:
    """What was reshaped in one request (counts only): the provider's note and the request record say it."""

    counts: dict[str, int] = field(default_factory=dict)
    # C1: est. tokens of what is sent minus those of the request view (the notes and headers added, ids shortened;
    # a moved image counts 2,000 where it went as where it was)
    added_tokens: int = 0

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def note(self) -> str:
        """One paragraph for the user (a provider.note): what was changed in what is sent, and why."""
        c = self.counts
        said = []
        if c.get("images_moved"):
            n = c["images_moved"]
            said.append(f"{n} image{'s' if n != 1 else ''} in tool results or other non-user messages moved into a "
                        "user message right after them (OpenAI takes images only in user messages; each left a "
                        "one-line note in its place)")
        if c.get("names_fixed"):
            said.append(f"{c['names_fixed']} message `name`(s) outside ^[a-zA-Z0-9_-]+$ sent with the other "
                        "characters as _")
        if c.get("names_dropped"):
            said.append(f"{c['names_dropped']} message `name`(s) with no letter or digit the API takes left out")
        if c.get("call_ids_shortened"):
            said.append(f"{c['call_ids_shortened']} tool-call id(s) over {MAX_CALL_ID} characters sent as a short "
                        "hash (the same in the call and its result)")
        if c.get("function_names_fixed"):
            said.append(f"{c['function_names_fixed']} historical function name(s) outside ^[a-zA-Z0-9_-]+$ sent "
                        "with the other characters as _")
        return ("This session's history holds shapes OpenAI's Chat Completions API refuses (HTTP 400), as imported "
                "sessions often do; the stored transcript is unchanged, and what is sent was reshaped: "
                + "; ".join(said) + f". What is sent is {self.added_tokens:+,} est. tokens from the request view "
                "(an image still counts 2,000). Said once per session; every request record keeps these counts "
                "(`sent_shaped`).")


def _valid_name(name: Any) -> bool:
    if name.__class__ is not str:
        return False
    if name in _NAMES_OK:
        return True
    ok = len(name) <= MAX_NAME and _NAME.fullmatch(name) is not None
    if ok:
        if len(_NAMES_OK) >= _NAMES_OK_MAX:
            _NAMES_OK.clear()
        _NAMES_OK.add(name)
    return ok


def _fixed_name(name: Any) -> str:
    """`name` with every run of other characters as `_`, at most 64 characters ('' when nothing usable is left)."""
    fixed = _NOT_NAME.sub("_", str(name)).strip("_")[:MAX_NAME]
    return fixed if any(ch.isalnum() for ch in fixed) else ""


def short_call_id(call_id: str) -> str:
    """A call id over 40 characters as a short, deterministic one (the call and its result map alike)."""
    digest = hashlib.blake2b(call_id.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"call_{digest}"


def _has_image(content: Any) -> bool:
    return content.__class__ is list and any(p.__class__ is dict and p.get("type") in _IMAGE_TYPES for p in content)


def _needs_shape(m: dict[str, Any]) -> bool:
    """True when OpenAI would refuse something in this (sent-form) message."""
    role = m.get("role")
    if role != "user" and m.get("content").__class__ is list and _has_image(m["content"]):
        return True
    if "name" in m and not _valid_name(m["name"]):
        return True
    if role == "tool":
        tcid = m.get("tool_call_id")
        return tcid.__class__ is str and len(tcid) > MAX_CALL_ID
    calls = m.get("tool_calls")
    if calls.__class__ is list:
        for call in calls:
            cid = call.get("id") if call.__class__ is dict else None
            fn = call.get("function") if call.__class__ is dict else None
            if (cid.__class__ is str and len(cid) > MAX_CALL_ID) or (
                    fn.__class__ is dict and not _valid_name(fn.get("name"))):
                return True
    return False


def _first_to_shape(messages: list[dict[str, Any]]) -> int | None:
    """The position of the first message OpenAI would refuse, or None. The usual message (text content, no name,
    a short id, valid call names) is passed by a few attribute tests: this runs over every message of every call."""
    ok_names, limit, str_ = _NAMES_OK, MAX_CALL_ID, str
    for k, m in enumerate(messages):
        if m.get("content").__class__ is str_ and "name" not in m:
            calls = m.get("tool_calls")
            if calls is None:
                tcid = m.get("tool_call_id")
                if tcid is None or (tcid.__class__ is str_ and len(tcid) <= limit):
                    continue
            elif calls.__class__ is list and len(calls) == 1:  # the usual call: one per message
                call = calls[0]
                fn = call.get("function") if call.__class__ is dict else None
                cid = call.get("id") if fn.__class__ is dict else None
                if cid.__class__ is str_ and len(cid) <= limit and fn["name"] in ok_names:  # type: ignore[index]
                    continue
        if _needs_shape(m):
            return k
    return None


def shape_history(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Shaped | None]:
    """`messages` (in sent form) as OpenAI takes them, and what was changed; the same list and None when nothing
    needed it (the usual case: one pass, no copy)."""
    first = _first_to_shape(messages)
    if first is None:
        return messages, None
    shaped = Shaped()
    out = list(messages[:first])
    pending: list[dict[str, Any]] = []  # image parts waiting for the end of their block
    for m in messages[first:]:
        if pending and m.get("role") != "tool":
            out.append(_moved_images(pending, shaped))
            pending = []
        if _needs_shape(m):
            new = _shaped(m, shaped, pending)
            shaped.added_tokens += estimate_sent(new) - estimate_sent(m)  # C1: only the changed messages counted
            m = new
        out.append(m)
    if pending:
        out.append(_moved_images(pending, shaped))
    return out, shaped


def _moved_images(parts: list[dict[str, Any]], shaped: Shaped) -> dict[str, Any]:
    moved = {"role": "user", "content": [{"type": "text", "text": MOVED_HEADER}, *parts]}
    shaped.added_tokens += estimate_sent(moved)
    return moved


def _image_words(part: dict[str, Any]) -> str:
    """What an image part was, in a few words: its type and size for a data URL, else its URL's scheme and host."""
    image = part.get("image_url")
    url = str(image.get("url") if isinstance(image, dict) else image or "")
    head, _, data = url.partition(",")
    if head.startswith("data:"):
        mime = head[5:].split(";")[0] or "image"
        size = len(data) * 3 // 4 - data[-2:].count("=") if ";base64" in head else len(data)
        return f"{mime}, {size:,} bytes"
    return url.split("?")[0][:80] or "image"


def _shaped(m: dict[str, Any], shaped: Shaped, pending: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(m)
    content = m.get("content")
    if m.get("role") != "user" and isinstance(content, list) and _has_image(content):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in _IMAGE_TYPES:
                pending.append(part)
                shaped.add("images_moved")
                texts.append(f"\n[image: {_image_words(part)}; sent in the next user message]\n")
            elif isinstance(part, dict):
                texts.append(str(part.get("text") or ""))
        out["content"] = "".join(texts)  # the text as it was, each image's line where the image was
    if "name" in m and not _valid_name(m["name"]):
        fixed = _fixed_name(m["name"])
        if fixed:
            out["name"] = fixed
            shaped.add("names_fixed")
        else:
            del out["name"]
            shaped.add("names_dropped")
    tcid = m.get("tool_call_id")
    if m.get("role") == "tool" and isinstance(tcid, str) and len(tcid) > MAX_CALL_ID:
        out["tool_call_id"] = short_call_id(tcid)
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [_shaped_call(c, shaped) for c in calls]
    return out


def _shaped_call(call: Any, shaped: Shaped) -> Any:
    if not isinstance(call, dict):
        return call
    out = dict(call)
    cid = call.get("id")
    if isinstance(cid, str) and len(cid) > MAX_CALL_ID:
        out["id"] = short_call_id(cid)
        shaped.add("call_ids_shortened")
    fn = call.get("function")
    if isinstance(fn, dict) and not _valid_name(fn.get("name")):
        out["function"] = {**fn, "name": _fixed_name(fn.get("name")) or "unknown"}
        shaped.add("function_names_fixed")
    return out
