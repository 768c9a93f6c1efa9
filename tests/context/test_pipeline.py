"""SPEC C0 (pipeline order), C7 (re-check every iteration, pinned summaries), C10 (event), and bad input."""

from __future__ import annotations

import copy
import json

import pytest

from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view, estimate_messages

from .oracle import build_and_check, check_pairing, check_sent_shape


def call(cid: str, name: str = "bash", args: str = "{}") -> dict:
    return {"role": "assistant", "content": f"run {cid}",
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]}


def step(k: int, result: str) -> list[dict]:
    return [{"role": "user", "content": f"goal {k}"}, call(f"c{k}"), {"role": "tool", "tool_call_id": f"c{k}",
                                                                     "content": result}]


SYSTEM = {"role": "system", "content": "[system prompt] " + "s" * 800}
POLICY = ContextPolicy(8_000, 0.8, 1_000)


def failing_steps(first: int, n: int) -> list[dict]:
    """Steps whose results are failures: microcompaction cannot shrink them, so the summary path runs."""
    return [m for k in range(first, first + n) for m in step(k, f"Tool failed: attempt {k} " + "e" * 10_000)]


def test_c0_order_repair_happens_before_estimate() -> None:
    """C0: the estimate is of the repaired view (dropped orphans cost nothing, synthetic results count)."""
    orphan = {"role": "tool", "tool_call_id": "nobody", "content": "x" * 40_000}
    view = build_request_view([SYSTEM, orphan, {"role": "user", "content": "hi"}], POLICY)
    assert view.stage == "unchanged" and view.before_tokens == estimate_messages([SYSTEM, {"role": "user",
                                                                                          "content": "hi"}])


def test_c7_summary_is_pinned_and_a_new_one_added_for_the_newly_old_part() -> None:
    """C7: feeding view.next_input into the next build keeps the first summary as a system message."""
    msgs = [SYSTEM, *failing_steps(0, 3)]
    first = build_and_check(msgs, POLICY)
    assert first.stage == "summary"
    grown = first.next_input(failing_steps(3, 3))
    second = build_and_check(grown, POLICY)
    assert second.stage == "summary"
    systems = [m for m in second.messages if m["role"] == "system"]
    assert systems[0] == {"role": "system", "content": SYSTEM["content"]}
    assert systems[1] == {"role": "system", "content": first.summary}, "the earlier summary stays pinned, unchanged"
    assert systems[2]["content"] == second.summary != first.summary
    assert "goal 3" in second.summary and "goal 0" not in second.summary
    third = build_and_check(second.next_input(failing_steps(6, 3)), POLICY)
    assert [m["content"] for m in third.messages if m["role"] == "system"][:3] == [m["content"] for m in systems]


def test_c7_under_threshold_next_input_is_sent_as_is() -> None:
    """C7: after a compaction, a small append that stays under the threshold sends view + new messages."""
    first = build_request_view([SYSTEM, *failing_steps(0, 3)], POLICY)
    appended = [{"role": "user", "content": "thanks", "reasoning": "not sent"}]
    second = build_and_check(first.next_input(appended), POLICY)
    assert second.stage == "unchanged"
    assert second.messages == first.messages + [{"role": "user", "content": "thanks"}]


def test_c7_next_input_keeps_stored_only_fields_of_kept_messages() -> None:
    """C7: kept messages go back as the originals (is_error survives), so failures stay failures."""
    msgs = [SYSTEM, *failing_steps(0, 2), *step(9, "Forbidden")]
    msgs[-1] = {**msgs[-1], "is_error": True, "content": "exit 1"}
    view = build_request_view(msgs, POLICY)
    again = view.next_input()
    assert any(m.get("is_error") for m in again) and all(m is not None for m in again)


def test_c10_event_payload() -> None:
    """C10: before_tokens/after_tokens labelled as estimates, summary and stage; None when unchanged."""
    view = build_request_view([SYSTEM, *failing_steps(0, 3)], POLICY)
    event = view.event()
    assert event == {"stage": "summary", "before_tokens": view.before_tokens, "after_tokens": view.after_tokens,
                     "tokens_are": "estimates", "threshold": 6_400, "summary": view.summary}
    assert event["summary"].startswith("[compressed conversation context]")
    assert build_request_view([SYSTEM], POLICY).event() is None


