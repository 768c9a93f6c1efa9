"""SPEC C11 + S1/T3/E3: the summary call is a model call like any other, end to end over HTTP (the shipped test
server with scripted summaries, the real openai client, a real DuckDB file): a stored request record marked
`purpose = 'summary'` with the usage the server reported, a line in the live log with that usage, its own marker
in the timeline (the SVG and the matplotlib drawing read the same layers), and its dollars in the turn's cost,
while the turn's own calls keep exactly the figures they had (readers of a turn's calls do not see it)."""

from __future__ import annotations

import json

import pytest

from mxclaw_nb.analysis.cost import CallTokens, Price, call_costs, request_costs, summary_call_costs
from mxclaw_nb.context.model_summary import ASK
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.records import SUMMARY_CALL
from mxclaw_nb.store.records import record_from_row
from mxclaw_nb.widgets.timeline import SUMMARY_LABEL, SUMMARY_OFFSET, TokenTimeline, draw_timeline
from mxclaw_nb.widgets.turnlog import TurnLog
from tests.test_model_summary import _agent, _events, _summary_requests, _turn, good_summary

PRICE = Price("test-model", 3.00, 0.30, 15.00, 3.75)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("c11call")
    heard: list[tuple[str, dict]] = []
    with TestServer(answers={ASK: good_summary}) as server:
        agent = _agent(server, tmp)
        agent.subscribe(lambda kind, payload: heard.append((kind, payload)))
        for k in range(6):
            _turn(agent, k)
        yield agent, server, heard


def test_c11_the_summary_call_is_stored_as_a_request_record_with_its_usage(session):
    agent, server, _ = session
    asked = _summary_requests(server)
    every = agent.store.requests(agent.session_id, summary_calls=True)
    calls = every[every["purpose"] == SUMMARY_CALL]
    assert len(asked) >= 2 and len(calls) == len(asked)  # one record per summary request the server saw
    recorded = _events(agent, "context.summary")
    for (_, row), event in zip(calls.iterrows(), recorded, strict=True):
        rec = record_from_row(row)
        assert rec.purpose == SUMMARY_CALL and rec.error is None and rec.model == "test-model"
        # the usage the server reported, the same figures the context.summary event carries
        assert rec.prompt_tokens_reported == event["usage"]["prompt_tokens"] > 0
        assert rec.completion_tokens_reported == event["usage"]["completion_tokens"] > 0
        assert rec.latency_ms is not None and rec.latency_ms >= 0
        assert rec.extra["coverage"] == event["coverage"] and rec.extra["outcome"] == "accepted"
        # made in the turn and call whose view it summarized: that call's record follows it
        turn = every[(every["turn"] == rec.turn) & (every["iteration"] == rec.iteration) & every["purpose"].isna()]
        assert len(turn) == 1 and int(turn["seq"].iloc[0]) > rec.seq
    # readers of the turn's calls are unchanged: exactly the requests the server saw besides the summary calls
    turn_calls = agent.store.requests(agent.session_id)
    assert turn_calls["purpose"].isna().all()
    assert len(turn_calls) == len(server.requests) - len(asked) == len(every) - len(calls)


def test_c11_the_live_log_shows_the_summary_call_with_its_usage(session):
    agent, _, heard = session
    log = TurnLog()
    for kind, payload in heard:
        log.handle(kind, payload)
    lines = [e.text for e in log.entries if e.kind == "note" and e.text.startswith("✎ model summary of #")]
    first = _events(agent, "context.summary")[0]
    used = first["usage"]
    assert len(lines) == len(_events(agent, "context.summary"))
    assert f"· summary call {used['prompt_tokens']:,} + {used['completion_tokens']:,} tokens, " in lines[0]
    assert lines[0].endswith(" ms")


def test_c11_the_timeline_marks_each_summary_call_before_the_call_it_served(session):
    agent, _, _ = session
    every = agent.store.requests(agent.session_id, summary_calls=True)
    calls = every[every["purpose"] == SUMMARY_CALL]
    tl = TokenTimeline(store=agent.store, session_id=agent.session_id)
    assert len(tl.data) == len(agent.store.requests(agent.session_id))  # x positions: the turn's calls only
    assert len(tl.layers.summary_calls) == len(calls)
    for (x, tokens, outcome), (_, row) in zip(tl.layers.summary_calls, calls.iterrows(), strict=True):
        served = tl.data[(tl.data["turn"] == row["turn"]) & (tl.data["iteration"] == row["iteration"])]
        assert x == pytest.approx(float(served["call"].iloc[0]) - SUMMARY_OFFSET)
        assert tokens == row["prompt_tokens_reported"] and outcome == "accepted"
    svg = tl.svg
    group = svg[svg.index('<g class="mx-summary-calls">'):]
    assert group[:group.index("</g>")].count('data-outcome="accepted"') == len(calls)
    assert f"+ {len(calls)} summary calls" in tl.caption_html()
    fig = draw_timeline(tl.data)  # the matplotlib drawing reads the same layers
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert SUMMARY_LABEL in labels


