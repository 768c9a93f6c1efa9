"""SPEC C6: the deterministic structured summary of the messages before the safe tail.

No model call: the summary is extracted, so the same old messages always give byte-identical text,
it can be tested exactly, and compaction never costs a request. It keeps what lets the model carry
on — recent user goals, files it changed, failures not to repeat, where it had got to — and says
`- None recorded` rather than dropping an empty section, so the structure is always the same. It is
not a replacement for the transcript: audit and search read the stored messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import eq

from mxclaw_nb.messages import (
    SUMMARY_PREFIX,
    Message,
    content_text,
    is_failure,
    tool_call_args,
    tool_call_list,
    tool_call_name,
)

GOALS_MAX, GOAL_CHARS = 4, 240
FAILURES_MAX, FAILURE_CHARS = 4, 240
STATE_CHARS = 500

# Tools whose `path`-like argument names a file the agent changed. Extend together with a test.
FILE_WRITING_TOOLS = frozenset({
    "edit_file", "write_file", "create_file", "apply_patch", "str_replace", "str_replace_editor",
    "replace_in_file", "insert", "multi_edit", "MultiEdit", "Edit", "Write", "NotebookEdit", "append_file",
})
PATH_KEYS = ("path", "file_path", "filename", "file", "notebook_path", "target_file")
NONE_RECORDED = "- None recorded"

_WS = re.compile(r"\s+")
_MARKER = re.compile(r"tool failed|invalid|permission denied|forbidden", re.IGNORECASE)


def clip(text: str, limit: int) -> str:
    """Collapse whitespace to single spaces and cut to `limit` characters (ending in an ellipsis)."""
    text = _WS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _most_recent(messages: Sequence[Message], wanted: Callable[[Message], bool], text: Callable[[Message], str],
                 limit: int) -> list[str]:
    """The last `limit` non-empty texts of wanted messages, oldest first (scanned from the end: O(limit))."""
    found: list[str] = []
    for m in reversed(messages):
        if wanted(m):
            item = text(m)
            if item:
                found.append(item)
                if len(found) == limit:
                    break
    return found[::-1]


def _goals(messages: Sequence[Message]) -> list[str]:
    return _most_recent(messages, lambda m: m.get("role") == "user",
                        lambda m: clip(content_text(m.get("content")), GOAL_CHARS), GOALS_MAX)


def _paths(messages: Sequence[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for m in compress(messages, map(dict.get, messages, repeat("tool_calls"))):  # at C speed: a long history
        if m.get("role") != "assistant":
            continue
        for call in tool_call_list(m):
            if tool_call_name(call) not in FILE_WRITING_TOOLS:
                continue
            args = tool_call_args(call) or {}
            path = next((args[k] for k in PATH_KEYS if isinstance(args.get(k), str) and args[k].strip()), None)
            if path is not None:
                seen.setdefault(clip(path, GOAL_CHARS), None)
    return list(seen)


def _failure_text(message: Message) -> str:
    text = content_text(message.get("content"))
    if not message.get("is_error"):
        # Start at the line carrying the marker, so the evidence survives the 240-character cut.
        found = _MARKER.search(text)
        if found:
            text = text[text.rfind("\n", 0, found.start()) + 1:]
    return clip(text, FAILURE_CHARS)


def _failures(messages: Sequence[Message]) -> list[str]:
    # only tool results can be failures: pick them out at C speed before the per-message test
    results = list(compress(messages, map(eq, map(dict.get, messages, repeat("role")), repeat("tool"))))
    return _most_recent(results, is_failure, _failure_text, FAILURES_MAX)


def _last_state(messages: Sequence[Message]) -> list[str]:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            text = clip(content_text(m.get("content")), STATE_CHARS)
            if text:
                return [text]
    return []


def _section(title: str, items: list[str]) -> list[str]:
    return [title] + ([f"- {item}" for item in items] if items else [NONE_RECORDED])


def build_structured_summary(old_messages: Sequence[Message]) -> str:
    """SPEC C6: the `[compressed conversation context]` text for messages before the safe tail."""
    old = old_messages if all(map(isinstance, old_messages, repeat(dict))) else [
        m for m in old_messages if isinstance(m, dict)]
    lines = [SUMMARY_PREFIX, "Older transcript messages were summarized."]
    lines += _section("Goals:", _goals(old))
    lines += _section("Files and tools touched:", _paths(old))
    lines += _section("Failures to avoid:", _failures(old))
    lines += _section("Last useful assistant state:", _last_state(old))
    return "\n".join(lines)