BROKEN = [
    {"content": "no role"},
    {"role": "robot", "content": "unknown role"},
    None,
    "a string",
    {"role": "system", "content": None},
    {"role": "developer", "content": "developer instructions"},
    {"role": "user", "content": None},
    {"role": "user", "content": [1, None, {"type": "text", "text": 5}, {"text": "no type"}, ["nested"],
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
    {"role": "user", "content": {"unexpected": "dict content"}},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "edit_file", "arguments": "{not json"}},
        {"id": "b", "function": {"name": "edit_file", "arguments": {"path": "dict-args.py"}}},
        {"function": {"name": "no_id", "arguments": None}},
        "not a call"]},
    {"role": "tool", "tool_call_id": "b", "content": ["part", 2]},
    {"role": "tool", "tool_call_id": "b", "content": "duplicate"},
    {"role": "tool", "tool_call_id": 7, "content": "int id, orphan"},
    {"role": "assistant", "content": "reuse", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "a", "content": "second turn result for reused id a"},
    {"role": "assistant", "content": "再见", "reasoning": "hidden", "name": "bot", "is_error": False},
]


@pytest.mark.parametrize("window", [100_000, 600, 200, 40])
def test_bad_input_no_crash_and_valid_view_at_every_stage(window: int) -> None:
    """Bad input: missing/unknown roles, None content, odd parts, invalid JSON args, reused/odd ids."""
    view = build_and_check(BROKEN, ContextPolicy(window, 0.8, 20))
    check_sent_shape(view.messages)
    check_pairing(view.messages)
    for m in view.messages:
        if isinstance(m["content"], list):
            for part in m["content"]:
                assert isinstance(part, dict) and part.get("type") in ("text", "image_url"), part
                assert part["type"] != "text" or isinstance(part["text"], str), part


def test_bad_input_invalid_json_arguments_are_sent_unchanged() -> None:
    """Bad input: invalid JSON arguments are not 'fixed' (the model sees what it produced)."""
    view = build_request_view(BROKEN, ContextPolicy(100_000, 0.8, 20))
    calls = next(m for m in view.messages if m.get("tool_calls"))["tool_calls"]
    assert calls[0]["function"]["arguments"] == "{not json"
    assert json.loads(calls[1]["function"]["arguments"]) == {"path": "dict-args.py"}


@pytest.mark.parametrize("messages", [[], [None, "x", {"role": "ghost"}], [{"role": "tool", "tool_call_id": "z"}]])
def test_value_error_only_when_nothing_can_be_sent(messages: list) -> None:
    """Bad input: a clear ValueError only when no usable message remains."""
    with pytest.raises(ValueError, match="nothing to send"):
        build_request_view(messages, POLICY)


@pytest.mark.parametrize("messages", ["not a list", b"bytes", {"role": "user"}, 42, None])
def test_value_error_for_non_list_input(messages: object) -> None:
    """Bad input: a non-list transcript is a clear ValueError, not an AttributeError deep inside."""
    with pytest.raises(ValueError, match="list"):
        build_request_view(messages, POLICY)  # type: ignore[arg-type]


def test_only_system_messages_are_sent() -> None:
    """Edge: a transcript with only system messages is sendable as it is."""
    view = build_request_view([SYSTEM], POLICY)
    assert view.messages == [{"role": "system", "content": SYSTEM["content"]}]


def test_only_sent_keys_leave_the_engine() -> None:
    """Only role/content/tool_calls/tool_call_id/name are sent; reasoning, is_error, attachments never are."""
    msgs = [{"role": "user", "content": "hi", "attachments": [{"path": "a.png"}], "id": 5, "created_at": "t"},
            {**call("x"), "reasoning": "secret chain of thought", "usage": {"prompt_tokens": 5}},
            {"role": "tool", "tool_call_id": "x", "content": "Tool failed", "is_error": True, "name": "bash"}]
    for window in (100_000, 20):
        view = build_and_check(msgs, ContextPolicy(window, 0.8, 5))
        check_sent_shape(view.messages)
        assert "secret" not in json.dumps(view.messages)


