"""SPEC C1 (token estimate) and C2 (threshold): exact figures, worked out by hand from the SPEC formula.

C1: cjk_chars + ceil(other_chars / 4) + 2000 * images + ceil(len(compact json(tool_calls)) / 4), only
over fields that are sent. Each expected number below is derived in the comment beside it.
"""

from __future__ import annotations

import json

import pytest

from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view, estimate_messages, estimate_tokens
from mxclaw_nb.context.counters import FunctionCounter


def user(content: object) -> dict:
    return {"role": "user", "content": content}


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("abcd", 1),                      # 4 other chars -> 1
    ("hello", 2),                     # ceil(5/4)
    ("你好世界", 4),                   # 4 Han
    ("你好 world", 4),                 # 2 Han + ceil(6/4)=2
    ("㐀䶵", 2),                       # Han extension A
    ("𠀀𪜀𫝀", 3),                      # Han extensions B, C, D (astral plane: one char each)
    ("𰀀", 1),                         # Han extension G
    ("豈", 1),                         # CJK compatibility ideograph
    ("ひらがなカタカナ", 8),            # hiragana + katakana
    ("ｶﾀｶﾅ", 4),                      # half-width katakana
    ("안녕하세요", 5),                  # hangul syllables
    ("가ㄱ", 3),                      # hangul jamo + compatibility jamo
    ("。、「」", 4),                   # CJK symbols and punctuation
    ("ＡＢＣ１２３！", 7),              # full-width forms
    ("ééé", 1),                       # accented Latin is not CJK: ceil(3/4)
    ("😀😀😀😀😀", 2),                 # emoji are not CJK: ceil(5/4)
    ("Привет", 2),                    # Cyrillic: ceil(6/4)
])
def test_c1_text_estimate_cjk_and_other(text: str, expected: int) -> None:
    """C1: CJK (Han incl. extensions, kana, hangul, CJK punctuation, full-width) is 1 token per char."""
    assert estimate_tokens(user(text)) == expected


def test_c1_images_cost_2000_each_and_parts_text_adds_up() -> None:
    """C1: each image part is 2,000 tokens; the text parts' characters are counted together."""
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 10_000}}
    msg = user([{"type": "text", "text": "look "}, img, {"type": "text", "text": "at 图片"}, img])
    # text "look at 图片": 2 Han + ceil(8/4)=2 -> 4; two images -> 4000; the data URL itself is not text
    assert estimate_tokens(msg) == 4_004
    assert estimate_tokens(user([img])) == 2_000


def test_c1_reasoning_and_stored_only_fields_are_not_counted() -> None:
    """C1: only fields that are sent count: reasoning, is_error, attachments are display/storage only."""
    plain = {"role": "assistant", "content": "abcdefgh"}
    extra = {**plain, "reasoning": "r" * 10_000, "is_error": True, "attachments": [{"path": "x.png"}] * 3}
    assert estimate_tokens(plain) == 2
    assert estimate_tokens(extra) == 2


def test_c1_tool_call_json_is_compact_with_non_ascii_kept() -> None:
    """C1: tool calls count ceil(len(json)/4) of the compact JSON, non-ASCII characters kept as-is."""
    args = json.dumps({"path": "文件.py", "text": "你好"}, ensure_ascii=False)
    calls = [{"id": "c1", "type": "function", "function": {"name": "edit_file", "arguments": args}}]
    # compact JSON of `calls` is 117 chars (with ", " separators 125, ASCII-escaped 137): ceil(117/4) = 30;
    # the content "好的" adds 2 CJK tokens. CJK inside the JSON counts as characters of the JSON (not 1 each).
    assert len(json.dumps(calls, separators=(",", ":"), ensure_ascii=False)) == 117
    assert estimate_tokens({"role": "assistant", "content": "好的", "tool_calls": calls}) == 32
    assert estimate_tokens({"role": "assistant", "content": None, "tool_calls": calls}) == 30


def test_c1_content_none_and_empty_count_zero() -> None:
    """C1: a message with no text, images or calls costs nothing (no per-message overhead in C1)."""
    assert estimate_tokens(user(None)) == 0
    assert estimate_tokens({"role": "tool", "tool_call_id": "x", "content": ""}) == 0


def test_c1_tool_result_counts_its_text_only() -> None:
    """C1: a tool message counts its content; tool_call_id is not part of the formula."""
    assert estimate_tokens({"role": "tool", "tool_call_id": "a-very-long-call-id-0123456789", "content": "x" * 9}) == 3


def test_c1_request_estimate_is_the_sum() -> None:
    """C1: the request estimate is the sum over messages."""
    msgs = [user("你好"), {"role": "assistant", "content": "abcde"}, user(None)]
    assert estimate_messages(msgs) == 2 + 2 + 0


def test_c1_estimate_of_view_matches_sent_messages_in_pipeline() -> None:
    """C1 via C0: before/after tokens of an unchanged view are the estimate of what is sent."""
    msgs = [{"role": "system", "content": "系统"}, user("hello 世界"), {"role": "assistant", "content": "ok",
                                                                   "reasoning": "x" * 400}]
    view = build_request_view(msgs, ContextPolicy(1_000, 0.8, 100))
    assert view.before_tokens == view.after_tokens == 2 + (2 + 2) + 1


