"""SPEC C4: tool-call repair, pinned message by message (the shape pydantic-ai's transcript-repair tests use).

After repair every assistant `tool_calls` is immediately followed by exactly one tool message per id,
and no other tool message exists; missing results become synthetic failures inside their block.
"""

from __future__ import annotations

import copy

from mxclaw_nb.context import build_request_view, repair_tool_call_transcript
from mxclaw_nb.context.pipeline import ContextPolicy

from .oracle import check_pairing, check_sent_shape, is_failure


def call(cid: str, name: str = "bash", args: str = "{}") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def asst(*ids: str, text: str | None = None) -> dict:
    return {"role": "assistant", "content": text, "tool_calls": [call(i) for i in ids]}


def res(cid: str, text: str = "ok") -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def shape(messages: list[dict]) -> list[tuple]:
    """(role, tool_call_id or call ids, synthetic?) per message: what C4 is about."""
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append(("tool", m["tool_call_id"], bool(m.get("synthetic"))))
        elif m.get("tool_calls"):
            out.append(("assistant", tuple(c["id"] for c in m["tool_calls"])))
        else:
            out.append((m["role"], m.get("content")))
    return out


def test_c4_well_formed_transcript_comes_back_as_the_same_dicts() -> None:
    """C4: nothing wrong -> the same messages, same objects, nothing synthesised."""
    msgs = [{"role": "user", "content": "go"}, asst("a", "b"), res("a"), res("b"),
            {"role": "assistant", "content": "x"}]
    out = repair_tool_call_transcript(msgs)
    assert len(out) == len(msgs) and all(o is m for o, m in zip(out, msgs, strict=True))


def test_c4_dangling_call_gets_synthetic_failure_in_its_block() -> None:
    """C4: a call with no result gets a synthetic result right after its block; it counts as a failure."""
    msgs = [{"role": "user", "content": "go"}, asst("a", "b"), res("a"), {"role": "user", "content": "next"}]
    out = repair_tool_call_transcript(msgs)
    assert shape(out) == [("user", "go"), ("assistant", ("a", "b")), ("tool", "a", False), ("tool", "b", True),
                          ("user", "next")]
    synthetic = out[3]
    assert "interrupted" in synthetic["content"] and "no result was recorded" in synthetic["content"]
    assert synthetic["is_error"] is True and is_failure(synthetic)


def test_c4_dangling_call_at_the_very_end() -> None:
    """C4: the kernel died mid-tool (last message is the call): the view still ends with a valid pair."""
    out = repair_tool_call_transcript([{"role": "user", "content": "go"}, asst("submit-1")])
    assert shape(out) == [("user", "go"), ("assistant", ("submit-1",)), ("tool", "submit-1", True)]


def test_c4_orphan_results_are_dropped() -> None:
    """C4: a result at the start, after a user message, or for an id the block did not issue is dropped."""
    msgs = [res("ghost"), {"role": "user", "content": "go"}, res("ghost2"), asst("a"), res("zzz"), res("a")]
    assert shape(repair_tool_call_transcript(msgs)) == [("user", "go"), ("assistant", ("a",)), ("tool", "a", False)]


def test_c4_result_for_an_earlier_block_is_an_orphan() -> None:
    """C4: the id must be issued by the assistant message directly before the tool block."""
    msgs = [asst("a"), res("a"), asst("b"), res("b"), res("a")]
    assert shape(repair_tool_call_transcript(msgs)) == [
        ("assistant", ("a",)), ("tool", "a", False), ("assistant", ("b",)), ("tool", "b", False)]


def test_c4_duplicate_results_keep_the_first() -> None:
    """C4: duplicate results for one id keep the first one."""
    msgs = [asst("a"), res("a", "first"), res("a", "second")]
    out = repair_tool_call_transcript(msgs)
    assert [m.get("content") for m in out] == [None, "first"]


