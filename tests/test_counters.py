"""SPEC T1/T2 (SPEC T2): pluggable token counters in mxclaw_nb.context.counters (pure, no tokenizer)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.context.counters import (
    MESSAGE_OVERHEAD_TOKENS,
    CalibratedCounter,
    EstimateCounter,
    FunctionCounter,
    TokenCounter,
    count_messages,
    messages_added_since,
)
from mxclaw_nb.context.tokens import estimate_messages, estimate_tokens

CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
SAMPLES = [
    {"role": "system", "content": "You are a careful coding agent."},
    {"role": "user", "content": "请修复登录页面的错误，谢谢！ Please fix it."},
    {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning": "long hidden thoughts " * 50},
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"lines": list(range(60))})},
    {"role": "user", "content": [{"type": "text", "text": "what is in this picture?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    {"role": "assistant", "content": "Done: the bug was in `login()`."},
]


def _filler(n_chars: int, role: str = "tool") -> dict:
    """A message whose C1 estimate is exactly n_chars / 4 (ASCII, multiple of 4)."""
    assert n_chars % 4 == 0
    return {"role": role, "tool_call_id": "x", "content": "a" * n_chars}


def test_t1_estimate_counter_is_exactly_c1():
    """T1: EstimateCounter is the C1 estimate, message by message and in total."""
    counter = EstimateCounter()
    assert counter.name == "estimate"
    assert [counter.count(m) for m in SAMPLES] == [estimate_tokens(m) for m in SAMPLES]
    assert count_messages(counter, SAMPLES) == estimate_messages(SAMPLES)


@pytest.mark.parametrize("counter", [EstimateCounter(), FunctionCounter("chars", len), CalibratedCounter()])
def test_t2_counters_satisfy_the_protocol(counter):
    """T2: every counter is a TokenCounter with a name and a per-message count."""
    assert isinstance(counter, TokenCounter)
    assert isinstance(counter.name, str) and counter.name
    assert all(isinstance(counter.count(m), int) and counter.count(m) >= 0 for m in SAMPLES)


def test_t2_function_counter_follows_c1_structure():
    """T2: FunctionCounter = framing + text + 2000 per image + tool-call JSON + name; reasoning ignored."""
    chars = FunctionCounter("chars", len)
    overhead = MESSAGE_OVERHEAD_TOKENS
    assert chars.count({"role": "user", "content": "hello"}) == overhead + 5
    assert chars.count(SAMPLES[1]) == overhead + len(SAMPLES[1]["content"])
    calls_json = json.dumps([CALL], separators=(",", ":"), ensure_ascii=False)
    assert chars.count(SAMPLES[2]) == overhead + len(calls_json)  # reasoning is never sent
    assert chars.count(SAMPLES[4]) == overhead + len("what is in this picture?") + 2000
    named = {"role": "tool", "tool_call_id": "c", "name": "think", "content": "ok"}
    assert chars.count(named) == overhead + 2 + len("think") + 1
    assert chars.count({"role": "user", "content": "x", "is_error": True, "attachments": ["big"]}) == overhead + 1
    assert FunctionCounter("chars", len, per_message=0).count({"role": "user", "content": "abc"}) == 3


def test_t2_function_counter_bad_input():
    """Bad input: a non-dict message counts 0 like C1; a bad counter definition is a clear ValueError."""
    chars = FunctionCounter("chars", len)
    assert chars.count("not a message") == 0  # type: ignore[arg-type]
    assert chars.count({"role": "user", "content": None}) == MESSAGE_OVERHEAD_TOKENS
    with pytest.raises(ValueError, match="non-empty name"):
        FunctionCounter("", len)
    with pytest.raises(ValueError, match="callable"):
        FunctionCounter("x", 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        FunctionCounter("x", len, per_message=-1)


def test_t2_calibrated_counter_learns_the_factor_from_reported_usage():
    """T2: a provider reporting 1.3x the estimate gives factor 1.3 and counts ceil(estimate * 1.3)."""
    sent = SAMPLES[:4]
    est = estimate_messages(sent)
    fresh = CalibratedCounter()
    assert not fresh.calibrated and fresh.factor == 1.0
    assert [fresh.count(m) for m in SAMPLES] == [estimate_tokens(m) for m in SAMPLES]
    learned = fresh.observe(sent, round(est * 1.3))
    assert learned.calibrated and learned.reports == 1
    assert learned.factor == pytest.approx(round(est * 1.3) / est)
    for m in SAMPLES:
        assert learned.count(m) == math.ceil(estimate_tokens(m) * learned.factor - 1e-9)
    assert "x1.30" in learned.label


def test_t2_calibrated_counter_is_immutable():
    """T2: observe returns a new counter; the original keeps its factor; fields cannot be assigned."""
    fresh = CalibratedCounter()
    learned = fresh.observe(SAMPLES, 2 * estimate_messages(SAMPLES))
    assert learned is not fresh
    assert fresh.factor == 1.0 and fresh.reports == 0 and fresh.ratios == ()
    assert learned.factor == pytest.approx(2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        learned.factor = 3.0  # type: ignore[misc]
    assert fresh.observe(SAMPLES, None) is fresh  # no usage reported: nothing learned
    assert fresh.observe(SAMPLES, 0) is fresh


def test_t2_segments_cancel_fixed_request_overhead():
    """T2: the factor comes from what was added between reports, so tool-schema overhead cancels out."""
    system = [{"role": "system", "content": "s" * 4000}]          # estimate 1000
    schemas = 1500                                                # tokens of tool schemas, in every report
    first = CalibratedCounter().observe(system, 1000 + schemas)   # bootstrap ratio 2.5: errs high
    assert first.factor == pytest.approx(2.5)
    turn = [*system, _filler(2000)]                               # +500 estimated, provider charges 750
    second = first.observe(turn, 1000 + schemas + 750)
    assert second.ratios == (pytest.approx(1.5),)
    assert second.factor == pytest.approx(1.5)
    assert first.factor == pytest.approx(2.5)                     # unchanged


def test_t2_small_segments_accumulate_until_measurable():
    """T2: additions below min_segment keep the anchor; the next report measures the combined segment."""
    base = [_filler(800)]                                         # 200 estimated
    c = CalibratedCounter(min_segment=64).observe(base, 200)
    tiny = [*base, _filler(40)]                                   # +10: too small to measure
    c2 = c.observe(tiny, 200 + 50)                                # ratio 5 would be pure noise
    assert c2.ratios == () and c2.factor == 1.0 and c2.reports == 2
    more = [*tiny, _filler(360)]                                  # +90 more: segment of 100 since the anchor
    c3 = c2.observe(more, 200 + 50 + 100)
    assert c3.ratios == (pytest.approx(1.5),)


def test_t2_compacted_view_reanchors_without_a_ratio():
    """T2: a report for a view that is not an extension (compaction) only becomes the new anchor."""
    a = [_filler(4000)]
    c = CalibratedCounter().observe(a, 1000).observe([*a, _filler(4000)], 2400)
    assert c.ratios == (pytest.approx(1.4),)
    compacted = [{"role": "system", "content": "[compressed conversation context] ..."}, _filler(400)]
    c2 = c.observe(compacted, 40)
    assert c2.ratios == c.ratios and c2.factor == c.factor
    c3 = c2.observe([*compacted, _filler(4000)], 40 + 1000 * 2)
    assert c3.ratios == (pytest.approx(1.4), pytest.approx(2.0)) and c3.factor == pytest.approx(2.0)


def test_t2_floor_and_window():
    """T2: the factor never goes below the floor (1.0: never below C1) and old ratios leave the window."""
    sent = [_filler(4000)]
    assert CalibratedCounter().observe(sent, 500).factor == 1.0
    assert CalibratedCounter(floor=0.25).observe(sent, 500).factor == pytest.approx(0.5)
    c = CalibratedCounter(window=2).observe(sent, 1000)
    view = list(sent)
    reported = 1000
    for ratio in (3.0, 1.2, 1.1):
        view = [*view, _filler(400)]
        reported += round(100 * ratio)
        c = c.observe(view, reported)
    assert c.ratios == (pytest.approx(1.2), pytest.approx(1.1))
    assert c.factor == pytest.approx(1.2)


def test_t2_anchored_total_is_report_plus_calibrated_new_messages():
    """T2: anchored total = last reported prompt_tokens + calibrated counts of messages added since."""
    sent, new = SAMPLES[:3], SAMPLES[3:]
    c = CalibratedCounter().observe(sent, round(estimate_messages(sent) * 1.3))
    expected_new = sum(math.ceil(estimate_tokens(m) * c.factor - 1e-9) for m in new)
    assert c.anchored_total(sent, 5000, new) == 5000 + expected_new
    assert c.anchored_total(sent, 5000, []) == 5000
    assert c.anchored_total(sent, None, new) == count_messages(c, sent) + expected_new
    assert c.view_total(sent, 5000, SAMPLES) == 5000 + expected_new
    rebuilt = [{"role": "system", "content": "summary"}, *new]
    assert c.view_total(sent, 5000, rebuilt) == count_messages(c, rebuilt)


@pytest.mark.parametrize("bad", [-1, 1.5, "100", True])
def test_t2_bad_reported_usage_is_a_clear_error(bad):
    """Bad input: reported usage must be a non-negative int (or None)."""
    with pytest.raises(ValueError, match="reported_prompt_tokens"):
        CalibratedCounter().observe(SAMPLES, bad)
    with pytest.raises(ValueError, match="reported_prompt_tokens"):
        CalibratedCounter().anchored_total(SAMPLES, bad, [])


@pytest.mark.parametrize("kwargs", [{"factor": 0}, {"factor": float("nan")}, {"floor": -1.0},
                                    {"window": 0}, {"min_segment": 0}, {"base": object()}])
def test_t2_bad_calibrated_settings(kwargs):
    """Bad input: invalid calibration settings raise ValueError naming the field."""
    with pytest.raises(ValueError, match="CalibratedCounter"):
        CalibratedCounter(**kwargs)


def test_messages_added_since():
    """T2: the suffix after an unchanged prefix, None when the prefix changed or is longer."""
    assert messages_added_since(SAMPLES[:2], SAMPLES) == SAMPLES[2:]
    assert messages_added_since([], SAMPLES[:1]) == SAMPLES[:1]
    copies = [dict(m) for m in SAMPLES[:3]]
    assert messages_added_since(copies, SAMPLES) == SAMPLES[3:]       # equal values count as unchanged
    assert messages_added_since([SAMPLES[1]], SAMPLES) is None
    assert messages_added_since(SAMPLES, SAMPLES[:2]) is None


def test_t2_calibrated_over_a_calibrated_or_exact_base():
    """T2: the base is pluggable (e.g. an exact counter); counts scale that base."""
    chars = FunctionCounter("chars", len, per_message=0)
    c = CalibratedCounter(base=chars).observe([{"role": "user", "content": "a" * 100}], 150)
    assert c.factor == pytest.approx(1.5)
    assert c.count({"role": "user", "content": "b" * 10}) == 15


messages_st = st.lists(
    st.fixed_dictionaries({
        "role": st.sampled_from(["user", "assistant", "tool", "system"]),
        "content": st.one_of(st.none(), st.text(max_size=300)),
    }),
    min_size=1, max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(history=st.lists(st.tuples(messages_st, st.integers(0, 20_000)), min_size=1, max_size=6),
       probe=messages_st)
def test_t2_property_calibrated_never_below_c1(history, probe):
    """T2 property: with the default floor, calibrated counts and anchored totals never fall below C1."""
    counter, view = CalibratedCounter(), []
    for added, reported in history:
        view = [*view, *added]
        counter = counter.observe(view, reported)
        assert counter.factor >= 1.0
    for m in probe:
        assert counter.count(m) >= estimate_tokens(m)
    assert counter.anchored_total(view, None, probe) >= estimate_messages([*view, *probe])


def test_t2_counter_equality_tracks_what_changes_counts():
    """T2: equality (the engine's per-message cache key) = same base, factor and last usage report."""
    assert CalibratedCounter() == CalibratedCounter(factor=1.0)
    assert CalibratedCounter(base=FunctionCounter("chars", len)) != CalibratedCounter()
    assert EstimateCounter() == EstimateCounter()
    sent = [_filler(4000)]
    a = CalibratedCounter().observe(sent, 1300)
    assert a == a and hash(a) == hash(a)
    assert a != CalibratedCounter(factor=a.factor)          # it also knows what the provider saw
    assert a != CalibratedCounter().observe(sent, 1300)     # a different report, even with equal numbers


def test_t2_per_message_counts_reproduce_the_anchored_total():
    """T2: messages covered by the last report share its prompt_tokens; new ones are scaled by the factor,
    so summing per-message counts (what the engine does) gives the anchored total up to rounding."""
    system = {"role": "system", "content": "Policy. " * 500}              # C1 over-counts prose
    sent = [system, {"role": "user", "content": "book a flight"}, _filler(2000)]
    new = [{"role": "assistant", "content": "Checking."}, _filler(800)]
    c = CalibratedCounter().observe(sent[:2], 1100).observe(sent, 1100 + 900)   # segment ratio 900/500
    assert c.factor == pytest.approx(1.8)
    per_message = count_messages(c, [*sent, *new])
    anchored = c.anchored_total(sent, 2000, new)
    assert anchored <= per_message <= anchored + len(sent)
    assert sum(c.count(m) for m in sent) >= 2000
    # A message rewritten by compaction is no longer covered by the report: base * factor.
    rewritten = {**sent[2], "content": "[old tool output compacted: 2000 characters]"}
    assert c.count(rewritten) == math.ceil(estimate_tokens(rewritten) * 1.8 - 1e-9)
    # Copies of the sent dicts (the engine sanitises every build) are still recognised.
    assert c.count(dict(sent[0])) == c.count(sent[0]) < c.factor * estimate_tokens(sent[0])


def test_t2_observe_reuses_base_counts_of_reported_messages():
    """T2 (cost): a report re-counts only messages the previous report did not cover."""
    calls: list[str] = []

    def chars(text: str) -> int:
        calls.append(text)
        return len(text)

    base = FunctionCounter("chars", chars, per_message=0)
    view = [{"role": "user", "content": "u" * 100}, {"role": "tool", "tool_call_id": "t", "content": "t" * 200}]
    c = CalibratedCounter(base=base).observe(view, 400)
    assert len(calls) == 2
    c.observe([*view, {"role": "assistant", "content": "a" * 50}], 500)
    assert calls[2:] == ["a" * 50]


def test_t2_malformed_tool_calls_are_still_counted():
    """Bad input: tool calls with dict arguments or missing ids do not break calibrated counting."""
    odd = {"role": "assistant", "content": None,
           "tool_calls": [{"function": {"name": "f", "arguments": {"path": "a"}}}, "garbage"]}
    c = CalibratedCounter().observe([odd], 100)
    assert c.count(odd) >= estimate_tokens(odd)
    assert c.count(dict(odd)) == c.count(odd)


def test_calibrated_counts_the_same_message_object_and_an_equal_copy_alike() -> None:
    """T2: the calibrated counter finds a message of the last report by identity (the loop re-sends the same
    dicts) or by content (an equal copy), with the same count; a message replaced in place is not anchored."""
    sent = [{"role": "system", "content": "rules " * 50}, {"role": "user", "content": "fix the tests please"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3 failed " * 40}]
    counter = CalibratedCounter().observe(sent, 400)
    again = counter.observe(sent, 410)  # the next report re-uses the identity entries of this one
    for c in (counter, again):
        for m in sent:
            assert c.count(m) == c.count(copy.deepcopy(m))
    edited = sent[3]
    edited["content"] = "2 failed, 1 passed " * 20  # same dict, new content object: not what was reported
    assert again.count(edited) == again.count(copy.deepcopy(edited))
    assert again.count(edited) == math.ceil(EstimateCounter().count(edited) * again.factor - 1e-9)


def test_reports_of_one_chain_share_their_facts_and_stay_values() -> None:
    """T2, C7: a report that extends the last one adds only its new messages' facts (observe is O(new)); every
    counter still counts as one built alone, also after an older counter is extended again (a branch) and
    after a non-extending report (compaction) starts afresh."""
    def msg(i: int, n: int = 40) -> dict:
        return {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "x" * (n + i)}

    base = [msg(i) for i in range(6)]
    x, y, z = msg(100, 400), msg(101, 800), msg(102, 1200)
    a = CalibratedCounter().observe(base, 300)
    b = a.observe([*base, x], 600)
    c = a.observe([*base, y], 900)  # a branch off `a` (not the newest report of its chain)
    d = b.observe([*base, x, z], 1500)
    e = d.observe([z], 400)  # not an extension: a new chain
    refs = {  # the same counters, each built alone from a fresh chain
        "a": CalibratedCounter().observe(base, 300),
        "b": CalibratedCounter().observe(base, 300).observe([*base, x], 600),
        "c": CalibratedCounter().observe(base, 300).observe([*base, y], 900),
        "d": CalibratedCounter().observe(base, 300).observe([*base, x], 600).observe([*base, x, z], 1500),
    }
    refs["e"] = refs["d"].observe([z], 400)
    probes = [*base, x, y, z, dict(x), {"role": "user", "content": "unseen"}]
    for name, counter in {"a": a, "b": b, "c": c, "d": d, "e": e}.items():
        ref = refs[name]
        assert counter.factor == ref.factor, name
        assert [counter.count(m) for m in probes] == [ref.count(m) for m in probes], name
        assert dict(counter.last_report.index) == dict(ref.last_report.index), name
        assert len(counter.last_report.index) == len(ref.last_report.index), name
    assert b.last_report.ledger is d.last_report.ledger  # extended, not copied
    assert c.last_report.ledger is not b.last_report.ledger  # the branch got its own
