"""The C11 summary call in real Chromium + JupyterLab, light and dark (SPEC C11, N2, E3).

A `model-summary` session runs in a JupyterLab kernel against the shipped test server, its summaries scripted by
the summary request's own question; the turn that makes the second (merged) summary is shown live in a
`LiveTurnView`: its log has the summary call's own line (with the usage the server reported and the latency),
and the session's timeline marks each summary call with its own diamond before the call it served, its caption
counting the summary calls and their cost. Screenshots (light and dark) go to MXCLAW_SHOTS (or a temporary
folder) for a human look.
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import chromium_page, open_notebook, run_all, shots_dir, theme_shots, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
PANEL = ".jp-NotebookPanel"

SESSION = '''\
import tempfile
from pathlib import Path
from IPython.display import display
from mxclaw_nb import Agent
from mxclaw_nb.context.model_summary import ASK
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.widgets import LiveTurnView, TokenTimeline

SCAFFOLD = "Scaffold (the deterministic summary of the same messages):\\n"

def summary(messages):
    """A scripted model summary: the scaffold's facts, the goals cut short (shorter than the messages)."""
    prompt = messages[-1]["content"]
    scaffold = prompt[prompt.index(SCAFFOLD) + len(SCAFFOLD): prompt.rindex(ASK)].strip()
    return "\\n".join(["Model summary of the older turns:",
                      *[l[:70] if l.startswith("- ") else l for l in scaffold.splitlines()][1:]])

home = Path(tempfile.mkdtemp())
(home / "ws").mkdir()
server = TestServer(answers={ASK: summary}).__enter__()
agent = Agent(workspace=home / "ws", db=str(home / "c11.duckdb"), base_url=server.base_url, api_key="k",
              model="gpt-4o-mini", home=home / "home", approval="allow", context_window_tokens=4_000,
              keep_recent_tokens=800, counter="estimate", strategy="model-summary")
def ask(k):
    return f"turn {k}: " + f"please remember fact {k} about the project. " * 60
for k in range(5):
    agent.run(ask(k))
'''
LIVE = '''\
view = LiveTurnView()
view.model_label, view.session_id = agent.label, agent.session_id
display(view)
stop = agent.subscribe(view)
agent.run(ask(5))
stop()
'''
CELLS = [SESSION, LIVE, "TokenTimeline(store=agent.store, session_id=agent.session_id)"]


def test_c11_the_summary_call_in_the_live_log_and_the_timeline_light_and_dark(jupyterlab: Any) -> None:
    base, root = jupyterlab
    write_notebook(root / "summary.ipynb", CELLS)
    shots = shots_dir("mxclaw-c11-")
    with chromium_page({"width": 1300, "height": 1000}) as page:
        open_notebook(page, base, "summary.ipynb")
        run_all(page)
        page.wait_for_function("document.querySelectorAll('.mx-timeline-caption').length >= 1", timeout=180_000)
        turn = page.locator(f"{PANEL} .mx-live-turn, {PANEL} .mx-static").first
        text = turn.inner_text()
        assert "✎ model summary of #" in text and "(merged into #" in text and "· summary call " in text
        assert " tokens, " in text and text.index("✎ model summary") < text.index("answer")
        caption = page.locator(f"{PANEL} .mx-timeline-caption").first.inner_text()
        made = page.locator(f"{PANEL} .mx-timeline-plot .mx-summary-calls path").count()  # one diamond each
        assert made >= 2 and f"+ {made} summary calls" in caption and f"for {made} summary calls (C11)" in caption
        assert caption.count("$") == 1  # a second one would make JupyterLab typeset the line as LaTeX
        page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
        theme_shots(page, shots, "summary-call-{theme}-{what}.png",
                    [("live-log", turn), ("timeline", page.locator(f"{PANEL} .mx-timeline").first)])
        assert all((shots / f"summary-call-{t}-{w}.png").stat().st_size > 5_000 for t in ("light", "dark")
                   for w in ("live-log", "timeline"))
