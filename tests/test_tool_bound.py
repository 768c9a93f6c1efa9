"""SPEC L3/C4: at most `max_tool_calls` tool calls run per model response; the rest are answered."""

from __future__ import annotations

from pathlib import Path

from mxclaw_nb import Agent
from mxclaw_nb.context.repair import plan_repair
from mxclaw_nb.demo.server import TestServer


def test_l3_a_response_with_1000_tool_calls_runs_the_bound_and_answers_the_rest(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with TestServer() as srv:
        agent = Agent(workspace=ws, db=str(tmp_path / "b.duckdb"), base_url=srv.base_url, api_key="k",
                      model="m", approval="allow", max_tool_calls=8)
        ids = srv.enqueue_tool_calls([("write_file", {"path": f"f{i}.txt", "content": "x"}) for i in range(1000)])
        srv.enqueue_text("done")
        result = agent.run("make files")
        second = srv.requests[-1]["messages"]
    assert result.text == "done"
    assert sorted(p.name for p in ws.iterdir()) == sorted(f"f{i}.txt" for i in range(8))
    tools = [m for m in agent.transcript() if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ids  # every call answered, in order (C4)
    skipped = [m for m in tools if "at most 8 are run per model response" in m["content"]]
    assert len(skipped) == 992 and all(m.get("is_error") for m in skipped)
    assert sum(1 for m in second if m["role"] == "tool") == 1000  # the model learns about each one
    events = agent.store.sql("SELECT payload FROM events WHERE type = 'tool.skipped'")
    assert len(events) == 1 and '"count": 992' in events.iloc[0]["payload"]
    assert not plan_repair(agent.transcript()).changed  # nothing dangling, nothing to repair
