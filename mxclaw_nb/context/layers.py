"""The article's context layers, so the gauge can show what fills the window.

Boundary layers (system prompt, project instructions and verification policy, skill index, memory
snapshot, user input) define the task; process layers (assistant text and calls, tool results, kernel
outputs, summaries) record how it went. Kernel outputs (K1) are the results of the tools that read and run
code in the user's kernel (`python`, `kernel_variables`, `notebook_cells`), shown apart from other tool
results because they are what floods a notebook agent's context. Frozen-context messages announce their
layer on their first line (`frozen.py` writes them that way); any other system message counts as the
system prompt. "tool definitions" is no message: the schemas every request carries (T1-T3, `overhead.py`), a
fixed layer the caller adds (`layer_tokens(..., tool_definitions=view.fixed_tokens)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mxclaw_nb.messages import (
    FALLBACK_PREFIX,
    MICRO_PREFIX,
    SUMMARY_PREFIX,
    SYSTEM_ROLES,
    Message,
    content_text,
    tool_call_list,
    tool_call_name,
)

LAYERS = ("tool definitions", "system prompt", "project instructions", "skill index", "memory snapshot", "user input",
          "assistant", "tool results", "kernel outputs", "summaries")
KERNEL_TOOLS = frozenset({"python", "kernel_variables", "notebook_cells"})  # K1 (tools/kernel_tools.py)
_PREFIXES = (
    ("[project instructions]", "project instructions"),
    ("[verification policy]", "project instructions"),
    ("[skill index]", "skill index"),
    ("[memory snapshot]", "memory snapshot"),
    ("[system prompt]", "system prompt"),
    (SUMMARY_PREFIX, "summaries"),
    (MICRO_PREFIX, "summaries"),
    (FALLBACK_PREFIX, "summaries"),
)


def message_layer(message: Message, tool_name: str | None = None) -> str:
    """The context layer one message belongs to (one of LAYERS); a tool result is a kernel output when its
    call's `tool_name` is a K1 tool or it carries the facts those tools record."""
    role = message.get("role")
    if role in SYSTEM_ROLES:
        head = content_text(message.get("content"))[:64].lstrip()
        return next((layer for prefix, layer in _PREFIXES if head.startswith(prefix)), "system prompt")
    if role == "user":
        return "user input"
    if role == "tool":
        return "kernel outputs" if tool_name in KERNEL_TOOLS or message.get("facts") else "tool results"
    return "assistant"


def layer_tokens(messages: Sequence[Message], tokens: Sequence[int] | Callable[[Message], int], *,
                 tool_definitions: int = 0) -> dict[str, int]:
    """Tokens per layer (every layer present, zero when empty), from per-message counts or a counter; the
    request's `tool_definitions` tokens (no message carries them) are their own layer."""
    out = dict.fromkeys(LAYERS, 0)
    out["tool definitions"] = tool_definitions
    names: dict[str, str] = {}  # tool_call_id -> tool name, from the calls before each result
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            for call in tool_call_list(m):
                name = tool_call_name(call)
                if isinstance(call, dict) and name is not None:
                    names[str(call.get("id"))] = name
        name = names.get(str(m.get("tool_call_id"))) if m.get("role") == "tool" else None
        out[message_layer(m, name)] += tokens(m) if callable(tokens) else tokens[i]
    return out
