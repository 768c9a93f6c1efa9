"""SPEC E4 + C12 live: the cache-aware variants (`<name>-cache`) run in the live agent.

Real parts: the Agent over HTTP (the real openai client) to the shipped TestServer, a real DuckDB file. At a turn's
first call the loop rebuilds from the stored transcript (C7); when this process made the session's previous call
less than the prefix-cache time to live ago, `masking-cache` sends the continuation of that call (its prefix kept)
where plain `masking` rewrites it, and the decision is stored (`context.cache_decision`, the request record's
`cache_decision`). The clock is injected (`Agent(clock=...)`): no sleeping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.analysis.cost import DEFAULT_TTL
from mxclaw_nb.cache_live import DEFAULT_TTL_SECONDS
from mxclaw_nb.context import lineage_messages
from mxclaw_nb.context.cache_variants import CacheVariant
from mxclaw_nb.context.model_summary import ASK, ModelSummary
from mxclaw_nb.context.strategies import STRATEGIES
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.events import parse
from mxclaw_nb.messages import SUMMARY_PREFIX
from mxclaw_nb.notebook.frames import events_frame
from mxclaw_nb.store.provenance import decode_lineage
from mxclaw_nb.widgets.turnlog import TurnLog


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _agent(server: TestServer, tmp_path: Path, strategy: str, clock: Clock, **kw) -> Agent:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "big.txt").write_text("x" * 6_000, encoding="utf-8")
    (ws / "b.txt").write_text("y" * 6_000, encoding="utf-8")
    kw.setdefault("context_window_tokens", 20_000)
    return Agent(workspace=ws, db=kw.pop("db", str(tmp_path / f"{strategy.split(':')[0]}.duckdb")),
                 base_url=server.base_url, api_key="k", model="test-model", home=tmp_path / "home",
                 approval="allow", strategy=strategy, keep_recent_tokens=500, counter="estimate", clock=clock, **kw)


def _script(server: TestServer) -> None:
    """Turn 1: two reads of 6,000 characters each, then an answer; turn 2: an answer."""
    server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    server.enqueue_tool_calls([("read_file", {"path": "b.txt"})])
    server.enqueue_text("done one")
    server.enqueue_text("done two")


REQUESTS: dict[str, list[dict]] = {}  # the requests the server got, per agent session (the last _two_turns)


def _two_turns(tmp_path: Path, strategy: str, idle: float, **kw) -> tuple[Agent, list[dict], list[dict]]:
    """Turn 1 reads two files (2 tool calls, then an answer); turn 2 starts `idle` seconds after turn 1's last
    call ended. Returns the agent, turn 1's last request and turn 2's first request (as the server got them);
    every request is in REQUESTS[agent.session_id]."""
    clock = Clock()
    with TestServer() as server:
        _script(server)
        agent = _agent(server, tmp_path, strategy, clock, **kw)
        assert agent.run("read both files").status == "ok"
        clock.now += idle
        assert agent.run("and again").status == "ok"
        REQUESTS[agent.session_id] = server.requests
        return agent, server.requests[-2]["messages"], server.requests[-1]["messages"]


def _shape(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content"))) for m in messages[1:]]


def _decisions(agent: Agent, turn: int | None = None) -> list[dict]:
    """The stored `context.cache_decision` payloads (of one turn)."""
    df = agent.store.events(agent.session_id, type="context.cache_decision")
    if turn is not None:
        df = df[df["turn"] == turn]
    return [json.loads(p) if isinstance(p, str) else p for p in df["payload"]]


def _extra(agent: Agent) -> list[dict]:
    rows = agent.store.requests(agent.session_id)
    return [json.loads(e) if isinstance(e, str) else e for e in rows["extra"]]


def test_e4_the_ttl_is_the_cost_models() -> None:
    assert DEFAULT_TTL.total_seconds() == DEFAULT_TTL_SECONDS


def test_e4_live_masking_cache_keeps_a_warm_prefix_that_plain_masking_rewrites(tmp_path) -> None:
    plain, p_prev, p_first = _two_turns(tmp_path / "plain", "masking:keep_last=0", idle=30)
    assert p_first[:len(p_prev)] != p_prev  # plain masking masks turn 1's last result at turn 2: prefix rewritten
    assert "y" * 100 not in json.dumps(p_first)

    agent, prev, first = _two_turns(tmp_path / "cache", "masking-cache:keep_last=0", idle=30)
    assert first[:len(prev)] == prev and len(first) == len(prev) + 2  # the warm prefix, + the answer and the prompt
    assert first[-1] == {"role": "user", "content": "and again"}
    [decision] = _decisions(agent, turn=2)  # the turn start, with a previous call in this process
    assert decision["decision"] == "deferred" and decision["warm"] is True and decision["continued"] is True
    assert decision["strategy"] == "masking-cache" and decision["idle_seconds"] == 30 and decision["ttl_seconds"] == 300
    assert decision["plain_stage"] == "micro" and decision["freed"] > 1_000  # what masking would have freed
    assert decision["sent_tokens"] > decision["plain_tokens"]
    extras = _extra(agent)
    # the first turn's first call had no previous call in this process: the plain strategy, said so on its record
    assert extras[0]["cache_decision"]["decision"] == "plain"
    assert extras[0]["cache_decision"]["why"] == "no previous call in this process"
    # inside a turn too (E4): call 2 had nothing to defer (recorded, no event); call 3 kept call 2's prefix where
    # masking masks the first read's result (call 2's warm prefix, answered 0 s before)
    assert extras[1]["cache_decision"]["decision"] == "plain"
    [inside] = _decisions(agent, turn=1)
    assert inside["decision"] == "deferred" and inside["idle_seconds"] == 0
    assert extras[2]["cache_decision"] == {k: v for k, v in inside.items() if k != "session_id"}
    requests = [r["messages"] for r in REQUESTS[agent.session_id]]
    assert requests[2][:len(requests[1])] == requests[1]  # call 3 extends call 2: nothing rewritten
    assert "x" * 6_000 in json.dumps(requests[2])  # the first read's result, which masking would have masked
    assert extras[3]["cache_decision"]["decision"] == "deferred"
    # E2: the record says the whole previous prompt is shared (nothing broken)
    rows = agent.store.requests(agent.session_id)
    assert "prefix_broken_tokens" not in extras[3] and rows["prefix_tokens"].iloc[3] > 0
    # N3: the deferred call's stored lineage rebuilds exactly what was sent, from the stored transcript
    stored = agent.transcript()
    lineage = decode_lineage(extras[3]["lineage"], stored)
    assert lineage_messages(lineage, stored) == first
    # the stored transcript is untouched (S2)
    assert sum(m.get("content") == "y" * 6_000 for m in stored) == 1
    # what a user sees: the live log's line says why the compaction was deferred
    text = parse("context.cache_decision", decision).text()
    assert text.startswith("masking-cache: kept the warm cached prefix (previous call 30 s ago, within the 300 s")
    assert "masking would have rewritten it (micro)" in text
    frame = events_frame(agent.store.events(agent.session_id, type="context.cache_decision"))  # `%agent events`
    assert list(frame["decision"]) == ["deferred", "deferred"]  # turn 1, call 3; turn 2, call 1
    assert "kept the warm cached prefix (previous call 30 s ago" in frame["detail"].iloc[1]
    log = TurnLog()
    log.handle("context.cache_decision", {**decision, "turn": 2, "iteration": 1})
    assert log.entries[-1].kind == "note" and "kept the warm cached prefix" in log.entries[-1].text


def test_e4_the_timeline_and_the_inspector_show_a_deferred_compaction(tmp_path) -> None:
    """E4, what a user sees: `%agent timeline` rings the call that kept the warm prefix (at what it sent) and the
    inspector of that call (`%agent view`) says why, from the stored record; a plain strategy's have neither."""
    from mxclaw_nb.widgets.data import from_request
    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.timeline import KEPT_WARM_LABEL, timeline_frame, timeline_layers, timeline_svg

    agent, _prev, _first = _two_turns(tmp_path / "cache", "masking-cache:keep_last=0", idle=30)
    rows = agent.store.requests(agent.session_id)
    layers = timeline_layers(timeline_frame(rows))
    # turn 1's third call (kept call 2's prefix) and turn 2's first call, each at what it sent
    assert layers.kept_warm == [(c, float(rows["after_tokens"].iloc[c - 1])) for c in (3, 4)]
    svg = timeline_svg(layers)
    assert svg.count("<circle") == 3 and KEPT_WARM_LABEL in svg  # the rings and the legend's sample
    head = CompactionInspector(from_request(rows.iloc[3].to_dict(), agent.transcript())).header_html()
    assert "masking-cache: kept the warm cached prefix (previous call 30 s ago" in head
    first = CompactionInspector(from_request(rows.iloc[0].to_dict(), agent.transcript())).header_html()
    assert "kept the warm" not in first  # the first call had no previous call to keep: nothing decided

    plain, _p, _f = _two_turns(tmp_path / "plain", "masking:keep_last=0", idle=30)
    plain_rows = plain.store.requests(plain.session_id)
    assert timeline_layers(timeline_frame(plain_rows)).kept_warm == []
    assert "<circle" not in timeline_svg(timeline_layers(timeline_frame(plain_rows)))


