"""SPEC E1-E4: reported cache figures, the shared prefix, the cache model and prices, the cache-aware variant."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.analysis.cost import (
    PRICES,
    CallTokens,
    Price,
    break_even_calls,
    cache_model,
    call_costs,
    price_for,
    price_table,
)
from mxclaw_nb.context import ContextPolicy, build_request_view
from mxclaw_nb.context.cache_aware import DEFERRED, CacheAware, cache_aware_choice
from mxclaw_nb.context.prefix import shared_prefix
from mxclaw_nb.demo.quirks import PROFILES
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.store.schema import MIGRATIONS, migrate

SYSTEM = {"role": "system", "content": "You are a careful assistant. " * 40}


def _provider(srv: TestServer, stream: bool = True) -> OpenAIProvider:
    return OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model", stream=stream, max_retries=0,
                          timeout=5, call_deadline=10)


# -- E1: what servers report ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("profile", ["openai", *PROFILES])
def test_e1_every_server_profile_reports_its_prefix_cache_or_nothing(profile: str, stream: bool) -> None:
    """E1: the second call repeats the first call's prefix; servers that report a cache figure (in their own
    place) give the tokens of that prefix, the others give none (None, never 0 made up)."""
    quirks = PROFILES.get(profile, frozenset()) - {"strict_params"}  # a refused stream_options is another test
    with TestServer(quirks=quirks) as srv:
        p = _provider(srv, stream)
        first = [SYSTEM, {"role": "user", "content": "one"}]
        a = p.complete(first, None)
        b = p.complete([*first, a.message, {"role": "user", "content": "two"}], None)
    assert a.usage is None or not a.usage.cached_tokens  # nothing cached before the first request
    if "cache_unreported" in quirks or "usage_prompt_null" in quirks and profile == "strict gateway":
        assert b.usage is None or b.usage.cached_tokens is None
        return
    assert b.usage is not None and b.usage.cached_tokens is not None
    assert 0 < b.usage.cached_tokens < (b.usage.prompt_tokens or 0)
    from mxclaw_nb.demo.usage import cached_prefix_tokens

    assert b.usage.cached_tokens == cached_prefix_tokens(first, [*first, a.message], srv.usage_counter)


def test_e1_a_prefix_older_than_the_cache_ttl_is_not_read() -> None:
    with TestServer() as srv:
        srv.cache_ttl = 0.0
        p = _provider(srv)
        p.complete([SYSTEM, {"role": "user", "content": "one"}], None)
        again = p.complete([SYSTEM, {"role": "user", "content": "one"}], None)
    assert again.usage is not None and again.usage.cached_tokens == 0


def test_e1_e2_a_live_turn_stores_reported_cache_and_shared_prefix(tmp_path: Path) -> None:
    """E1/E2 end to end: request records keep `cached_tokens_reported` and `prefix_tokens` per call."""
    from mxclaw_nb import Agent

    with TestServer() as srv:
        agent = Agent(workspace=tmp_path, db=str(tmp_path / "c.duckdb"), provider=_provider(srv), approval="allow",
                      home=tmp_path / "home")
        (tmp_path / "a.txt").write_text("alpha\n", encoding="utf-8")
        srv.enqueue_tool_calls([("read_file", {"path": "a.txt"})])
        srv.enqueue_text("done")
        agent.run("read a.txt")
        srv.enqueue_text("again")
        agent.run("and now?")
        rows = agent.store.sql("SELECT turn, iteration, prompt_tokens_reported, cached_tokens_reported, "
                               "prefix_tokens, after_tokens FROM requests WHERE session_id = ? ORDER BY seq",
                               [agent.session_id])
    assert len(rows) == 3
    assert rows["prefix_tokens"].isna().tolist() == [True, False, False]  # the first call has no previous call
    later = rows.iloc[1:]
    assert (later["prefix_tokens"] > 0).all() and (later["prefix_tokens"] <= later["after_tokens"]).all()
    assert rows["cached_tokens_reported"].iloc[0] == 0
    assert (later["cached_tokens_reported"] > 0).all()
    assert (later["cached_tokens_reported"] < later["prompt_tokens_reported"]).all()


def test_e1_migration_adds_the_cache_columns_once(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    assert migrate(con, tmp_path, MIGRATIONS[:1]) == 1
    con.execute("INSERT INTO requests (session_id, seq, created_at, retry) VALUES ('s', 0, now(), false)")
    assert migrate(con, tmp_path) == len(MIGRATIONS) and migrate(con, tmp_path) == len(MIGRATIONS)
    cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'requests'")
            .fetchall()}
    assert {"cached_tokens_reported", "cache_write_tokens_reported", "prefix_tokens"} <= cols
    assert con.execute("SELECT count(*), count(cached_tokens_reported) FROM requests").fetchone() == (1, 0)


# -- E2: the shared prefix ------------------------------------------------------------------------------------------

def _msgs(texts: list[str]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": t} for t in texts]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=12),
       st.dictionaries(st.sampled_from("abcd"), st.integers(0, 50), min_size=4))
def test_e2_shared_prefix_is_the_longest_equal_head(a: list[str], b: list[str], weight: dict[str, int]) -> None:
    """E2 (property): the shared prefix is the longest run of equal leading messages, its tokens their sum,
    and the next state continues from the second list whatever the first was."""
    ta, tb = [weight[x] for x in a], [weight[x] for x in b]
    _, state = shared_prefix(None, _msgs(a), ta)
    shared, after = shared_prefix(state, _msgs(b), tb)
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    assert shared.messages == k
    assert shared.tokens == sum(ta[:k]) and shared.total == sum(tb) and shared.previous == sum(ta)
    assert shared.broken_tokens == sum(ta) - sum(ta[:k]) and shared.new_tokens == sum(tb) - sum(ta[:k])
    again, _ = shared_prefix(after, _msgs(b), tb)
    assert again.messages == len(b) and again.broken_tokens == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from("abcd"), max_size=12), st.lists(st.sampled_from("abcd"), max_size=6))
def test_e2_the_extends_hint_gives_what_the_comparison_finds(a: list[str], more: list[str]) -> None:
    """E2: the loop's O(new) path (`extends`, C7 growth) agrees with the full comparison."""
    _, state = shared_prefix(None, _msgs(a), [len(x) for x in a])
    grown = _msgs(a + more)
    counts = [1] * len(grown)
    assert shared_prefix(state, grown, counts, extends=True)[0] == shared_prefix(state, grown, counts)[0]