def test_c4_reused_id_in_a_later_turn_is_paired_per_block() -> None:
    """C4: real transcripts reuse an id in a later turn; each block pairs with its own result."""
    msgs = [asst("call_1"), res("call_1", "turn 1"), {"role": "user", "content": "again"},
            asst("call_1"), res("call_1", "turn 2")]
    out = repair_tool_call_transcript(msgs)
    assert [m.get("content") for m in out] == [None, "turn 1", "again", None, "turn 2"]


def test_c4_result_separated_from_its_call_by_a_user_message() -> None:
    """C4: a late result after another message is an orphan; the call gets a synthetic result instead."""
    msgs = [asst("a"), {"role": "user", "content": "interrupt"}, res("a")]
    assert shape(repair_tool_call_transcript(msgs)) == [
        ("assistant", ("a",)), ("tool", "a", True), ("user", "interrupt")]


def test_c4_results_out_of_order_inside_the_block_are_kept() -> None:
    """C4: results in a different order than the calls are still one per id, nothing synthesised."""
    out = repair_tool_call_transcript([asst("a", "b"), res("b"), res("a")])
    assert shape(out) == [("assistant", ("a", "b")), ("tool", "b", False), ("tool", "a", False)]


def test_c4_unknown_roles_and_non_messages_are_dropped() -> None:
    """Bad input: missing/unknown roles and non-dicts do not crash and are not sent."""
    msgs = [{"content": "no role"}, {"role": "narrator", "content": "x"}, "just a string", None, 42,
            {"role": "user", "content": "real"}]
    assert shape(repair_tool_call_transcript(msgs)) == [("user", "real")]


def test_c4_tool_message_without_id_is_dropped_and_call_without_id_still_paired() -> None:
    """Bad input: a result with no tool_call_id pairs with nothing; a call with no id gets a stable id."""
    msgs = [{"role": "assistant", "content": None, "tool_calls": [{"type": "function",
                                                                  "function": {"name": "ls", "arguments": "{}"}}]},
            {"role": "tool", "content": "orphan without id"}]
    view = build_request_view(msgs, ContextPolicy(10_000, 0.8, 1_000))
    check_sent_shape(view.messages)
    check_pairing(view.messages)
    call_id = view.messages[0]["tool_calls"][0]["id"]
    assert call_id and view.messages[1]["tool_call_id"] == call_id and "interrupted" in view.messages[1]["content"]
    # provenance rows follow the repaired order: the synthetic result sits right after its call
    assert [r.action for r in view.provenance.before] == ["kept", "synthetic", "dropped"]


def test_c4_repair_is_idempotent_deterministic_and_does_not_mutate() -> None:
    """C4 works on the view only: input untouched; repairing twice changes nothing; same output each run."""
    msgs = [res("x"), asst("a", "b"), res("b"), res("b"), {"role": "user", "content": "u"}, asst("c")]
    snapshot = copy.deepcopy(msgs)
    once = repair_tool_call_transcript(msgs)
    assert msgs == snapshot
    assert repair_tool_call_transcript(once) == once
    assert repair_tool_call_transcript(copy.deepcopy(snapshot)) == once


def test_c4_provenance_marks_dropped_and_synthetic_with_reasons() -> None:
    """C4 + DESIGN provenance: every input row is accounted for; synthetic rows are marked as such."""
    msgs = [res("x"), asst("a"), res("a"), res("a"), asst("b")]
    view = build_request_view(msgs, ContextPolicy(10_000, 0.8, 1_000))
    rows = [(r.position, r.action, r.synthetic, r.reason is not None) for r in view.provenance.before]
    assert rows == [(0, "dropped", False, True), (1, "kept", False, False), (2, "kept", False, False),
                    (3, "dropped", False, True), (4, "kept", False, False), (None, "synthetic", True, False)]
    assert view.repaired is True
    assert [r.failure for r in view.provenance.before if r.synthetic] == [True]