def test_c11_the_summary_calls_are_counted_in_the_turns_cost_and_the_turn_calls_keep_their_figures(session):
    agent, _, _ = session
    every = agent.store.requests(agent.session_id, summary_calls=True)
    costs = request_costs(every, PRICE)
    summary = costs[costs["purpose"] == SUMMARY_CALL]
    turn = costs[costs["purpose"].isna()]
    assert len(summary) == (every["purpose"] == SUMMARY_CALL).sum() >= 2
    # the turn's calls: exactly what costing them alone gives (summary calls are not in their cache chain)
    alone = request_costs(agent.store.requests(agent.session_id), PRICE)
    assert turn["cost_est"].tolist() == pytest.approx(alone["cost_est"].tolist())
    # each summary call: all its prompt tokens fresh, plus its completion
    calls = every[every["purpose"] == SUMMARY_CALL]
    expected = [(p * PRICE.write + c * PRICE.output) / 1e6
                for p, c in zip(calls["prompt_tokens_reported"], calls["completion_tokens_reported"], strict=True)]
    assert summary["cost_est"].tolist() == pytest.approx(expected) and min(expected) > 0
    assert (summary["cached_tokens_est"] == 0).all()
    # per turn: a turn that made a summary call costs that much more
    t = int(calls["turn"].iloc[0])
    assert costs[costs["turn"] == t]["cost_est"].sum() == pytest.approx(
        alone[alone["turn"] == t]["cost_est"].sum() + summary[summary["turn"] == t]["cost_est"].sum())


def test_c11_summary_call_costs_ignore_any_shared_prefix():
    made = [CallTokens(1_000_000, 900_000, 1_000_000)]
    assert summary_call_costs(made, PRICE)[0].cost == pytest.approx(PRICE.write + PRICE.output)
    assert call_costs(made, PRICE)[0].cost == pytest.approx(PRICE.write + PRICE.output)  # first call: cold anyway
    assert summary_call_costs(made * 2, PRICE)[1].cached == 0  # a second one reads no cache either


def test_c11_a_rejected_summary_call_is_stored_with_its_usage_and_outcome(tmp_path):
    long_text = "A very long summary that repeats itself. " * 2_000
    with TestServer(answers={ASK: long_text}) as server:
        agent = _agent(server, tmp_path)
        for k in range(5):
            _turn(agent, k)
        rejected = _events(agent, "context.summary_rejected")
        every = agent.store.requests(agent.session_id, summary_calls=True)
        calls = every[every["purpose"] == SUMMARY_CALL]
        assert len(calls) == len(rejected) == len(_summary_requests(server)) >= 1
        extra = json.loads(calls["extra"].iloc[0])
        assert extra["outcome"] == "rejected"
        assert int(calls["completion_tokens_reported"].iloc[0]) == rejected[0]["usage"]["completion_tokens"] > 1_000
        tl = TokenTimeline(store=agent.store, session_id=agent.session_id)
        assert {o for _, _, o in tl.layers.summary_calls} == {"rejected"}


def test_c11_compare_counts_summary_calls_per_strategy_and_says_when_c6_stood_in():
    from mxclaw_nb.analysis.compare import compare, summarize_policies
    from mxclaw_nb.context.model_summary import summary_prompt
    from mxclaw_nb.context.tokens import estimate_messages
    from mxclaw_nb.datasets import load

    sessions = {c.id: c.messages for c in load("swe-agent")[:4]}
    policies = [{"strategy": s, "window": 8_000} for s in ("article", "masking", "model-summary")]
    df = compare(sessions, policies, progress=False, facts=False, executor="inline")
    table = summarize_policies(df).set_index("policy")
    for label in table.index:
        if "model-summary" not in label:  # strategies without model summaries make none
            assert table.loc[label, "summary_calls"] == table.loc[label, "summary_call_tokens"] == 0
    ms = table.loc[[x for x in table.index if "model-summary" in x][0]]
    assert ms["summary_calls"] > 0 and ms["summary_calls_stand_in"] == ms["summary_calls"]  # no records: C6 sent
    assert ms["summary_calls_recorded"] == 0
    # the tokens are the C1 estimate of exactly the requests the engine planned
    from mxclaw_nb.analysis.policies import as_policy
    from mxclaw_nb.analysis.replay import replay_messages

    policy = as_policy(policies[2])[1]
    planned = 0
    for messages in sessions.values():
        views: list = []
        replay_messages(messages, policy, facts=False, views=views)
        planned += sum(estimate_messages(summary_prompt(v.plan)) for v in views if v.plan is not None)
    assert ms["summary_call_tokens"] == planned > 0