def test_e2_mismatched_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="one token count per message"):
        shared_prefix(None, _msgs(["a", "b"]), [1])


# -- E2/E3: the cache model and prices ------------------------------------------------------------------------------

def test_e2_cache_model_reads_the_shared_prefix_within_the_ttl_only() -> None:
    t0 = datetime(2026, 1, 1, 9)
    calls = [CallTokens(1000, 0, 10, t0), CallTokens(1200, 1000, 10, t0 + timedelta(minutes=1)),
             CallTokens(1300, 1200, 10, t0 + timedelta(minutes=7)), CallTokens(900, 300, 10, t0 + timedelta(minutes=8))]
    assert cache_model(calls) == [(0, 1000, False), (1000, 200, True), (0, 1300, False), (300, 600, True)]
    assert cache_model(calls, ttl=timedelta(minutes=10))[2] == (1200, 100, True)
    untimed = [replace(c, at=None) for c in calls]  # a replay: back to back
    assert [c[0] for c in cache_model(untimed)] == [0, 1000, 1200, 300]


def test_e3_prices_cost_and_break_even() -> None:
    sonnet = price_for("claude-sonnet-4-20250514")
    assert sonnet is PRICES["claude-sonnet-4"] and sonnet.source and sonnet.as_of
    assert all(p.source and p.as_of for p in PRICES.values()), "every shipped row says where and when"
    assert price_for("gpt-4o-2024-08-06").model == "gpt-4o" and price_for("gpt-4o-mini-x").model == "gpt-4o-mini"
    with pytest.raises(ValueError, match="no price row"):
        price_for("my-local-model")
    table = price_table({"my-local-model": {"input": 1, "cached_input": 0.1, "output": 2}})
    mine = price_for("my-local-model", table)
    assert mine.write == 1 and mine.label == "my-local-model (user)"
    costs = call_costs([CallTokens(1_000_000, 0, 0), CallTokens(1_000_000, 1_000_000, 1_000_000)], sonnet)
    assert [round(c.cost, 4) for c in costs] == [3.75, 0.30 + 15.00]
    # a break of 40,000 prefix tokens for 2,000 saved per call: (3.75 - 0.30) * 40k / (0.30 * 2k) = 230 calls
    assert break_even_calls(40_000, 2_000, sonnet) == 230
    assert break_even_calls(40_000, 0, sonnet) == float("inf") and break_even_calls(0, 5, sonnet) == 0
    assert break_even_calls(40_000, 2_000, Price("x", 1, 1, 1)) == 0  # no cache discount: nothing to pay back


# -- E4: the cache-aware choice -------------------------------------------------------------------------------------

def _tool_turns(n: int, size: int = 4000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    for k in range(n):
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"{k} " + "x" * size})
    return out


