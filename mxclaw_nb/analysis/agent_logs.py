"""Parse the session logs coding agents leave on disk into Conversations (SPEC S4; mapping in docs/importers.md).

Why: the transcripts people most want to study are their own, and two agents keep them as JSONL:
Claude Code (``~/.claude/projects/<project>/<session>.jsonl``) and Codex CLI
(``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``). Both are append-only event logs whose shapes
differ from Chat Completions (content blocks, split assistant messages, tool results in user lines,
Responses-API items), so each gets a small pure parser that maps them onto the project's message
shape; ``import_claude_code`` / ``import_codex`` write the results with the common importer code.
Lines the parser does not understand are reported by number; lines that carry no conversation
(snapshots, token counts, UI state) are ignored silently, as documented.

The harnesses' own compactions are kept beside the transcript, not in it: each becomes a stored
``harness.compaction`` event (``Conversation.events``) with the summary the harness wrote, its trigger,
the token figures *the harness reported* and the transcript position (``seq``: the compaction happened
before message ``seq``). The transcript stays complete (SPEC S2): no message before a boundary is cut,
and the harness's summary is not turned into a user message, so replaying our policies over the
session sees the work, not the other harness's summary. Record shapes, as checked against public code:

- Claude Code: ``{"type": "system", "subtype": "compact_boundary", "parentUuid": null,
  "logicalParentUuid": ..., "content": "Conversation compacted", "compactMetadata": {"trigger":
  "auto"|"manual", "preTokens": N}}`` (newer versions may add ``postTokens`` and ``preservedMessages:
  {"anchorUuid", "uuids"}``), then a ``user`` line with ``"isCompactSummary": true`` (and
  ``isVisibleInTranscriptOnly``) whose content is the summary ("This session is being continued from a
  previous conversation ..."). Seen in the fixtures and parsers of several public Claude Code log readers.
- Codex CLI: ``{"type": "compacted", "payload": {"message": ..., "replacement_history": [ResponseItem...]}}``
  (``CompactedItem`` in openai/codex ``codex-rs/protocol/src/protocol.rs``; ``replacement_history`` is
  absent in older rollouts, newer ones add ``window_number``/``window_id``). ``message`` is
  ``SUMMARY_PREFIX + "\n" + summary`` (``codex-rs/core/src/compact.rs``); without a replacement history the
  kept history is rebuilt as Codex does (``build_compacted_history``: the latest user messages, up to
  about 20,000 tokens at 4 characters per token, then the summary). Token figures come from the last
  ``event_msg`` ``token_count`` before the record (``info.last_token_usage.input_tokens``).
- pi's ``CompactionEntry`` (``type: "compaction"``, ``summary``, ``firstKeptEntryId``, ``tokensBefore``) has
  no importer here yet.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mxclaw_nb.analysis.importers import Conversation, ImportReport, write_conversations
from mxclaw_nb.analysis.jsonl import read_jsonl
from mxclaw_nb.messages import content_text

Errors = list[tuple[int, str]]
HARNESS_EVENT = "harness.compaction"  # declared stored in mxclaw_nb/events.py
TOKENS_NOTE = "reported by the harness (its own count of its own request, not a C1 estimate)"
CODEX_SUMMARY_PREFIX = "Another language model started to solve this problem"  # codex templates/compact
CODEX_KEPT_USER_TOKENS = 20_000  # COMPACT_USER_MESSAGE_MAX_TOKENS in codex-rs/core/src/compact.rs
_EXIT_RE = re.compile(r"\s*(?:Exit code|Process exited with code):?\s*(-?\d+)")


def _lines(file: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line_no, parsed object or None, error) for each non-blank line."""
    for line_no, obj, error in read_jsonl(file):
        if error is None and not isinstance(obj, dict):
            obj, error = None, f"expected a JSON object, got {type(obj).__name__}"
        yield line_no, obj, error


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text", "summary_text"):
        return str(block.get("text") or "")
    return ""


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    """An image block as an `image_url` part: Claude's `image` (a `source`), Codex's `input_image` (`image_url`)."""
    if block.get("type") == "input_image":
        raw = block.get("image_url")
        url = raw.get("url") if isinstance(raw, dict) else raw
        return {"type": "image_url", "image_url": {"url": str(url)}} if url else None
    source = block.get("source") if isinstance(block.get("source"), dict) else {}
    if source.get("type") == "base64" and source.get("data"):
        url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
    elif source.get("url"):
        url = str(source["url"])
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _content(blocks: Any) -> str | list[dict[str, Any]]:
    """Claude content (string or blocks) -> a string, or a list of parts when images are present."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return "" if blocks is None else str(blocks)
    parts: list[dict[str, Any]] = []
    for b in blocks:
        image = _image_part(b) if isinstance(b, dict) and b.get("type") in ("image", "input_image") else None
        if image is not None:
            parts.append(image)
        elif _block_text(b):
            parts.append({"type": "text", "text": _block_text(b)})
    if any(p["type"] == "image_url" for p in parts):
        return parts
    return "".join(p["text"] for p in parts)


def _assistant_blocks(msg: dict[str, Any], blocks: Any) -> None:
    """Fold one Claude assistant line's content blocks into the (merged) assistant message ``msg``."""
    for b in blocks if isinstance(blocks, list) else [{"type": "text", "text": str(blocks or "")}]:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            msg["content"] = (msg.get("content") or "") + str(b.get("text") or "")
        elif kind == "thinking":
            msg["reasoning"] = "\n\n".join(x for x in (msg.get("reasoning"), str(b.get("thinking") or "")) if x)
        elif kind == "tool_use":
            args = json.dumps(b.get("input") or {}, ensure_ascii=False)
            call = {"id": str(b.get("id") or ""), "type": "function",
                    "function": {"name": str(b.get("name") or "unknown"), "arguments": args}}
            msg.setdefault("tool_calls", []).append(call)


