"""Hypothesis property tests of the DESIGN.md invariants over hundreds of random, partly broken transcripts.

Transcripts mix well-formed call blocks with dangling calls, orphan and duplicate results, ids reused
across turns, missing/unknown roles, non-dict entries, None content, odd content parts, CJK text,
images, failure markers and stored-only fields. For each, `oracle.build_and_check` asserts: the input is
never mutated; every tool message follows its call block and every call has exactly one result; only
sendable keys; system messages survive the summary path; after_tokens <= threshold unless over_threshold
has an allowed reason (or the stage is fallback); byte-identical output; under the threshold the view is
the sanitised repaired transcript; and the stage reached is the first one the SPEC allows (C0).
"""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb.context import (
    ContextPolicy,
    TokenCache,
    build_request_view,
    estimate_messages,
    estimate_tokens,
    repair_tool_call_transcript,
)

from .oracle import build_and_check, check_pairing, check_sent_shape, micro_figures, oracle_repair

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])
CJK = "你好世界修复测试漢字㐀𠀀ひらがなカタカナ안녕하세요。、ＡＢＣ"
IDS = st.sampled_from(["a", "b", "c", "call_1", 7])

short_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=CJK + "abc \n", max_size=40),
    st.sampled_from(["Tool failed: boom", "INVALID argument", "permission Denied", "forbidden command", "ok"]),
)
big_text = st.builds(lambda ch, n: ch * n, st.sampled_from(["x", "长", "é", "line\n"]), st.integers(0, 6_000))
text = st.one_of(short_text, big_text)
tool_output = st.one_of(text, st.builds(lambda n: "output line\n" * n, st.integers(100, 1_500)))  # compactable
image = st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
part = st.one_of(st.builds(lambda t: {"type": "text", "text": t}, text), image, st.integers(), st.none(),
                 st.builds(lambda t: {"text": t}, short_text), st.just({"type": "text", "text": None}))
content = st.one_of(st.none(), text, st.lists(part, max_size=4), st.builds(lambda t: {"error": t}, text))
args = st.one_of(st.just("{}"), st.just("{not json"), st.builds(
    lambda p: json.dumps({"path": p}, ensure_ascii=False), st.sampled_from(["a.py", "目录/文件.py", ""])))
call = st.one_of(
    st.builds(lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
              IDS, st.sampled_from(["edit_file", "write_file", "bash", "read_file"]), args),
    st.builds(lambda n: {"function": {"name": n, "arguments": "{}"}}, st.sampled_from(["bash", "edit_file"])),
    st.just("not a call"),
)
extras = st.fixed_dictionaries({}, optional={"reasoning": short_text, "is_error": st.booleans(),
                                             "attachments": st.just([{"path": "a.png"}]), "name": st.just("n")})


def with_extras(base: dict, more: dict) -> dict:
    return {**base, **more}


system = st.builds(lambda r, t: {"role": r, "content": t}, st.sampled_from(["system", "developer"]), text)
user = st.builds(lambda c, e: with_extras({"role": "user", "content": c}, e), content, extras)
assistant = st.builds(lambda c, calls, e: with_extras(
    {"role": "assistant", "content": c, **({"tool_calls": calls} if calls else {})}, e),
    content, st.lists(call, max_size=3), extras)
tool = st.builds(lambda i, c, e: with_extras({"role": "tool", "tool_call_id": i, "content": c}, e),
                 st.one_of(IDS, st.none()), content, extras)
junk = st.one_of(st.just({"role": "robot", "content": "x"}), st.just({"content": "no role"}), st.none(),
                 st.just("a string"), st.just({"role": None}))