def test_e4_a_warm_prefix_is_kept_while_under_the_threshold() -> None:
    policy = ContextPolicy(8000, 0.8, 1000)
    history = _tool_turns(12)
    continued_input = _tool_turns(5) + [{"role": "user", "content": "next"}]  # the previous call's view + new
    plain = build_request_view(history, policy)
    continued = build_request_view(continued_input, policy)
    assert plain.compacted and not continued.over_threshold
    view, decision = cache_aware_choice(plain, continued, warm=True)
    assert view is continued and decision["decision"] == DEFERRED
    view, decision = cache_aware_choice(plain, continued, warm=False)
    assert view is plain and decision["decision"] == "plain"
    enough = CacheAware(clear_at_least=1)
    view, decision = cache_aware_choice(plain, continued, warm=True, options=enough)
    assert view is plain and decision == {**decision, "decision": "compacted", "why": "clear_at_least"}
    over = build_request_view(_tool_turns(20), policy)  # the continuation itself would pass the threshold
    view, decision = cache_aware_choice(plain, over, warm=True)
    assert view is plain and decision["decision"] != DEFERRED
    with pytest.raises(ValueError, match="clear_at_least"):
        CacheAware(clear_at_least=-1)


# -- E1/E2 on imported harness logs ---------------------------------------------------------------------------------

FIXTURES = Path(__file__).parent


def test_e1_imported_logs_get_per_call_usage_as_request_records(tmp_path: Path) -> None:
    """E1: SQL over a real harness's calls: Claude Code's cache reads/writes and Codex's cached input, reported."""
    from mxclaw_nb.analysis.agent_logs import import_claude_code, import_codex
    from mxclaw_nb.store import Store

    store = Store(str(tmp_path / "imp.duckdb"))
    claude = import_claude_code(store, FIXTURES / "fixtures" / "claude_code_compacted.jsonl", progress=False)
    codex = import_codex(store, FIXTURES / "fixtures" / "codex_compacted_rollout.jsonl", progress=False)
    rows = store.sql("SELECT session_id, count(*) AS calls, sum(cached_tokens_reported) AS cached, "
                     "sum(cache_write_tokens_reported) AS written, min(counter) AS counter, "
                     "count(DISTINCT created_at) AS stamps FROM requests GROUP BY session_id ORDER BY calls DESC")
    by = rows.set_index("session_id")
    c, x = by.loc[claude.sessions[0]], by.loc[codex.sessions[0]]
    assert (c["calls"], c["stamps"], c["counter"]) == (13, 13, "reported")
    assert c["cached"] == 15920 + 17720 + 18620 + 19520 + 21320 + 22220 + 23120 + 24020 + 24920 + 25820 + 26720 \
        + 27620 + 28520 and c["written"] > 0
    assert (x["calls"], x["cached"]) == (5, 4906 + 5272 + 1560 + 1695 + 1735) and x["written"] != x["written"]  # NaN
    first = store.sql("SELECT created_at, prompt_tokens_reported FROM requests WHERE session_id = ? ORDER BY seq "
                      "LIMIT 1", [claude.sessions[0]])
    assert str(first["created_at"].iloc[0]) == "2026-11-30 09:00:21.777000"  # the log's own timestamp, as it is
    assert first["prompt_tokens_reported"].iloc[0] == 4 + 390 + 15920


def test_e2_predicted_cache_reads_beside_the_reported_ones(tmp_path: Path) -> None:
    """E2 against the imported Claude Code fixture: the prefix-cache model, from reported prompt sizes and the
    log's timestamps, predicts each call's cache reads; pinned, with the agreement figure the README quotes."""
    from mxclaw_nb.analysis.agent_logs import import_claude_code
    from mxclaw_nb.analysis.cost import imported_cache_check
    from mxclaw_nb.store import Store

    store = Store(str(tmp_path / "imp.duckdb"))
    report = import_claude_code(store, FIXTURES / "fixtures" / "claude_code_compacted.jsonl", progress=False)
    check = imported_cache_check(store, report.sessions[0])
    assert check["cached_est"].tolist() == [0, 16314, 18194, 19134, 0, 21954, 22894, 23834, 24774, 25714, 0,
                                            27594, 28534]
    assert check["compacted_before"].tolist() == [False] * 4 + [True] + [False] * 5 + [True, False, False]
    comparable = check[(check["call"] > 1) & ~check["compacted_before"]]
    ratio = comparable["cached_est"] / comparable["cached_reported"]
    assert len(comparable) == 10 and ((ratio - 1).abs() <= 0.08).all()  # README: 10 of 10 within 8%
    assert round(comparable["cached_est"].sum() / comparable["cached_reported"].sum(), 3) == 0.986


# -- E1-E3 shown: gauge, timeline, inspector, events, OTel ----------------------------------------------------------

