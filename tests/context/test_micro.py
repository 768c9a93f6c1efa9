"""SPEC C5: microcompaction of old successful tool outputs, tried before any summary."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.context import ContextPolicy, build_request_view, estimate_messages

from .oracle import build_and_check


def call(cid: str, name: str = "read_file") -> dict:
    return {"role": "assistant", "content": f"calling {cid}", "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": '{"path": "a.py"}'}}]}


def res(cid: str, content: object, **extra: object) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": content, **extra}


def transcript(old_results: list[dict], tail_result_chars: int = 4_000) -> list[dict]:
    """system + one call/result step per old result + a recent step with a big successful result."""
    msgs: list[dict] = [{"role": "system", "content": "system prompt"}, {"role": "user", "content": "start"}]
    for r in old_results:
        msgs += [call(r["tool_call_id"]), r]
    msgs += [{"role": "user", "content": "recent"}, call("recent"), res("recent", "R" * tail_result_chars),
             {"role": "assistant", "content": "done"}]
    return msgs


def policy_for(msgs: list[dict], window: int) -> ContextPolicy:
    """Ratio 0.8, and a tail budget that holds exactly the recent step (the last four messages)."""
    return ContextPolicy(window, 0.8, estimate_messages(msgs[-4:]))


def test_c5_old_success_becomes_exact_placeholder_same_role_and_id() -> None:
    """C5 + C13: `[old tool output compacted: N characters; recall #seq]`, N = original length, seq the stored
    message it replaces (a dry run: its input position); role, id and message count kept."""
    msgs = transcript([res("a", "A" * 20_000), res("b", "B" * 18_432)])
    policy = policy_for(msgs, 12_000)  # ~10.6k tokens before, threshold 9,600
    view = build_and_check(msgs, policy)
    assert view.stage == "micro"
    tools = [m for m in view.messages if m["role"] == "tool"]
    assert tools[0] == {"role": "tool", "tool_call_id": "a",
                        "content": "[old tool output compacted: 20000 characters; recall #3]"}
    assert tools[1] == {"role": "tool", "tool_call_id": "b",
                        "content": "[old tool output compacted: 18432 characters; recall #5]"}
    assert tools[2]["content"] == "R" * 4_000, "a tool result inside the safe tail is never compacted"
    assert len(view.messages) == len(msgs)
    assert [r.action for r in view.provenance.before if r.role == "tool"] == ["placeholder", "placeholder", "kept"]


def test_c5_event_summary_starts_with_microcompaction() -> None:
    """C5/C10: the event summary starts with `[microcompaction]` and carries estimated before/after."""
    msgs = transcript([res("a", "A" * 40_000)])
    view = build_request_view(msgs, policy_for(msgs, 12_000))
    event = view.event()
    assert event["stage"] == "micro" and event["summary"].startswith("[microcompaction]")
    assert event["before_tokens"] == view.before_tokens > view.threshold >= event["after_tokens"] == view.after_tokens
    assert event["tokens_are"] == "estimates"


@pytest.mark.parametrize("failure", [
    res("f", "F" * 20_000, is_error=True),
    res("f", "Tool failed: " + "F" * 20_000),
    res("f", "F" * 20_000 + "\ntool FAILED at the end"),
    res("f", "F" * 10_000 + " INVALID argument " + "F" * 10_000),
    res("f", "F" * 10_000 + " Permission Denied " + "F" * 10_000),
    res("f", "F" * 10_000 + " forbidden command " + "F" * 10_000),
    res("f", [{"type": "text", "text": "F" * 20_000}, {"type": "text", "text": "Invalid"}]),
])
def test_c5_failures_are_never_compacted(failure: dict) -> None:
    """C5: flagged errors and texts carrying a failure marker (any case, anywhere) keep their full text."""
    msgs = transcript([res("a", "A" * 40_000), failure])
    view = build_and_check(msgs, policy_for(msgs, 16_000))
    assert view.stage == "micro"
    kept = next(m for m in view.messages if m.get("tool_call_id") == "f")
    assert kept["content"] == failure["content"]
    assert next(m for m in view.messages if m.get("tool_call_id") == "a")["content"].startswith("[old tool output")


def test_c5_placeholder_only_when_shorter() -> None:
    """C5: a short result (e.g. `ok`) stays, since the placeholder would be longer than the original."""
    msgs = transcript([res("a", "A" * 40_000), res("s", "ok: 1 replacement"), res("t", "x" * 60)])
    view = build_and_check(msgs, policy_for(msgs, 12_000))
    contents = {m["tool_call_id"]: m["content"] for m in view.messages if m["role"] == "tool"}
    assert contents["s"] == "ok: 1 replacement"
    assert contents["t"] == "[old tool output compacted: 60 characters; recall #7]"  # 53 chars < 60


def test_c5_list_content_counts_text_characters() -> None:
    """C5: a tool result given as text parts is replaced by one placeholder with its text length."""
    msgs = transcript([res("a", [{"type": "text", "text": "A" * 30_000}, {"type": "text", "text": "B" * 10_000}])])
    view = build_and_check(msgs, policy_for(msgs, 12_000))
    assert next(m for m in view.messages if m.get("tool_call_id") == "a")["content"] == \
        "[old tool output compacted: 40000 characters; recall #3]"


def test_c5_system_messages_and_user_assistant_text_are_untouched() -> None:
    """C5: only tool results change; system, user and assistant messages are sent as they were."""
    msgs = transcript([res("a", "A" * 40_000)])
    msgs[0]["content"] = "S" * 8_000  # a big system message is never a candidate
    view = build_and_check(msgs, policy_for(msgs, 14_000))
    assert view.stage == "micro"
    assert [m["content"] for m in view.messages if m["role"] != "tool"] == \
        [m["content"] for m in msgs if m["role"] != "tool"]


def test_c5_micro_not_enough_goes_to_summary() -> None:
    """C5 -> C6: when placeholders do not bring the view under the threshold, the summary path runs."""
    msgs = transcript([res("a", "A" * 40_000)])
    msgs.insert(2, {"role": "assistant", "content": "long analysis " * 3_000})  # ~10.5k tokens, not replaceable
    view = build_and_check(msgs, policy_for(msgs, 12_000))
    assert view.stage == "summary"


def test_c5_c7_placeholder_is_not_compacted_again_in_the_next_iteration() -> None:
    """C5/C7: a placeholder fed back through next_input keeps its original character count."""
    msgs = transcript([res("a", "A" * 20_000), res("b", "B" * 20_000)])
    policy = policy_for(msgs, 12_000)
    first = build_request_view(msgs, policy)
    assert first.stage == "micro"
    grown = first.next_input([{"role": "user", "content": "more"}, call("c"), res("c", "C" * 36_000),
                              {"role": "assistant", "content": "ok"}])
    second = build_and_check(grown, policy)
    assert second.stage == "micro"
    contents = {m["tool_call_id"]: m["content"] for m in second.messages if m["role"] == "tool"}
    assert contents["a"] == "[old tool output compacted: 20000 characters; recall #3]"
    assert contents["b"] == "[old tool output compacted: 20000 characters; recall #5]"
    assert contents["c"] == "[old tool output compacted: 36000 characters; recall #12]"  # its input position


def test_c5_n_is_the_length_of_the_text_that_is_sent() -> None:
    """C5: N counts the characters the provider would have received (None parts send nothing, ints as text)."""
    msgs = transcript([res("a", [None, "x" * 40_000, 7]), res("d", {"log": "y" * 40_000})])
    view = build_and_check(msgs, policy_for(msgs, 12_000))
    contents = {m["tool_call_id"]: m["content"] for m in view.messages if m["role"] == "tool"}
    assert contents["a"] == "[old tool output compacted: 40001 characters; recall #3]"
    sent_text = '{"log": "' + "y" * 40_000 + '"}'  # dict content is sent as its JSON text
    assert contents["d"] == f"[old tool output compacted: {len(sent_text)} characters; recall #5]"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ \n:", max_size=80),
       st.sampled_from(["", "tool failed", "invalid", "permission denied", "forbidden", "tool  failed", "forbiden"]),
       st.randoms(), st.integers(0, 80), st.sampled_from(["", "é", "修"]))
def test_c5_failure_markers_match_case_insensitively_anywhere(text: str, marker: str, rnd, at: int,
                                                               extra: str) -> None:
    """C5: a text carries a failure marker exactly when the SPEC's case-insensitive pattern finds one, on the
    ASCII fast path (rarest-letter pre-checks) as on the regex path for other text."""
    from mxclaw_nb.messages import FAILURE_RE, is_failure

    cased = "".join(c.upper() if rnd.random() < 0.5 else c for c in marker)
    content = text[:at] + cased + text[at:] + extra
    assert is_failure({"role": "tool", "content": content}) == bool(FAILURE_RE.search(content))
