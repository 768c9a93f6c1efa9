"""An independent reading of SPEC C3/C4/C5/C6/C8 used to check the engine's views.

Why: a test that only replays the engine's own helpers cannot catch a misreading of the SPEC. These
small reference functions are written from the SPEC text (not from the engine's code): repair per C4,
the safe tail per C3 (searching for the issuing assistant, as the SPEC words it), microcompaction per
C5, the summary and fallback view shapes per C6/C8. `check_view` then derives, for any input and
policy, what the view must look like at the stage the engine reports, and asserts every DESIGN.md
invariant. Only `sanitize` (the key filter) and `estimate_tokens` (C1, unit-tested exactly elsewhere)
are borrowed from the engine.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from mxclaw_nb.context import ContextPolicy, RequestView, build_request_view, estimate_tokens
from mxclaw_nb.messages import sanitize

ALLOWED_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}
SENT_ROLES = {"system", "developer", "user", "assistant", "tool"}
SYSTEMS = {"system", "developer"}
MARKERS = re.compile(r"tool failed|invalid|permission denied|forbidden", re.IGNORECASE)
PLACEHOLDER_RE = re.compile(r"^\[old tool output compacted: (\d+) characters(; recall #\d+)?\]$")
SUMMARY_HEAD = "[compressed conversation context]\nOlder transcript messages were summarized.\nGoals:\n"
Message = dict[str, Any]
STAND_IN = "__oracle_stand_in_for_a_synthetic_result__"


def text_of(content: Any) -> str:
    """Text of a content value as it is sent (string, or the text parts of a list)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type", "text") == "text":
                    out.append("" if part.get("text") is None else str(part.get("text")))
            elif part is not None:
                out.append(str(part))
        return "".join(out)
    return str(content)


def is_failure(msg: Message) -> bool:
    """C5: flagged as error, or carrying a failure marker (case-insensitive)."""
    return bool(msg.get("is_error")) or bool(MARKERS.search(text_of(sanitize(msg).get("content"))))


def oracle_repair(messages: Sequence[Any]) -> list[tuple[int | None, Message]]:
    """C4 from the SPEC: (input position or None for a synthetic result, message)."""
    out: list[tuple[int | None, Message]] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if not isinstance(m, dict) or m.get("role") not in SENT_ROLES or m.get("role") == "tool":
            i += 1  # not a message, unknown role, or a tool result outside any call block: dropped
            continue
        out.append((i, m))
        i += 1
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        ids = list(dict.fromkeys(c["id"] for c in sanitize(m)["tool_calls"]))
        answered: set[str] = set()
        while i < n and isinstance(messages[i], dict) and messages[i].get("role") == "tool":
            tcid = messages[i].get("tool_call_id")
            tcid = None if tcid is None else str(tcid)
            if tcid in ids and tcid not in answered:
                answered.add(tcid)
                out.append((i, messages[i]))
            i += 1
        out += [(None, {"role": "tool", "tool_call_id": cid, STAND_IN: True}) for cid in ids if cid not in answered]
    return out


def oracle_tail_start(conv: Sequence[Message], tokens: Sequence[int], keep: int) -> int:
    """C3 from the SPEC: budget walk from the end, last message always, extend to the issuing assistant."""
    n = len(conv)
    start, total = n - 1, tokens[n - 1]
    for j in range(n - 2, -1, -1):
        if total + tokens[j] > keep:
            break
        start, total = j, total + tokens[j]
    if conv[start].get("role") == "tool":
        wanted = str(conv[start].get("tool_call_id"))
        j = start
        while not (conv[j].get("role") == "assistant"
                   and any(c["id"] == wanted for c in sanitize(conv[j]).get("tool_calls") or [])):
            j -= 1
        start = j
    return start


def check_pairing(view: Sequence[Message]) -> None:
    """Every tool message directly follows its assistant call block; every call has exactly one result."""
    i = 0
    while i < len(view):
        m = view[i]
        assert m["role"] != "tool", f"tool message at {i} is not inside a call block"
        i += 1
        if m["role"] == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            results = []
            while i < len(view) and view[i]["role"] == "tool":
                results.append(view[i]["tool_call_id"])
                i += 1
            assert sorted(results) == sorted(set(ids)), f"call ids {ids} answered by {results}"


def check_sent_shape(view: Sequence[Message]) -> None:
    """Only sendable keys and roles; tool calls well-formed with JSON-string arguments."""
    for m in view:
        assert set(m) <= ALLOWED_KEYS, f"unexpected keys {set(m) - ALLOWED_KEYS}"
        assert m["role"] in SENT_ROLES
        for c in m.get("tool_calls") or []:
            assert set(c) == {"id", "type", "function"} and isinstance(c["function"]["arguments"], str)


