"""SPEC L1/L4, C7-C10, T3: one turn of the query loop.

The loop is glue between the pure engine and three adapters it only knows through small Protocols
(provider, store, tools), so tests can run it against the real DuckDB store and the real `openai`
client talking to the shipped test server. Its one rule is L4: everything is stored the moment it
happens — the user message before the first model call, then one commit per iteration (the request
record, the assistant message, its tool results and their events) before the next model call; an
interrupt or failure inside still writes what was done — so a kernel interrupt loses nothing already
done, a crash at most the iteration in flight, and the next turn's repair pass (C4) heals a
half-finished tool block. The request view is rebuilt before
every model call (C7) from the previous view plus what was appended, never by re-reading the store
inside a turn; at most one prompt-too-long retry per turn uses the fallback window (C9).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from mxclaw_nb import events
from mxclaw_nb.context import (
    ContextPolicy,
    RequestView,
    SharedPrefix,
    TokenCache,
    build_fallback_view,
    build_request_view,
    build_structured_summary,
    copied,
    shared_prefix,
    with_appended,
)
from mxclaw_nb.context.lineage import NextCall, first_call, next_call
from mxclaw_nb.events import Subscriber
from mxclaw_nb.messages import REFUSED_CALLS_KEY, Message, tool_call_name
from mxclaw_nb.records import RequestRecord, record_of_view
from mxclaw_nb.settings import Settings
from mxclaw_nb.summary_call import ask_summary  # C11: the summary call (replay's writer makes the same one)
from mxclaw_nb.tools.base import ToolContext, ToolResult  # data carriers; the registry is a Protocol below
from mxclaw_nb.truncation import suspected_cut  # T3: a report of a prompt the server cut

COMMIT_AFTER = 0.5  # L4: seconds an iteration's appends may wait for its one commit (Store.deferred)
STORED_EVENTS = events.STORED  # kept for callers of the old name; the declarations live in events.py


class StoreLike(Protocol):
    """What the loop needs from the store (mxclaw_nb.store.writer.Store implements it)."""

    def append_message(self, session_id: str, message: Message, *, turn: int, iteration: int | None = None) -> int: ...
    def append_event(self, session_id: str, type: str, payload: dict[str, Any], *, turn: int | None = None,
                     iteration: int | None = None) -> None: ...
    def append_request(self, session_id: str, record: RequestRecord) -> None: ...
    def load_transcript(self, session_id: str) -> list[Message]: ...
    def batch(self) -> Any: ...
    def deferred(self, commit_after: float | None = None) -> Any: ...


class ProviderLike(Protocol):
    """What the loop needs from a provider (mxclaw_nb.provider.client.OpenAIProvider implements it)."""

    model: str
    base_url: str

    def complete(self, messages: list[Message], tools: list[dict[str, Any]] | None,
                 on_delta: Callable[[str], None] | None = None) -> Any: ...


@runtime_checkable
class ClassifiedFailure(Protocol):
    """A failed model call the provider classified (ProviderError implements it): `kind` drives C9's retry."""

    kind: str


class ToolsLike(Protocol):
    """What the loop needs from the tools (mxclaw_nb.tools.ToolRegistry implements it)."""

    def schemas(self) -> list[dict[str, Any]]: ...
    def run(self, name: str, arguments: str, ctx: ToolContext) -> ToolResult: ...
    def finalize(self, result: ToolResult, ctx: ToolContext) -> ToolResult: ...


@dataclass
class TurnResult:
    """Outcome of one turn: final text, how it ended, and what happened on the way."""

    session_id: str
    turn: int
    text: str
    status: str  # "ok" | "max_iterations" | "failed" | "interrupted"
    iterations: int
    views: list[RequestView] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    retried: bool = False
    error: str | None = None
    partial: str = ""  # L4: the streamed text of an interrupted call, stored labelled partial

    def __repr__(self) -> str:
        return (f"TurnResult(session={self.session_id[:8]}, turn={self.turn}, status={self.status!r}, "
                f"iterations={self.iterations}, compactions={len(self.compactions)}, text={self.text[:60]!r})")