def test_input_never_mutated_and_output_byte_identical_on_every_path() -> None:
    """The transcript is never mutated; the same input gives byte-identical output (messages + provenance)."""
    msgs = [SYSTEM, *failing_steps(0, 3), *step(5, "x" * 20_000), *BROKEN]
    for summarize in (None, lambda old: 1 / 0):
        for window in (100_000, 9_000, 3_000):
            snapshot = copy.deepcopy(msgs)
            kwargs = {} if summarize is None else {"summarize": summarize}
            a = build_request_view(msgs, ContextPolicy(window, 0.8, 500), **kwargs)
            b = build_request_view(copy.deepcopy(msgs), ContextPolicy(window, 0.8, 500), **kwargs)
            assert msgs == snapshot
            assert json.dumps(a.messages, ensure_ascii=False).encode() == json.dumps(b.messages,
                                                                                     ensure_ascii=False).encode()
            assert json.dumps(a.provenance.to_records()) == json.dumps(b.provenance.to_records())
            a.messages[0]["content"] = "caller edits the view"  # editing a view must not reach the transcript
            assert msgs == snapshot


def test_cache_gives_the_same_view_as_no_cache() -> None:
    """C1: the TokenCache changes speed only, never the result."""
    msgs = [SYSTEM, *failing_steps(0, 3), *step(5, "x" * 20_000)]
    cache = TokenCache()
    for window in (100_000, 9_000, 3_000):
        policy = ContextPolicy(window, 0.8, 500)
        cold = build_request_view(msgs, policy)
        warm = build_request_view(msgs, policy, cache=cache)
        assert json.dumps(warm.messages) == json.dumps(cold.messages) and warm.stage == cold.stage


def test_cache_incremental_dangling_call_then_its_result_arrives() -> None:
    """C4 + cache: the synthetic result of a dangling call is replaced once the real result is appended."""
    msgs = [SYSTEM, {"role": "user", "content": "go"}, call("c1")]
    cache = TokenCache()
    first = build_request_view(msgs, POLICY, cache=cache)
    assert "interrupted" in first.messages[-1]["content"]
    msgs.append({"role": "tool", "tool_call_id": "c1", "content": "real result"})
    second = build_request_view(msgs, POLICY, cache=cache)
    assert second.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "real result"}
    assert not second.repaired
    msgs.append({"role": "tool", "tool_call_id": "c1", "content": "duplicate"})
    third = build_request_view(msgs, POLICY, cache=cache)
    assert third.messages == second.messages and [r.action for r in third.provenance.before][-1] == "dropped"


def test_cache_reuse_only_for_a_grown_identical_prefix() -> None:
    """Cache: a shorter, different or edited transcript, or another counter, gives the same view as no cache."""
    base = [SYSTEM, *failing_steps(0, 2), *step(5, "x" * 2_000)]
    cache = TokenCache()
    build_request_view(base, POLICY, cache=cache)
    variants = [base[:4], [copy.deepcopy(m) for m in base], list(reversed(base)), [*base[:2], *base[3:]]]
    edited = list(base)
    edited[2] = {**edited[2], "content": "changed"}
    variants.append(edited)
    for variant in variants:
        warm = build_request_view(variant, POLICY, cache=cache)
        assert json.dumps(warm.messages) == json.dumps(build_request_view(variant, POLICY).messages)
    base[1]["content"] = "edited in place " * 50  # same dict, new content object: detected
    warm = build_request_view(base, POLICY, cache=cache)
    assert warm.before_tokens == build_request_view(base, POLICY).before_tokens


def test_cache_with_a_different_counter_recounts() -> None:
    """Cache: switching the policy's counter never serves counts made by another counter."""
    from mxclaw_nb.context.counters import FunctionCounter

    msgs = [SYSTEM, {"role": "user", "content": "hello world"}]
    cache = TokenCache()
    build_request_view(msgs, POLICY, cache=cache)
    by_words = ContextPolicy(8_000, 0.8, 1_000, counter=FunctionCounter("words", lambda t: len(t.split())))
    warm = build_request_view(msgs, by_words, cache=cache)
    assert warm.before_tokens == build_request_view(msgs, by_words).before_tokens


