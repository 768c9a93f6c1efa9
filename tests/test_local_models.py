"""What a small local model needs from the loop (SPEC L2, L7, T1-T3, C5/C6, N2), over HTTP to the shipped test server
through the real `openai` client, on a real DuckDB file.

- `max_tokens` is sent with every call and kept with the request record; `stream=False` sends plain requests.
- The request's tool definitions are their own layer: the first call's estimate is within 10% of what the server
  reports on its usage profile (which, like a chat template, counts the tools); without the layer it is far low.
- A compaction that would not shrink the view is not applied: stored as `context.nothing_to_gain`, kept with the
  record, said in the live log.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.context import estimate_messages
from mxclaw_nb.demo.model import copy_demo_workspace
from mxclaw_nb.demo.server import TestServer


def _agent(srv: TestServer, tmp_path: Path, **kw: Any) -> Agent:
    ws = copy_demo_workspace(tmp_path / "ws")
    return Agent(workspace=ws, db=str(tmp_path / "l.duckdb"), base_url=srv.base_url, api_key="k", model="test-model",
                 approval="allow", home=tmp_path / "home", **kw)


def _extra(row: Any) -> dict[str, Any]:
    return row if isinstance(row, dict) else json.loads(row or "{}")


def test_l2_max_tokens_is_sent_and_recorded_and_stream_can_be_off(tmp_path: Path) -> None:
    with TestServer() as srv:
        agent = _agent(srv, tmp_path, max_tokens=123, stream=False)
        srv.enqueue_text("ok")
        agent.run("hello")
        body = srv.requests[-1]
        assert body["max_tokens"] == 123 and not body.get("stream")
        rec = agent.store.requests(agent.session_id).iloc[-1]
        assert _extra(rec["extra"])["max_tokens"] == 123
        unbounded = _agent(srv, tmp_path / "b", max_tokens=None)
        srv.enqueue_text("ok")
        unbounded.run("hello")
        assert "max_tokens" not in srv.requests[-1] and srv.requests[-1]["stream"] is True
        with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
            _agent(srv, tmp_path / "c", max_tokens=0)


def test_t1_t3_first_call_estimate_within_10_percent_on_the_test_servers_usage_profile(tmp_path: Path) -> None:
    with TestServer() as srv:  # usage: o200k_base of the messages + the tool definitions, like a template
        agent = _agent(srv, tmp_path)
        srv.enqueue_text("ok")
        agent.run("Look at the failing test and tell me what is wrong.")
        rec = agent.store.requests(agent.session_id).iloc[0]
        reported, estimate = int(rec["prompt_tokens_reported"]), int(rec["estimate_tokens"])
        defs = _extra(rec["extra"])["tool_definitions_tokens"]
        assert abs(estimate / reported - 1) <= 0.10, (estimate, reported)
        messages_only = estimate_messages(srv.requests[0]["messages"])
        assert estimate == messages_only + defs  # C1 for messages unchanged (T1), the layer added once
        assert messages_only / reported < 0.8  # without the layer: far low, as the issue measured
        # T3: calibration learns the messages' share; an unchanged view then sums to what was reported
        view = agent.dry_run()
        assert view.counter == "calibrated" and view.fixed_tokens == defs


def test_c5_c6_a_compaction_with_nothing_to_gain_is_said_stored_and_not_applied(tmp_path: Path) -> None:
    from mxclaw_nb.notebook.livelog import LiveLog

    with TestServer() as srv:
        agent = _agent(srv, tmp_path, context_window_tokens=3000, keep_recent_tokens=50, counter="estimate",
                       summarize=lambda old: "[compressed conversation context]\n" + "long summary " * 2000)
        log = LiveLog("test", agent.session_id, mode="off")
        seen: list[tuple[str, dict]] = []
        agent.subscribe(lambda kind, p: seen.append((kind, p)))
        agent.subscribe(log.handle)
        srv.enqueue_text("first answer " * 100)
        agent.run("hi")
        srv.enqueue_text("second")
        agent.run("again " * 50)
        events = agent.store.events(agent.session_id)
        gains = events[events["type"] == "context.nothing_to_gain"]
        assert len(gains) >= 1 and not (events["type"] == "context.compacted").any()
        payload = _extra(gains["payload"].iloc[0])
        assert payload["stage"] == "summary" and payload["after_tokens"] >= payload["before_tokens"]
        recs = agent.store.requests(agent.session_id)
        assert set(recs["stage"]) == {"unchanged"}
        assert any("nothing_to_gain" in _extra(e) for e in recs["extra"])
        assert [k for k, _ in seen].count("context.nothing_to_gain") == len(gains)
        assert "summary compaction: nothing to gain" in log.to_text()
