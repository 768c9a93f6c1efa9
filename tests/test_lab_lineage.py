"""SPEC N3 + C7 in the policy lab: a call that is not the first of its turn after a compaction is shown as the live
inspector shows it. Its before rows are the stored transcript up to the call (the original tool output, not the
placeholder an earlier call of the turn made), each placeholder or summary it carries is named by the call that made
it, and the `carried` line says so.

The equality test runs a real session over the shipped test server (real `openai` client over HTTP, real DuckDB
file), then opens `PolicyLab(store=..., current=sid)` on the stored session with the agent's policy: for every call
of the turn, the lab's rows equal what `%agent view` reads from the store and what the live widget read from the
loop's view.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from mxclaw_nb import Agent
from mxclaw_nb.analysis.replay import replayed_lineage
from mxclaw_nb.context import Lineage
from mxclaw_nb.widgets.data import CallData, from_request, from_view
from mxclaw_nb.widgets.lab import PolicyLab
from tests.context.test_lineage import SETTINGS, run_turn, turns


def _shown(d: CallData) -> dict[str, Any]:
    """What the gauge and the inspector show of a call: rows, carried line, summaries, figures."""
    r = d.record
    return {"before": d.before, "after": d.after, "carried": d.carried, "summaries": d.summaries,
            "relative": d.transcript_relative, "tail": d.tail_start, "sent": list(d.sent or ()),
            "record": (r.turn, r.iteration, r.stage, r.before_tokens, r.after_tokens, r.threshold, r.window_tokens,
                       r.summary, (r.extra or {}).get("tool_definitions_tokens"))}


@pytest.mark.parametrize("strategy", ["article", "masking", "clearing"])
def test_n3_lab_shows_a_carried_call_as_the_live_inspector_does(strategy: str, test_server: Any, tmp_path: Path
                                                                 ) -> None:
    """A 12-call turn (after a 1-call one) that masks and later summarizes, each compaction carried by the calls
    after it: the lab's gauge and inspector data of every call equal the live widget's and the stored record's."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.txt").write_text("line of a big file\n" * 300)
    test_server.enqueue_text("hello")  # a first turn: the second one's calls are counted from its own first
    for _ in range(11):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("done reading")
    agent = Agent(workspace=workspace, db=str(tmp_path / "lab.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", approval="allow", counter="estimate",
                  context_window_tokens=4_000, keep_recent_tokens=1_000, strategy=strategy)
    assert agent.run("hi").status == "ok"
    result = agent.run("read big.txt eleven times")
    assert result.status == "ok" and result.iterations == 12
    stored = agent.transcript()
    requests = agent.store.requests(agent.session_id)
    assert len(requests) == 13
    pol = agent.policy
    lab = PolicyLab(store=agent.store, current=agent.session_id, datasets=False, background=False, strategy=strategy,
                    window=pol.context_window_tokens, threshold_ratio=pol.threshold_ratio,
                    keep_recent=pol.keep_recent_tokens, tool_definitions=pol.tool_definitions)
    assert lab.transcript.value.startswith("current session") and lab.call.max == 13
    carried = []
    for k, view in enumerate(result.views, 1):
        live = from_view(view)  # the live widget's data of the call (the loop's view and its lineage)
        store = from_request(requests.iloc[k], stored)  # what `%agent view` reads back from the store
        lab.call.value = k + 1  # the lab's call slider: the first turn's call is call 1
        assert lab.data is not None
        got = _shown(lab.data)
        assert got == _shown(store), k
        assert got == _shown(live) | {"record": got["record"]}, k  # live: the iteration is the loop's own
        assert live.record.iteration == k
        if " · carries " in (lab.data.carried or ""):
            carried.append(lab.data.carried)
            carries = lab.data.carried.split(" · ", 1)[1]  # shown after the stage's chip
            assert f" · {carries}" in lab.gauge.value and f" · {carries}" in lab.inspector.value
    assert len(carried) >= 3  # calls after a compaction carry what it made
    if strategy == "article":  # C6 at call 10, then carried (pinned) by the calls after it (C7)
        assert carried[-2:] == ["micro · carries the summary of call 10",
                                "micro · carries the summary of call 10 and 1 placeholder"]
        assert "summary made by call 10 of this turn, carried" in lab.inspector.value


@SETTINGS
@given(turns())
def test_n3_a_replayed_turns_lineage_is_the_one_the_loop_composes(turn: Any) -> None:
    """`replayed_lineage` over the views of a turn, one after the other (what the lab does for the call on screen),
    gives every call the lineage the loop composed while it ran (`first_call`/`next_call`, C7), fallback retries
    (C9) and repairs included."""
    transcript, blocks, policy, summarize, retry_at = turn
    previous: tuple[Lineage, int] | None = None
    for call, (view, lineage, stored) in enumerate(run_turn(transcript, blocks, policy, summarize, retry_at), 1):
        got = replayed_lineage(view, len(stored), previous, call=call)
        assert got == lineage and got.describe() == lineage.describe()
        previous = (got, len(stored))
