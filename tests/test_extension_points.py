"""The registries are real extension points (SPEC C12, N3): a strategy defined in one outside module and
registered once is accepted by name everywhere a strategy is (the engine's parser, the `strategy` setting,
`replay`, `compare`, a live `Agent`), and C4 and the C3 tail hold for it as for the shipped ones.

docs/extending.md lists the files each kind of change touches; this file shows the strategy row for real,
from a module that is not part of the package (this one).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from mxclaw_nb import Agent
from mxclaw_nb.analysis import compare, replay
from mxclaw_nb.context.pipeline import Summarizer, _Builder
from mxclaw_nb.context.strategies import STRATEGIES, Strategy, describe, register, strategy_from
from mxclaw_nb.context.view import RequestView
from mxclaw_nb.demo.examples import synthetic_transcript
from mxclaw_nb.settings import check_setting

from .context.test_properties import cases, has_usable
from .context.test_strategies import check_any_strategy


@dataclass(frozen=True)
class SummaryOnly(Strategy):
    """Skip C5: over the threshold, summarise the old part at once (a toy strategy for this test)."""

    name: str = "summary-only"
    ladder: tuple[str, ...] = ("threshold (C2)", "summary (C6)", "fallback (C8)")

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        if b.before <= b.policy.threshold:
            return b.finish("unchanged", None, None)
        return b.summarize(b.split(), summarize)


@pytest.fixture
def summary_only() -> Iterator[Strategy]:
    registered = register(SummaryOnly(), "summarise at once, never placeholders (test)")
    try:
        yield registered
    finally:
        STRATEGIES.pop("summary-only", None)
        STRATEGIES.pop("summary-only-cache", None)


# 120 synthetic messages at an 11k window: the article's ladder places placeholders (C5) on 9 calls.
MESSAGES = synthetic_transcript(120)
WINDOW = 11_000


def test_c12_a_strategy_from_one_outside_module_is_known_by_name(summary_only):
    assert strategy_from("summary-only") is summary_only
    assert any(row["strategy"] == "summary-only" for row in describe())
    assert check_setting("strategy", "summary-only") == "summary-only"
    STRATEGIES.pop("summary-only")
    STRATEGIES.pop("summary-only-cache")
    with pytest.raises(ValueError, match="unknown strategy 'summary-only'"):
        strategy_from("summary-only")


def test_c12_replay_and_compare_run_the_registered_strategy(summary_only):
    article = replay(MESSAGES, {"window": WINDOW})
    mine = replay(MESSAGES, {"window": WINDOW, "strategy": "summary-only"})
    assert (article["stage"] == "micro").sum() > 0, "the article's ladder uses placeholders here"
    assert set(mine["stage"]) == {"unchanged", "summary"}, "this strategy never stops at placeholders"
    assert (mine["placeholder"] == 0).all()
    # Where the article first stopped at placeholders, this one summarised (later calls of the turn carry
    # that summary, C7): fewer tokens sent at each of those calls.
    micro = article["stage"] == "micro"
    assert mine.loc[micro, "stage"].iloc[0] == "summary"
    first = micro.idxmax()
    assert mine.loc[first, "after_tokens"] < article.loc[first, "after_tokens"]
    assert len(mine) == len(article)
    both = compare([("synthetic", MESSAGES)], [{"window": WINDOW}, {"window": WINDOW, "strategy": "summary-only"}],
                   progress=False, facts=False)
    assert both["policy"].nunique() == 2
    assert any(label.startswith("summary-only") for label in both["policy"].unique())


def test_c12_e4_a_strategy_registered_later_gets_its_cache_variant(summary_only):
    """The `<name>-cache` companion (E4) exists for a strategy registered after import too, by name, with the
    inner strategy's parameters and its own, and replay runs it: never more tokens than its plain strategy sends
    when the prefix is kept warm, the same calls otherwise."""
    variant = strategy_from("summary-only-cache")
    assert variant.name == "summary-only-cache"
    assert variant.inner is summary_only  # type: ignore[attr-defined]
    assert "clear_at_least" in variant.params() and "idle_ratio" in variant.params()
    assert check_setting("strategy", "summary-only-cache:clear_at_least=500") == "summary-only-cache:clear_at_least=500"
    plain = replay(MESSAGES, {"window": WINDOW, "strategy": "summary-only"})
    cached = replay(MESSAGES, {"window": WINDOW, "strategy": "summary-only-cache"})
    assert len(cached) == len(plain)
    assert set(cached["stage"]) <= {"unchanged", "summary"}
    assert (cached["after_tokens"] <= WINDOW).all()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                   HealthCheck.function_scoped_fixture])
@given(cases())
def test_c12_c4_and_c3_hold_for_the_registered_strategy(summary_only, case: tuple) -> None:
    """The invariants every shipped strategy keeps (C4 pairing, C3 tail, determinism), on random transcripts."""
    messages, policy = case
    if has_usable(messages):
        check_any_strategy(messages, replace(policy, strategy=summary_only))


def test_c12_a_live_agent_runs_the_registered_strategy(summary_only, tmp_path: Path):
    (tmp_path / "ws").mkdir()
    agent = Agent(workspace=tmp_path / "ws", db=str(tmp_path / "ext.duckdb"), strategy="summary-only")
    try:
        assert agent.policy.strategy is summary_only
        agent.run("list the files")
        assert len(agent.store.requests(agent.session_id)) >= 1
    finally:
        agent.close()
