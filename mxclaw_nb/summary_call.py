"""SPEC C11: the loop's half of a model-written summary: ask the model, apply the gates, record the result.

The engine (`context.model_summary`) planned the summary (coverage, C6 scaffold, previous summary) and sent the C6
stand-in; here the session's provider is called with `summary_prompt(plan)` (no tools), the deadline and the
gates are checked, and the outcome is stored as an event: `context.summary` with the four records the article
asks for (source, coverage, invalidation, merge) plus the text and usage, or `context.summary_rejected` with the
reason (the view then keeps the C6 text). A recorded summary is reused for the same coverage by every later
build, re-entry and replay (`recorded_from_store`), so it is asked for once.
"""

from __future__ import annotations

import time
from typing import Any

from mxclaw_nb.context.model_summary import (
    PROMPT_VERSION,
    RecordedSummary,
    SummaryPlan,
    compose,
    gate,
    recorded,
    summary_prompt,
)
from mxclaw_nb.messages import content_text

SUMMARY_EVENT, REJECTED_EVENT = "context.summary", "context.summary_rejected"


def ask_model(provider: Any, plan: SummaryPlan, deadline: float,
              record: Any) -> RecordedSummary | None:
    """One summary call. `record(kind, payload)` stores an event. Returns the summary when every gate passed."""
    coverage = [plan.start, plan.stop]
    source = {"model": getattr(provider, "model", None), "endpoint": getattr(provider, "base_url", None),
              "prompt_version": PROMPT_VERSION}
    started = time.perf_counter()
    try:
        completion = provider.complete(summary_prompt(plan), None)
    except Exception as exc:  # noqa: BLE001 - any failure: C6 stands in, and the reason is stored
        record(REJECTED_EVENT, {"reason": f"the model call failed: {type(exc).__name__}: {exc}", "coverage": coverage,
                                "source": source})
        return None
    seconds = time.perf_counter() - started
    usage = getattr(completion, "usage", None)
    used = None if usage is None else {"prompt_tokens": usage.prompt_tokens,
                                       "completion_tokens": usage.completion_tokens}
    text = compose(content_text((getattr(completion, "message", None) or {}).get("content")))
    reason = (f"passed its deadline ({seconds:.2f} s > {deadline:g} s)" if seconds > deadline else gate(plan, text))
    if reason is not None:
        record(REJECTED_EVENT, {"reason": reason, "coverage": coverage, "source": source, "usage": used,
                                "latency_ms": round(seconds * 1000, 1), "chars": len(text)})
        return None
    merge = None if plan.previous is None else {"extends": [plan.previous.start, plan.previous.stop]}
    record(SUMMARY_EVENT, {
        "text": text, "coverage": coverage, "source": source, "merge": merge, "usage": used,
        "latency_ms": round(seconds * 1000, 1),
        "invalidation": f"valid only for seqs #{plan.start}-#{plan.stop}, model {source['model']} and prompt "
                        f"{PROMPT_VERSION}", "free_form": plan.free_form})
    return RecordedSummary(plan.start, plan.stop, text,
                           f"{source['model']}@{source['endpoint']}/{PROMPT_VERSION}")


def recorded_from_store(store: Any, session_id: str) -> tuple[RecordedSummary, ...]:
    """The session's recorded model summaries (from its `context.summary` events), oldest first."""
    import json

    df = store.events(session_id, type=SUMMARY_EVENT)
    payloads = [json.loads(p) if isinstance(p, str) else p for p in df["payload"]] if len(df) else []
    return recorded(payloads)