def _placeholdered(msg: Message, seq: int | None) -> Message:
    """C5 + C13: the placeholder naming the stored message (`recall #seq`; a dry run's seq is the input position)."""
    sent = sanitize(msg)
    text = text_of(sent.get("content"))
    ph = f"[old tool output compacted: {len(text)} characters; recall #{seq}]"
    if msg.get("role") != "tool" or is_failure(msg) or PLACEHOLDER_RE.match(text) or len(ph) >= len(text):
        return sent
    return {**sent, "content": ph}


def expected_fallback(steps: list[tuple[int | None, Message]]) -> list[Message]:
    """C8: first two systems + the fixed note (checked by prefix) + last six, never starting on a tool."""
    systems = [m for _, m in steps if m.get("role") in SYSTEMS][:2]
    conv = [m for _, m in steps if m.get("role") not in SYSTEMS]
    start = max(0, len(conv) - 6)
    while start > 0 and conv[start].get("role") == "tool":
        start -= 1
    return [_sent(m) for m in systems] + [None] + [_sent(m) for m in conv[start:]]  # type: ignore[list-item]


def _sent(m: Message) -> Message:
    if m.get(STAND_IN):  # the oracle's own stand-in for a synthetic result: compare role and id only
        return {"role": "tool", "tool_call_id": m["tool_call_id"]}
    return sanitize(m)


def _same(actual: Sequence[Message], expected: Sequence[Message | None]) -> None:
    assert len(actual) == len(expected), f"{len(actual)} sent messages, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if e is None:
            continue
        if set(e) == {"role", "tool_call_id"}:  # synthetic repair result
            assert a["role"] == "tool" and a["tool_call_id"] == e["tool_call_id"], (k, a, e)
            assert "interrupted" in a["content"] and "no result was recorded" in a["content"]
        else:
            assert a == e, f"sent message {k} differs: {a!r} != {e!r}"


def check_view(messages: Sequence[Any], policy: ContextPolicy, view: RequestView,
               summarize: Callable[[list[Message]], str] | None = None) -> None:
    """Assert every DESIGN.md invariant and the stage-specific SPEC shape for one view."""
    sent = view.messages
    check_sent_shape(sent)
    check_pairing(sent)
    steps = oracle_repair(messages)
    synthetic_rows = [r for r in view.provenance.before if r.synthetic]
    stand_ins = [m for src, m in steps if src is None]
    assert len(synthetic_rows) == len(stand_ins), "repair synthesised a different number of results"
    synth_tokens = {id(m): r.tokens_before for m, r in zip(stand_ins, synthetic_rows, strict=True)}
    assert view.threshold == policy.threshold
    assert view.after_tokens == sum(estimate_tokens(m) for m in sent)
    assert view.before_tokens == sum(synth_tokens[id(m)] if src is None else estimate_tokens(m) for src, m in steps)
    assert view.over_threshold == (view.after_tokens > view.threshold)
    systems = [m for _, m in steps if m.get("role") in SYSTEMS]
    conv = [m for _, m in steps if m.get("role") not in SYSTEMS]
    if view.before_tokens <= policy.threshold:  # C2: the repaired transcript, unchanged
        assert view.stage == "unchanged" and view.summary is None and view.event() is None
        _same(sent, [_sent(m) for _, m in steps])
        return
    conv_tokens = [synth_tokens[id(m)] if m.get(STAND_IN) else estimate_tokens(m) for m in conv]
    tail = oracle_tail_start(conv, conv_tokens, policy.keep_recent_tokens) if conv else 0
    conv_src = [src for src, m in steps if m.get("role") not in SYSTEMS]
    micro = [_sent(m) for m in systems] + [_placeholdered(m, conv_src[j]) if j < tail and not m.get(STAND_IN)
                                           else _sent(m) for j, m in enumerate(conv)]
    micro_tokens = sum(synth_tokens[id(c)] if c.get(STAND_IN) else estimate_tokens(m)
                       for c, m in zip([*systems, *conv], micro, strict=True))
    if view.no_gain is not None:  # C5/C6: the compaction would not have shrunk the view: not applied
        assert view.stage == "unchanged" and view.event() is None
        assert view.no_gain["after_tokens"] >= view.no_gain["before_tokens"] == view.before_tokens
        _same(sent, [_sent(m) for _, m in steps])
        return
    if view.stage in ("unchanged", "micro"):
        if view.stage == "unchanged":
            assert tail == 0, "over threshold with older messages, yet nothing was compacted"
        else:
            assert micro_tokens <= policy.threshold and not view.over_threshold
            assert view.summary.startswith("[microcompaction]") and view.event()["stage"] == "micro"
        _same(sent, micro)
        return
    assert tail > 0 and micro_tokens > policy.threshold, "summary/fallback reached though micro was enough"
    if view.stage == "summary" and view.over_threshold:
        assert over_threshold_reason(policy, [synth_tokens[id(m)] if m.get(STAND_IN) else estimate_tokens(m)
                                              for m in systems], conv_tokens[tail:], conv[tail:])
    if view.stage == "summary":
        assert view.error is None and isinstance(view.summary, str)
        if summarize is None:
            assert view.summary.startswith(SUMMARY_HEAD)
        _same(sent, [_sent(m) for m in systems] + [{"role": "system", "content": view.summary}]
              + [_sent(m) for m in conv[tail:]])
        assert view.tail_start == _source_of(steps, conv[tail])
        return
    assert view.stage == "fallback" and view.error
    _same(sent, expected_fallback(steps))
    assert sent[len(systems[:2])]["content"].startswith("[fallback context window]")


