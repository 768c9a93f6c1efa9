"""SPEC C11: the summary call (the loop's half of a model-written summary), the recorded summaries of a stored
session, and the summary writer that lets `replay`/`compare` make the same calls.

The engine plans a summary (`SummaryPlan`); `ask_summary` makes the call through a provider adapter, checks the gates
(deadline, must shrink, keep C6's facts) and reports the outcome as the `context.summary` or
`context.summary_rejected` payload plus the call's request record (`purpose = 'summary'`). The loop
(`loop._model_summary`) stores both and rebuilds the view; `recorded_from_store` reads the accepted ones back as
`RecordedSummary` values for `ModelSummary(summaries=...)` (re-entry and replay reuse them, never ask again).
`ModelSummarizer` is the replay's writer: the same `ask_summary` through the same provider, each outcome kept per
(session, coverage, prompt) so a second replay or another policy with the same request asks nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mxclaw_nb.context import model_summary as c11
from mxclaw_nb.context.model_summary import SUMMARY_EVENT, RecordedSummary, recorded
from mxclaw_nb.context.tokens import estimate_messages, estimate_text
from mxclaw_nb.messages import content_text
from mxclaw_nb.records import SUMMARY_CALL, RequestRecord

# C11 `summary_source` of a replayed call whose summary a `ModelSummarizer` asked a model for (see replay's columns)
MODEL = "model"  # accepted; the call was made now
MODEL_REUSED = "model (reused)"  # accepted earlier for the same (session, coverage, prompt): no call made
REJECTED = "C6 (model summary rejected)"  # the call was made; a gate rejected it (or it failed): C6 stands in
REJECTED_REUSED = "C6 (rejection reused)"  # rejected earlier for the same request: no call made, C6 stands in
WRITER_SOURCES = (MODEL, MODEL_REUSED, REJECTED, REJECTED_REUSED)


def recorded_from_store(store: Any, session_id: str) -> tuple[RecordedSummary, ...]:
    """The session's recorded model summaries (from its `context.summary` events), oldest first."""
    df = store.events(session_id, type=SUMMARY_EVENT)
    payloads = [json.loads(p) if isinstance(p, str) else p for p in df["payload"]] if len(df) else []
    return recorded(payloads)


def ask_summary(provider: Any, plan: c11.SummaryPlan, deadline: float, record: Any,
                store_call: Callable[[RequestRecord], None] | None = None) -> c11.RecordedSummary | None:
    """C11, the loop's half: one summary call through the session's provider (no tools), its deadline and the
    engine's gates; the outcome stored as `context.summary` (source, coverage, invalidation, merge, text, usage) or
    `context.summary_rejected` (the reason; the view keeps the C6 text). `record(kind, payload)` stores an event;
    `store_call(rec)` stores the call's request record (`purpose='summary'`: a model call like any other, with its
    usage and latency, for the timeline and the cost). Returns the summary when every gate passed."""
    coverage = [plan.start, plan.stop]
    source = {"model": getattr(provider, "model", None), "endpoint": getattr(provider, "base_url", None),
              "prompt_version": c11.PROMPT_VERSION}
    prompt = c11.summary_prompt(plan)

    def call_record(usage: Any = None, latency_ms: float | None = None, error: str | None = None,
                    outcome: str = "accepted") -> None:
        if store_call is None:
            return
        sent = estimate_messages(prompt)
        store_call(RequestRecord(
            model=source["model"], base_url=source["endpoint"], estimate_tokens=sent, before_tokens=sent,
            after_tokens=sent, prompt_tokens_reported=getattr(usage, "prompt_tokens", None) if usage else None,
            completion_tokens_reported=getattr(usage, "completion_tokens", None) if usage else None,
            cached_tokens_reported=getattr(usage, "cached_tokens", None) if usage else None,
            latency_ms=latency_ms, error=error, purpose=SUMMARY_CALL,
            extra={"coverage": coverage, "outcome": outcome}))

    started = time.perf_counter()
    try:
        completion = provider.complete(prompt, None)
    except Exception as exc:  # noqa: BLE001 - any failure: C6 stands in, and the reason is stored
        reason = f"the model call failed: {type(exc).__name__}: {exc}"
        call_record(latency_ms=(time.perf_counter() - started) * 1000, error=reason, outcome="failed")
        record(c11.REJECTED_EVENT, {"reason": reason, "coverage": coverage, "source": source})
        return None
    seconds = time.perf_counter() - started
    usage = getattr(completion, "usage", None)
    used = None if usage is None else {"prompt_tokens": usage.prompt_tokens,
                                       "completion_tokens": usage.completion_tokens}
    text = c11.compose(content_text((getattr(completion, "message", None) or {}).get("content")))
    cut = getattr(completion, "finish_reason", None) == "length"  # L7: the text ends where the output limit hit
    reason = (f"passed its deadline ({seconds:.2f} s > {deadline:g} s)" if seconds > deadline
              else "it stopped at the model's output limit (finish_reason 'length'): a cut summary is not used"
              if cut else c11.gate(plan, text))
    call_record(usage, round(seconds * 1000, 1), outcome="accepted" if reason is None else "rejected")
    if reason is not None:
        record(c11.REJECTED_EVENT, {"reason": reason, "coverage": coverage, "source": source, "usage": used,
                                    "latency_ms": round(seconds * 1000, 1), "chars": len(text)})
        return None
    merge = None if plan.previous is None else {"extends": [plan.previous.start, plan.previous.stop]}
    record(c11.SUMMARY_EVENT, {
        "text": text, "coverage": coverage, "source": source, "merge": merge, "usage": used,
        "latency_ms": round(seconds * 1000, 1),
        "invalidation": f"valid only for seqs #{plan.start}-#{plan.stop}, model {source['model']} and prompt "
                        f"{c11.PROMPT_VERSION}", "free_form": plan.free_form})
    return c11.RecordedSummary(plan.start, plan.stop, text,
                               f"{source['model']}@{source['endpoint']}/{c11.PROMPT_VERSION}")


