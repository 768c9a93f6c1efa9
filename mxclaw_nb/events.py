"""Event names, which of them are stored, and the one path every event takes (SPEC C10, L4, S1).

Why one module: the loop's events (turn, model call, compaction) and the tools' events (approval, skipped
call, artifact fallback) used to take two paths with two storage rules. Every event is now declared
here once, and `record` is how the loop and the tools both publish one: a stored event is appended to
the store first (so what a subscriber shows is already kept, L4), then every event goes to the live
subscribers. Publishing a name that is not declared is a programming error and raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

# Appended to the `events` table as they happen.
STORED: frozenset[str] = frozenset({
    "turn.started", "turn.finished", "turn.failed", "turn.interrupted", "turn.max_iterations",  # L1, L7
    "tool.started", "tool.finished", "tool.skipped",  # L3
    "approval.decided",  # L5: who allowed or denied a command
    "artifact.fallback",  # A3: an artifact could not be written
    "context.compacted",  # C10
    "context.summary", "context.summary_rejected",  # C11: a recorded model summary, or why one was rejected
    "provider.note",  # L2: what the adapter did about this server (e.g. stream_options refused: asked again without)
    "frozen.note",  # L9: a project file of the frozen context refused (a link out, a FIFO, a device, ...)
    "harness.compaction",  # S4: a compaction another harness (Claude Code, Codex) made, imported from its log
})
# Shown live only: the streamed text, and what the `requests` table already keeps (the request view and
# the provider's usage are part of the call's request record).
LIVE_ONLY: frozenset[str] = frozenset({"model.delta", "request.built", "model.completed",
                                      "turn.waiting"})  # another process holds the session (S3)
ALL: frozenset[str] = STORED | LIVE_ONLY

Subscriber = Callable[[str, dict[str, Any]], None]


class EventStore(Protocol):
    """What `record` needs of a store (mxclaw_nb.store.writer.Store implements it)."""

    def append_event(self, session_id: str, type: str, payload: dict[str, Any], *, turn: int | None = None,
                     iteration: int | None = None) -> None: ...


def record(store: EventStore, emit: Subscriber, session_id: str, kind: str, payload: dict[str, Any], *,
           turn: int | None, iteration: int | None = None) -> None:
    """Publish one event: store it when it is a stored event, then pass it to the live subscribers."""
    if kind not in ALL:
        raise ValueError(f"undeclared event {kind!r}: declare it in mxclaw_nb/events.py (STORED or LIVE_ONLY)")
    if kind in STORED:
        store.append_event(session_id, kind, payload, turn=turn, iteration=iteration)
    emit(kind, {**payload, "turn": turn, "iteration": iteration})
