"""The article's context layers, so the gauge can show what fills the window.

Boundary layers (system prompt, project instructions and verification policy, skill index, memory
snapshot, user input) define the task; process layers (assistant text and calls, tool results,
summaries) record how it went. Frozen-context messages announce their layer on their first line
(`frozen.py` writes them that way); any other system message counts as the system prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mxclaw_nb.messages import FALLBACK_PREFIX, MICRO_PREFIX, SUMMARY_PREFIX, SYSTEM_ROLES, Message, content_text

LAYERS = ("system prompt", "project instructions", "skill index", "memory snapshot", "user input",
          "assistant", "tool results", "summaries")
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


def message_layer(message: Message) -> str:
    """The context layer one message belongs to (one of LAYERS)."""
    role = message.get("role")
    if role in SYSTEM_ROLES:
        head = content_text(message.get("content"))[:64].lstrip()
        return next((layer for prefix, layer in _PREFIXES if head.startswith(prefix)), "system prompt")
    if role == "user":
        return "user input"
    if role == "tool":
        return "tool results"
    return "assistant"


def layer_tokens(messages: Sequence[Message], tokens: Sequence[int] | Callable[[Message], int]) -> dict[str, int]:
    """Tokens per layer (every layer present, zero when empty), from per-message counts or a counter."""
    out = dict.fromkeys(LAYERS, 0)
    for i, m in enumerate(messages):
        out[message_layer(m)] += tokens(m) if callable(tokens) else tokens[i]
    return out