def test_e4_live_masking_cache_past_the_ttl_behaves_as_plain_masking(tmp_path) -> None:
    _, p_prev, p_first = _two_turns(tmp_path / "plain", "masking:keep_last=0", idle=301)
    agent, prev, first = _two_turns(tmp_path / "cache", "masking-cache:keep_last=0", idle=301)
    # the same view as plain masking (each run has its own workspace path and call ids): prefix rewritten
    assert _shape(first) == _shape(p_first) and first[:len(prev)] != prev and "y" * 100 not in json.dumps(first)
    [decision] = _decisions(agent, turn=2)
    assert decision["decision"] == "plain" and decision["warm"] is False and decision["continued"] is False
    assert parse("context.cache_decision", decision).text().startswith(
        "masking-cache: cache cold (previous call 301 s ago, past the 300 s cache time to live)")


def test_e4_the_cache_ttl_setting_decides_warmth(tmp_path) -> None:
    """E4: `cache_ttl_seconds` (e.g. Anthropic's 1-hour cache) is the time to live the decision uses: a pause of
    1,000 s is warm under 3,600 s and cold under the default 300 s; the record and the log line say which TTL."""
    agent, prev, first = _two_turns(tmp_path / "hour", "masking-cache:keep_last=0", idle=1_000,
                                    cache_ttl_seconds=3_600)
    assert agent.settings.cache_ttl_seconds == 3_600
    assert first[:len(prev)] == prev  # warm: the prefix kept
    [decision] = _decisions(agent, turn=2)
    assert decision["decision"] == "deferred" and decision["warm"] is True and decision["ttl_seconds"] == 3_600
    assert "within the 3,600 s cache time to live" in parse("context.cache_decision", decision).text()

    agent, prev, first = _two_turns(tmp_path / "default", "masking-cache:keep_last=0", idle=1_000)
    assert first[:len(prev)] != prev  # cold under 300 s: rewritten as plain masking does
    [decision] = _decisions(agent, turn=2)
    assert decision["decision"] == "plain" and decision["warm"] is False and decision["ttl_seconds"] == 300


