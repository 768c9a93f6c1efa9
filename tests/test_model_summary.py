"""SPEC C11 end to end over HTTP: the `model-summary` strategy with summaries scripted on the shipped test server
(answered by the summary request's own question), a real DuckDB file and the real openai client.

A merged second summary, a rejected longer-than-input one, a timed-out one (each falling back to C6 with a stored
`context.summary_rejected`), re-entry that reuses the stored summary (the server sees no second summary request),
and a replay that rebuilds the live views byte for byte from the recorded summaries, without any model call."""

from __future__ import annotations

import json
from pathlib import Path

from mxclaw_nb import Agent
from mxclaw_nb.analysis.replay import replay_messages
from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.model_summary import ASK, ModelSummary, summary_note
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.messages import SUMMARY_PREFIX
from mxclaw_nb.summary_call import recorded_from_store
from mxclaw_nb.widgets.turnlog import TurnLog

SCAFFOLD = "Scaffold (the deterministic summary of the same messages):\n"


def good_summary(messages: list[dict]) -> str:
    """A scripted model summary: the scaffold's facts, with the goals cut short (shorter than the messages)."""
    prompt = messages[-1]["content"]
    scaffold = prompt[prompt.index(SCAFFOLD) + len(SCAFFOLD): prompt.rindex(ASK)].strip()
    lines = [line[:70] if line.startswith("- ") else line for line in scaffold.splitlines()]
    return "\n".join(["Model summary of the older turns:", *lines[1:]])


def _agent(server: TestServer, tmp_path: Path, strategy: str = "model-summary", **kw) -> Agent:
    (tmp_path / "ws").mkdir(parents=True, exist_ok=True)
    return Agent(workspace=tmp_path / "ws", db=kw.pop("db", str(tmp_path / "c11.duckdb")), base_url=server.base_url,
                 api_key="k", model="test-model", home=tmp_path / "home", approval="allow",
                 context_window_tokens=4_000, keep_recent_tokens=800, counter="estimate", strategy=strategy, **kw)


def _turn(agent: Agent, k: int) -> None:
    assert agent.run(f"turn {k}: " + f"please remember fact {k} about the project. " * 60).status == "ok"


def _events(agent: Agent, kind: str) -> list[dict]:
    df = agent.store.events(agent.session_id, type=kind)
    return [json.loads(p) if isinstance(p, str) else p for p in df["payload"]]


def _summary_requests(server: TestServer) -> list[dict]:
    return [r for r in server.requests if r["messages"][-1]["content"].endswith(ASK)]


def test_c11_merged_summaries_recorded_reused_on_reentry_and_replayed_byte_for_byte(tmp_path):
    with TestServer(answers={ASK: good_summary}) as server:
        agent = _agent(server, tmp_path)
        heard: list[tuple[str, dict]] = []
        agent.subscribe(lambda kind, payload: heard.append((kind, payload)))
        for k in range(6):
            _turn(agent, k)
        recorded = _events(agent, "context.summary")
        assert len(recorded) >= 2 and not _events(agent, "context.summary_rejected")
        first, second = recorded[0], recorded[1]
        # the four records the article asks for
        source = {"model": "test-model", "endpoint": server.base_url, "prompt_version": "c11-1"}
        assert first["source"] == source
        assert first["merge"] is None
        assert first["invalidation"].startswith(f"valid only for seqs #{first['coverage'][0]}")
        assert second["coverage"][0] == first["coverage"][0] and second["coverage"][1] > first["coverage"][1]
        assert second["merge"] == {"extends": first["coverage"]}  # anchored: merged into the first, not rewritten
        asked = _summary_requests(server)
        assert first["text"] in asked[1]["messages"][-1]["content"]  # the second request carried the first summary
        assert second["usage"]["prompt_tokens"] > 0
        # live subscribers hear it (the live log's own line, with its usage)
        live = [p for kind, p in heard if kind == "context.summary"]
        assert len(live) == len(recorded)
        note = summary_note("context.summary", live[1])
        assert note.startswith(f"✎ model summary of #{second['coverage'][0]}-#{second['coverage'][1]} (merged into "
                               f"#{first['coverage'][0]}-#{first['coverage'][1]}) · ")
        log = TurnLog()  # the one live turn model every renderer draws: the summary call has its own line
        for kind, payload in heard:
            log.handle(kind, payload)
        assert any(line.kind == "note" and line.text.startswith("✎ model summary of #") and "merged into" in line.text
                   for line in log.entries)
        # the view sent the model's text (with the range it covers, C13), not the C6 one
        sent = [m["content"] for r in server.requests if r not in asked for m in r["messages"]
                if m["role"] == "system" and m["content"].startswith(SUMMARY_PREFIX)]
        assert any(second["text"] in s and f"Recall: #{second['coverage'][0]}-#{second['coverage'][1]}" in s
                   for s in sent)
        # re-entry: a new Agent on the same session and store reuses the stored summary, no second request
        n = len(asked)
        again = _agent(server, tmp_path, db=agent.store, session_id=agent.session_id)
        assert again.run("go on").status == "ok"
        assert len(_summary_requests(server)) == n
        last = server.requests[-1]["messages"]
        assert any(m["role"] == "system" and recorded[-1]["text"] in m["content"] for m in last)
        # replay: the same views from the transcript and the recorded summaries, without any model call
        requests = len(server.requests)
        policy = ContextPolicy(4_000, 0.8, 800, strategy=ModelSummary(
            summaries=recorded_from_store(agent.store, agent.session_id)),
            tool_definitions=again.policy.tool_definitions)  # T1-T3: the same fixed overhead as the live calls
        views: list = []
        replay_messages(again.transcript(), policy, facts=False, views=views)
        live = [r["messages"] for r in server.requests if not r["messages"][-1]["content"].endswith(ASK)]
        assert len(server.requests) == requests
        assert [json.dumps(v.messages, sort_keys=True) for v in views] == [json.dumps(m, sort_keys=True)
                                                                            for m in live]
        assert sum(v.stage == "summary" for v in views) >= 3


def test_c11_a_longer_summary_and_a_late_one_are_rejected_and_c6_stands_in(tmp_path):
    long_text = "A very long summary that repeats itself. " * 2_000
    with TestServer(answers={ASK: long_text}) as server:
        agent = _agent(server, tmp_path)
        for k in range(5):
            _turn(agent, k)
        rejected = _events(agent, "context.summary_rejected")
        assert rejected and rejected[0]["reason"].startswith("not shorter than what it replaces")
        assert summary_note("context.summary_rejected", rejected[0]).endswith("; the C6 summary stands in")
        assert not _events(agent, "context.summary")
        summaries = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "system"
                     and m["content"].startswith(SUMMARY_PREFIX)]
        assert summaries and "Older transcript messages were summarized." in summaries[0]  # the C6 text
        assert long_text not in json.dumps(server.requests[-1]["messages"])
    with TestServer(answers={ASK: good_summary}) as server:
        late = _agent(server, tmp_path / "late", strategy="model-summary:deadline=0")
        for k in range(5):
            _turn(late, k)
        reasons = [e["reason"] for e in _events(late, "context.summary_rejected")]
        assert reasons and all(r.startswith("passed its deadline") for r in reasons)
        assert not _events(late, "context.summary")
