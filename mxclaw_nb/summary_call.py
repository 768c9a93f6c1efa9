"""SPEC C11: the recorded model summaries of a stored session (re-entry and replay reuse them, never ask again).

The loop (`loop._model_summary`) asks the model and stores each accepted summary as a `context.summary` event
(source, coverage, invalidation, merge, text, usage); this reads them back as `RecordedSummary` values for
`ModelSummary(summaries=...)`.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.context.model_summary import SUMMARY_EVENT, RecordedSummary, recorded


def recorded_from_store(store: Any, session_id: str) -> tuple[RecordedSummary, ...]:
    """The session's recorded model summaries (from its `context.summary` events), oldest first."""
    import json

    df = store.events(session_id, type=SUMMARY_EVENT)
    payloads = [json.loads(p) if isinstance(p, str) else p for p in df["payload"]] if len(df) else []
    return recorded(payloads)
