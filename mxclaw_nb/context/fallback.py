"""SPEC C8: the deterministic fallback window used when the compactor fails (and for the C9 retry).

It has to work when everything cleverer has failed, so it is tiny and cannot raise on any input the
repair pass accepts: at most the first two system messages, one fixed note saying what happened, and
the last six conversation messages, with the start moved back so the window never opens on a tool
result (a result without its call is rejected by providers).
"""

from __future__ import annotations

from collections.abc import Sequence

from mxclaw_nb.context.repair import repair_tool_call_transcript
from mxclaw_nb.messages import FALLBACK_PREFIX, SYSTEM_ROLES, Message, sanitize

FALLBACK_SYSTEM_KEEP = 2
FALLBACK_TAIL = 6
FALLBACK_TEXT = (
    f"{FALLBACK_PREFIX} Older conversation messages were omitted from this request because "
    "context compaction could not be completed. Only the most recent messages follow; the full "
    "transcript is stored and nothing was deleted."
)


def fallback_message() -> Message:
    """The fixed system message that stands in for everything the fallback window omits."""
    return {"role": "system", "content": FALLBACK_TEXT}


def fallback_indices(messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """Positions of the kept system messages and of the kept conversation messages (repaired input)."""
    systems = [i for i, m in enumerate(messages) if m.get("role") in SYSTEM_ROLES][:FALLBACK_SYSTEM_KEEP]
    conversation = [i for i, m in enumerate(messages) if m.get("role") not in SYSTEM_ROLES]
    start = max(0, len(conversation) - FALLBACK_TAIL)
    while start > 0 and messages[conversation[start]].get("role") == "tool":
        start -= 1
    return systems, conversation[start:]


def fallback_window(messages: Sequence[Message]) -> list[Message]:
    """SPEC C8: first 2 system messages + the fixed fallback note + the last 6 conversation messages."""
    repaired = repair_tool_call_transcript(list(messages))
    systems, tail = fallback_indices(repaired)
    sent = [sanitize(repaired[i]) for i in systems]
    return sent + [fallback_message()] + [sanitize(repaired[i]) for i in tail]