@dataclass
class TurnContext:
    """Everything one turn uses; built by `Agent` from its configuration."""

    store: StoreLike
    provider: ProviderLike
    tools: ToolsLike
    tool_context: ToolContext
    policy_for: Callable[[], ContextPolicy]  # re-read each iteration: the calibrated counter learns mid-turn
    on_usage: Callable[[list[Message], int | None], None]
    emit: Subscriber
    cache: TokenCache
    settings: Settings = field(default_factory=Settings)  # N1: the session's settings (a new one: read it here)
    summarize: Any = build_structured_summary  # pluggable (C6); if it raises, the view is the C8 fallback
    # the stored transcript when the caller keeps it across turns (Agent: read once, extended); None = load it
    transcript: list[Message] | None = None
    # C11: keeps a recorded model summary (the Agent puts it into its policy's strategy); None: no summary calls
    on_summary: Callable[[Any], None] | None = None
    # E2: the previous call's sent messages per session (context.prefix.PrefixState); the Agent keeps it across turns
    prefix: dict[str, Any] = field(default_factory=dict)
    # E4: a cache-aware strategy's previous call per session and its clock (cache_live.LiveCacheAware); None: plain
    cache_aware: Any = None
    # L2: (session, key) of the notes said once per session (`once` on a provider note); the Agent keeps it
    told: set[tuple[str, str]] = field(default_factory=set)