@dataclass(frozen=True)
class Written:
    """What one replayed call's summary request came to (C11): the accepted summary or None (C6 stands in), the
    model calls made for it now (0 when reused), their tokens and where the summary came from."""

    summary: RecordedSummary | None
    calls: int
    tokens: int  # prompt + completion tokens of the call: reported by the server, else the C1 estimate; 0 if reused
    source: str  # one of WRITER_SOURCES
    reason: str | None = None  # why it was rejected

    def columns(self) -> dict[str, Any]:
        """The C11 columns of a replay row."""
        return {"summary_calls": self.calls, "summary_call_tokens": self.tokens, "summary_source": self.source}


@dataclass
class ModelSummarizer:
    """A summary writer for `replay`/`compare` (C11): the live loop's summary call (`ask_summary`: the engine's
    prompt, the same provider adapter, deadline and gates) made for each summary a replay plans, so the
    `model-summary` rows say what a model really wrote instead of the C6 stand-in.

    Each outcome, accepted or rejected, is kept per (session, coverage, prompt digest): the same request again (a
    second replay, another policy reaching the same point) is answered from here and counted as reused, not made.
    `log` has one dict per summary request (made or reused) for a table: session, coverage, outcome, calls,
    tokens (and whether the server reported them), latency, rejection reason."""

    provider: Any  # anything with `complete(messages, tools)` returning a Completion (e.g. an OpenAIProvider)
    deadline: float | None = None  # seconds; None: the strategy's own `deadline`
    log: list[dict[str, Any]] = field(default_factory=list)
    _done: dict[tuple[str, int, int, str], Written] = field(default_factory=dict, repr=False)

    @property
    def calls_made(self) -> int:
        """Summary calls sent to the provider so far."""
        return sum(e["calls"] for e in self.log)

    @property
    def calls_reused(self) -> int:
        """Summary requests answered from an earlier outcome (no call made)."""
        return sum(1 for e in self.log if e["source"] in (MODEL_REUSED, REJECTED_REUSED))

    def write(self, session_id: str, plan: c11.SummaryPlan, deadline: float = 60.0) -> Written:
        """The summary for `plan` in session `session_id`: asked once, then reused."""
        prompt = c11.summary_prompt(plan)
        digest = hashlib.sha256(json.dumps(prompt, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
        key = (session_id, plan.start, plan.stop, digest)
        entry: dict[str, Any] = {"session_id": session_id, "coverage": f"#{plan.start}-#{plan.stop}",
                                 "merged": plan.previous is not None}
        hit = self._done.get(key)
        if hit is not None:
            out = Written(hit.summary, 0, 0, MODEL_REUSED if hit.summary is not None else REJECTED_REUSED, hit.reason)
            self.log.append({**entry, "source": out.source, "calls": 0, "tokens": 0, "tokens_are": None,
                             "latency_ms": None, "reason": out.reason})
            return out
        events: list[tuple[str, dict[str, Any]]] = []
        records: list[RequestRecord] = []
        started = time.perf_counter()
        summary = ask_summary(self.provider, plan, deadline if self.deadline is None else self.deadline,
                              lambda kind, payload: events.append((kind, payload)), records.append)
        latency = round((time.perf_counter() - started) * 1000, 1)
        payload = events[-1][1] if events else {}
        rec = records[-1] if records else None
        reported = (rec.prompt_tokens_reported, rec.completion_tokens_reported) if rec is not None else (None, None)
        if reported[0] is not None and reported[1] is not None:
            tokens, tokens_are = int(reported[0]) + int(reported[1]), "reported"
        else:  # the server reported no usage: the C1 estimate of the request and of the answer
            answer = estimate_text(payload["text"]) if "text" in payload else -(-int(payload.get("chars") or 0) // 4)
            tokens, tokens_are = estimate_messages(prompt) + answer, "est. (C1)"
        reason = payload.get("reason") if summary is None else None
        out = Written(summary, 1, tokens, MODEL if summary is not None else REJECTED, reason)
        self._done[key] = out
        self.log.append({**entry, "source": out.source, "calls": 1, "tokens": tokens, "tokens_are": tokens_are,
                         "latency_ms": latency, "reason": reason})
        return out


def as_writer(summary_provider: Any) -> ModelSummarizer | None:
    """`replay`/`compare`'s `summary_provider=`: None, a `ModelSummarizer`, or a provider to build one from."""
    if summary_provider is None or isinstance(summary_provider, ModelSummarizer):
        return summary_provider
    if callable(getattr(summary_provider, "complete", None)):
        return ModelSummarizer(summary_provider)
    raise TypeError("summary_provider must be a provider with complete(messages, tools) (e.g. an OpenAIProvider) "
                    f"or a ModelSummarizer, got a {type(summary_provider).__name__}")
