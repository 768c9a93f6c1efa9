"""E4 live in real Chromium + JupyterLab, light and dark (SPEC E4, C12, C10).

A `masking-cache` session runs in a JupyterLab kernel against the shipped test server (its clock injected, no
sleeping); the second turn starts 30 s after the first one's last call, within the cache's time to live, and is
shown live in a `LiveTurnView`: its log has the decision's own line, saying the warm prefix was kept and what
plain masking would have freed. The session's timeline rings that call (the warm prefix kept, at what it sent).
Screenshots (light and dark) go to MXCLAW_SHOTS (or a temporary folder).
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
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.widgets import LiveTurnView

home = Path(tempfile.mkdtemp())
(home / "ws").mkdir()
(home / "ws" / "big.txt").write_text("x" * 6_000)
(home / "ws" / "b.txt").write_text("y" * 6_000)
now = [1_000_000.0]
server = TestServer().__enter__()
server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
server.enqueue_tool_calls([("read_file", {"path": "b.txt"})])
server.enqueue_text("done one")
server.enqueue_text("done two")
agent = Agent(workspace=home / "ws", db=str(home / "e4.duckdb"), base_url=server.base_url, api_key="k",
              model="gpt-4o-mini", home=home / "home", approval="allow", context_window_tokens=20_000,
              keep_recent_tokens=500, counter="estimate", strategy="masking-cache:keep_last=0",
              clock=lambda: now[0])
agent.run("read both files")
now[0] += 30
'''
LIVE = '''\
view = LiveTurnView()
view.model_label, view.session_id = agent.label, agent.session_id
display(view)
stop = agent.subscribe(view)
agent.run("and again")
stop()
'''
TIMELINE = '''\
from mxclaw_nb.widgets.timeline import TokenTimeline
display(TokenTimeline(store=agent.store, session_id=agent.session_id))
'''
CELLS = [SESSION, LIVE, TIMELINE]


def test_e4_the_cache_decision_in_the_live_log_light_and_dark(jupyterlab: Any) -> None:
    base, root = jupyterlab
    write_notebook(root / "e4.ipynb", CELLS)
    shots = shots_dir("mxclaw-e4-")
    with chromium_page({"width": 1300, "height": 900}) as page:
        open_notebook(page, base, "e4.ipynb")
        run_all(page)
        page.wait_for_function("document.querySelectorAll('.mx-live-turn, .mx-static').length >= 1"
                               " && document.body.innerText.includes('done two')", timeout=180_000)
        turn = page.locator(f"{PANEL} .mx-live-turn, {PANEL} .mx-static").first
        text = turn.inner_text()
        assert "masking-cache: kept the warm cached prefix (previous call 30 s ago" in text
        assert text.index("kept the warm cached prefix") < text.index("done two")
        page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
        theme_shots(page, shots, "cache-decision-{theme}-{what}.png", [("live-log", turn)])
        assert all((shots / f"cache-decision-{t}-live-log.png").stat().st_size > 5_000 for t in ("light", "dark"))
        plot = page.locator(f"{PANEL} .mx-timeline-plot").first
        plot.wait_for(timeout=60_000)
        assert plot.locator(".mx-kept-warm circle").count() == 2  # turn 1, call 3 and turn 2, call 1
        assert plot.locator('.mx-legend[data-label="kept the warm prefix (E4)"]').count() == 1
        theme_shots(page, shots, "cache-decision-{theme}-{what}.png", [("timeline", plot)])
        assert all((shots / f"cache-decision-{t}-timeline.png").stat().st_size > 5_000 for t in ("light", "dark"))