@st.composite
def call_block(draw: st.DrawFn) -> list[dict]:
    """An assistant call block whose results are shuffled, partly missing, duplicated or foreign."""
    ids = draw(st.lists(IDS, min_size=1, max_size=3))
    calls = [{"id": i, "type": "function", "function": {"name": draw(st.sampled_from(["edit_file", "bash"])),
                                                        "arguments": draw(args)}} for i in ids]
    msgs = [{"role": "assistant", "content": draw(st.one_of(st.none(), short_text)), "tool_calls": calls}]
    result_ids = draw(st.lists(st.one_of(st.sampled_from(ids), IDS), max_size=4))
    msgs += [{"role": "tool", "tool_call_id": i, "content": draw(tool_output), **draw(extras)} for i in result_ids]
    return msgs


step = st.one_of(
    st.builds(lambda m: [m], st.one_of(system, user, user, assistant, assistant, tool, junk)),
    call_block(), call_block(),
)
transcripts = st.builds(lambda steps: [m for s in steps for m in s], st.lists(step, max_size=25))
policies = st.builds(ContextPolicy, st.integers(50, 30_000), st.sampled_from([0.3, 0.5, 0.8, 0.95, 1.0]),
                     st.integers(0, 4_000))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list, ContextPolicy]:
    """A transcript and a policy: half fully random, half sized to the transcript so that every stage
    (unchanged, micro, summary under and over the threshold, fallback) is reached often."""
    messages = draw(transcripts)
    if draw(st.booleans()):
        return messages, draw(policies)
    total = max(1, estimate_messages([m for m in messages if isinstance(m, dict)]))
    ratio = draw(st.sampled_from([0.5, 0.8, 1.0]))
    window = max(1, int(total * draw(st.one_of(st.floats(0.05, 1.3), st.floats(0.3, 0.9))) / ratio))
    return messages, ContextPolicy(window, ratio, int(total * draw(st.floats(0, 0.3))))


def boom(old: list[dict]) -> str:
    raise RuntimeError("compactor failed")


def has_usable(messages: list) -> bool:
    return bool(repair_tool_call_transcript(messages))


@FAST
@given(cases(), st.sampled_from([None, None, boom, lambda old: "custom summary 摘要"]))
def test_invariants_hold_for_random_broken_transcripts(case: tuple[list, ContextPolicy], summarize) -> None:
    """DESIGN invariants + C0 stage order on random partly broken transcripts, at random policies."""
    messages, policy = case
    if not has_usable(messages):
        return  # covered by the ValueError test below
    view = build_and_check(messages, policy, summarize)
    if view.over_threshold:
        assert view.stage in ("unchanged", "summary", "fallback")


@settings(max_examples=100, deadline=None)
@given(transcripts)
def test_value_error_exactly_when_nothing_usable(messages: list) -> None:
    """Bad input: ValueError only when repair leaves nothing to send."""
    try:
        build_request_view(messages, ContextPolicy(1_000, 0.8, 100))
    except ValueError as exc:
        assert not has_usable(messages) and "nothing to send" in str(exc)
    else:
        assert has_usable(messages)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.lists(st.one_of(user, assistant, tool, call_block().map(tuple)), max_size=5))
def test_c7_iterations_keep_invariants_and_pin_earlier_system_messages(case: tuple[list, ContextPolicy],
                                                                         appended: list) -> None:
    """C7: the next iteration's input is the current view + new messages; invariants hold again and the
    system messages of the first view (incl. a summary) are still sent, in order, unless C8 applies."""
    messages, policy = case
    if not has_usable(messages):
        return
    flat = [m for a in appended for m in (a if isinstance(a, tuple) else [a])]
    first = build_request_view(messages, policy)
    second = build_and_check(first.next_input(flat), policy)
    if second.stage != "fallback":
        pinned = [m for m in first.messages if m["role"] in ("system", "developer")]
        sent = [m for m in second.messages if m["role"] in ("system", "developer")]
        assert sent[: len(pinned)] == pinned


