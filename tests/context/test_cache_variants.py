"""SPEC E4 + C12: the cache-aware variant of every named strategy (`<name>-cache`), registered by name and numbers;
every view a replay sends under it keeps C4 (random sessions and every shipped transcript); the decision is
recorded per call; and on the shipped datasets it costs less than its plain strategy at no more over-threshold
calls (the E4 claim, measured)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb import datasets
from mxclaw_nb.analysis import compare, summarize_policies
from mxclaw_nb.analysis.policies import as_policy
from mxclaw_nb.analysis.replay import replay_messages
from mxclaw_nb.context import ContextPolicy, RequestView
from mxclaw_nb.context.cache_variants import CacheVariant, cache_variant
from mxclaw_nb.context.strategies import STRATEGIES, Clearing, Masking, parse_strategy, strategy_from

from .oracle import check_pairing, check_sent_shape
from .test_properties import agent_session

PLAIN = ["article", "masking", "clearing", "model-summary"]
VARIANTS = [f"{n}-cache" for n in PLAIN]
DECISIONS = {"plain", "deferred", "compacted", "idle"}


def test_e4_c12_every_strategy_has_its_cache_variant_by_name_and_numbers() -> None:
    assert set(VARIANTS) <= set(STRATEGIES)
    for name in PLAIN:
        variant = strategy_from(f"{name}-cache")
        assert isinstance(variant, CacheVariant) and variant.inner == strategy_from(name)
        assert variant.params() == {**strategy_from(name).params(), "clear_at_least": 0, "idle_ratio": None}
    masking = parse_strategy("masking-cache:keep_last=5,clear_at_least=2000")
    assert isinstance(masking, CacheVariant)
    assert masking.inner == Masking(keep_last=5) and masking.clear_at_least == 2000
    assert masking.label() == "masking-cache(keep_last=5, clear_at_least=2000)"
    clearing = parse_strategy("clearing-cache:clear_at_least=700")  # Anthropic's clear_at_least: both mean it
    assert isinstance(clearing, CacheVariant) and clearing.inner == Clearing(clear_at_least=700)
    # the older spelling `cache_aware` is the same registry row
    _, by_key = as_policy({"strategy": "masking", "keep_last": 5, "cache_aware": {"clear_at_least": 2000}})
    _, by_name = as_policy({"strategy": "masking-cache", "keep_last": 5, "clear_at_least": 2000})
    assert by_key == by_name and cache_variant(by_name) == masking
    with pytest.raises(ValueError, match="idle_ratio must be in"):
        parse_strategy("article-cache:idle_ratio=2")
    with pytest.raises(ValueError, match="has no parameter 'keep'"):
        parse_strategy("masking-cache:keep=3")
    with pytest.raises(ValueError, match="cache_aware options: unknown 'deadline'"):
        as_policy({"cache_aware": {"deadline": 1}})


def test_c12_the_live_agent_takes_a_cache_variant_by_name_and_refuses_a_bad_one_clearly(tmp_path) -> None:
    """C12: `-cache` variants run live too (tests/test_loop_cache_aware.py runs them over HTTP); bad numbers are
    refused before anything is opened."""
    from mxclaw_nb.agent import Agent

    agent = Agent(tmp_path, db=str(tmp_path / "a.duckdb"), strategy="article-cache:clear_at_least=500")
    assert isinstance(agent.policy.strategy, CacheVariant) and agent.policy.strategy.clear_at_least == 500
    with pytest.raises(ValueError, match="idle_ratio must be in"):
        Agent(tmp_path, db=str(tmp_path / "b.duckdb"), strategy="article-cache:idle_ratio=2")
    assert not (tmp_path / "b.duckdb").exists()  # refused before anything opened


def _replayed(messages: list, policy: ContextPolicy) -> tuple[list[dict], list[RequestView]]:
    views: list[RequestView] = []
    rows = replay_messages(messages, policy, facts=False, views=views)
    for view in views:
        check_pairing(view.messages)
        check_sent_shape(view.messages)
    return rows, views


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(agent_session(), st.sampled_from(VARIANTS), st.integers(300, 6_000), st.sampled_from([0, 500, 3_000]))
def test_e4_every_view_a_cache_variant_sends_keeps_c4(messages: list, name: str, window: int, clear: int) -> None:
    policy = ContextPolicy(window, 0.8, window // 4, strategy=strategy_from(name, clear_at_least=clear))
    rows, views = _replayed(messages, policy)
    assert len(rows) == len(views)
    assert rows[0]["cache_decision"] is None if rows else True  # the first call has no previous prefix
    assert all(r["cache_decision"] in DECISIONS for r in rows[1:])  # recorded per call


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("dataset", datasets.available())
def test_e4_every_cache_variant_valid_on_every_shipped_transcript_and_its_decisions_recorded(
        name: str, dataset: str) -> None:
    policy = ContextPolicy(4_000, 0.8, 1_000, strategy=strategy_from(name, clear_at_least=1_000))
    decisions: dict[str, int] = {}
    for conv in datasets.load(dataset):
        rows, _ = _replayed(list(conv.messages), policy)
        for r in rows[1:]:
            decisions[r["cache_decision"]] = decisions.get(r["cache_decision"], 0) + 1
    assert set(decisions) <= DECISIONS and decisions.get("compacted"), decisions  # a 4k window must compact


def test_e4_each_cache_variant_costs_less_than_its_strategy_at_no_more_over_threshold_calls() -> None:
    """The must-show claim, measured on both shipped datasets (8k window, 2k tail, clear_at_least 2,000)."""
    base = {"window": 8_000, "tail": 2_000}
    policies = [p for n in PLAIN for p in ({**base, "strategy": n, "name": n},
                                           {**base, "strategy": f"{n}-cache", "clear_at_least": 2_000,
                                            "name": f"{n}-cache"})]
    for dataset in datasets.available():
        rows = compare(datasets.load(dataset), policies, progress=False, facts=False, executor="inline")
        decided = rows[rows["policy"] == "masking-cache"]["cache_decision"]
        assert (decided == "deferred").any()  # masking rewrites the prefix on every call: some of that waits
        table = summarize_policies(rows).set_index("policy")
        for n in PLAIN:
            plain, aware = table.loc[n], table.loc[f"{n}-cache"]
            assert aware["cost"] < plain["cost"], (dataset, n)
            assert aware["over_threshold"] <= plain["over_threshold"], (dataset, n)
            assert aware["broken_tokens"] < plain["broken_tokens"], (dataset, n)
            assert aware["cache_read_share"] > plain["cache_read_share"], (dataset, n)


def test_e4_a_cache_variant_policy_is_the_plain_one_for_a_single_build() -> None:
    # the engine stays pure: one build knows nothing of warmth, so the variant's build is its inner strategy's
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "go " * 3000}]
    plain = ContextPolicy(2_000, 0.8, 500, strategy=Masking())
    aware = replace(plain, strategy=strategy_from("masking-cache"))
    from mxclaw_nb.context import build_request_view

    assert build_request_view(messages, aware).messages == build_request_view(messages, plain).messages
