"""SPEC C5: microcompaction, replacing old successful tool outputs with a length placeholder.

Tried before any summary because it loses the least: no message disappears, the call/result pairs
and the roles stay exactly as they were, only the bulk of old build logs and file dumps goes. Failure
evidence (flagged errors and texts with `Tool failed`, `Invalid`, `Permission denied`, `Forbidden`)
is never replaced, since it is what stops the model from repeating a mistake.
"""

from __future__ import annotations

import re

from mxclaw_nb.messages import Message, content_text, is_failure

PLACEHOLDER = "[old tool output compacted: {n} characters]"
# A placeholder fed back by C7 (next_input) is already compacted: replacing it again would lose N.
_PLACEHOLDER_RE = re.compile(r"\[old tool output compacted: \d+ characters\]")


def placeholder_for(message: Message) -> str | None:
    """The placeholder text for a tool result, or None when it must stay (not a tool, failure, not shorter)."""
    if message.get("role") != "tool" or is_failure(message):
        return None
    original = content_text(message.get("content"))
    if _PLACEHOLDER_RE.fullmatch(original):
        return None
    text = PLACEHOLDER.format(n=len(original))
    return text if len(text) < len(original) else None


def micro_summary(replaced: int, chars: int, before: int, after: int, counter: str = "estimate") -> str:
    """The event summary for a microcompaction (starts with `[microcompaction]`, C10)."""
    unit = "est. tokens" if counter == "estimate" else f"{counter} tokens"
    return (f"[microcompaction] replaced {replaced} old tool output(s) ({chars:,} characters) with "
            f"placeholders; {before:,} -> {after:,} {unit}")
