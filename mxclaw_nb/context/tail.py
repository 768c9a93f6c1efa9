"""SPEC C3: choose the safe tail by token budget, never by message count.

Walking back from the end, a message joins the tail while the running total stays within
`keep_recent_tokens`. Two exceptions may break the budget and both protect the request's validity:
the last message is always kept (an empty conversation is worse than an expensive one), and a tail
that would start on a tool result grows backwards to the assistant message that issued the call,
because a split call/result pair is rejected by providers (pi-mono computes its cut points the same
way: never on a tool result). Works on the repaired conversation, where results directly follow
their call.
"""

from __future__ import annotations

from collections.abc import Sequence

from mxclaw_nb.messages import Message


def safe_tail_start(conversation: Sequence[Message], tokens: Sequence[int], keep_recent_tokens: int) -> int:
    """Index in `conversation` where the safe tail starts (len(conversation) when it is empty)."""
    n = len(conversation)
    if n == 0:
        return 0
    start = n - 1  # exception (a): the last message is always kept
    back = reversed(tokens)  # from the end, at C speed (a long history is never indexed item by item)
    total = next(back)
    for count in back:
        if total + count > keep_recent_tokens:
            break
        start -= 1
        total += count
    # exception (b): never begin on a tool result; extend to the issuing assistant message.
    while start > 0 and conversation[start].get("role") == "tool":
        start -= 1
    return start