def test_e4_the_cache_ttl_setting_is_checked() -> None:
    from mxclaw_nb.settings import Settings

    for bad in (0, -5, "long", float("nan")):
        with pytest.raises(ValueError, match="cache_ttl_seconds"):
            Settings(cache_ttl_seconds=bad)


def test_e4_live_clear_at_least_breaks_a_warm_prefix_for_enough_tokens(tmp_path) -> None:
    """A rewrite freeing at least `clear_at_least` tokens is made even on a warm cache (and recorded why)."""
    agent, prev, first = _two_turns(tmp_path, "masking-cache:keep_last=0,clear_at_least=1000", idle=10)
    assert first[:len(prev)] != prev
    [decision] = _decisions(agent, turn=2)
    assert decision["decision"] == "compacted" and decision["why"] == "clear_at_least" and decision["freed"] >= 1000
    [inside] = _decisions(agent, turn=1)  # call 3: masking the first read frees about 1,500 >= 1,000: made
    assert inside["decision"] == "compacted" and inside["why"] == "clear_at_least"


def test_e4_live_a_warm_prefix_is_broken_when_its_continuation_would_pass_the_threshold(tmp_path) -> None:
    """Threshold 2,800 (window 3,500): the continuation (about 3,000 est.) would pass it, so the compaction is made."""
    agent, prev, first = _two_turns(tmp_path, "masking-cache:keep_last=0", idle=10, context_window_tokens=3_500)
    assert first[:len(prev)] != prev and "y" * 100 not in json.dumps(first)
    [decision] = _decisions(agent, turn=2)
    assert decision["decision"] == "compacted" and decision["why"] == "threshold" and decision["warm"] is True
    assert decision["sent_tokens"] <= 2_800
    assert "broke the warm cached prefix" in parse("context.cache_decision", decision).text()