def _is_prompt(obj: Any) -> bool:
    """A user line that is a prompt (not tool results): what an edit or rewind re-submits."""
    msg = obj.get("message")
    blocks = msg.get("content") if isinstance(msg, dict) else None
    return obj.get("type") == "user" and not (isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks))


def _abandoned(lines: list[tuple[int, Any, str | None]]) -> set[str]:
    """uuids of lines on branches the session left: an edited or rewound prompt, a regenerated answer.

    Lines form a tree by ``parentUuid`` (``logicalParentUuid`` across a compaction boundary). The active
    conversation is the path from the last main-thread user/assistant line to its root. Only forks on that
    path whose children are two or more prompts, or two or more different assistant replies, are cut:
    every other child is dropped with everything below it. Anything else (parallel tool results, lines
    whose parent is not in the file) is kept, in file order, as before.
    """
    parent: dict[str, str | None] = {}
    node: dict[str, dict[str, Any]] = {}
    children: dict[str, list[str]] = {}
    leaf = None
    for _, obj, error in lines:
        uid = obj.get("uuid") if not error else None
        if not isinstance(uid, str) or uid in node:
            continue
        up = obj.get("parentUuid") or obj.get("logicalParentUuid")
        parent[uid], node[uid] = (up if isinstance(up, str) else None), obj
        if isinstance(up, str):
            children.setdefault(up, []).append(uid)
        if obj.get("type") in ("user", "assistant") and not obj.get("isSidechain"):
            leaf = uid
    path: list[str] = []
    at = leaf
    while at is not None and at in node and at not in path:
        path.append(at)
        at = parent[at]
    on_path = set(path)
    cut: list[str] = []
    for fork in path:
        kids = [k for k in children.get(fork, ()) if not node[k].get("isSidechain")]
        prompts = [k for k in kids if _is_prompt(node[k])]
        replies = {str((node[k].get("message") or {}).get("id") or k) for k in kids
                   if node[k].get("type") == "assistant"}
        if len(prompts) >= 2 or len(replies) >= 2:
            cut += [k for k in kids if k not in on_path and (k in prompts or node[k].get("type") == "assistant")]
    dropped: set[str] = set()
    while cut:
        uid = cut.pop()
        if uid not in dropped and uid not in on_path:
            dropped.add(uid)
            cut += children.get(uid, ())
    return dropped


def _users(messages: list[dict[str, Any]]) -> int:
    return sum(m.get("role") == "user" for m in messages)


def _compaction(harness: str, messages: list[dict[str, Any]], line_no: int, **fields: Any) -> dict[str, Any]:
    """A harness.compaction payload at the current end of ``messages`` (``seq``: the next message's position)."""
    payload: dict[str, Any] = {
        "harness": harness, "trigger": None, "seq": len(messages), "turn": _users(messages), "line": line_no,
        "summary": None, "summary_chars": 0, "reported_tokens": {}, "tokens_note": TOKENS_NOTE,
        "kept_seqs": [], "kept": [],
    }
    payload.update(fields)
    return payload