def test_token_cache_recounts_only_new_messages() -> None:
    """C1: a kept TokenCache makes a rebuild after one append estimate just the grown part
    (the new message, and at most the last message before it, where repair planning resumes)."""
    counted: list[str] = []

    class Counting:  # a counter that notes what it was asked to count
        name = "counting"

        def count(self, message: dict) -> int:
            counted.append(message["content"])
            return estimate_tokens(message)

    msgs = [user(f"message {k}") for k in range(50)]
    cache = TokenCache()
    policy = ContextPolicy(100_000, 0.8, 1_000, counter=Counting())
    first = build_request_view(msgs, policy, cache=cache)
    assert sorted(counted) == sorted(f"message {k}" for k in range(50))
    counted.clear()
    msgs.append(user("one more"))
    second = build_request_view(msgs, policy, cache=cache)
    assert "one more" in counted and len(counted) <= 2, "only the grown part is counted again"
    assert second.before_tokens == first.before_tokens + estimate_tokens(msgs[-1])


def test_token_cache_counts_only_new_messages_with_a_counter() -> None:
    """With a real counter (slow: a tokenizer) a kept cache calls it once per new message, even when the
    transcript is a new list (no prefix to reuse: the per-message entries answer)."""
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    msgs = [user(f"message {k}") for k in range(50)]
    cache = TokenCache()
    policy = ContextPolicy(100_000, 0.8, 1_000, counter=FunctionCounter("chars", count))
    build_request_view(msgs, policy, cache=cache)
    assert len(calls) == 50
    grown = [*msgs, user("one more")]  # a new list of the same dicts: per-message entries, not the prefix
    view = build_request_view(grown, policy, cache=cache)
    assert calls[50:] == ["one more"]
    assert view.before_tokens == build_request_view(grown, policy).before_tokens


def test_token_cache_notices_replaced_content() -> None:
    """The cache must not serve a stale count when a message's content object is replaced in place."""
    msgs = [user("short")]
    cache = TokenCache()
    policy = ContextPolicy(100_000, 0.8, 1_000)
    assert build_request_view(msgs, policy, cache=cache).before_tokens == 2
    msgs[0]["content"] = "x" * 400
    assert build_request_view(msgs, policy, cache=cache).before_tokens == 100


@pytest.mark.parametrize(("window", "ratio", "expected"), [
    (64_000, 0.8, 51_200),
    (1_001, 0.5, 500),      # floor(500.5)
    (100, 0.29, 29),        # float 0.29 * 100 = 28.999...: the floor must not lose a token to binary error
    (10, 0.333, 3),
    (128_000, 1.0, 128_000),
    (7, 0.8, 5),            # floor(5.6)
])
def test_c2_threshold_is_floor_of_window_times_ratio(window: int, ratio: float, expected: int) -> None:
    """C2: threshold = floor(context_window_tokens * threshold_ratio)."""
    assert ContextPolicy(window, ratio, 0).threshold == expected


def test_c2_default_ratio_is_0_8() -> None:
    """C2: the default ratio is 0.8 (and the default tail budget C3 is 8,000)."""
    policy = ContextPolicy(context_window_tokens=10_000)
    assert policy.threshold_ratio == 0.8 and policy.threshold == 8_000 and policy.keep_recent_tokens == 8_000


@pytest.mark.parametrize("kwargs", [
    {"context_window_tokens": 0}, {"context_window_tokens": -5}, {"context_window_tokens": 1.5},
    {"context_window_tokens": 100, "threshold_ratio": 0}, {"context_window_tokens": 100, "threshold_ratio": 1.2},
    {"context_window_tokens": 100, "keep_recent_tokens": -1},
])
def test_c2_bad_policy_values_raise_clear_value_error(kwargs: dict) -> None:
    """Bad configuration is a clear ValueError naming the field."""
    with pytest.raises(ValueError, match=next(iter(kwargs)) if len(kwargs) == 1 else "threshold_ratio|keep_recent"):
        ContextPolicy(**kwargs)


def test_c2_at_threshold_is_unchanged_one_above_compacts() -> None:
    """C2: estimate <= threshold sends the transcript unchanged, with no summary and no event."""
    base = [{"role": "system", "content": "s" * 40}, user("u" * 40),
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "r", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "r", "content": "t" * 400}, user("next")]
    total = estimate_messages(base)
    at = build_request_view(base, ContextPolicy(total, 1.0, 1))
    assert at.stage == "unchanged" and at.summary is None and at.event() is None and at.after_tokens == total
    over = build_request_view(base, ContextPolicy(total - 1, 1.0, 1))
    assert over.stage == "micro" and over.event() is not None


def test_rows_notice_in_place_edits_under_a_session_cache() -> None:
    """C10, N3: a view's rows (its lineage's, rebuilt from the messages) describe an old message whose content
    is replaced or whose error flag is set in place afresh, even when the session's cache kept its counts."""
    msgs = [user("start"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "all good"}]
    cache = TokenCache()
    policy = ContextPolicy(100_000, 0.8, 1_000)
    first = build_request_view(msgs, policy, cache=cache).provenance.before[2]
    assert (first.failure, first.preview) == (False, "all good")
    msgs[2]["is_error"] = True
    msgs.append(user("again"))
    assert build_request_view(msgs, policy, cache=cache).provenance.before[2].failure is True
    msgs[2]["content"] = "Permission denied: /etc"
    msgs.append(user("once more"))
    row = build_request_view(msgs, policy, cache=cache).provenance.before[2]
    assert (row.preview, row.chars) == ("Permission denied: /etc", 23)