def test_layers_of_a_view_add_up_to_its_tokens() -> None:
    """The article's context layers (for the gauge): every sent message has one layer; totals match after_tokens."""
    from mxclaw_nb.context import LAYERS, layer_tokens, message_layer

    msgs = [{"role": "system", "content": "[system prompt] be helpful"},
            {"role": "system", "content": "[project instructions] AGENTS.md ..."},
            {"role": "system", "content": "[skill index] review: ..."},
            {"role": "system", "content": "[memory snapshot] user prefers uv"},
            *failing_steps(0, 3), {"role": "assistant", "content": "done"}]
    view = build_request_view(msgs, POLICY)
    assert view.stage == "summary"
    layers = [message_layer(m) for m in view.messages]
    assert layers[:5] == ["system prompt", "project instructions", "skill index", "memory snapshot", "summaries"]
    totals = layer_tokens(view.messages, [r.tokens for r in view.provenance.after])
    assert set(totals) == set(LAYERS) and sum(totals.values()) == view.after_tokens
    assert totals["summaries"] == view.provenance.after[4].tokens


def test_c0_passes_run_on_their_own_in_the_documented_order() -> None:
    """C0: each named pass is a small function with a named result; the pipeline is their sequence."""
    from mxclaw_nb.context import pipeline
    from mxclaw_nb.context.incremental import layout_of, plan_and_count

    names = [fn for _, _, fn in pipeline.C0_PASSES]
    doc = pipeline.__doc__ or ""
    assert [doc.index(f"`{fn}`") for fn in names] == sorted(doc.index(f"`{fn}`") for fn in names)
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}]
    for k in range(6):
        messages += step(k, "x" * 400)
    messages.append({"role": "user", "content": "next"})
    policy = ContextPolicy(context_window_tokens=400, threshold_ratio=0.8, keep_recent_tokens=120)
    planned = plan_and_count(messages, pipeline.estimate_sent, None, None)  # pass 1
    before = sum(planned.tokens)
    assert before > policy.threshold  # pass 2 sends on
    layout = layout_of(planned)
    conv = pipeline.split_conversation(planned.messages, planned.tokens, layout, policy.keep_recent_tokens)  # 3
    assert list(conv.steps) == list(range(1, len(messages)))
    assert 0 < conv.tail < len(conv.steps) and conv.messages[conv.tail]["role"] != "tool"  # a pair is not split
    assert sum(conv.tokens[conv.tail + 1:]) <= policy.keep_recent_tokens < sum(conv.tokens[conv.tail - 1:])
    micro = pipeline.microcompact(conv, planned.messages, planned.sent, planned.tokens, layout, policy, before)  # 4
    assert micro.sent and all(k in conv.old and planned.messages[k]["role"] == "tool" for k in micro.sent)
    assert micro.after == before + sum(micro.tokens[k] - planned.tokens[k] for k in micro.sent)
    assert all(planned.sent[k]["content"] == "x" * 400 for k in micro.sent)  # the pass copied, not edited
    text = pipeline.summarize_old(conv, planned.messages, 1, pipeline.build_structured_summary, None)  # 5
    view = build_request_view(messages, policy)
    assert view.stage == ("micro" if micro.after <= policy.threshold else "summary")
    if view.stage == "summary":
        assert view.summary == text
    with pytest.raises(RuntimeError, match="no summariser"):
        pipeline.summarize_old(conv, planned.messages, 1, None, None)


def test_c6_a_summary_longer_than_what_it_replaces_is_not_applied() -> None:
    """The real-model case: one short user message outside the tail, and the summary replacing it is longer."""
    from mxclaw_nb.context import ContextPolicy as Policy

    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "x" * 400}, {"role": "user", "content": "y" * 400}]
    policy = Policy(context_window_tokens=1_000, threshold_ratio=0.2, keep_recent_tokens=150)
    view = build_request_view(messages, policy, lambda old: "[compressed conversation context]\n" + "z" * 600)
    assert view.stage == "unchanged" and view.no_gain is not None and view.no_gain["stage"] == "summary"
    assert view.no_gain["after_tokens"] > view.no_gain["before_tokens"] == view.after_tokens
    assert view.messages == [dict(m) for m in messages] and view.event() is None