@FAST
@given(transcripts)
def test_repair_is_idempotent_and_pairs_every_call(messages: list) -> None:
    """C4: repaired output pairs every call; repairing again changes nothing."""
    once = repair_tool_call_transcript(messages)
    assert repair_tool_call_transcript(once) == once
    view = build_request_view(once, ContextPolicy(10_000_000, 1.0, 0)) if once else None
    if view is not None:
        check_sent_shape(view.messages)
        check_pairing(view.messages)
        assert not view.repaired


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=CJK, max_size=60), st.text(alphabet="abcdefghij \n{}\"é😀", max_size=60), st.randoms())
def test_c1_estimate_is_cjk_plus_quarter_of_the_rest(cjk: str, other: str, rnd) -> None:
    """C1: any interleaving of CJK and other characters costs cjk + ceil(other / 4)."""
    chars = list(cjk + other)
    rnd.shuffle(chars)
    assert estimate_tokens({"role": "user", "content": "".join(chars)}) == len(cjk) + math.ceil(len(other) / 4)


@FAST
@given(transcripts)
def test_c1_request_estimate_is_additive(messages: list) -> None:
    """C1: the request estimate is the sum of the per-message estimates."""
    dicts = [m for m in messages if isinstance(m, dict)]
    assert estimate_messages(dicts) == sum(estimate_tokens(m) for m in dicts)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_incremental_cache_gives_identical_views(case: tuple[list, ContextPolicy]) -> None:
    """C1: growing a transcript one message at a time with one TokenCache = cold builds."""
    messages, policy = case
    cache = TokenCache()
    grown: list = []
    for m in messages:
        grown.append(m)
        if not has_usable(grown):
            continue
        warm = build_request_view(grown, policy, cache=cache)
        cold = build_request_view(grown, policy)
        assert json.dumps(warm.messages) == json.dumps(cold.messages)
        assert (warm.stage, warm.before_tokens, warm.after_tokens) == (cold.stage, cold.before_tokens,
                                                                       cold.after_tokens)
        assert warm.provenance == cold.provenance  # rows from the cache's per-message memo = rows made afresh


any_str = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
raw_call = st.one_of(
    st.fixed_dictionaries({"id": any_str, "type": st.just("function"),
                           "function": st.fixed_dictionaries({"name": any_str, "arguments": any_str})}),
    st.fixed_dictionaries({"id": st.one_of(any_str, st.integers(), st.none())},
                          optional={"function": st.dictionaries(st.sampled_from(["name", "arguments", "x"]),
                                                                st.one_of(any_str, st.integers())),
                                    "type": any_str, "extra": any_str}),
    any_str,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), any_str), st.lists(raw_call, min_size=1, max_size=4))
def test_c1_tool_calls_cost_a_quarter_token_per_compact_json_character(text: str | None, calls: list) -> None:
    """C1: ceil(len(json(tool_calls, separators=(",", ":"), ensure_ascii=False)) / 4) of the sent calls."""
    from mxclaw_nb.messages import sanitize

    msg = {"role": "assistant", "content": text, "tool_calls": calls}
    sent_calls = sanitize(msg)["tool_calls"]
    call_tokens = math.ceil(len(json.dumps(sent_calls, separators=(",", ":"), ensure_ascii=False)) / 4)
    assert estimate_tokens(msg) == estimate_tokens({"role": "assistant", "content": text}) + call_tokens


@st.composite
def agent_session(draw: st.DrawFn) -> list[dict]:
    """A well-formed agent session: goals, calls, big/short/failed results, notes (no repair needed)."""
    msgs: list[dict] = [{"role": "system", "content": draw(text)}]
    for k in range(draw(st.integers(1, 12))):
        msgs.append({"role": "user", "content": draw(short_text)})
        msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), short_text)), "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": draw(args)}}]})
        result = draw(st.one_of(tool_output, tool_output, st.just("ok")))
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": result, **draw(extras)})
        if draw(st.booleans()):
            msgs.append({"role": "assistant", "content": draw(text)})
    return msgs


