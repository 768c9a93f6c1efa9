"""The ``recall`` tool: read this session's stored transcript back, one message, a seq range or a search (SPEC R1).

Why: compaction replaces old tool outputs with placeholders and old turns with a summary, but the store keeps
every byte (S2). The placeholders and summaries say where the original is (`recall #41`, `#0-#40`, SPEC C13),
and this tool fetches it, so nothing compacted is beyond the agent's reach. It reads with the *calling*
session's id: a seq names a message of this session only, and another session's messages are never returned
(a `session_id` argument naming another session is refused). Output is bounded with the total length shown
(`tools.artifacts.bound_output`, the same bounds as `read_artifact`), and the result is an ordinary tool result:
it can be compacted again later (C5 keeps the seq it points to).
"""

from __future__ import annotations

import json
from typing import Any

from mxclaw_nb.messages import Message, content_text, tool_call_args, tool_call_list, tool_call_name
from mxclaw_nb.tools import artifacts as artifacts
from mxclaw_nb.tools.base import ToolContext, ToolResult, failed, invalid
from mxclaw_nb.tools.registry import Tool

MAX_RANGE = 50  # messages one range call shows (the output is bounded anyway)


def render(seq: int, message: Any) -> str:
    """`#41 tool (call c1): <content>` / `#40 assistant: <text> -> read_file {"path": ...}` (one block)."""
    if not isinstance(message, dict):
        return f"#{seq} ?: {message!r}"
    role = str(message.get("role"))
    head = f"#{seq} {role}"
    if role == "tool" and message.get("tool_call_id") is not None:
        head += f" (call {message.get('tool_call_id')})"
    return f"{head}: " + body(message)


def body(message: Any) -> str:
    """A message's text and its tool calls (`-> name {args}`), as recall shows them."""
    if not isinstance(message, dict):
        return repr(message)
    parts = [content_text(message.get("content"))]
    for call in tool_call_list(message):
        if isinstance(call, dict):
            parts.append(f"-> {tool_call_name(call)} {json.dumps(tool_call_args(call) or {}, ensure_ascii=False)}")
    return "\n".join(p for p in parts if p)


def _transcript(ctx: ToolContext) -> list[Message]:
    load = getattr(ctx.artifacts, "load_transcript", None)
    if load is None:
        raise failed("the stored transcript is not available in this session")
    return list(load(ctx.session_id))


def _seq(args: dict[str, Any], key: str, n: int) -> int:
    value = args[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid(f"arguments for tool 'recall': {key} must be an integer >= 0 (got {value!r})")
    if value >= n:
        raise failed(f"#{value} is not in this session's transcript (it has {n} messages, #0-#{n - 1})")
    return value


def recall(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """One message (`seq`), a range (`start`..`end`, inclusive) or a `search` of this session's transcript."""
    other = args.get("session_id")
    if other is not None and str(other).strip() != ctx.session_id:
        raise failed("recall reads only this session's transcript; another session's messages are never returned")
    modes = [m for m, keys in (("seq", ("seq",)), ("range", ("start", "end")), ("search", ("search",)))
             if any(args.get(k) is not None for k in keys)]
    if len(modes) != 1:
        raise invalid("arguments for tool 'recall': give one of seq, start/end or search"
                      + (f" (got {' and '.join(modes)})" if modes else ""))
    messages = _transcript(ctx)
    n = len(messages)
    mode = modes[0]
    if mode == "seq":
        seq = _seq(args, "seq", n)
        text = render(seq, messages[seq])
        return ToolResult(f"[recall #{seq}: {len(text):,} characters]\n" + artifacts.bound_output(text),
                          meta={"mode": mode, "seqs": [seq]})
    if mode == "range":
        start = _seq({"start": args.get("start", 0) if args.get("start") is not None else 0}, "start", n)
        end = _seq({"end": args.get("end") if args.get("end") is not None else n - 1}, "end", n)
        if end < start:
            raise invalid(f"arguments for tool 'recall': end {end} is before start {start}")
        shown = min(end, start + MAX_RANGE - 1)
        shown_text = "\n\n".join(render(s, messages[s]) for s in range(start, shown + 1))
        more = f"; showing #{start}-#{shown}, ask for #{shown + 1} on" if shown < end else ""
        return ToolResult(f"[recall #{start}-#{end} of #0-#{n - 1}: {len(shown_text):,} characters{more}]\n"
                          + artifacts.bound_output(shown_text), meta={"mode": mode, "seqs": [start, shown]})
    lines = "\n".join(line for s, m in enumerate(messages) for line in
                      (f"#{s}: {t}" for t in body(m).splitlines() or [""]))
    out = artifacts.search(lines, args["search"], regex=bool(args.get("regex", False)),
                           context=args.get("context") if args.get("context") is not None else 1,
                           max_hits=args.get("max_hits") if args.get("max_hits") is not None else 10)
    if out.startswith("Invalid"):
        return ToolResult(out, is_error=True, meta={"mode": mode})
    return ToolResult(f"[recall search over #0-#{n - 1}]\n" + out, meta={"mode": mode})


_INT = {"type": "integer"}
RECALL_TOOL = Tool(
    "recall",
    "Read this session's stored transcript back when a placeholder ('recall #41') or a summary ('#0-#40') hides "
    "what you need. Choose one: seq (one message), start/end (a range, inclusive), or search (literal text, or a "
    "regex with regex=true; context lines and max_hits). Output is bounded; only this session is readable.",
    {
        "type": "object",
        "properties": {"seq": _INT, "start": _INT, "end": _INT, "search": {"type": "string"},
                       "regex": {"type": "boolean"}, "context": _INT, "max_hits": _INT,
                       "session_id": {"type": "string"}},
        "required": [],
    },
    recall,
)