def over_threshold_reason(policy: ContextPolicy, system_tokens: list[int], tail_tokens: list[int],
                          tail: list[Message]) -> str:
    """Why a summary view may legitimately stay over the threshold (DESIGN: only the allowed reasons)."""
    if sum(system_tokens) > policy.threshold:
        return "system messages alone exceed the threshold"
    if sum(tail_tokens) > policy.keep_recent_tokens:
        assert len(tail) == 1 or tail[0].get("tool_calls"), "tail over budget without exception (a) or (b)"
        return "safe-tail exception (a) or (b)"
    # systems (kept by C6) + the summary + a tail within budget: the policy's budgets leave no room
    assert sum(system_tokens) + sum(tail_tokens) <= policy.threshold + policy.keep_recent_tokens
    return "system messages + summary + safe tail exceed the threshold"


def _source_of(steps: list[tuple[int | None, Message]], msg: Message) -> int | None:
    return next(src for src, m in steps if m is msg)


def build_and_check(messages: Sequence[Any], policy: ContextPolicy,
                    summarize: Callable[[list[Message]], str] | None = None) -> RequestView:
    """Build twice, check invariants, determinism (byte-identical) and that the input is not mutated."""
    snapshot = copy.deepcopy(list(messages))
    kwargs = {} if summarize is None else {"summarize": summarize}
    view = build_request_view(messages, policy, **kwargs)
    again = build_request_view(copy.deepcopy(snapshot), policy, **kwargs)
    assert list(messages) == snapshot, "the transcript was mutated"
    assert json.dumps(view.messages, ensure_ascii=False) == json.dumps(again.messages, ensure_ascii=False)
    assert view.provenance.to_records() == again.provenance.to_records()
    check_view(messages, policy, view, summarize)
    check_provenance(messages, view)
    return view


def check_provenance(messages: Sequence[Any], view: RequestView) -> None:
    """Every input position has one before-row; after-rows match the sent messages one to one."""
    rows = view.provenance.before
    positions = [r.position for r in rows if r.position is not None]
    assert sorted(positions) == list(range(len(messages)))
    assert {r.action for r in rows} <= {"kept", "placeholder", "summarized", "dropped", "synthetic"}
    assert len(view.provenance.after) == len(view.messages)
    for pos, rec in enumerate(view.provenance.after):
        assert rec.position == pos and rec.role == view.messages[pos]["role"]
        if rec.source is not None and rec.action == "kept":
            assert sanitize(messages[rec.source]) == view.messages[pos]
    assert sum(r.tokens for r in view.provenance.after) == view.after_tokens


def micro_figures(messages: Sequence[Any], keep_recent_tokens: int) -> tuple[int, int]:
    """(before, after microcompaction) estimates per the SPEC, for a transcript that needs no repair."""
    steps = oracle_repair(messages)
    assert all(src is not None for src, _ in steps), "use a transcript that needs no synthetic results"
    systems = [m for _, m in steps if m.get("role") in SYSTEMS]
    conv = [m for _, m in steps if m.get("role") not in SYSTEMS]
    before = sum(estimate_tokens(m) for _, m in steps)
    if not conv:
        return before, before
    tail = oracle_tail_start(conv, [estimate_tokens(m) for m in conv], keep_recent_tokens)
    conv_src = [src for src, m in steps if m.get("role") not in SYSTEMS]
    micro = [*systems, *(_placeholdered(m, conv_src[j]) if j < tail else m for j, m in enumerate(conv))]
    return before, sum(estimate_tokens(m) for m in micro)
