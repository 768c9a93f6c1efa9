"""SPEC C3: the safe tail is chosen by token budget, with exactly two exceptions, never by message count."""

from __future__ import annotations

from mxclaw_nb.context import ContextPolicy, build_request_view, estimate_tokens, safe_tail_start


def msg(role: str, tokens: int, **extra: object) -> dict:
    """A message whose C1 estimate is exactly `tokens` (4 ASCII characters per token)."""
    return {"role": role, "content": "x" * (4 * tokens), **extra}


def asst_call(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}} for i in ids]}


def start(conv: list[dict], keep: int) -> int:
    return safe_tail_start(conv, [estimate_tokens(m) for m in conv], keep)


def test_c3_budget_walk_from_the_end() -> None:
    """C3: messages join from the end while the running total stays <= keep_recent_tokens."""
    conv = [msg("user", 100), msg("assistant", 100), msg("user", 100), msg("assistant", 100)]
    assert start(conv, 250) == 2   # 100 + 100 fits, +100 = 300 does not
    assert start(conv, 300) == 1   # exactly at the budget is still within it
    assert start(conv, 10_000) == 0


def test_c3_walk_stops_at_the_first_message_that_does_not_fit() -> None:
    """C3: the walk stops; it does not skip a big message to pick up cheaper older ones."""
    conv = [msg("user", 10), msg("assistant", 500), msg("user", 10), msg("assistant", 10)]
    assert start(conv, 100) == 2


def test_c3_exception_a_last_message_always_kept_even_over_budget() -> None:
    """C3 (a): the last message is kept even when it alone is over budget, and nothing else joins."""
    conv = [msg("user", 1), msg("assistant", 5_000)]
    assert start(conv, 100) == 1
    assert start(conv, 0) == 1
    assert start([msg("user", 9_999)], 0) == 0


def test_c3_exception_b_tail_never_starts_on_a_tool_result() -> None:
    """C3 (b): a tail that would start on a tool result grows back to the assistant that issued the call."""
    conv = [msg("user", 10), asst_call("a", "b", "c"),
            msg("tool", 300, tool_call_id="a"), msg("tool", 300, tool_call_id="b"),
            msg("tool", 50, tool_call_id="c"), msg("assistant", 40)]
    # budget admits the last assistant (40) and result c (50) only: the tail would start on tool "c"
    s = start(conv, 100)
    assert s == 1 and conv[s]["role"] == "assistant"
    tail_tokens = sum(estimate_tokens(m) for m in conv[s:])
    assert tail_tokens > 100  # the exception is allowed to exceed the budget


def test_c3_exceptions_a_and_b_together() -> None:
    """C3 (a)+(b): the last message alone is a tool result over budget: its call comes along."""
    conv = [msg("user", 5), asst_call("a"), msg("tool", 9_000, tool_call_id="a")]
    assert start(conv, 10) == 1


def test_c3_never_last_n_messages() -> None:
    """C3: the number of messages in the tail follows their cost, not a fixed count."""
    cheap = [msg("user" if k % 2 == 0 else "assistant", 5) for k in range(40)]
    dear = [msg("user" if k % 2 == 0 else "assistant", 600) for k in range(40)]
    assert len(cheap) - start(cheap, 1_000) == 40
    assert len(dear) - start(dear, 1_000) == 1
    images = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}, msg("assistant", 5)]
    assert start(images, 1_000) == 1  # one image (2,000) is dearer than many lines of text


def test_c3_empty_conversation() -> None:
    """C3: no conversation messages -> an empty tail (start == len)."""
    assert safe_tail_start([], [], 100) == 0


def test_c3_pipeline_tail_excludes_system_messages_and_reports_input_position() -> None:
    """C3 in C0: system messages are not part of the walk; tail_start is the input position of its first message."""
    msgs = [msg("system", 3_000), msg("user", 500), msg("assistant", 500), msg("system", 3_000),
            msg("user", 500), msg("assistant", 500)]
    view = build_request_view(msgs, ContextPolicy(5_000, 0.8, 1_000), summarize=lambda old: "S")
    assert view.stage == "summary"
    assert view.tail_start == 4
    assert [m["role"] for m in view.messages] == ["system", "system", "system", "user", "assistant"]
    # the summary names the stored range it covers (C13): the old messages #1-#2 (the systems are not in it)
    assert view.messages[2]["content"] == "S\nRecall: #1-#2 are in the transcript (the recall tool reads them)."