@FAST
@given(agent_session(), st.integers(0, 3_000), st.data())
def test_c5_micro_is_chosen_exactly_when_placeholders_suffice(messages: list, keep: int, data) -> None:
    """C0/C5: with the threshold between the micro view and the full view, the stage is `micro`; below the
    micro view, the summary path runs (C6), and its view is sent when it is smaller than what it replaces (else
    the view goes on unchanged and says the summary had nothing to gain); the view follows the SPEC in all cases."""
    before, after_micro = micro_figures(messages, keep)
    if after_micro >= before:
        return  # nothing replaceable before the tail
    threshold = data.draw(st.integers(after_micro, before - 1), label="threshold")
    view = build_and_check(messages, ContextPolicy(threshold, 1.0, keep))
    assert view.stage == "micro" and view.after_tokens == after_micro
    if after_micro > 1:
        below = build_and_check(messages, ContextPolicy(after_micro - 1, 1.0, keep))
        if below.no_gain is None:
            assert below.stage == "summary" and below.after_tokens < below.before_tokens
        else:  # e.g. a tiny transcript whose C6 scaffold is longer than the messages it would replace
            assert below.stage == "unchanged" and below.after_tokens == before
            assert below.no_gain["stage"] == "summary"
            assert below.no_gain["after_tokens"] >= below.no_gain["before_tokens"]


def test_c5_c6_a_summary_longer_than_what_it_replaces_is_not_sent() -> None:
    """C5/C6 (the example Hypothesis found): placeholders are not enough and the C6 scaffold is longer than the
    few messages it would replace, so the view goes on unchanged and says the summary had nothing to gain."""
    call = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c0", "content": "x" * 57}, {"role": "assistant", "content": ""}]
    before, after_micro = micro_figures(messages, 0)
    assert after_micro < before
    view = build_and_check(messages, ContextPolicy(after_micro - 1, 1.0, 0))
    assert view.stage == "unchanged" and view.after_tokens == before
    assert view.no_gain is not None and view.no_gain["stage"] == "summary"
    assert view.no_gain["after_tokens"] >= view.no_gain["before_tokens"]


odd_assistant = st.builds(lambda c, calls, e: with_extras({"role": "assistant", "content": c, "tool_calls": calls}, e),
                          st.one_of(st.none(), any_str, content), st.one_of(st.lists(raw_call, max_size=3), raw_call),
                          extras)


@FAST
@given(st.builds(lambda a, b: a + b, transcripts, st.lists(odd_assistant, max_size=4)))
def test_one_pass_plan_sanitises_and_estimates_exactly_like_the_reference(messages: list) -> None:
    """C1/C4: the cold build's one-pass plan (inline fast paths for the usual shapes) gives, for every
    step, exactly `sanitize(message)` (same keys, same order) and `estimate_sent` of it, in fresh dicts."""
    from mxclaw_nb.context.repair import plan_counted, plan_steps
    from mxclaw_nb.context.tokens import estimate_sent
    from mxclaw_nb.messages import sanitize

    plan = plan_counted(messages)
    steps, dropped, sent, tokens = plan.steps, plan.dropped, plan.sent, plan.tokens
    assert [src for src, _ in steps] == [src for src, _ in oracle_repair(messages)]
    assert (steps, dropped) == plan_steps(messages)
    assert len(steps) == len(sent) == len(tokens)
    for (_, message), out, n in zip(steps, sent, tokens, strict=True):
        assert json.dumps(out) == json.dumps(sanitize(message))
        assert n == estimate_sent(out) == estimate_tokens(message)
        assert out is not message
        originals = message.get("tool_calls") if message.get("role") == "assistant" else None
        originals = originals if isinstance(originals, list) else [originals]
        for call, original in zip(out.get("tool_calls") or [], originals, strict=False):
            assert call is not original
            assert not isinstance(original, dict) or call["function"] is not original.get("function")


@settings(max_examples=1_000, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=CJK + "abc，（）\ufff0\uffef\u2e7f\u2e80\u4dc0\u4dbf\ud800", max_size=80),
                 st.text(alphabet=st.characters(min_codepoint=0x1000, max_codepoint=0x3_2400), max_size=60)))
