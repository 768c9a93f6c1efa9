"""SPEC C7, T3, N2: re-entry into a stored session without rescanning what the engine already built.

A notebook restarts its kernel all the time; a fresh process used to rebuild the C6 summary state from the whole
old part of the transcript on its first compacting call. The process that built it saves it instead (plain JSON
in the store's `engine_state` table, one row per session, replaced after every turn; SPEC S1: the transcript
itself is never rewritten), keyed by the stored rows it was made from (their count and a fingerprint of the last
one) and by the engine's version. A fresh Agent checks it against the stored rows and hands it to the engine
(`TokenCache.resume_summary`), which checks it once more against the old messages themselves and continues it
with the messages stored after it. The C4 repair plan and C1 counts of the stored rows are saved beside it
(`plan_snapshot`, clean plans only) and seed the first build (`TokenCache.resume_plan`): the fresh process plans
and counts only the rows stored after them, and sanitises only the steps it sends (`repair.SentForms`). Anything
that does not fit (another engine version, other rows, malformed data: a database may come from someone else) is
dropped and the state rebuilt once from the rows, and the first
model call says so in a stored `context.state_rebuilt` event: never a wrong view.

Glue only: the engine stays pure (it exposes the snapshot and the resume entry point), the store does the I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from mxclaw_nb.context import TokenCache
from mxclaw_nb.context.incremental import plan_snapshot, summary_snapshot
from mxclaw_nb.context.summary import SUMMARY_STATE_VERSION, fingerprint
from mxclaw_nb.messages import Message
from mxclaw_nb.version import __version__

# what the saved state is checked against (bumped with the engine's state), besides the package version
ENGINE_STATE_VERSION = SUMMARY_STATE_VERSION
REBUILT_EVENT = "context.state_rebuilt"


def resume(store: Any, session_id: str, cache: TokenCache, stored: Sequence[Message]) -> None:
    """Hand the session's saved engine state to `cache` when it fits the stored rows (else note why not)."""
    load = getattr(store, "load_engine_state", None)
    if load is None or not stored:
        return
    try:
        saved = load(session_id)
    except Exception as exc:  # noqa: BLE001 - an unreadable state is rebuilt, never fatal
        cache.resume_note = f"the saved engine state could not be read ({type(exc).__name__}: {exc})"
        return
    if saved is None:
        return
    version, rows, boundary, state = saved
    if version != ENGINE_STATE_VERSION:
        cache.resume_note = (f"the saved engine state is of engine version {version}, this engine's is "
                             f"{ENGINE_STATE_VERSION}")
    elif not 0 < rows <= len(stored) or fingerprint(stored[rows - 1]) != boundary:
        cache.resume_note = (f"the saved engine state was made from {rows} stored messages that do not match "
                             f"the {len(stored)} stored now")
    elif not isinstance(state, dict) or not any(isinstance(state.get(k), dict) for k in ("summary", "plan")):
        cache.resume_note = "the saved engine state is malformed"
    elif state.get("package") != __version__:  # the engine may have changed without a state version bump
        cache.resume_note = (f"the saved engine state was saved by mxclaw_nb {state.get('package')}, "
                             f"this is {__version__}")
    else:  # each part is checked again by the engine against the messages themselves
        cache.resume_summary, cache.resume_plan = state.get("summary"), state.get("plan")


def save(store: Any, session_id: str, cache: TokenCache, stored: Sequence[Message]) -> None:
    """Save what re-entry needs of `cache` (built over `stored`); best effort: a failure costs a rebuild later."""
    if not stored or getattr(store, "read_only", False):
        return
    snapshot, plan = summary_snapshot(cache), plan_snapshot(cache, stored)
    if snapshot is None and plan is None:
        return
    with contextlib.suppress(Exception):
        store.save_engine_state(session_id, ENGINE_STATE_VERSION, len(stored), fingerprint(stored[-1]),
                                {"summary": snapshot, "plan": plan, "package": __version__})
