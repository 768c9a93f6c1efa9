"""SPEC N3 through the whole stack: the demo reproduction of "a view that contradicts itself", and a long
multi-iteration turn on the test server whose every stored record reproduces exactly what was sent.

Before N3, after a few demo turns with a small window `%agent view` said "Stage: unchanged" and "no summary:
nothing was compacted" while its After tab sent a summary and placeholders marked `kept`, and its Before
tab was the previous request view instead of the stored transcript.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb import Agent
from mxclaw_nb.context import lineage_messages
from mxclaw_nb.widgets import CompactionInspector
from mxclaw_nb.widgets.data import stored_lineage
from tests.helpers.shell import agent_shell

PROMPTS = ("fix the failing tests", "look at the build log", "review the tests and the code")  # fix, logs, review


@pytest.fixture
def ip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    with agent_shell(monkeypatch, tmp_path) as shell:
        yield shell


def _view(shell: InteractiveShell) -> tuple[CompactionInspector, str]:
    with capture_output() as cap:
        value = shell.run_line_magic("agent", "view")
    return value, cap.stdout


def _check_later_call(insp: CompactionInspector, stored: list[dict]) -> None:
    d = insp.data
    assert d.record.stage == "unchanged" and d.transcript_relative
    assert " · carries the summar" in d.carried  # the stage header names what the call carries
    head = insp.header_html()
    assert "carries the summar" in head and "stored transcript up to this call" in head
    upto = len(insp.before_df)
    assert insp.tabs.titles[0] == f"Before (transcript, {upto} msgs)"
    assert upto == len(stored) - 1  # everything stored before the call (its own answer came after it)
    assert insp.before_df["position"].tolist() == list(range(upto))
    assert (insp.before_df["action"] == "summarized").sum() > 20
    assert insp.before_df.loc[insp.before_df["action"] == "summarized", "by_call"].notna().all()
    after = insp.after_df
    placeholders = after["preview"].str.startswith("[old tool output compacted")
    assert (after.loc[placeholders, "action"] == "placeholder").all()  # never `kept`
    assert (after.loc[after["role"] == "system", "action"].isin(["kept", "summary"])).all()
    assert (after["action"] == "summary").sum() >= 1
    assert "no summary" not in insp.summary_html() and "carried" in insp.summary_html()


def test_n3_demo_view_of_a_later_call_names_what_it_carries(ip: InteractiveShell) -> None:
    """The issue's reproduction: several demo turns with a small window, then `%agent view`, live and stored."""
    ip.run_line_magic("agent", "config approval=allow context_window_tokens=6000 keep_recent_tokens=1500")
    for prompt in PROMPTS:
        with capture_output():
            ip.run_cell_magic("agent", "", prompt)
    m = ip.magics_manager.registry["AgentMagics"]
    agent = m.get_agent()
    stored = agent.transcript()
    requests = agent.store.requests(agent.session_id)
    assert requests.iloc[-1]["stage"] == "unchanged"
    live, caption = _view(ip)  # the RequestView the loop just built
    assert "unchanged · carries the summar" in caption
    _check_later_call(live, stored)
    live_view, m.last_view = m.last_view, None  # as in a new kernel: read back from the stored request record
    from_store, caption = _view(ip)
    assert "unchanged · carries the summar" in caption
    _check_later_call(from_store, stored)
    pd.testing.assert_frame_equal(live.before_df, from_store.before_df)
    pd.testing.assert_frame_equal(live.after_df, from_store.after_df)
    assert lineage_messages(stored_lineage(requests.iloc[-1], stored), stored) == live_view.messages
    for _, row in requests.iterrows():  # every stored call of the session resolves to stored rows
        lin = stored_lineage(row, stored)
        assert lin is not None and lin.upto <= len(stored)
        lineage_messages(lin, stored)


def test_n3_long_turn_on_the_test_server_every_record_reproduces_the_request(test_server, tmp_path):
    """Every stored record of a 12-call turn that compacts early rebuilds exactly the messages the server got."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "big.txt").write_text("line of a big file\n" * 300)
    for _ in range(11):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("done reading")
    agent = Agent(workspace=workspace, db=str(tmp_path / "n3.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", approval="allow", counter="estimate",
                  context_window_tokens=6_000, keep_recent_tokens=1_500)
    result = agent.run("read big.txt eleven times")
    assert result.status == "ok" and result.iterations == 12
    stages = [v.stage for v in result.views]
    assert {"micro", "summary"} & set(stages) and stages.count("unchanged") >= 3
    stored = agent.transcript()
    requests = agent.store.requests(agent.session_id)
    assert len(requests) == len(test_server.requests) == 12
    carried = 0
    for (_, row), sent, view in zip(requests.iterrows(), test_server.requests, result.views, strict=True):
        lin = stored_lineage(row, stored)
        rebuilt = lineage_messages(lin, stored)
        assert rebuilt == view.messages
        assert json.loads(json.dumps(rebuilt)) == sent["messages"]
        insp = CompactionInspector(row, transcript=stored)
        assert len(insp.before_df) == lin.upto and insp.before_df["position"].tolist() == list(range(lin.upto))
        carried += " · carries " in insp.data.carried
    assert carried >= 3


def _sent_summaries(request: dict) -> list[str]:
    """The summary and fallback texts of one request as the server received it (C6/C8 system messages)."""
    return [m["content"] for m in request["messages"] if m["role"] == "system" and isinstance(m["content"], str)
            and m["content"].startswith(("[compressed conversation context]", "[fallback"))]


def test_n3_every_call_that_sent_a_summary_has_it_in_requests(test_server, tmp_path):
    """`requests.summary` holds every summary a call sent, carried ones too, so SQL finds each such call (N3, C7);
    and a bare stored row (no transcript passed) opens the full transcript-relative inspector."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # C5 never compacts a result that reads like a failure, so the turn has to summarize, again and again
    (workspace / "big.txt").write_text("Tool failed at line of a big file\n" * 200)
    for _ in range(15):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("done reading")
    agent = Agent(workspace=workspace, db=str(tmp_path / "n3.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", approval="allow", counter="estimate",
                  context_window_tokens=7_500, keep_recent_tokens=1_500)
    result = agent.run("read big.txt fifteen times")
    assert result.status == "ok"
    made = [v for v in result.views if v.stage == "summary"]
    assert len(made) >= 2, [v.stage for v in result.views]  # several summaries in one turn
    rows = agent.store.requests(agent.session_id)
    sent = [_sent_summaries(r) for r in test_server.requests]
    senders = sum(1 for s in sent if s)
    assert senders > len(made)  # later calls carry earlier summaries without making one
    for (_, row), texts in zip(rows.iterrows(), sent, strict=True):
        if not texts:
            assert pd.isna(row["summary"]) or row["stage"] == "micro"  # a micro call's own note only
            continue
        assert isinstance(row["summary"], str)
        for text in texts:
            assert text in row["summary"], (row["iteration"], row["stage"])
        if row["stage"] != "summary":
            assert "[carried: summary made by call " in row["summary"]
    n = agent.store.sql("SELECT count(*) AS n FROM requests WHERE summary LIKE '%[compressed conversation context]%'")
    assert int(n["n"].iloc[0]) == senders
    bare = CompactionInspector(rows.iloc[-1])  # as from `%agent sql`: the open store supplies the transcript
    assert bare.data.transcript_relative and len(bare.before_df) == len(agent.transcript()) - 1
    assert not bare.tabs.titles[0].endswith("0 msgs)")
    assert "carried" in bare.summary_html() and "no summary" not in bare.summary_html()