@pytest.mark.parametrize("report", [True, False], ids=["reported", "unreported"])
def test_e3_views_show_the_cache_labelled(report: bool, tmp_path: Path) -> None:
    """A demo turn against the test server, with and without a cached-token figure: the gauge, the timeline,
    the inspector, `%agent events` and the OTel export show the cache, `reported` or `est.` (and say which)."""
    from mxclaw_nb import Agent
    from mxclaw_nb.analysis.otel import call_attributes
    from mxclaw_nb.notebook.frames import events_frame
    from mxclaw_nb.widgets.gauge import ContextGauge
    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.timeline import TokenTimeline

    with TestServer(demo=True) as srv:
        srv.stream_delay, srv.report_cache = 0.0, report
        provider = OpenAIProvider(base_url=srv.base_url, api_key="k", model="gpt-4o-mini", stream=True)
        agent = Agent(model="gpt-4o-mini", provider=provider, approval="allow", home=tmp_path,
                      db=str(tmp_path / "v.duckdb"), context_window_tokens=1_100, keep_recent_tokens=200)
        from mxclaw_nb.__main__ import DEMO_PROMPTS

        for prompt in DEMO_PROMPTS[:2]:
            agent.run(prompt)
    req = agent.store.requests(agent.session_id)
    assert req["cached_tokens_reported"].notna().any() == report
    caption = TokenTimeline(req, session_id=agent.session_id).caption_html()
    assert ("read from cache (reported)" in caption) == report
    assert ("(est.; the provider reported no cache figure)" in caption) != report
    assert "est. cost $" in caption and "gpt-4o-mini (openai.com/api/pricing, as of 2025-06)" in caption
    gauge = ContextGauge.from_request(req.iloc[-1]).to_html()
    assert "mx-cache-part" in gauge
    assert ("read from the provider&#x27;s cache (reported)" in gauge) == report
    assert ("shared with the previous call (est.; the provider reports no cache figure" in gauge) != report
    attrs = call_attributes(req.iloc[-1])
    assert ("gen_ai.usage.cache_read.input_tokens" in attrs) == report and attrs["mxclaw.context.prefix_tokens"] > 0
    compacted = req[req["stage"] != "unchanged"]
    assert len(compacted), "the small window compacts"
    events = events_frame(agent.store.events(agent.session_id, "context.compacted"))
    assert events["cache_break"].notna().all() and (events["cache_break"] >= 0).all()
    broke = [json.loads(e).get("prefix_broken_tokens") for e in compacted["extra"]]
    row = compacted.iloc[next(k for k, b in enumerate(broke) if b)]
    head = CompactionInspector.from_request(agent.store, agent.session_id, int(row["turn"]),
                                            int(row["iteration"])).header_html()
    assert "cache break:" in head and "pay for it" in head and "(est., gpt-4o-mini" in head


def test_e4_a_forced_break_frees_at_least_clear_at_least_and_a_cold_cache_may_compact_early() -> None:
    """E4: a warm compaction the threshold forces goes deeper when it frees too little; a cold cache above
    `idle_ratio` of the threshold compacts early (idle), and says so."""
    policy = ContextPolicy(8000, 0.8, 1000)
    plain = build_request_view(_tool_turns(7), policy)  # just over the threshold: micro frees a little
    assert plain.compacted
    freed = plain.before_tokens - plain.after_tokens
    deeper = build_request_view(_tool_turns(7), replace(policy, threshold_ratio=0.1))  # micro is not enough
    view, decision = cache_aware_choice(plain, None, warm=True, options=CacheAware(clear_at_least=freed + 1),
                                        deeper=lambda: deeper)
    assert decision["decision"] == "compacted" and decision["why"] == "threshold, deeper"
    assert view is deeper and view.after_tokens < plain.after_tokens
    view, decision = cache_aware_choice(plain, None, warm=True, options=CacheAware(clear_at_least=1),
                                        deeper=lambda: deeper)
    assert view is plain and decision["why"] == "threshold"  # it already freed enough
    small = build_request_view(_tool_turns(4), policy)  # under the threshold
    assert not small.compacted
    view, decision = cache_aware_choice(small, None, warm=False, options=CacheAware(idle_ratio=0.5),
                                        idle=lambda: build_request_view(_tool_turns(4), replace(policy,
                                                                                               threshold_ratio=0.3)))
    assert decision["decision"] == "idle" and view.after_tokens < small.after_tokens
    view, decision = cache_aware_choice(small, None, warm=True, options=CacheAware(idle_ratio=0.5),
                                        idle=lambda: deeper)
    assert view is small and decision["decision"] == "plain"  # warm: nothing early
