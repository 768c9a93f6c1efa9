"""Event names, which of them are stored, and the one path every event takes (SPEC C10, L4, S1).

Why one module: the loop's events (turn, model call, compaction) and the tools' events (approval, skipped
call, artifact fallback) used to take two paths with two storage rules. Every event is now declared
here once, and `record` is how the loop and the tools both publish one: a stored event is appended to
the store first (so what a subscriber shows is already kept, L4), then every event goes to the live
subscribers. Publishing a name that is not declared is a programming error and raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mxclaw_nb.records import RequestRecord

# Appended to the `events` table as they happen.
STORED: frozenset[str] = frozenset({
    "turn.started", "turn.finished", "turn.failed", "turn.interrupted", "turn.max_iterations",  # L1, L7
    "tool.started", "tool.finished", "tool.skipped",  # L3
    "approval.decided",  # L5: who allowed or denied a command
    "artifact.fallback",  # A3: an artifact could not be written
    "context.compacted",  # C10
    "context.cache_decision",  # E4: a cache-aware strategy kept a warm prefix (deferred) or compacted, and why
    "context.nothing_to_gain",  # C5/C6: a compaction tried and not applied: it would not have shrunk the view
    "context.summary", "context.summary_rejected",  # C11: a recorded model summary, or why one was rejected
    "context.state_rebuilt",  # C7: a saved engine state did not fit the stored rows: rebuilt from them, once
    "provider.note",  # L2: what the adapter did about this server (e.g. stream_options refused: asked again without)
    "frozen.note",  # L9: a project file of the frozen context refused (a link out, a FIFO, a device, ...)
    "harness.compaction",  # S4: a compaction another harness (Claude Code, Codex) made, imported from its log
})
# Shown live only: the streamed text, and what the `requests` table already keeps (the request view and
# the provider's usage are part of the call's request record).
LIVE_ONLY: frozenset[str] = frozenset({"model.delta", "request.built", "model.completed",
                                      "turn.waiting",  # another process holds the session (S3)
                                      "approval.pending"})  # N6: a command waits for a person's answer
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


# -- typed events (SPEC C10, N2): one frozen dataclass per event the live turn model reads ------------------------
# The loop and the tools publish dicts (stored as JSON); `parse` turns one into its typed event, so the live
# renderers (text, HTML, widgets) share one reading of every field instead of each picking keys out of dicts.


@dataclass(frozen=True)
class Event:
    """Common to every event: the turn and model call it belongs to (None outside one)."""

    turn: int | None = None
    iteration: int | None = None


@dataclass(frozen=True)
class TurnStarted(Event):
    session_id: str | None = None
    prompt: Any = None
    model_label: str = ""
    sandbox_warning: str = ""  # L5: said once per agent when the shell runs unconfined


@dataclass(frozen=True)
class TurnWaiting(Event):
    session_id: str | None = None
    holder: str = ""


@dataclass(frozen=True)
class RequestBuilt(Event):
    view: Any = None  # the RequestView (context.view), live only
    retry: bool = False
    counter_tokens: int | None = None


@dataclass(frozen=True)
class ModelDelta(Event):
    text: str = ""


@dataclass(frozen=True)
class ModelCompleted(Event):
    usage: dict[str, Any] | None = None
    latency_ms: float | None = None
    record: RequestRecord | None = None  # the call's request record exactly as stored (C10)


@dataclass(frozen=True)
class ContextCompacted(Event):
    stage: str = "?"
    before_tokens: int | None = None
    after_tokens: int | None = None
    tokens_are: str = "estimate"
    summary: str = ""


@dataclass(frozen=True)
class ContextSummary(Event):
    """C11: a model-written summary recorded (source, coverage, invalidation, merge, text, usage)."""

    text: str = ""
    coverage: Any = None
    source: Any = None
    merge: Any = None
    invalidation: str = ""
    usage: Any = None
    latency_ms: Any = None


@dataclass(frozen=True)
class ContextSummaryRejected(Event):
    """C11: why a model summary was not used (the C6 summary stands in)."""

    reason: str = ""
    coverage: Any = None
    source: Any = None
    usage: Any = None
    latency_ms: Any = None  # the summary call's, when it answered (C11: shown in the live log)


@dataclass(frozen=True)
class ProviderNote(Event):
    note: str = ""
    shown: bool = True  # L2: False for a repeat the live log does not say again (e.g. another text-written call)
    warning: bool = False  # T3, L2: something the user should act on (a prompt the server probably cut)


@dataclass(frozen=True)
class ContextNothingToGain(Event):
    """C5/C6: a compaction tried and not applied, because it would not have made the view smaller."""

    stage: str = "?"
    before_tokens: int | None = None
    after_tokens: int | None = None
    tokens_are: str = "estimates"


@dataclass(frozen=True)
class ContextCacheDecision(Event):
    """E4: at a call (a turn's first, or one inside a turn where a compaction was in question), a cache-aware
    strategy (`<name>-cache`) sent the continuation of the previous call (`deferred`: its cached prefix kept) or
    its own view (`compacted`, `plain`, `idle`), and why."""

    decision: str = "plain"
    strategy: str = ""
    warm: bool = False
    why: str = ""
    freed: int | None = None
    clear_at_least: int | None = None
    idle_seconds: float | None = None
    ttl_seconds: float | None = None
    plain_stage: str = ""
    plain_tokens: int | None = None
    sent_tokens: int | None = None

    def text(self) -> str:
        """One line for the live log and `%agent events`: what was sent and why (E4)."""
        name, plain = self.strategy or "cache-aware strategy", (self.strategy or "").removesuffix("-cache")
        ago = "" if self.idle_seconds is None else f"previous call {self.idle_seconds:,.0f} s ago, "
        ttl = "" if self.ttl_seconds is None else f"{self.ttl_seconds:,.0f} s"
        freed = f"{self.freed:,}" if self.freed is not None else "?"
        if self.decision == "deferred":
            bar = (f"under clear_at_least {self.clear_at_least:,}" if self.clear_at_least
                   else "only the threshold breaks a warm prefix (clear_at_least 0)")
            return (f"{name}: kept the warm cached prefix ({ago}within the {ttl} cache time to live); {plain} "
                    f"would have rewritten it ({self.plain_stage}) to free {freed} tokens, {bar}; sent the "
                    f"continuation of the previous call ({self.sent_tokens or 0:,} tokens)")
        if self.decision == "compacted":
            why = ("the threshold required it" if self.why.startswith("threshold")
                   else f"it frees {freed} tokens, at least clear_at_least {self.clear_at_least or 0:,}")
            return f"{name}: broke the warm cached prefix ({ago}within {ttl}): {why}"
        if self.decision == "idle":
            return f"{name}: cache cold ({ago}past {ttl}): compacted early (idle_ratio), freeing {freed} tokens"
        if self.why == "keeps the prefix":
            return f"{name}: {plain}'s own view extends the previous call's, so its cached prefix is kept ({ago[:-2]})"
        if not self.warm:
            return f"{name}: cache cold ({ago}past the {ttl} cache time to live): sent {plain}'s own view"
        return f"{name}: sent {plain}'s own view ({ago}within {ttl})"


@dataclass(frozen=True)
class ToolStarted(Event):
    call_id: str = ""
    name: str = "?"
    arguments: Any = ""


@dataclass(frozen=True)
class ToolFinished(Event):
    call_id: str = ""
    name: str = "?"
    is_error: bool = False
    content: str = ""
    chars: int | None = None
    artifact_id: str | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class ToolSkipped(Event):
    count: int = 0
    asked: int = 0
    bound: int = 0


@dataclass(frozen=True)
class ApprovalPending(Event):
    command: str = ""
    kind: str = "shell"  # L5: "shell" | "python"
    timeout: float | None = None


@dataclass(frozen=True)
class ApprovalDecided(Event):
    command: str = ""
    decision: str = "deny"
    by: str = "?"


@dataclass(frozen=True)
class FrozenNote(Event):
    note: str = ""


@dataclass(frozen=True)
class ArtifactFallback(Event):
    reason: str = ""


@dataclass(frozen=True)
class TurnFinished(Event):
    text: str = ""
    iterations: int | None = None
    status: str = "ok"


@dataclass(frozen=True)
class TurnFailed(Event):
    error: str = "unknown error"
    kind: str = ""


@dataclass(frozen=True)
class TurnInterrupted(Event):
    iterations: int | None = None
    partial_chars: int | None = None  # L4: chars of a streamed answer stored as partial


@dataclass(frozen=True)
class TurnMaxIterations(Event):
    limit: int | None = None


@dataclass(frozen=True)
class ContextStateRebuilt(Event):
    """C7: the engine state saved by an earlier process did not fit (reason); it was rebuilt from the rows."""

    reason: str = ""
    session_id: str | None = None


@dataclass(frozen=True)
class HarnessCompaction(Event):
    stage: str = ""


TYPES: dict[str, type[Event]] = {
    "turn.started": TurnStarted, "turn.waiting": TurnWaiting, "request.built": RequestBuilt,
    "model.delta": ModelDelta, "model.completed": ModelCompleted, "context.compacted": ContextCompacted,
    "context.summary": ContextSummary, "context.summary_rejected": ContextSummaryRejected,
    "provider.note": ProviderNote, "frozen.note": FrozenNote,
    "context.nothing_to_gain": ContextNothingToGain, "context.cache_decision": ContextCacheDecision,
    "tool.started": ToolStarted,
    "tool.finished": ToolFinished,
    "tool.skipped": ToolSkipped, "approval.pending": ApprovalPending, "approval.decided": ApprovalDecided,
    "artifact.fallback": ArtifactFallback, "turn.finished": TurnFinished, "turn.failed": TurnFailed,
    "turn.interrupted": TurnInterrupted, "turn.max_iterations": TurnMaxIterations,
    "harness.compaction": HarnessCompaction, "context.state_rebuilt": ContextStateRebuilt,
}
_FIELDS: dict[type[Event], dict[str, Any]] = {cls: {f.name: f.type for f in fields(cls)} for cls in TYPES.values()}


def _coerce(name: str, value: Any, default: Any) -> Any:
    """A payload value as its field expects it: ints from JSON floats/strings, text from anything, None kept."""
    if value is None:
        return default if name not in _OPTIONAL else None
    if isinstance(default, bool):
        return bool(value)
    if name in _INTS:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    if isinstance(default, str) and not isinstance(value, str):
        return str(value)
    return value


_INTS = frozenset({"turn", "iteration", "before_tokens", "after_tokens", "chars", "exit_code", "iterations",
                   "limit", "count", "asked", "bound", "counter_tokens", "partial_chars", "freed", "clear_at_least",
                   "plain_tokens", "sent_tokens"})
_OPTIONAL = frozenset({"turn", "iteration", "before_tokens", "after_tokens", "chars", "exit_code", "iterations",
                       "limit", "counter_tokens", "partial_chars", "artifact_id", "usage", "latency_ms", "record",
                       "session_id", "prompt", "view", "timeout", "freed", "clear_at_least", "idle_seconds",
                       "ttl_seconds", "plain_tokens", "sent_tokens"})


def parse(kind: str, payload: dict[str, Any] | None) -> Event:
    """The typed event of one published (kind, payload); unknown keys are dropped, missing ones defaulted.

    An undeclared kind raises ValueError, as `record` does."""
    cls = TYPES.get(kind)
    if cls is None:
        raise ValueError(f"undeclared event {kind!r}: declare it in mxclaw_nb/events.py (STORED or LIVE_ONLY)")
    p = payload or {}
    defaults = {f.name: f.default for f in fields(cls)}
    return cls(**{name: _coerce(name, p[name], defaults[name]) for name in _FIELDS[cls] if name in p})