def test_c11_compare_over_a_live_session_counts_its_recorded_summary_calls(session):
    from mxclaw_nb.analysis.compare import summarize_policies
    from mxclaw_nb.analysis.replay import replay_messages
    from mxclaw_nb.context.model_summary import ModelSummary
    from mxclaw_nb.summary_call import recorded_from_store

    agent, _, _ = session
    recorded = recorded_from_store(agent.store, agent.session_id)
    from dataclasses import replace

    policy = replace(agent.policy, strategy=ModelSummary(summaries=recorded))  # with its tool definitions (T1)
    import pandas as pd

    rows = pd.DataFrame(replay_messages(agent.transcript(), policy, facts=False))
    rows["policy"] = "model-summary (recorded)"
    row = summarize_policies(rows).iloc[0]
    assert row["summary_calls_recorded"] == row["summary_calls"] == len(recorded) >= 2
    assert row["summary_calls_stand_in"] == 0 and row["summary_call_tokens"] == 0  # reported ones: in `requests`


def test_c11_the_timeline_caption_cost_includes_the_summary_calls(session):
    import re

    from mxclaw_nb.analysis.cost import price_for
    from mxclaw_nb.widgets.cost import cost_caption

    agent, _, _ = session
    data = TokenTimeline(store=agent.store, session_id=agent.session_id).data.copy()
    data["model"] = "gpt-4o-mini"  # a model with an example price row
    made = data.attrs["summary_calls"]
    with_calls = cost_caption(data)
    without = data.copy()
    without.attrs["summary_calls"] = []

    def dollars(html: str) -> float:
        return float(re.search(r"est\. cost \$([0-9.,]+)", html).group(1).replace(",", ""))

    extra = sum(c.cost for c in summary_call_costs(
        [CallTokens(m["tokens"], 0, m["completion"] or 0) for m in made], price_for("gpt-4o-mini")))
    assert extra > 0 and dollars(with_calls) == pytest.approx(dollars(cost_caption(without)) + extra, abs=1e-4)
    assert f"for {len(made)} summary calls (C11)" in with_calls and with_calls.count("$") == 1


@pytest.mark.parametrize(("finish", "accepted"), [("stop", True), ("length", False)])
def test_c11_a_summary_cut_at_the_output_limit_is_rejected(finish: str, accepted: bool) -> None:
    """C11: a summary that stopped at the model's output limit (finish_reason "length", e.g. a small max_tokens) is
    cut mid-sentence: it is rejected with that reason and C6 stands in, instead of being stored as the valid summary
    of its range (and reused on every re-entry). The same text with finish_reason "stop" passes the gates."""
    from mxclaw_nb.context.model_summary import SummaryPlan
    from mxclaw_nb.context.summary import build_structured_summary
    from mxclaw_nb.provider import OpenAIProvider
    from mxclaw_nb.summary_call import ask_summary

    old = [{"role": "user", "content": "explain the report"}, {"role": "assistant", "content": "It sums rows."}]
    scaffold = build_structured_summary(old)
    plan = SummaryPlan(0, 1, scaffold, None, tuple(old), replaced_tokens=5_000, free_form=True)
    events: list[tuple[str, dict]] = []
    with TestServer() as server:
        server.enqueue_text("[compressed conversation context]\nThe user asked how the report is built; the",
                            finish_reason=finish)
        provider = OpenAIProvider(base_url=server.base_url, api_key="k", model="test-model")
        got = ask_summary(provider, plan, 60.0, lambda kind, payload: events.append((kind, payload)))
    assert (got is not None) == accepted
    if not accepted:
        assert events[0][0] == "context.summary_rejected" and "finish_reason 'length'" in events[0][1]["reason"]