def test_e4_live_a_fresh_process_has_no_previous_call_and_sends_the_plain_view(tmp_path) -> None:
    """Re-entry in a new Agent (a new process's view of the session): the plain strategy, no decision event."""
    clock = Clock()
    with TestServer() as server:
        _script(server)
        first = _agent(server, tmp_path, "masking-cache:keep_last=0", clock)
        first.run("read both files")
        clock.now += 5
        again = _agent(server, tmp_path, "masking-cache:keep_last=0", clock, db=first.store,
                       session_id=first.session_id)
        again.run("and again")
        prev, sent = server.requests[-2]["messages"], server.requests[-1]["messages"]
    assert sent[:len(prev)] != prev  # as plain masking: nothing of the previous call is known here
    assert not _decisions(again, turn=2)
    assert _extra(again)[-1]["cache_decision"]["why"] == "no previous call in this process"


@pytest.mark.parametrize("name", sorted(n for n in STRATEGIES if n.endswith("-cache")))
def test_c12_the_live_agent_takes_every_cache_variant_by_name(tmp_path, name: str) -> None:
    with TestServer() as server:
        agent = _agent(server, tmp_path, name, Clock())
        assert isinstance(agent.policy.strategy, CacheVariant) and agent.policy.strategy.name == name
        assert agent.run("hello").status == "ok" and agent.run("again").status == "ok"
        assert [d["decision"] for d in _decisions(agent)] == ["plain"]  # nothing to defer: it extends
        assert _decisions(agent)[0]["why"] == "keeps the prefix"


def test_e4_live_model_summary_cache_asks_keeps_and_sends_the_model_summary(tmp_path) -> None:
    """C11 under the variant: the live summary hook sees the ModelSummary inside `model-summary-cache`."""

    def summary(messages: list[dict]) -> str:
        return "Model summary of the older turns: facts kept."

    (tmp_path / "ws").mkdir()
    with TestServer(answers={ASK: summary}) as server:
        agent = Agent(workspace=tmp_path / "ws", db=str(tmp_path / "ms.duckdb"), base_url=server.base_url,
                      api_key="k", model="test-model", home=tmp_path / "home", approval="allow",
                      context_window_tokens=4_000, keep_recent_tokens=800, counter="estimate",
                      strategy="model-summary-cache:free_form=true", clock=Clock())
        for k in range(6):
            assert agent.run(f"turn {k}: " + f"please remember fact {k} about the project. " * 60).status == "ok"
        df = agent.store.events(agent.session_id, type="context.summary")
        assert len(df) >= 1
        strategy = agent.policy.strategy
        assert isinstance(strategy, CacheVariant) and isinstance(strategy.inner, ModelSummary)
        assert strategy.inner.summaries  # kept in the variant's inner strategy
        sent = [m["content"] for r in server.requests for m in r["messages"]
                if m["role"] == "system" and m["content"].startswith(SUMMARY_PREFIX)]
        assert any("facts kept." in s for s in sent)