def test_c1_cjk_count_matches_the_one_character_class(text: str) -> None:
    """C1: the fast CJK count (BMP-only class, Latin-1 shortcut) counts exactly what CJK_PATTERN matches."""
    from mxclaw_nb.context.tokens import CJK_PATTERN, count_cjk, estimate_text

    assert count_cjk(text) == len(CJK_PATTERN.findall(text))
    cjk = len(CJK_PATTERN.findall(text))
    assert estimate_text(text) == cjk + math.ceil((len(text) - cjk) / 4)


@FAST
@given(cases())
def test_c10_stored_provenance_expands_to_exactly_the_live_rows(case: tuple[list, ContextPolicy]) -> None:
    """C10 storage: the compact form stored per request (after rows that repeat their before row kept as an
    index) expands, after a JSON round trip, to exactly the records form of the live view."""
    messages, policy = case
    if not has_usable(messages):
        return
    from mxclaw_nb.context.view import Provenance
    from mxclaw_nb.store.provenance import decode_provenance, encode_provenance, provenance_rows

    view = build_request_view(messages, policy)
    stored = json.loads(json.dumps(encode_provenance(view.provenance), ensure_ascii=False))
    assert provenance_rows(stored) == json.loads(json.dumps(view.provenance.to_records(), ensure_ascii=False))
    rebuilt = Provenance.from_rows(view.provenance.before, view.provenance.after)  # rows -> the same columns
    assert rebuilt == view.provenance and encode_provenance(rebuilt) == encode_provenance(view.provenance)
    assert decode_provenance(stored).to_records() == provenance_rows(stored)


@FAST
@given(cases(), st.sampled_from([None, boom]))
def test_t3_view_carries_the_c1_estimate_of_what_is_sent_under_any_counter(case: tuple[list, ContextPolicy],
                                                                           summarize) -> None:
    """T3: with another counter in the policy the view still reports the C1 estimate of its sent messages
    (the request record stores both), on every path; with the C1 estimate it is after_tokens itself."""
    from dataclasses import replace

    from mxclaw_nb.context.counters import FunctionCounter

    messages, policy = case
    if not has_usable(messages):
        return
    kwargs = {} if summarize is None else {"summarize": summarize}
    counted = replace(policy, counter=FunctionCounter("chars", len))
    cache = TokenCache()
    for view in (build_request_view(messages, counted, **kwargs),
                 build_request_view(messages, counted, cache=cache, **kwargs),
                 build_request_view(messages, counted, cache=cache, **kwargs)):
        assert view.after_estimate == estimate_messages(view.messages)
    plain = build_request_view(messages, policy, **kwargs)
    assert plain.after_estimate == plain.after_tokens == estimate_messages(plain.messages)


@settings(max_examples=100, deadline=None)
@given(cases(), st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=40))
def test_incremental_cache_with_a_changing_counter_gives_identical_views(case: tuple[list, ContextPolicy],
                                                                         switches: list[int]) -> None:
    """C1/T3: one TokenCache across builds whose counter changes from call to call (as the
    calibrated counter does after every usage report): every view equals a cold build with that counter."""
    from dataclasses import replace

    from mxclaw_nb.context.counters import FunctionCounter

    messages, policy = case
    counters = [None, FunctionCounter("chars", len), FunctionCounter("words", lambda t: len(t.split()))]
    cache = TokenCache()
    grown: list = []
    for step, m in enumerate(messages):
        grown.append(m)
        if not has_usable(grown):
            continue
        counted = replace(policy, counter=counters[switches[step % len(switches)]])
        warm = build_request_view(grown, counted, cache=cache)
        cold = build_request_view(grown, counted)
        assert json.dumps(warm.messages) == json.dumps(cold.messages)
        assert (warm.stage, warm.before_tokens, warm.after_tokens, warm.after_estimate) == (
            cold.stage, cold.before_tokens, cold.after_tokens, cold.after_estimate)


