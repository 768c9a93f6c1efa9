"""SPEC C12: every named strategy keeps C4 (pairing, sendable shape), the C3 tail and C8, on random transcripts
(Hypothesis) and on every shipped transcript; `article` is today's pipeline byte for byte; masking and clearing
do what their numbers say."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb import datasets
from mxclaw_nb.analysis.replay import call_positions
from mxclaw_nb.context import ContextPolicy, RequestView, build_request_view, estimate_messages
from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.context.strategies import (
    ARTICLE,
    STRATEGIES,
    Clearing,
    Masking,
    describe,
    parse_strategy,
    strategy_from,
)
from mxclaw_nb.messages import SYSTEM_ROLES, is_failure, sanitize

from .oracle import check_pairing, check_sent_shape
from .test_properties import agent_session, cases, has_usable

NAMED = [strategy_from(n) for n in STRATEGIES] + [Masking(keep_last=0), Masking(keep_last=2),
                                                  Clearing(keep_last=1, clear_at_least=500),
                                                  Clearing(keep_last=0, trigger_tokens=0, exclude_tools=("bash",))]


def dump(view: RequestView) -> str:
    return json.dumps(view.messages, ensure_ascii=False, sort_keys=True)


def check_any_strategy(messages: list, policy: ContextPolicy) -> RequestView:
    """The invariants every strategy keeps (C4, C3, C8 shape, determinism, input untouched, provenance)."""
    snapshot = copy.deepcopy(messages)
    view = build_request_view(messages, policy)
    assert messages == snapshot, "the transcript was mutated"
    assert dump(view) == dump(build_request_view(copy.deepcopy(snapshot), policy))
    check_pairing(view.messages)
    check_sent_shape(view.messages)
    prov = view.provenance
    assert len(prov.after) == len(view.messages)
    assert sum(r.tokens for r in prov.after) == view.after_tokens
    # C3: from the safe tail on, every input message is sent as it was (sanitised)
    if view.tail_start is not None:
        sent = {r.source: view.messages[r.position] for r in prov.after if r.source is not None}
        for pos in range(view.tail_start, len(messages)):
            if pos in sent and prov.before[[r.position for r in prov.before].index(pos)].action == "kept":
                assert sent[pos] == sanitize(messages[pos])
    # placeholders only for successful tool results; system messages never lost outside the fallback window
    for r in prov.before:
        if r.action == "placeholder":
            assert r.role == "tool" and not r.failure
    if view.stage != "fallback":
        systems = [sanitize(m) for m in messages if isinstance(m, dict) and m.get("role") in SYSTEM_ROLES]
        for m in systems:
            assert m in view.messages
    return view


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases(), st.sampled_from(NAMED))
def test_c12_every_strategy_keeps_the_invariants_on_random_transcripts(case: tuple, strategy) -> None:
    messages, policy = case
    if not has_usable(messages):
        return
    check_any_strategy(messages, replace(policy, strategy=strategy))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_c12_the_registered_article_is_the_pipeline_byte_for_byte(case: tuple) -> None:
    messages, policy = case
    if not has_usable(messages):
        return
    a = build_request_view(messages, policy)
    b = build_request_view(messages, replace(policy, strategy=ARTICLE))
    assert (dump(a), a.stage, a.after_tokens, a.summary) == (dump(b), b.stage, b.after_tokens, b.summary)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agent_session(), st.integers(0, 6), st.integers(200, 20_000))
def test_c12_masking_keeps_the_last_m_results_and_masks_older_ones_whatever_the_threshold(
        messages: list, keep_last: int, window: int) -> None:
    policy = ContextPolicy(window, 1.0, 0, strategy=Masking(keep_last=keep_last))
    view = check_any_strategy(messages, policy)
    if view.stage in ("summary", "fallback") or view.no_gain:
        return  # masking was not enough: C6 took over (or C6 would have grown the view: sent as it is, C5/C6)
    before = view.provenance.before
    tools = [r for r in before if r.role == "tool"]
    recent = {r.position for r in tools[-keep_last:]} if keep_last else set()
    tail = len(messages) if view.tail_start is None else view.tail_start
    for r in tools:
        msg = messages[r.position]
        expected = r.position not in recent and r.position < tail and placeholder_for(msg, r.position) is not None
        assert (r.action == "placeholder") == expected, (r, keep_last)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agent_session(), st.integers(0, 4), st.integers(0, 3_000), st.booleans())
def test_c12_clearing_only_over_its_trigger_never_recent_or_excluded_and_at_least_its_step(
        messages: list, keep_last: int, clear_at_least: int, exclude: bool) -> None:
    total = estimate_messages(messages)
    strategy = Clearing(keep_last=keep_last, clear_at_least=clear_at_least, trigger_tokens=total // 2,
                        exclude_tools=("bash",) if exclude else ())
    view = check_any_strategy(messages, ContextPolicy(10 * total + 1_000, 1.0, 0, strategy=strategy))
    placeholders = [r for r in view.provenance.before if r.action == "placeholder"]
    if view.before_tokens <= total // 2:
        assert not placeholders
        return
    tools = [r for r in view.provenance.before if r.role == "tool"]
    recent = {r.position for r in tools[-keep_last:]} if keep_last else set()
    for r in placeholders:
        assert r.position not in recent
        assert not (exclude and r.tool_name == "bash")
    if placeholders:
        assert view.before_tokens - view.after_tokens >= clear_at_least


def _views_of(messages: list, policy: ContextPolicy) -> list[RequestView]:
    """The view at every simulated model call (rebuilt from the transcript) plus one C7 chain per turn."""
    out = []
    view = None
    prev = 0
    for i in call_positions(messages):
        rebuilt = view is None or any(isinstance(m, dict) and m.get("role") == "user" for m in messages[prev:i])
        inputs = messages[:i] if rebuilt else view.next_input(messages[prev:i])
        view = build_request_view(inputs, policy)
        check_pairing(view.messages)
        check_sent_shape(view.messages)
        out.append(view)
        prev = i
    return out


@pytest.mark.parametrize("name", list(STRATEGIES))
@pytest.mark.parametrize("dataset", datasets.available())
def test_c12_every_strategy_valid_on_every_shipped_transcript(name: str, dataset: str) -> None:
    strategy = strategy_from(name)
    compacted = 0
    for conv in datasets.load(dataset):
        messages = list(conv.messages)
        policy = ContextPolicy(4_000, 0.8, 1_000, strategy=None if strategy is ARTICLE else strategy)
        for view in _views_of(messages, policy):
            compacted += view.compacted
            if view.stage == "micro":
                assert all(not is_failure(m) or m["content"] == sanitize(m)["content"] for m in view.messages)
    assert compacted, "a 4k window compacts the shipped transcripts"


def test_c12_strategies_by_name_and_numbers_with_clear_errors() -> None:
    assert parse_strategy("masking:keep_last=5") == Masking(keep_last=5)
    assert parse_strategy("clearing:keep_last=2,clear_at_least=2_000,exclude_tools=read_file|bash") == Clearing(
        keep_last=2, clear_at_least=2000, exclude_tools=("read_file", "bash"))
    assert parse_strategy("clearing:exclude_tools=bash").exclude_tools == ("bash",)
    assert parse_strategy(None) is ARTICLE and parse_strategy("article") is ARTICLE
    assert Masking(keep_last=5).label() == "masking(keep_last=5)" and Masking().label() == "masking"
    with pytest.raises(ValueError, match="unknown strategy 'mask'; known strategies: article, masking"):
        parse_strategy("mask")
    with pytest.raises(ValueError, match="has no parameter 'keep'.*keep_last"):
        parse_strategy("masking:keep=3")
    with pytest.raises(ValueError, match="keep_last must be an integer >= 0"):
        parse_strategy("masking:keep_last=-1")
    assert {row["strategy"] for row in describe()} >= {"article", "masking", "clearing"}


def test_c12_the_strategy_setting_is_checked_where_it_is_set() -> None:
    from mxclaw_nb.settings import check_setting

    assert check_setting("strategy", "clearing:keep_last=2") == "clearing:keep_last=2"
    with pytest.raises(ValueError, match="strategy: unknown strategy 'bogus'; known strategies: article"):
        check_setting("strategy", "bogus")