@pytest.mark.parametrize("strategy", ["masking-cache:keep_last=1", "clearing-cache:keep_last=1",
                                      "article-cache", "masking-cache:keep_last=0,clear_at_least=900"])
def test_e4_a_replay_of_a_live_cache_aware_session_sends_what_the_live_calls_sent(tmp_path, strategy: str) -> None:
    """E4 live = E4 replayed: a warm multi-turn session (each turn several reads, every pause within the time to
    live) replayed from its stored transcript under the same policy gives every live call's messages byte for
    byte, and the same decision per call (replay takes the cache as warm; live measured it)."""
    from mxclaw_nb.analysis.replay import replay_messages
    from mxclaw_nb.context import ContextPolicy

    clock = Clock()
    ws = tmp_path / "ws"
    ws.mkdir()
    for k in range(6):
        (ws / f"f{k}.txt").write_text(f"{k}" * 2_500, encoding="utf-8")
    with TestServer() as server:
        agent = _agent(server, tmp_path, strategy, clock, context_window_tokens=6_000)
        for turn in range(3):
            for k in range(2 * turn, 2 * turn + 2):
                server.enqueue_tool_calls([("read_file", {"path": f"f{k}.txt"})])
            server.enqueue_text(f"done {turn}")
            clock.now += 20
            assert agent.run(f"read two files, round {turn}").status == "ok"
        live = [r["messages"] for r in server.requests]
    policy = ContextPolicy(6_000, 0.8, 500, strategy=agent.policy.strategy,
                           tool_definitions=agent.policy.tool_definitions)  # T1-T3: the live calls' fixed layer
    views: list = []
    rows = replay_messages(agent.transcript(), policy, facts=False, views=views)
    assert [json.dumps(v.messages, sort_keys=True) for v in views] == [json.dumps(m, sort_keys=True) for m in live]
    recorded = [e["cache_decision"]["decision"] for e in _extra(agent)]
    assert recorded[0] == "plain"  # live's first call: no previous call in this process (replay: no decision)
    assert [r["cache_decision"] for r in rows] == [None, *recorded[1:]]
    assert {"deferred", "compacted"} & set(recorded)  # the session put a decision to the test


def test_e4_a_tool_run_past_the_ttl_cools_the_prefix_inside_a_turn(tmp_path) -> None:
    """E4: warmth inside a turn is measured from when the previous call's answer came, so a tool that runs longer
    than the time to live (the clock moves 400 s while it runs) leaves a cold prefix: masking is not deferred."""
    from mxclaw_nb.tools import Tool

    clock = Clock()

    def slow(args: dict, ctx: object) -> str:
        clock.now += 400
        return "z" * 6_000

    tool = Tool("slow_job", "A long job.", {"type": "object", "properties": {}}, slow)
    with TestServer() as server:
        agent = _agent(server, tmp_path, "masking-cache:keep_last=0", clock)
        agent.tools.register(tool)
        for name, args in (("read_file", {"path": "big.txt"}), ("slow_job", {}), ("read_file", {"path": "b.txt"})):
            server.enqueue_tool_calls([(name, args)])
        server.enqueue_text("done")
        assert agent.run("read, wait, read").status == "ok"
    decisions = [e.get("cache_decision", {}) for e in _extra(agent)]
    # call 2 (after a quick read) compacts nothing; call 3 follows the 400 s job: cold, so the first read is masked
    # as plain masking masks it; call 4 follows a quick read: warm, masking the job's output is deferred
    assert decisions[1]["decision"] == "plain" and decisions[1]["plain_stage"] == "unchanged"
    assert decisions[2]["warm"] is False and decisions[2]["idle_seconds"] == 400
    assert decisions[2]["decision"] == "plain" and decisions[2]["plain_stage"] == "micro"
    assert decisions[3]["decision"] == "deferred" and decisions[3]["idle_seconds"] == 0