class TurnFailed(Exception):
    """A failure that ended the turn (provider, store, tool machinery); the message is one paragraph for the user.

    `user_seq` is the stored seq of the turn's user message (None when it could not be stored), `kind` the
    provider error kind or the exception type that ended the turn.
    """

    def __init__(self, message: str, *, kind: str = "error", user_seq: int | None = None) -> None:
        super().__init__(message)
        self.kind, self.user_seq = kind, user_seq


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def failure_reason(exc: BaseException, doing: str) -> str:
    """SPEC L7: one paragraph for an unexpected exception that ended a turn while `doing` something."""
    what = _one_line(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return (f"The turn stopped while {doing}: {what}. Everything stored before that is kept, and the next turn "
            "repairs any unfinished tool call; send another message to go on.")


def _emit(ctx: TurnContext, session_id: str, kind: str, payload: dict[str, Any], turn: int,
          iteration: int | None) -> None:
    events.record(ctx.store, ctx.emit, session_id, kind, payload, turn=turn, iteration=iteration)


def _request_record(view: RequestView, provider: ProviderLike, turn: int, iteration: int, *, usage: Any = None,
                    latency_ms: float | None = None, error: str | None = None, retry: bool = False,
                    engine_ms: float | None = None) -> RequestRecord:
    """The call's record (T3: estimate, calibrated count and reported usage, each labelled; N3: its lineage;
    E1: the reported cache figures; E2: the prefix shared with the previous call)."""
    return record_of_view(
        view, turn=turn, iteration=iteration, model=provider.model, base_url=provider.base_url, retry=retry,
        error=error, latency_ms=latency_ms, engine_ms=engine_ms,
        prompt_tokens_reported=getattr(usage, "prompt_tokens", None) if usage else None,
        completion_tokens_reported=getattr(usage, "completion_tokens", None) if usage else None,
        cached_tokens_reported=getattr(usage, "cached_tokens", None) if usage else None,
        cache_write_tokens_reported=getattr(usage, "cache_write_tokens", None) if usage else None,
        extra={"max_tokens": getattr(provider, "max_tokens", None),  # L2: the answer's bound, as sent
               **({"nothing_to_gain": view.no_gain} if view.no_gain else {})})


def _with_prefix(record: RequestRecord, shared: SharedPrefix | None) -> RequestRecord:
    """E2: the record with the prefix shared with the previous call and, where it broke, the tokens it broke."""
    if shared is None:
        return record
    extra = {**record.extra, "prefix_broken_tokens": shared.broken_tokens} if shared.broken_tokens else record.extra
    return replace(record, prefix_tokens=shared.tokens, extra=extra)


def _shared_prefix(ctx: TurnContext, session_id: str, view: RequestView, continued: bool) -> SharedPrefix | None:
    """E2: the prefix this call shares with the session's previous call (None: no previous call known here).
    `continued`: the view was built from the previous view's `next_input` (C7)."""
    state = ctx.prefix.get(session_id)
    tokens = view.trace.sent_tokens if view.trace is not None else ()
    if len(tokens) != len(view.messages):
        ctx.prefix.pop(session_id, None)
        return None
    extends = continued and view.stage == "unchanged" and not view.repaired
    shared, ctx.prefix[session_id] = shared_prefix(state, view.messages, tokens, view.counter, view.after_tokens,
                                                   extends=extends)
    return None if state is None else shared


@dataclass
class _Progress:
    """What the turn is doing (L7: the failure reason names it) and its user message's stored seq (None: not
    stored yet); the steps below update it as they go, so a failure anywhere is told in the same words."""

    doing: str = "loading the session's transcript"
    user_seq: int | None = None


def run_turn(ctx: TurnContext, session_id: str, user_message: Message, turn: int) -> TurnResult:
    """L1: store the user message, then model call -> store -> tools -> store until an answer.

    L7: the turn ends with a final answer, or with a stored `turn.failed` event and a `TurnFailed` whose text
    is one paragraph, whatever failed (provider, store, a tool's machinery, a subscriber); KeyboardInterrupt
    stays an interruption (`turn.interrupted`, re-raised).
    """
    result = TurnResult(session_id, turn, "", "ok", 0)
    progress = _Progress()
    try:
        nxt = _start_turn(ctx, session_id, user_message, turn, progress)
        while not _bound_reached(ctx, session_id, turn, result):
            result.iterations += 1
            following = _iteration(ctx, session_id, nxt, turn, result, progress)
            if following is None:  # answered without tool calls
                break
            nxt = following
        progress.doing = "finishing the turn"
        _finish_turn(ctx, session_id, turn, result)
    except KeyboardInterrupt:
        _interrupt_turn(ctx, session_id, turn, result)
        raise
    except TurnFailed as exc:
        reason = _fail(ctx, result, str(exc), exc.kind, progress.user_seq)
        raise TurnFailed(reason, kind=exc.kind, user_seq=progress.user_seq) from (exc.__cause__ or exc)
    except Exception as exc:  # L7: anything else ends the turn the same visible, stored way
        kind = type(exc).__name__
        reason = _fail(ctx, result, failure_reason(exc, progress.doing), kind, progress.user_seq)
        raise TurnFailed(reason, kind=kind, user_seq=progress.user_seq) from exc
    return result


def _start_turn(ctx: TurnContext, session_id: str, user_message: Message, turn: int, progress: _Progress
                ) -> NextCall:
    """L1 + L7: load the stored transcript (or take the one the Agent keeps), store the user message before any
    model call (L4), announce `turn.started`; returns the first call's input (C7 + N3)."""
    transcript = ctx.store.load_transcript(session_id) if ctx.transcript is None else ctx.transcript
    progress.doing = "storing your message"
    progress.user_seq = user_seq = ctx.store.append_message(session_id, user_message, turn=turn)
    progress.doing = "starting the turn"
    started = {"session_id": session_id, "prompt": user_message.get("content")}
    _emit(ctx, session_id, "turn.started", started, turn, None)
    view_input: list[Message] = with_appended(transcript, [user_message])  # C7: a lazy transcript not read
    # C7 + N3: the input, the stored seq of each input position, what the turn's calls did so far, and the
    # stored transcript by seq (live views rebuild their transcript-relative rows from it; None if seqs skip)
    return first_call(view_input, range(user_seq + 1), copied(view_input)) if user_seq == len(transcript) \
        else first_call(view_input, [*range(len(transcript)), user_seq], None)


def _bound_reached(ctx: TurnContext, session_id: str, turn: int, result: TurnResult) -> bool:
    """L1: the max-iterations bound, reported (`turn.max_iterations` and the turn's text), never silent."""
    if result.iterations < (limit := ctx.settings.max_iterations):
        return False
    result.status = "max_iterations"
    result.text = (f"Stopped after {limit} model calls without a final answer "
                   "(max-iterations bound). Everything so far is stored; send another message to go on.")
    _emit(ctx, session_id, "turn.max_iterations", {"limit": limit}, turn, result.iterations)
    return True


def _iteration(ctx: TurnContext, session_id: str, nxt: NextCall, turn: int, result: TurnResult,
               progress: _Progress) -> NextCall | None:
    """L1, one iteration: build the view and call the model (C0, C9: `_call_model`), store the record and the
    answer, then either end the turn (no tool calls: None) or run the tools and return the next call's input (C7).

    L4, S1: one commit per iteration (record, answer, tool results, events), written before the next model call;
    an interrupt or failure inside still writes what was done, and a slow tool or approval prompt does not keep
    the answer unstored: what is queued is committed after COMMIT_AFTER seconds.
    """
    it = result.iterations
    progress.doing = f"building the request view for model call {it}"
    with ctx.store.deferred(commit_after=COMMIT_AFTER):
        view, completion, record, nxt = _call_model(ctx, session_id, nxt, turn, it, result)
        progress.doing = f"storing the answer of model call {it}"
        assistant = dict(completion.message)
        assistant.setdefault("role", "assistant")
        ctx.store.append_request(session_id, record)
        new_seqs = [ctx.store.append_message(session_id, assistant, turn=turn, iteration=it)]
        calls = assistant.get("tool_calls") or []
        if not calls:
            _answered(ctx, session_id, view, nxt, assistant, new_seqs[-1], turn, result, progress)
            return None
        appended = [assistant]
        _run_tools(ctx, session_id, assistant, calls, turn, it, appended, new_seqs, progress)
        if ctx.cache_aware is not None:
            ctx.cache_aware.called(session_id, view, nxt.seqs, new_seqs[-1] + 1)
    progress.doing = f"preparing model call {it + 1}"
    return next_call(view, appended, new_seqs, nxt.seqs)


def _answered(ctx: TurnContext, session_id: str, view: RequestView, nxt: NextCall, assistant: Message,
              answer_seq: int, turn: int, result: TurnResult, progress: _Progress) -> None:
    """L1 + L7: an answer without tool calls ends the turn; `turn.finished` is stored with the answer, in the
    iteration's commit (subscribers hear it once committed, `_finish_turn`); E4: the next turn may keep this
    call's prefix."""
    result.text = assistant.get("content") or ""
    progress.doing = "finishing the turn"
    finished = {"text": result.text, "iterations": result.iterations, "status": result.status}
    ctx.store.append_event(session_id, "turn.finished", finished, turn=turn, iteration=result.iterations)
    if ctx.cache_aware is not None:
        ctx.cache_aware.called(session_id, view, nxt.seqs, answer_seq + 1)


def _run_tools(ctx: TurnContext, session_id: str, assistant: Message, calls: list[dict[str, Any]], turn: int,
               it: int, appended: list[Message], new_seqs: list[int], progress: _Progress) -> None:
    """L1, L3, A1: run the requested tools in order and store each result as it comes (L4), up to max_tool_calls;
    the calls past it are answered without running (C4 needs every call answered); L10: a call whose arguments
    were over the bound is answered as refused, never run. Appends each result and its seq to `appended` and
    `new_seqs` as it is stored."""
    bound = ctx.tool_context.max_tool_calls
    refused = assistant.get(REFUSED_CALLS_KEY) or {}
    for n, call in enumerate(calls[:bound], 1):
        progress.doing = f"running tool call {n} of {len(calls)} ({tool_call_name(call) or 'unknown'})"
        message, seq = _run_tool(ctx, session_id, call, turn, it, refused.get(str(call.get("id") or "")))
        appended.append(message)
        new_seqs.append(seq)
    if len(calls) > bound:
        progress.doing = f"answering the {len(calls) - bound} tool calls past max_tool_calls"
        skipped = _skip_tools(ctx, session_id, calls[bound:], len(calls), bound, turn, it)
        appended.extend(m for m, _ in skipped)
        new_seqs.extend(s for _, s in skipped)


def _finish_turn(ctx: TurnContext, session_id: str, turn: int, result: TurnResult) -> None:
    """L1 + L7: `turn.finished` to subscribers; stored here only after the max-iterations bound (an answer's was
    stored in its iteration's commit, so a subscriber reading the store finds all of the turn there)."""
    if result.status == "max_iterations":
        _emit(ctx, session_id, "turn.finished", {"text": result.text, "iterations": result.iterations,
                                                 "status": result.status}, turn, result.iterations)
    else:
        ctx.emit("turn.finished", {"text": result.text, "iterations": result.iterations, "status": result.status,
                                   "turn": turn, "iteration": result.iterations})


def _interrupt_turn(ctx: TurnContext, session_id: str, turn: int, result: TurnResult) -> None:
    """L4: a KeyboardInterrupt ends the turn as interrupted (`turn.interrupted`, with the length of what was
    streamed of a cut-short answer); the caller re-raises it."""
    result.status = "interrupted"
    interrupted: dict[str, Any] = {"iterations": result.iterations}
    if result.partial:
        interrupted["partial_chars"] = len(result.partial)
    _emit(ctx, session_id, "turn.interrupted", interrupted, turn, result.iterations)


def _fail(ctx: TurnContext, result: TurnResult, reason: str, kind: str, user_seq: int | None) -> str:
    """Store `turn.failed` (best effort: the store may be what failed) and tell subscribers; returns the reason."""
    if user_seq is None:
        reason += " Your message could not be stored."
    payload = {"error": reason, "kind": kind}
    try:
        ctx.store.append_event(result.session_id, "turn.failed", payload, turn=result.turn, iteration=result.iterations)
    except Exception as exc:
        reason += f" This failure could not be stored either ({_one_line(f'{type(exc).__name__}: {exc}', 200)})."
        payload["error"] = reason
    result.status, result.error = "failed", reason
    with contextlib.suppress(Exception):  # a failing subscriber must not hide the reason
        ctx.emit("turn.failed", {**payload, "turn": result.turn, "iteration": result.iterations})
    return reason


def _model_summary(ctx: TurnContext, session_id: str, nxt: NextCall, turn: int, it: int, view: RequestView
                   ) -> RequestView:
    """C11: ask the model for the planned summary; when it passes the gates, rebuild the view with it."""
    strategy = ctx.policy_for().strategy
    strategy = getattr(strategy, "inner", strategy)  # E4: `model-summary-cache` wraps the ModelSummary
    summary = ask_summary(ctx.provider, view.plan, float(getattr(strategy, "deadline", 60.0)),
                        lambda kind, payload: _emit(ctx, session_id, kind, payload, turn, it),
                        lambda rec: ctx.store.append_request(session_id, replace(rec, turn=turn, iteration=it)))
    if summary is None:
        return view  # the C6 stand-in stays (context.summary_rejected says why)
    assert ctx.on_summary is not None
    ctx.on_summary(summary)
    return _build_view(ctx, nxt, it)


def _build_view(ctx: TurnContext, nxt: NextCall, it: int, policy: ContextPolicy | None = None, cached: bool = True
                ) -> RequestView:
    """C0 + N3: call `it`'s view, with its lineage composed onto what the turn's earlier calls did."""
    return build_request_view(nxt.inputs, policy or ctx.policy_for(), ctx.summarize, cache=ctx.cache if cached
                              else None, seqs=nxt.seqs, previous=nxt.previous, transcript=nxt.transcript, call=it)


def _call_model(ctx: TurnContext, session_id: str, nxt: NextCall, turn: int, it: int, result: TurnResult,
                ) -> tuple[RequestView, Any, RequestRecord, NextCall]:
    """C0 + provider call, with the single C9 retry per turn; also returns what the view was built from (E4 may
    have chosen the continuation of the session's previous call)."""
    view, nxt, decision, engine_ms = _prepare_view(ctx, session_id, nxt, turn, it)
    retry = False
    while True:
        result.views.append(view)
        continued = (it > 1 or bool(decision and decision["continued"])) and not retry
        shared = _shared_prefix(ctx, session_id, view, continued)  # E2, before the call: no I/O
        _announce(ctx, session_id, view, turn, it, retry, shared, result)
        started = time.perf_counter()
        streamed: list[str] = []

        def on_delta(text: str, streamed: list[str] = streamed) -> None:
            streamed.append(text)
            ctx.emit("model.delta", {"text": text})

        try:
            completion = ctx.provider.complete(view.messages, ctx.tools.schemas(), on_delta=on_delta)
        except KeyboardInterrupt:
            _interrupted(ctx, session_id, view, turn, it, retry, engine_ms, "".join(streamed), result)
            raise
        except Exception as exc:
            latency = (time.perf_counter() - started) * 1000
            known = isinstance(exc, ClassifiedFailure) and isinstance(getattr(exc, "kind", None), str)
            reason = str(exc) if known else failure_reason(exc, f"calling the model (call {it})")
            note = _store_failed_request(ctx, session_id, _request_record(
                view, ctx.provider, turn, it, latency_ms=latency, error=reason, retry=retry, engine_ms=engine_ms))
            if known and exc.kind == "prompt_too_long" and not result.retried:
                result.retried = retry = True
                built = time.perf_counter()
                view = build_fallback_view(nxt.inputs, ctx.policy_for(), f"provider said: {exc}", seqs=nxt.seqs,
                                           previous=nxt.previous, transcript=nxt.transcript, call=it)
                engine_ms = (time.perf_counter() - built) * 1000
                continue
            raise TurnFailed(reason + note, kind=exc.kind if known else type(exc).__name__) from exc
        latency = getattr(completion, "latency_ms", None) or (time.perf_counter() - started) * 1000
        if ctx.cache_aware is not None:  # E4: the prefix was cached when the answer came, not after the tools ran
            ctx.cache_aware.answered(session_id)
        record = _completed(ctx, session_id, view, completion, turn, it, latency, retry, engine_ms, shared, decision)
        return view, completion, record, nxt


def _prepare_view(ctx: TurnContext, session_id: str, nxt: NextCall, turn: int, it: int
                  ) -> tuple[RequestView, NextCall, dict[str, Any] | None, float]:
    """C0 (with the C11 summary call and the E4 choice of a `-cache` strategy): the view, what it was built from,
    the E4 decision (None: a plain strategy) and the engine's time in ms (C10)."""
    built = time.perf_counter()
    view = _build_view(ctx, nxt, it)
    if view.plan is not None and ctx.on_summary is not None:  # C11: the engine planned a model summary
        view = _model_summary(ctx, session_id, nxt, turn, it, view)
    decision: dict[str, Any] | None = None
    if ctx.cache_aware is not None:  # E4: keep the warm prefix of the session's previous call?

        def build(n: NextCall, p: ContextPolicy, cached: bool) -> RequestView:
            return _build_view(ctx, n, it, p, cached)

        ttl = ctx.settings.cache_ttl_seconds
        if it == 1:  # the previous turn's last call, when this process made it
            view, nxt, decision = ctx.cache_aware.choose_first(session_id, nxt, view, ctx.policy_for(), build, ttl)
        else:  # inside a turn: the previous call of this turn
            view, decision = ctx.cache_aware.choose_next(session_id, nxt, view, ctx.policy_for(), build, ttl)
        # stored (with the record in any case): why a compaction was deferred, or made; inside a turn only when one
        # was in question (a view that compacts nothing has nothing to defer: no line per call)
        if decision is not None and decision["warm"] is not None and (it == 1 or decision["decision"] != "plain"):
            _emit(ctx, session_id, "context.cache_decision", {**decision, "session_id": session_id}, turn, it)
    engine_ms = (time.perf_counter() - built) * 1000  # C10: how long the engine took (kept with the record)
    if getattr(ctx.cache, "resume_note", None):  # C7: a saved engine state did not fit: rebuilt once, said so
        _emit(ctx, session_id, "context.state_rebuilt", {"reason": ctx.cache.resume_note, "session_id": session_id},
              turn, it)
        ctx.cache.resume_note = None
    return view, nxt, decision, engine_ms


def _announce(ctx: TurnContext, session_id: str, view: RequestView, turn: int, it: int, retry: bool, shared: Any,
              result: TurnResult) -> None:
    """C10: the events of a built view, before it is sent (request built; nothing to gain; the compaction, with
    what it did to the prefix cache, E3)."""
    _emit(ctx, session_id, "request.built", {"view": view, "retry": retry}, turn, it)
    event = view.event()
    if view.no_gain is not None:  # C5/C6: said, stored, and kept with the record; not shown as a compaction
        _emit(ctx, session_id, "context.nothing_to_gain", {
            **view.no_gain, "tokens_are": "estimates" if view.counter == "estimate" else view.counter,
            "threshold": view.threshold, "session_id": session_id}, turn, it)
    if event is not None:
        if retry:
            event["stage"] = "prompt_too_long_retry"
        if shared is not None:  # E3: what this compaction did to the prefix cache (est., in the policy's counter)
            event["cache_break_tokens"] = shared.broken_tokens
            event["prefix_tokens"] = shared.tokens
        event["session_id"] = session_id
        result.compactions.append(event)
        _emit(ctx, session_id, "context.compacted", event, turn, it)


def _interrupted(ctx: TurnContext, session_id: str, view: RequestView, turn: int, it: int, retry: bool,
                 engine_ms: float, partial: str, result: TurnResult) -> None:
    """L4: an interrupted call's record, and what was streamed of its answer (kept as an answer cut short)."""
    record = _request_record(view, ctx.provider, turn, it, error="interrupted", retry=retry, engine_ms=engine_ms)
    ctx.store.append_request(session_id, record)
    result.partial = partial
    if partial:  # L4: what the user saw streamed is kept, as what it is: an answer cut short
        # (text only, no tool calls: C4 holds for the next turn's view)
        ctx.store.append_message(session_id, {"role": "assistant", "content": partial, "partial": True},
                                 turn=turn, iteration=it)


def _completed(ctx: TurnContext, session_id: str, view: RequestView, completion: Any, turn: int, it: int,
               latency: float, retry: bool, engine_ms: float, shared: Any, decision: dict[str, Any] | None
               ) -> RequestRecord:
    """C10: the record of a call that answered (usage, the E2 prefix, the E4 decision), the calibration's usage
    report (T2), the adapter's notes (L2) and `model.completed`."""
    usage = getattr(completion, "usage", None)
    record = _with_prefix(_request_record(view, ctx.provider, turn, it, usage=usage, latency_ms=latency,
                                          retry=retry, engine_ms=engine_ms), shared)
    if decision is not None:  # E4: kept with the call's record, as replay keeps it with its row
        record = replace(record, extra={**record.extra, "cache_decision": decision})
    record = _learn_usage(ctx, session_id, view, usage, record, turn, it)
    record = _provider_notes(ctx, session_id, getattr(completion, "notes", None) or (), record, turn, it)
    ctx.emit("model.completed", {"usage": None if usage is None else {  # C10: ends the call with its record
        "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
        "cached_tokens": getattr(usage, "cached_tokens", None)}, "prefix_tokens": record.prefix_tokens,
        "latency_ms": latency, "record": record, "turn": turn, "iteration": it})
    return record


def _learn_usage(ctx: TurnContext, session_id: str, view: RequestView, usage: Any, record: RequestRecord,
                 turn: int, it: int) -> RequestRecord:
    """T3: the calibration learns from a report of the whole request; a report of a prompt the server cut (Ollama
    past num_ctx: `truncation.suspected_cut`) is kept as reported, never learned from, and said once per session."""
    reported = getattr(usage, "prompt_tokens", None) if usage else None
    cut = suspected_cut(view, reported)
    if cut is None:
        ctx.on_usage(view.messages, reported)
        return record
    if (session_id, "prompt_cut") not in ctx.told:
        ctx.told.add((session_id, "prompt_cut"))
        _emit(ctx, session_id, "provider.note", cut.payload(ctx.provider.base_url), turn, it)
    return replace(record, extra={**record.extra, "prompt_cut": {"reported": cut.reported, "least": cut.least}})


def _provider_notes(ctx: TurnContext, session_id: str, notes: Any, record: RequestRecord, turn: int, it: int
                    ) -> RequestRecord:
    """L2: the adapter's own account of a server quirk, each a stored `provider.note` (one marked `once`: once per
    session); the record of every call keeps what was reshaped in what it sent (C10, `provider/shape.py`)."""
    for note in notes:
        payload = dict(note) if isinstance(note, dict) else {"note": note}
        if payload.get("sent_shaped"):
            record = replace(record, extra={**record.extra, "sent_shaped": payload["sent_shaped"]})
        once = payload.pop("once", None)
        if once is not None:
            if (session_id, once) in ctx.told:
                continue
            ctx.told.add((session_id, once))
        _emit(ctx, session_id, "provider.note", payload, turn, it)
    return record


def _skip_tools(ctx: TurnContext, session_id: str, calls: list[dict[str, Any]], asked: int, bound: int, turn: int,
                it: int) -> list[tuple[Message, int]]:
    """Failure results for the tool calls past the per-response bound, stored in one commit."""
    text = (f"Tool failed: not run: the response asked for {asked} tool calls and at most {bound} are run per "
            "model response (max_tool_calls). Ask for the remaining calls again.")
    messages: list[Message] = [{"role": "tool", "tool_call_id": str(c.get("id") or ""), "content": text,
                                "is_error": True} for c in calls]
    seqs = ctx.store.append_messages(session_id, messages, turn=turn, iteration=it)  # one transaction
    _emit(ctx, session_id, "tool.skipped", {"count": len(calls), "asked": asked, "bound": bound}, turn, it)
    return list(zip(messages, seqs, strict=True))


def _store_failed_request(ctx: TurnContext, session_id: str, record: RequestRecord) -> str:
    """Store a failed call's request record (with `error`); '' or a note when the store refused it."""
    try:
        ctx.store.append_request(session_id, record)
    except Exception as exc:
        return f" Its request record could not be stored ({_one_line(f'{type(exc).__name__}: {exc}', 200)})."
    return ""


def _run_tool(ctx: TurnContext, session_id: str, call: dict[str, Any], turn: int, it: int,
              refused: str | None = None) -> tuple[Message, int]:
    name = tool_call_name(call) or "unknown"
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    arguments = fn.get("arguments", "")
    call_id = str(call.get("id") or "")
    _emit(ctx, session_id, "tool.started", {"call_id": call_id, "name": name, "arguments": arguments}, turn, it)
    result = (ToolResult(refused, is_error=True) if refused else  # L10: over max_tool_args_bytes, never run
              ctx.tools.finalize(ctx.tools.run(name, arguments, ctx.tool_context), ctx.tool_context))
    message: Message = {"role": "tool", "tool_call_id": call_id, "content": result.content}
    if result.is_error:
        message["is_error"] = True
    if isinstance(result.meta.get("facts"), dict):  # K2/K3: recorded facts, stored, never sent (client strips)
        message["facts"] = result.meta["facts"]
    finished = {"call_id": call_id, "name": name, "is_error": result.is_error, "content": result.content[:2_000],
                "chars": len(result.content), "artifact_id": result.meta.get("artifact_id"),
                "exit_code": result.meta.get("exit_code")}
    with ctx.store.deferred():  # the result and its event are written together (joins the iteration's block)
        seq = ctx.store.append_message(session_id, message, turn=turn, iteration=it)
        _emit(ctx, session_id, "tool.finished", finished, turn, it)
    return message, seq
