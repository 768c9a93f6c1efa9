"""K1-K3 offline: the demo model's data-notebook task on the shipped sample data, in a real IPython shell.

With the kernel's namespace (the `%agent` magics give the agent `python`), the demo loads
`demo/workspace/data/sales.csv` into `sales`, finds the planted spike, plots it, and over three turns with the
demo's own window (16k) reaches a typed compaction: the old printout of `sales` is sent as a typed placeholder
naming the live variable, and a later summary's Kernel state section names it. Without a namespace (no
`python` tool) the demo behaves as before: the data prompt runs no script.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb import Agent
from mxclaw_nb.context import lineage_messages
from mxclaw_nb.demo import plans
from mxclaw_nb.demo.model import DEMO_WORKSPACE, next_reply
from mxclaw_nb.widgets.data import stored_lineage
from tests.helpers.shell import ENV_VARS, agent_shell

PROMPTS = ("Load the sample sales CSV, find the anomaly and plot it.", "plot the sales anomaly again",
           "find the anomaly in the sales data")
TYPED = ("[old tool output compacted: 18,419 characters; DataFrame 360x5 (date, region, units, ...); "
         "still in the kernel as sales; recall #")  # C13: then the seq of the stored printout
STATE = "- sales: DataFrame 360x5 (date, region, units, ...)"


@pytest.fixture
def ip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    with agent_shell(monkeypatch, tmp_path, forget=("sales", "anomalies", "fig", "stats", "weekly")) as shell:
        yield shell


def test_sample_data_ships_with_one_planted_anomaly() -> None:
    sales = pd.read_csv(DEMO_WORKSPACE / "data" / "sales.csv", parse_dates=["date"])
    assert sales.shape == (360, 5) and list(sales.columns) == ["date", "region", "units", "unit_price", "revenue"]
    z = ((sales.revenue - sales.revenue.median()) / sales.revenue.std()).abs()
    assert sales[z > 4].date.dt.strftime("%Y-%m-%d").tolist() == ["2026-08-17"]
    assert plans.SALES_CSV == DEMO_WORKSPACE / "data" / "sales.csv"


def test_k2_k3_demo_data_task_reaches_a_typed_compaction_offline(ip: InteractiveShell) -> None:
    ip.run_line_magic("agent", "config approval=allow python_approval=allow")  # L5: one setting per kind of code
    outputs = []
    for prompt in PROMPTS:
        with capture_output() as cap:
            ip.run_cell_magic("agent", "", prompt)
        outputs.append(cap.stdout)
    # K1: the code ran in the user's namespace: the variables are the user's now
    ns = ip.user_ns
    assert ns["sales"].shape == (360, 5)
    assert ns["anomalies"].date.dt.strftime("%Y-%m-%d").tolist() == ["2026-08-17"]
    assert [ax.get_title() for ax in ns["fig"].axes] == ["Daily revenue, the anomaly in red"]
    assert "Found one anomaly: 2026-08-17 North units=2460 revenue=30,750.00" in outputs[0]
    # what was sent, call by call, rebuilt from the stored request records (N3)
    agent = ip.magics_manager.registry["AgentMagics"].get_agent()
    stored = agent.transcript()
    requests = agent.store.requests(agent.session_id)
    sent = [lineage_messages(stored_lineage(row, stored), stored) for _, row in requests.iterrows()]
    stages = requests["stage"].tolist()
    assert "micro" in stages and "summary" in stages
    tools = [str(m.get("content")) for view in sent for m in view if m.get("role") == "tool"]
    # K2: the old printout of `sales` became a typed placeholder naming the live variable, and (C13) its seq
    typed = next(t for t in tools if t.startswith(TYPED))
    seq = int(typed[len(TYPED):-1])
    assert typed.endswith("]") and len(str(stored[seq]["content"])) == 18_419 and stored[seq]["role"] == "tool"
    summaries = [str(m.get("content")) for view in sent for m in view if m.get("role") == "system"
                 and str(m.get("content")).startswith("[compressed conversation context]")]
    assert summaries and all(STATE in s for s in summaries)  # K3: the Kernel state section names it
    assert "- anomalies: DataFrame 1x5" in summaries[-1] and "- fig: plot: Daily revenue" in summaries[-1]
    assert not any(k in s for s in summaries for k in ("- pd:", "- matplotlib:"))  # modules are no results
    # N2: the inspector of those stored calls shows the typed placeholder as sent and the Kernel state section
    from html import escape

    from mxclaw_nb.widgets.inspector import CompactionInspector
    k = next(j for j, view in enumerate(sent) if any(m.get("content") == typed for m in view))
    row = requests.iloc[k]
    shown = CompactionInspector.from_request(agent.store, agent.session_id, int(row.turn), int(row.iteration))
    assert escape(typed, quote=False)[:60] in shown.tabs.children[1].value  # the After tab's preview
    assert escape(typed, quote=False) in shown.to_html()  # the row opens the whole placeholder
    last = requests.iloc[max(j for j, stage in enumerate(stages) if stage == "summary")]
    summary_tab = CompactionInspector.from_request(agent.store, agent.session_id, int(last.turn),
                                                   int(last.iteration)).tabs.children[2].value
    assert "Kernel state" in summary_tab and escape(STATE, quote=False) in summary_tab
    # S2: the stored transcript keeps the full printout
    assert any(str(m.get("content")).startswith("stdout:\n") and "2026-08-17" in str(m.get("content"))
               and len(str(m.get("content"))) == 18_419 for m in stored if m.get("role") == "tool")


def test_without_a_namespace_the_demo_behaves_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    agent = Agent(db=str(tmp_path / "s.duckdb"), home=tmp_path / "home", approval="allow")
    assert "python" not in agent.tools.names()
    result = agent.run(PROMPTS[0])
    assert result.status == "ok" and result.iterations == 1  # no script ran: the demo lists what it can do
    assert "cannot answer" in result.text and "sales" not in result.text.split("Nothing was run")[-1]
    assert "kernel's `python` tool" not in result.text


def test_data_plan_only_when_the_request_offers_python() -> None:
    user = [{"role": "user", "content": PROMPTS[0]}]
    python = [{"type": "function", "function": {"name": "python", "parameters": {}}}]
    assert next_reply(user).tool_calls == []  # as before: no script for this prompt
    first = next_reply(user, python)
    assert [c.name for c in first.tool_calls] == ["kernel_variables"] and "Plan (data, 6 steps)" in str(first.text)
    assert "kernel's `python` tool" in str(next_reply([{"role": "user", "content": "2+2?"}], python).text)
    # other prompts keep their plans when python is offered
    assert plans.choose("fix the failing tests", [], kernel=True)[0] == "fix"  # type: ignore[index]
    assert plans.choose("look at the build log", [], kernel=True)[0] == "logs"  # type: ignore[index]


def test_denied_python_ends_the_data_turn_with_a_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """approval=deny: the demo's first python call is refused; the turn ends saying what failed and how to allow it."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    ns: dict = {}
    agent = Agent(db=str(tmp_path / "s.duckdb"), home=tmp_path / "home", approval="deny", namespace=lambda: ns)
    result = agent.run(PROMPTS[0])
    assert result.status == "ok" and "sales" not in ns
    assert "The call python(" in result.text and "Python code run in your kernel need approval" in result.text


def test_l3_demo_does_not_claim_a_test_run_the_user_denied(tmp_path):
    """After a Deny of the stock-test run, the demo says it did not see that run (it used to quote its failure)."""
    from mxclaw_nb import Agent
    from mxclaw_nb.demo.plans import TEST_FIRST

    def approver(command: str) -> bool:
        return command != TEST_FIRST  # deny only the run that shows the failure

    agent = Agent(db=str(tmp_path / "d.duckdb"), approval="ask", approver=approver, home=tmp_path / "home")
    result = agent.run("fix the failing tests")
    said = "\n".join(str(m.get("content") or "") for m in agent.transcript() if m["role"] == "assistant")
    assert "you denied it" in said and "The assertion says 101.75 != 155.75" not in said
    assert "101.75 instead of 155.75" not in result.text and "I did not see the failing test run" in result.text