def _same_view(warm, cold) -> None:
    assert json.dumps(warm.messages, ensure_ascii=False) == json.dumps(cold.messages, ensure_ascii=False)
    assert (warm.stage, warm.before_tokens, warm.after_tokens, warm.after_estimate, warm.tail_start, warm.summary,
            warm.over_threshold, warm.repaired) == (cold.stage, cold.before_tokens, cold.after_tokens,
                                                    cold.after_estimate, cold.tail_start, cold.summary,
                                                    cold.over_threshold, cold.repaired)
    assert warm.provenance == cold.provenance


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(step, min_size=1, max_size=30), policies, st.lists(st.integers(1, 4), min_size=1, max_size=10),
       st.lists(st.sampled_from([0, 0, 1, 2]), min_size=1, max_size=10), st.data())
def test_session_cache_extended_by_appends_equals_a_cold_build(steps: list[list], policy: ContextPolicy,
                                                               chunks: list[int], kinds: list[int], data) -> None:
    """Flat cost (C7, T2): an append-only session cache kept across turns, extended by random appends
    (tool pairs, dangling calls, orphan results, CJK, junk), gives byte-identical views to a cold build: the
    first call of a turn on the whole transcript, later calls on the previous view's C7 input (two prefixes
    in one cache), with the counter changing between calls as the calibrated one does."""
    from dataclasses import replace

    from mxclaw_nb.context.counters import FunctionCounter

    counters = [None, FunctionCounter("chars", len), FunctionCounter("words", lambda t: len(t.split()))]
    cache = TokenCache(append_only=True)
    transcript: list = []
    earlier: list = []
    at, call = 0, 0
    while at < len(steps):
        n = chunks[call % len(chunks)]
        for s in steps[at: at + n]:
            transcript.extend(s)
        at += n
        if not has_usable(transcript):
            call += 1
            continue
        counted = replace(policy, counter=counters[kinds[call % len(kinds)]])
        view_input = list(transcript)  # a turn starts from the whole stored transcript
        for _ in range(data.draw(st.integers(1, 3))):  # C7 iterations: previous view + what the turn appended
            warm = build_request_view(view_input, counted, cache=cache)
            _same_view(warm, build_request_view(view_input, counted))
            earlier.append((warm, list(view_input), counted))
            more = data.draw(st.lists(step, max_size=2))
            appended = [m for s in more for m in s]
            transcript.extend(appended)
            view_input = warm.next_input(appended)
            if not has_usable(view_input):
                break
        call += 1
    # the cache extends its lists in place (O(new)); every earlier view still describes its own build
    for warm, inputs, counted in earlier:
        cold = build_request_view(inputs, counted)
        for name in ("inputs", "step_sources", "step_messages", "tokens", "actions", "sent_of_step", "sent_sources",
                     "sent_tokens"):
            assert list(getattr(warm.trace, name)) == list(getattr(cold.trace, name)), name
        assert warm.trace.dropped == cold.trace.dropped
        assert warm.provenance == cold.provenance  # N3: its lineage's rows, read after the cache grew
        assert json.dumps(warm.next_input([]), ensure_ascii=False) == json.dumps(cold.next_input([]),
                                                                                  ensure_ascii=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(step, min_size=1, max_size=30), policies, st.lists(st.integers(1, 4), min_size=1, max_size=10),
       st.lists(st.floats(0.5, 3.0), min_size=1, max_size=10), st.data())
