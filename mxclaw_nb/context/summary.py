"""SPEC C6: the deterministic structured summary of the messages before the safe tail.

No model call: the summary is extracted, so the same old messages always give byte-identical text,
it can be tested exactly, and compaction never costs a request. It keeps what lets the model carry
on — recent user goals, files it changed, failures not to repeat, where it had got to — and says
`- None recorded` rather than dropping an empty section, so the structure is always the same. It is
not a replacement for the transcript: audit and search read the stored messages.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import eq, is_
from typing import Any, cast

from mxclaw_nb.context.micro import type_facts
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


def _dicts(messages: Sequence[Any]) -> Sequence[Message]:
    return messages if all(map(isinstance, messages, repeat(dict))) else [m for m in messages if isinstance(m, dict)]


def _kernel_update(seen: dict[str, str], messages: Sequence[Message]) -> bool:
    """SPEC K3: add the variables `messages` created to `seen` (last record wins); True when any had facts."""
    any_facts = False
    for m in messages:
        facts = m.get("facts")
        if not facts:
            continue
        any_facts = True
        if m.get("role") != "tool" or not isinstance(facts, dict) or m.get("is_error"):
            continue
        described = type_facts({k: v for k, v in facts.items() if k != "variables"})
        for name in facts.get("variables") or []:
            seen[str(name)] = described
    return any_facts


def _kernel_lines(seen: dict[str, str]) -> list[str]:
    return [clip(f"{name}: {what}" if what else name, STATE_CHARS) for name, what in sorted(seen.items())]


def _kernel_state(messages: Sequence[Message]) -> list[str] | None:
    """The live variables the summarized history created, or None when no kernel tool recorded facts."""
    seen: dict[str, str] = {}
    return _kernel_lines(seen) if _kernel_update(seen, messages) else None


def _text(old: Sequence[Message], paths: list[str], failures: list[str], kernel: list[str] | None) -> str:
    lines = [SUMMARY_PREFIX, "Older transcript messages were summarized."]
    lines += _section("Goals:", _goals(old))
    lines += _section("Files and tools touched:", paths)
    lines += _section("Failures to avoid:", failures)
    lines += _section("Last useful assistant state:", _last_state(old))
    if kernel is not None:  # K3: only when kernel tools ran, so C6 texts stay byte-identical
        lines += _section("Kernel state:", kernel)
    return "\n".join(lines)


def build_structured_summary(old_messages: Sequence[Message]) -> str:
    """SPEC C6: the `[compressed conversation context]` text for messages before the safe tail."""
    old = _dicts(old_messages)
    return _text(old, _paths(old), _failures(old), _kernel_state(old))


def _snapshot(messages: Sequence[Message], keys: tuple[str, ...]) -> tuple[list[Any], ...]:
    return tuple(list(map(dict.get, messages, repeat(key))) for key in keys)


# C7/T3: the version of the persisted C6 state (`StructuredSummaryState.snapshot`). Bump it whenever the C6 text,
# what the state keeps, or how steps are derived from stored rows changes: a state of another version is rebuilt.
SUMMARY_STATE_VERSION = 1


def fingerprint(message: Any) -> str:
    """A short digest of one message's value (sorted-key JSON), which a resumed state is checked against."""
    data = json.dumps(message, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


class StructuredSummaryState:
    """`build_structured_summary` for a list of old messages that only grows between calls (same text).

    Inside a loop the messages before the safe tail grow by a few per call; the file paths and the
    failures of the part already seen are kept, so a call scans only what was added (goals and the last
    state are read from the end, which is cheap anyway). Reuse needs the same message objects, with the
    same content, tool calls and error flag objects, in the same positions (checked at C speed);
    anything else starts again from scratch.
    """

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._snap: tuple[list[Any], ...] = ()
        self._paths: dict[str, None] = {}
        self._failures: list[str] = []
        self._kernel: dict[str, str] = {}
        self._any_facts = False
        self._resume_n: int | None = None  # set by `resumed`: the old messages its snapshot covered
        self.scanned = 0  # old messages scanned so far (a resumed state scans only those after its snapshot)

    def snapshot(self) -> dict[str, Any] | None:
        """C7: this state as plain data (JSON-able; no pickle: a database may come from someone else), or None
        when it is not a trusted (append-only) state. `resumed` continues it in another process."""
        n = len(self._messages)
        if self._snap or not n:
            return None
        return {"version": SUMMARY_STATE_VERSION, "n": n, "first": fingerprint(self._messages[0]),
                "last": fingerprint(self._messages[n - 1]), "paths": list(self._paths),
                "failures": list(self._failures), "kernel": [[k, v] for k, v in self._kernel.items()],
                "any_facts": self._any_facts}

    @classmethod
    def resumed(cls, data: Any, old_messages: Sequence[Message]) -> tuple[StructuredSummaryState | None, str]:
        """C7: the state `snapshot` made, continued over `old_messages` (whose first n messages it covered),
        or (None, why not): another version, malformed data, or old messages that are not the ones it saw
        (checked by the fingerprints of the first and last message it covered). Never a wrong summary: the
        caller then builds the state from scratch."""
        if not isinstance(data, dict):
            return None, "the saved summary state is not an object"
        if data.get("version") != SUMMARY_STATE_VERSION:
            return None, (f"the saved summary state is of engine version {data.get('version')!r}, "
                          f"this engine's is {SUMMARY_STATE_VERSION}")
        n, kernel = data.get("n"), data.get("kernel")
        if (not isinstance(n, int) or isinstance(n, bool) or n <= 0 or not _strings(data.get("paths"))
                or not _strings(data.get("failures")) or not isinstance(data.get("any_facts"), bool)
                or not isinstance(kernel, list) or not all(_strings(kv) and len(kv) == 2 for kv in kernel)):
            return None, "the saved summary state is malformed"
        if len(old_messages) < n:
            return None, f"the saved summary state covers {n} old messages, the transcript has {len(old_messages)}"
        if (fingerprint(old_messages[0]) != data.get("first")
                or fingerprint(old_messages[n - 1]) != data.get("last")):
            return None, "the saved summary state does not match the stored messages"
        state = cls()
        state._messages = cast("list[dict[str, Any]]", old_messages)  # the caller's (read-only) sequence
        state._paths = dict.fromkeys(data["paths"])
        state._failures = list(data["failures"])[-FAILURES_MAX:]
        state._kernel = {k: v for k, v in kernel}
        state._any_facts = data["any_facts"]
        state._resume_n = n
        return state, ""

    def summary(self, old_messages: Sequence[Message], *, unchanged_content: bool = False,
                trusted: bool = False) -> str:
        """The C6 text of `old_messages`, equal to build_structured_summary(old_messages).

        `unchanged_content=True` says the caller has already checked that the content and tool calls of
        messages seen before were not replaced (the pipeline's TokenCache does); only the error flags are
        then compared. `trusted=True` (an append-only session cache) says more: the messages are dicts that
        are never edited in place, and those seen before are a prefix of `old_messages` when it is as long.
        """
        n = len(self._messages)
        resume_n, self._resume_n = self._resume_n, None
        if resume_n is not None:  # resumed: the first resume_n old messages were checked (`resumed`)
            n = resume_n if trusted and old_messages is self._messages else -1
            if n < 0:
                n, self._paths, self._failures, self._kernel, self._any_facts = 0, {}, [], {}, False
            old = cast("list[dict[str, Any]]", old_messages) if trusted else list(_dicts(old_messages))
            snap: tuple[list[Any], ...] = ()
        elif trusted:  # dicts only, never edited in place, and a prefix of `old` when it is as long (caller checked)
            old = cast("list[dict[str, Any]]", old_messages)  # read-only here: no copy of a long history
            snap = ()
            if len(old) < n or self._snap or (n and old[n - 1] is not self._messages[n - 1]):
                n, self._paths, self._failures, self._kernel, self._any_facts = 0, {}, [], {}, False
        else:
            old = list(_dicts(old_messages))
            keys = ("is_error",) if unchanged_content else ("content", "tool_calls", "is_error")
            snap = _snapshot(old, keys)
            if (len(old) < n or len(snap) != len(self._snap) or not all(map(is_, old[:n], self._messages))
                    or not all(all(map(is_, now[:n], before))
                               for now, before in zip(snap, self._snap, strict=True))):
                n, self._paths, self._failures, self._kernel, self._any_facts = 0, {}, [], {}, False
        added = old[n:]
        self.scanned += len(added)
        for path in _paths(added):
            self._paths.setdefault(path, None)
        self._failures = (self._failures + _failures(added))[-FAILURES_MAX:]
        self._any_facts = _kernel_update(self._kernel, added) or self._any_facts
        self._messages, self._snap = old, snap
        return _text(old, list(self._paths), list(self._failures),
                     _kernel_lines(self._kernel) if self._any_facts else None)
