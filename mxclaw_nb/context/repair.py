"""SPEC C4: repair the tool-call protocol before anything else looks at the transcript.

A provider rejects a request whose assistant tool calls are not each followed by exactly one result,
or that carries a result nobody asked for. Real transcripts break this all the time: a kernel
interrupted mid-tool leaves a dangling call, agents reuse ids in later turns, logs duplicate results.
Repair pairs results per assistant block (so a reused id in a later turn is its own pair), keeps the
first result per id, drops orphans, and synthesises an "interrupted" failure for each missing result
placed at the end of its block. It works on the view only, returns its input's dicts unchanged when
nothing is wrong, and reports what it did so the UI can show it (like pydantic-ai's
`_clean_message_history`: small passes whose order matters — repair must precede estimation, because
the estimate is of what will be sent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mxclaw_nb.messages import ROLES, SYSTEM_ROLES, Message, fallback_call_id, tool_call_name

SYNTHETIC_TEXT = (
    "Tool failed: the {name} call ({call_id}) was interrupted and no result was recorded. "
    "Treat it as not done."
)


@dataclass(frozen=True)
class RepairStep:
    """One message of the repaired sequence: where it came from (None = synthetic) and the message."""

    source: int | None
    message: Message


@dataclass(frozen=True)
class RepairPlan:
    """Repaired sequence plus the input positions that were dropped, with the reason."""

    steps: list[RepairStep]
    dropped: dict[int, str]

    @property
    def changed(self) -> bool:
        """True when repair dropped or synthesised anything."""
        return bool(self.dropped) or any(s.source is None for s in self.steps)


def synthetic_result(call_id: str, name: str | None) -> Message:
    """The synthetic failure result that stands in for a call with no recorded result."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": SYNTHETIC_TEXT.format(name=name or "tool", call_id=call_id),
        "is_error": True,
        "synthetic": True,
    }


def _call_ids(calls: Any) -> list[tuple[str, Any]]:
    """(sent id, call) per tool call; the name is looked up only for a call that needs a synthetic result."""
    if not isinstance(calls, list):
        calls = [calls]
    out: list[tuple[str, Any]] = []
    for k, call in enumerate(calls):
        cid = call.get("id") if isinstance(call, dict) else None
        # Same fallback id as messages.sanitize, so the synthetic result pairs with the sent call.
        out.append((str(cid) if cid else fallback_call_id(call, k), call))
    return out


Step = tuple[int | None, Message]  # (input position or None when synthetic, message)
_KNOWN_ROLES = frozenset(ROLES) | SYSTEM_ROLES


def plan_steps(messages: list[Any], start: int = 0) -> tuple[list[Step], dict[int, str]]:
    """The repaired sequence of `messages[start:]` as (source, message) tuples, plus dropped positions.

    `start` must be the position of a message with a known, non-tool role (or 0): the loop is then at the
    top level there, so a prefix already planned can be reused and only the rest re-planned.
    """
    steps: list[Step] = []
    dropped: dict[int, str] = {}
    n = len(messages)
    i = start
    while i < n:
        msg = messages[i]
        role = msg.get("role") if isinstance(msg, dict) else None
        if not isinstance(role, str) or role not in _KNOWN_ROLES:
            dropped[i] = "unknown role" if isinstance(msg, dict) else "not a message"
            i += 1
            continue
        if role == "tool":
            dropped[i] = "orphan tool result (no matching call directly before)"
            i += 1
            continue
        steps.append((i, msg))
        i += 1
        if role != "assistant":
            continue
        raw_calls = msg.get("tool_calls")
        if not raw_calls:
            continue
        calls = _call_ids(raw_calls)
        wanted = {cid for cid, _ in calls}
        seen: set[str] = set()
        while i < n and isinstance(messages[i], dict) and messages[i].get("role") == "tool":
            tcid = messages[i].get("tool_call_id")
            tcid = None if tcid is None else str(tcid)
            if tcid in wanted and tcid not in seen:
                seen.add(tcid)
                steps.append((i, messages[i]))
            else:
                dropped[i] = "duplicate tool result" if tcid in seen else "orphan tool result (id not issued)"
            i += 1
        for cid, call in calls:
            if cid not in seen:
                seen.add(cid)
                steps.append((None, synthetic_result(cid, tool_call_name(call))))
    return steps, dropped


def plan_repair(messages: list[Message]) -> RepairPlan:
    """Compute the repaired sequence without copying or mutating any message."""
    steps, dropped = plan_steps(messages)
    return RepairPlan([RepairStep(src, msg) for src, msg in steps], dropped)


def repair_tool_call_transcript(messages: list[Message]) -> list[Message]:
    """SPEC C4: a transcript where every tool call has exactly one result directly after its call."""
    return [step.message for step in plan_repair(list(messages)).steps]