def test_calibrated_counts_as_a_factor_over_cached_counts_equal_a_cold_build(
        steps: list[list], policy: ContextPolicy, chunks: list[int], reports: list[float], data) -> None:
    """T2/T3 in a session cache: after every call the provider reports usage and the calibrated counter
    learns (a new counter each time); each build reuses the cached C1 counts with the new factor and anchor,
    and equals a cold build with that counter."""
    from dataclasses import replace

    from mxclaw_nb.context.counters import CalibratedCounter

    counter = CalibratedCounter()
    cache = TokenCache(append_only=True)
    transcript: list = []
    at, call = 0, 0
    while at < len(steps):
        n = chunks[call % len(chunks)]
        for s in steps[at: at + n]:
            transcript.extend(s)
        at += n
        if not has_usable(transcript):
            call += 1
            continue
        view_input = list(transcript)
        for _ in range(data.draw(st.integers(1, 3))):
            counted = replace(policy, counter=counter if counter.calibrated else None)
            warm = build_request_view(view_input, counted, cache=cache)
            _same_view(warm, build_request_view(view_input, counted))
            reported = max(1, math.ceil(estimate_messages(warm.messages) * reports[call % len(reports)]))
            counter = counter.observe(warm.messages, reported)
            more = data.draw(st.lists(step, max_size=2))
            appended = [m for s in more for m in s]
            transcript.extend(appended)
            view_input = warm.next_input(appended)
            if not has_usable(view_input):
                break
        call += 1


@FAST
@given(cases(), st.sampled_from([None, lambda old: "a much longer summary " * 400, lambda old: "s"]))
def test_c5_c6_a_compaction_is_applied_only_when_it_shrinks_the_view(case: tuple[list, ContextPolicy],
                                                                     summarize) -> None:
    """C5/C6: micro and summary views are smaller than what they replace; one that would not be is not applied
    ("nothing to gain"): the view is the one sent under the threshold, and says what was tried."""
    from dataclasses import replace

    from mxclaw_nb.context import build_structured_summary

    messages, policy = case
    if not has_usable(messages):
        return
    view = build_request_view(messages, policy, summarize or build_structured_summary)
    if view.stage in ("micro", "summary"):
        assert view.after_tokens < view.before_tokens
    if view.no_gain is not None:
        assert view.stage == "unchanged" and view.event() is None
        assert view.no_gain["stage"] in ("micro", "summary")
        assert view.no_gain["after_tokens"] >= view.no_gain["before_tokens"] == view.before_tokens
        roomy = replace(policy, context_window_tokens=10**9, threshold_ratio=1.0)
        assert view.messages == build_request_view(messages, roomy).messages
        assert view.after_tokens == view.before_tokens


@FAST
@given(st.lists(st.integers(0, 5_000), max_size=60), st.integers(0, 70), st.floats(0.5, 4.0), st.floats(0.5, 4.0),
       st.dictionaries(st.integers(0, 59), st.integers(0, 9_999), max_size=5), st.integers(0, 20), st.data())
def test_t2_calibrated_counts_read_as_the_rescaled_list(c1: list[int], m: int, factor: float, ratio: float,
                                                        overrides: dict[int, int], extra: int, data) -> None:
    """T2 as a factor applied where counts are read: every way the engine reads `CalibratedCounts` (index,
    slice, iteration, reversed, equality) gives the per-count ceil(c * ratio) for the first m steps and
    ceil(c * factor) after (overrides win), and histogram totals equal the sum of those counts; a list the
    counts were made from may grow later without changing them."""
    from collections import Counter

    from mxclaw_nb.context.incremental import CalibratedCounts, _histogram_total

    n = len(c1)
    m = min(m, n)
    overrides = {k: v for k, v in overrides.items() if k < n}
    base = list(c1)
    counts = CalibratedCounts(base, n, factor, m, ratio, overrides)
    expected = [overrides.get(k, math.ceil(c * (ratio if k < m else factor) - 1e-9)) for k, c in enumerate(c1)]
    base += [7] * extra  # the session cache extends its list in place: this build's counts stay
    assert len(counts) == n and list(counts) == expected and counts == expected
    assert list(reversed(counts)) == expected[::-1]
    assert [counts[k] for k in range(-n, n)] == expected + expected
    start, stop = sorted(data.draw(st.tuples(st.integers(-n - 2, n + 2), st.integers(-n - 2, n + 2))))
    assert counts[start:stop] == expected[start:stop] and counts[::2] == expected[::2]
    if m == n and not overrides:
        assert _histogram_total(Counter(c1), ratio) == sum(expected)
    if m == 0 and not overrides:
        assert _histogram_total(Counter(c1), factor) == sum(expected)