def _set_summary(payload: dict[str, Any], text: str) -> None:
    payload["summary"], payload["summary_chars"] = text, len(text)


def _finish_claude(compactions: list[dict[str, Any]], seqs: dict[str, list[int]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for c in compactions:
        preserved = c.pop("preserved_uuids", None) or []
        c["kept_seqs"] = sorted({s for uid in preserved for s in seqs.get(str(uid), ())})
        if preserved:
            c["kept_source"] = "compactMetadata.preservedMessages"
        out.append((HARNESS_EVENT, c))
    return out


@dataclass
class _ClaudeRead:
    """What reading one Claude Code session file has gathered so far (S4): the messages of the thread the session
    ended on, the harness's compactions, the per-call usage (E1), the session's facts and the bad lines."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    errors: Errors = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    summary: Any = None  # the file's first `summary` line (the session's title)
    last_id: Any = None  # the API message id of the assistant message being continued (its blocks span lines)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    seqs: dict[str, list[int]] = field(default_factory=dict)  # line uuid -> positions of the messages it became
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # E1: per assistant message, its last usage


def parse_claude_code(path: str | Path) -> tuple[Conversation | None, Errors]:
    """One Claude Code session file -> (Conversation or None when it holds no messages, [(line, error)])."""
    file = Path(path)
    read = _ClaudeRead()
    lines = list(_lines(file))
    abandoned = _abandoned(lines)
    for line_no, obj, error in lines:
        if error:
            read.errors.append((line_no, error))
            continue
        _claude_line(read, line_no, obj, abandoned)
    if not read.messages:
        return None, read.errors
    return _claude_conversation(read, file), read.errors


def _claude_line(read: _ClaudeRead, line_no: int, obj: Any, abandoned: set[str]) -> None:
    """One parsed line: a compaction boundary or summary of the thread (kept as the harness's compaction, not in
    the transcript), a user or assistant line of the thread, or nothing (snapshots, system notes, sub-agent
    threads, branches the session left, counted)."""
    kind = obj.get("type")
    if kind == "summary" and read.summary is None:
        read.summary = obj.get("summary")
    on_thread = not obj.get("isSidechain") and obj.get("uuid") not in abandoned
    if kind == "system" and obj.get("subtype") == "compact_boundary" and on_thread:
        _claude_boundary(read, line_no, obj)
        return
    if kind == "user" and obj.get("isCompactSummary") and on_thread:
        _claude_compact_summary(read, line_no, obj)
        return  # the harness's view, not the conversation: kept in the event, not in the transcript
    if kind not in ("user", "assistant") or obj.get("isSidechain"):
        return  # snapshots, system notes, summaries, sub-agent (Task) threads: not this conversation
    if obj.get("uuid") in abandoned:
        read.info["abandoned_lines"] = read.info.get("abandoned_lines", 0) + 1
        return  # a branch the session left (edited/rewound prompt, regenerated answer)
    msg = obj.get("message")
    if not isinstance(msg, dict) or "content" not in msg:
        read.errors.append((line_no, f"a {kind!r} line without a message.content"))
        return
    for key in ("sessionId", "cwd", "gitBranch", "version"):
        read.info.setdefault(key, obj.get(key))
    if kind == "assistant":
        _claude_assistant(read, line_no, obj, msg)
    else:
        _claude_user(read, obj, msg)


def _claude_boundary(read: _ClaudeRead, line_no: int, obj: Any) -> None:
    """A `compact_boundary` line: the harness compacted here (its trigger, reported tokens and kept messages)."""
    meta = obj.get("compactMetadata") if isinstance(obj.get("compactMetadata"), dict) else {}
    preserved = meta.get("preservedMessages") if isinstance(meta.get("preservedMessages"), dict) else {}
    reported = {k: meta[m] for k, m in (("pre_tokens", "preTokens"), ("post_tokens", "postTokens"))
                if isinstance(meta.get(m), int)}
    read.compactions.append(_compaction(
        "claude-code", read.messages, line_no, trigger=meta.get("trigger"), reported_tokens=reported,
        uuid=obj.get("uuid"), timestamp=obj.get("timestamp"), preserved_uuids=preserved.get("uuids")))
    read.last_id = None


def _claude_compact_summary(read: _ClaudeRead, line_no: int, obj: Any) -> None:
    """The summary the harness wrote at a compaction: set on that compaction (one of its own when no boundary line
    came just before)."""
    msg = obj.get("message") if isinstance(obj.get("message"), dict) else {}
    text = msg.get("content")
    text = text if isinstance(text, str) else "".join(_block_text(b) for b in text or [])
    last = read.compactions[-1] if read.compactions else None
    if last is None or last["summary"] is not None or last["seq"] != len(read.messages):
        last = _compaction("claude-code", read.messages, line_no, uuid=None, timestamp=obj.get("timestamp"))
        read.compactions.append(last)  # a summary without its boundary line: still the harness's compaction
    _set_summary(last, text)
    read.last_id = None


def _claude_assistant(read: _ClaudeRead, line_no: int, obj: Any, msg: dict[str, Any]) -> None:
    """An assistant line: its blocks join the message of the same API id (one answer spans lines); E1: the call's
    usage, the last line's."""
    messages = read.messages
    mid = msg.get("id") or obj.get("requestId") or f"line-{line_no}"
    if read.last_id != mid or not messages or messages[-1].get("role") != "assistant":
        messages.append({"role": "assistant", "content": None})
        if msg.get("model") and msg.get("model") != "<synthetic>":
            read.info.setdefault("model", msg.get("model"))
    _assistant_blocks(messages[-1], msg.get("content"))
    if isinstance(msg.get("usage"), dict):
        messages[-1]["usage"] = msg["usage"]
        read.calls[len(messages) - 1] = {"index": len(messages) - 1, "usage": _claude_usage(msg["usage"]),
                                         "at": obj.get("timestamp"), "model": msg.get("model")}
    read.seqs.setdefault(str(obj.get("uuid")), []).append(len(messages) - 1)
    read.last_id = mid


def _claude_user(read: _ClaudeRead, obj: Any, msg: dict[str, Any]) -> None:
    """A user line: its tool results, each a tool message, then the rest as a user message (meta lines marked)."""
    read.last_id = None
    messages = read.messages
    first = len(messages)
    blocks = msg.get("content")
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"] \
        if isinstance(blocks, list) else []
    for b in results:
        tool = {"role": "tool", "tool_call_id": str(b.get("tool_use_id") or ""),
                "content": _content(b.get("content"))}
        if b.get("is_error"):
            tool["is_error"] = True
        messages.append(tool)
    rest = [b for b in blocks if b not in results] if isinstance(blocks, list) else blocks
    if rest or not results:
        user: dict[str, Any] = {"role": "user", "content": _content(rest)}
        if obj.get("isMeta"):
            user["meta"] = True
        messages.append(user)
    read.seqs.setdefault(str(obj.get("uuid")), []).extend(range(first, len(messages)))


def _claude_conversation(read: _ClaudeRead, file: Path) -> Conversation:
    """The Conversation of what was read: titled by the file's summary or its first user text; S4: the harness's
    compactions with the seqs they kept, the calls that reported usage (E1)."""
    messages, info = read.messages, read.info
    first_user = next((m for m in messages if m["role"] == "user" and isinstance(m["content"], str)), None)
    title = read.summary or (" ".join(first_user["content"].split())[:80] if first_user else None)
    meta = {k: v for k, v in info.items() if v not in (None, "") and k != "model"}
    return Conversation(str(info.get("sessionId") or file.stem), messages, "claude-code", meta, title,
                        info.get("cwd") or None, info.get("model"), _finish_claude(read.compactions, read.seqs),
                        [c for c in read.calls.values() if c["usage"]])


def _claude_usage(usage: dict[str, Any]) -> dict[str, int]:
    """E1: an Anthropic usage block in request-record columns; the prompt is input + cache reads + cache writes."""
    parts = [usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    out = {"prompt_tokens_reported": sum(p for p in parts if isinstance(p, int)) if any(
               isinstance(p, int) for p in parts) else None,
           "completion_tokens_reported": usage.get("output_tokens"),
           "cached_tokens_reported": usage.get("cache_read_input_tokens"),
           "cache_write_tokens_reported": usage.get("cache_creation_input_tokens")}
    return {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}


def _codex_usage(payload: Any) -> dict[str, int]:
    """E1: a Codex ``token_count``'s ``last_token_usage`` (the last call) in request-record columns (its
    ``input_tokens`` includes the cached ones)."""
    info = payload.get("info") if isinstance(payload, dict) and payload.get("type") == "token_count" else None
    last = info.get("last_token_usage") if isinstance(info, dict) else None
    if not isinstance(last, dict):
        return {}
    out = {"prompt_tokens_reported": last.get("input_tokens"), "completion_tokens_reported": last.get("output_tokens"),
           "cached_tokens_reported": last.get("cached_input_tokens")}
    return {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}


def _codex_output(raw: Any) -> tuple[str | list[dict[str, Any]], bool]:
    """Codex function_call_output ``output`` -> (content, is_error); exec outputs are JSON with an exit code, and
    newer CLIs write an output with content items (text, images) as the list of them: its text, or its parts when
    an image is among them."""
    if isinstance(raw, list):
        return _content(raw), False
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    try:
        parsed = json.loads(text)
    except ValueError:  # newer CLIs send plain text that starts with the exit code
        code = _EXIT_RE.match(text)
        return text, bool(code and code.group(1) != "0")
    if isinstance(parsed, dict) and "output" in parsed:
        code = (parsed.get("metadata") or {}).get("exit_code") if isinstance(parsed.get("metadata"), dict) else None
        return str(parsed.get("output") or ""), code not in (None, 0)
    return text, False


def _codex_item(messages: list[dict[str, Any]], item: dict[str, Any], pending: list[str]) -> bool:
    """Append one Responses-API item as messages; False when the item type is unknown."""
    kind = item.get("type")
    if kind == "message":
        role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role")))
        if role not in ("system", "user", "assistant"):
            return False
        msg: dict[str, Any] = {"role": role, "content": _content(item.get("content"))}  # images as parts (C1)
        if role == "assistant" and pending:
            msg["reasoning"] = "\n\n".join(pending)
            pending.clear()
        messages.append(msg)
    elif kind == "reasoning":
        pending.extend(t for t in (_block_text(b) for b in item.get("summary") or []) if t)
    elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
        if kind == "local_shell_call":
            action = item.get("action") if isinstance(item.get("action"), dict) else {}
            name, args = "shell", json.dumps({"command": action.get("command")}, ensure_ascii=False)
        else:
            name = str(item.get("name") or "unknown")
            args = item.get("arguments") if kind == "function_call" else json.dumps({"input": item.get("input")})
        call = {"id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
                "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
        last = messages[-1] if messages else None
        if last is None or last["role"] != "assistant":  # after tool results, a new model call
            last = {"role": "assistant", "content": None}
            if pending:
                last["reasoning"] = "\n\n".join(pending)
                pending.clear()
            messages.append(last)
        last.setdefault("tool_calls", []).append(call)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        text, failed = _codex_output(item.get("output"))
        tool: dict[str, Any] = {"role": "tool", "tool_call_id": str(item.get("call_id") or ""), "content": text}
        if failed:
            tool["is_error"] = True
        messages.append(tool)
    else:
        return False
    return True


def _codex_rebuilt(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What Codex keeps without a replacement history: the latest real user messages, ~20k tokens (compact.rs)."""
    kept: list[dict[str, Any]] = []
    budget = CODEX_KEPT_USER_TOKENS * 4  # approx_token_count: 4 bytes per token
    for m in reversed(messages):
        text = content_text(m.get("content")) if m.get("role") == "user" else ""  # the text of an image message
        if not text or text.lstrip().startswith("<") or text.startswith(CODEX_SUMMARY_PREFIX):
            continue  # environment context / instructions wrappers and earlier summaries are not kept
        if budget <= 0:
            break
        kept.append({"role": "user", "content": text[:budget]})
        budget -= len(text.encode("utf-8"))
    return kept[::-1]


def _codex_compaction(messages: list[dict[str, Any]], payload: dict[str, Any], line_no: int,
                      usage: dict[str, Any]) -> dict[str, Any]:
    summary = payload.get("message")
    history = payload.get("replacement_history")
    if isinstance(history, list):
        kept: list[dict[str, Any]] = []
        for item in history:
            if isinstance(item, dict):
                _codex_item(kept, item, [])
        kept = [m for m in kept if m["role"] != "system" and m.get("content") != summary
                and not str(m.get("content") or "").startswith(CODEX_SUMMARY_PREFIX)]
        source = "replacement_history"
    else:
        kept, source = _codex_rebuilt(messages), "rebuilt as codex build_compacted_history does"
    extra = {k: payload[k] for k in ("window_number", "window_id", "previous_window_id", "first_window_id")
             if payload.get(k) is not None}
    out = _compaction("codex", messages, line_no, trigger=payload.get("trigger"), reported_tokens=dict(usage),
                      kept=kept, kept_source=source, **extra)
    if isinstance(summary, str):
        _set_summary(out, summary)
    return out


def _token_count(payload: Any) -> dict[str, Any] | None:
    """The token figures of an ``event_msg`` ``token_count`` (None for other events or an empty one)."""
    info = payload.get("info") if isinstance(payload, dict) and payload.get("type") == "token_count" else None
    if not isinstance(info, dict):
        return None
    last = info.get("last_token_usage") if isinstance(info.get("last_token_usage"), dict) else {}
    out = {"pre_tokens": last.get("input_tokens"), "context_window": info.get("model_context_window")}
    return {k: v for k, v in out.items() if isinstance(v, int)} or None


def parse_codex(path: str | Path) -> tuple[Conversation | None, Errors]:
    """One Codex CLI rollout file -> (Conversation or None, [(line, error)]); both rollout layouts."""
    file = Path(path)
    messages: list[dict[str, Any]] = []
    errors: Errors = []
    meta: dict[str, Any] = {}
    pending: list[str] = []
    events: list[tuple[str, dict[str, Any]]] = []
    usage: dict[str, Any] = {}  # the last token_count before a compaction: the harness's own figures
    calls: dict[int, dict[str, Any]] = {}  # E1: per assistant message, the last token_count after it
    for line_no, obj, error in _lines(file):
        if error:
            errors.append((line_no, error))
            continue
        kind, payload = obj.get("type"), obj.get("payload")
        if kind == "session_meta" or (line_no == 1 and "instructions" in obj and "type" not in obj):
            head = payload if isinstance(payload, dict) else obj
            meta.update({k: head.get(k) for k in ("id", "cwd", "cli_version", "originator", "timestamp")
                         if head.get(k) is not None})
            if head.get("instructions"):
                messages.append({"role": "system", "content": str(head["instructions"])})
            continue
        if kind == "turn_context" and isinstance(payload, dict) and payload.get("model"):
            meta.setdefault("model", payload["model"])
        if kind == "event_msg":
            usage = _token_count(payload) or usage
            last = next((n for n in range(len(messages) - 1, -1, -1) if messages[n]["role"] == "assistant"), None)
            if (figures := _codex_usage(payload)) and last is not None:  # the call that wrote the last answer
                calls[last] = {"index": last, "usage": figures, "at": obj.get("timestamp")}
        if kind == "compacted" and isinstance(payload, dict):
            events.append((HARNESS_EVENT, _codex_compaction(messages, payload, line_no, usage)))
            usage = {}
        if kind in ("event_msg", "turn_context", "compacted") or obj.get("record_type") == "state":
            continue  # UI events, token counts, per-turn settings: no conversation content
        item = payload if kind == "response_item" and isinstance(payload, dict) else obj
        if not _codex_item(messages, item, pending):
            errors.append((line_no, f"unknown rollout item type {item.get('type')!r}"))
    if not messages:
        return None, errors
    first_user = next((content_text(m["content"]) for m in messages if m["role"] == "user"
                       and not content_text(m["content"]).lstrip().startswith("<")), None)
    title = " ".join(first_user.split())[:80] if first_user else None
    return Conversation(str(meta.get("id") or file.stem), messages, "codex", meta, title, meta.get("cwd"),
                        meta.get("model"), events, list(calls.values())), errors


def _import(store: Any, path: str | Path, fmt: str, parse: Any, pattern: str, progress: bool) -> ImportReport:
    started = time.perf_counter()
    root = Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    files = sorted(root.rglob(pattern)) if root.is_dir() else [root]
    report = ImportReport(str(root), fmt)
    items: list[tuple[int, Conversation]] = []
    for file in files:
        conv, errors = parse(file)
        prefix = f"{file.relative_to(root)}: " if root.is_dir() else ""
        report.errors.extend((n, prefix + msg) for n, msg in errors)
        if conv is not None:
            conv.meta["file"] = str(file)
            items.append((1, conv))
    write_conversations(store, items, report, f"import:{root.name}", progress=progress)
    report.seconds = time.perf_counter() - started
    return report


def import_claude_code(store: Any, path: str | Path = "~/.claude/projects", *, progress: bool = True) -> ImportReport:
    """Import Claude Code session logs (one ``.jsonl`` file, or every one under a folder) into ``store``."""
    return _import(store, path, "claude-code", parse_claude_code, "*.jsonl", progress)


def import_codex(store: Any, path: str | Path = "~/.codex/sessions", *, progress: bool = True) -> ImportReport:
    """Import Codex CLI rollout logs (one ``rollout-*.jsonl`` file, or every one under a folder) into ``store``."""
    return _import(store, path, "codex", parse_codex, "rollout-*.jsonl", progress)
