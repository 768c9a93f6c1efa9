"""SPEC C8 (fallback window when the compactor raises) and C9 (prompt-too-long classification)."""

from __future__ import annotations

import pytest

from mxclaw_nb.context import ContextPolicy, build_request_view, fallback_window, is_prompt_too_long

from .oracle import build_and_check, check_pairing, check_sent_shape


def sys_msg(k: int) -> dict:
    return {"role": "system", "content": f"system {k} " + "s" * 400}


def step(k: int) -> list[dict]:
    return [{"role": "user", "content": f"goal {k} " + "u" * 1_000},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": "Tool failed: " + "t" * 1_000}]


def session() -> list[dict]:
    msgs = [sys_msg(0), sys_msg(1), sys_msg(2)]
    for k in range(5):
        msgs += step(k)
    return msgs  # 15 conversation messages, ending on a tool result


def boom(old: list[dict]) -> str:
    raise RuntimeError("summariser exploded")


def contents(msgs: list[dict]) -> list[str]:
    return [str(m.get("content"))[:12] for m in msgs]


def test_c8_compactor_raising_gives_the_fallback_window() -> None:
    """C8: first 2 systems + one fixed note + the last 6 conversation messages; the turn does not stop."""
    msgs = session()
    view = build_and_check(msgs, ContextPolicy(2_000, 0.8, 300), summarize=boom)
    assert view.stage == "fallback"
    assert "RuntimeError" in view.error and "summariser exploded" in view.error
    assert view.messages[:2] == [{"role": "system", "content": m["content"]} for m in msgs[:2]]
    note = view.messages[2]
    assert note["role"] == "system" and note["content"].startswith("[fallback context window]")
    assert view.messages[3:] == [{k: v for k, v in m.items()} for m in msgs[-6:]]
    assert view.summary == note["content"] and view.event()["stage"] == "fallback"
    dropped = [r.position for r in view.provenance.before if r.action == "dropped"]
    assert dropped == [2, *range(3, 12)]  # the third system message and the older conversation


def test_c8_note_is_fixed_text() -> None:
    """C8: the fallback note is one fixed message, the same whatever the input."""
    a = fallback_window(session())
    b = fallback_window([{"role": "user", "content": "只有一条"}])
    assert a[2] == b[0] and a[2]["content"].startswith("[fallback context window]")


def test_c8_window_never_starts_on_a_tool_result() -> None:
    """C8: the start moves earlier so the window begins with the call, not its result."""
    msgs = [sys_msg(0), {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in "abcd"]}]
    msgs += [{"role": "tool", "tool_call_id": i, "content": "Invalid: " + "r" * 4_000} for i in "abcd"]
    msgs += [{"role": "assistant", "content": "x" * 4_000}, {"role": "user", "content": "y" * 4_000}]
    # last 6 conversation messages would start at tool "b"; the window moves back to the assistant call
    window = fallback_window(msgs)
    assert [m["role"] for m in window] == ["system", "system", "assistant", "tool", "tool", "tool", "tool",
                                           "assistant", "user"]
    check_pairing(window)
    view = build_and_check(msgs, ContextPolicy(6_000, 0.8, 100), summarize=boom)
    assert view.messages == window


def test_c8_fallback_window_repairs_first() -> None:
    """C8 on a broken transcript: a dangling call in the window still gets its synthetic result."""
    msgs = [sys_msg(0), {"role": "tool", "tool_call_id": "orphan", "content": "x"}, *step(0)[:2]]
    window = fallback_window(msgs)
    check_sent_shape(window)
    check_pairing(window)
    assert window[-1]["role"] == "tool" and "interrupted" in window[-1]["content"]


@pytest.mark.parametrize("summarize", [None, lambda old: None, lambda old: 42, lambda old: 1 / 0])
def test_c8_missing_or_bad_summariser_takes_the_fallback_path(summarize: object) -> None:
    """C8: no summariser, a non-string result or any exception -> fallback, with the reason recorded."""
    view = build_request_view(session(), ContextPolicy(2_000, 0.8, 300), summarize=summarize)
    assert view.stage == "fallback" and view.error


def test_c8_only_two_system_messages_even_when_summaries_were_pinned() -> None:
    """C8: at most the first two system messages; later ones (e.g. pinned summaries) are omitted."""
    window = fallback_window([sys_msg(0), sys_msg(1), sys_msg(2), {"role": "user", "content": "hi"}])
    assert contents(window) == [contents([sys_msg(0)])[0], contents([sys_msg(1)])[0], "[fallback co", "hi"]


@pytest.mark.parametrize("message", [
    "Error code: 400 - This model's maximum context length is 8192 tokens",
    "prompt too long",
    "PROMPT TOO LONG: 210000 tokens > 200000 maximum",
    "Request failed: too many tokens in request",
    "Context Length exceeded",
    # the same condition as other servers word it (one classifier for the engine and the provider)
    "prompt is too long: 201234 tokens > 200000 maximum",
    '{"error": {"code": "context_length_exceeded"}}',
    "the request exceeds the available context size, try increasing it",
    "input exceeds the context window",
])
def test_c9_prompt_too_long_is_recognised(message: str) -> None:
    """C9: /prompt too long|context length|too many tokens/i."""
    assert is_prompt_too_long(message)


@pytest.mark.parametrize("message", ["rate limit exceeded", "invalid api key", "", None, "prompt was fine"])
def test_c9_other_errors_are_not_prompt_too_long(message: str | None) -> None:
    """C9: anything else fails the turn normally (no retry)."""
    assert not is_prompt_too_long(message)


def test_c9_fallback_view_for_the_retry_matches_fallback_window() -> None:
    """C9: the prompt-too-long retry sends the C8 window, as a RequestView with provenance and the reason."""
    from mxclaw_nb.context import build_fallback_view

    msgs = session()
    view = build_fallback_view(msgs, ContextPolicy(1_000_000, 0.8, 8_000), "provider said: context length exceeded")
    assert view.stage == "fallback" and view.error == "provider said: context length exceeded"
    assert view.messages == fallback_window(msgs)
    assert view.event()["stage"] == "fallback" and view.event()["summary"].startswith("[fallback context window]")
    assert [r.action for r in view.provenance.after] == ["kept", "kept", "summary"] + ["kept"] * 6
    check_pairing(view.messages)
    with pytest.raises(ValueError, match="nothing to send"):
        build_fallback_view([], ContextPolicy(1_000, 0.8, 100), "x")


def test_c8_fallback_tokens_are_estimates_of_what_is_sent() -> None:
    """C8/C10: after_tokens of a fallback view is the estimate of the sent window."""
    from mxclaw_nb.context import estimate_messages

    view = build_request_view(session(), ContextPolicy(2_000, 0.8, 300), summarize=boom)
    assert view.after_tokens == estimate_messages(view.messages) < view.before_tokens


def test_c9_engine_and_provider_share_one_classifier() -> None:
    """C9: the provider's error kind and the loop's retry decision come from the same function."""
    from mxclaw_nb.provider import errors

    assert errors.is_prompt_too_long is is_prompt_too_long
