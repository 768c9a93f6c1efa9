"""The prompt cache in real Chromium + JupyterLab (SPEC E1-E3; UX "Money is a view too"), light and dark.

Two demo sessions run in a JupyterLab kernel against the shipped test server: one that reports
`cached_tokens` (the gauge shows "prompt cache (reported)", the timeline says "(reported)") and one that
reports nothing (the gauge shows "shared prefix (est.)" and says the provider reports no cache figure; the
timeline says "est."). Screenshots of both gauges and timelines, light and dark, go to MXCLAW_SHOTS (or a
temporary folder) for a human look.
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import chromium_page, open_notebook, run_all, shots_dir, theme_shots, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
PANEL = ".jp-NotebookPanel"

SESSION = '''\
import tempfile
from mxclaw_nb import Agent
from mxclaw_nb.__main__ import DEMO_PROMPTS
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.widgets import ContextGauge, TokenTimeline

def session(report):
    """Two demo turns against the test server (model name gpt-4o-mini: its example price row applies)."""
    home = tempfile.mkdtemp()
    with TestServer(demo=True) as srv:
        srv.stream_delay, srv.report_cache = 0.0, report
        p = OpenAIProvider(base_url=srv.base_url, api_key="k", model="gpt-4o-mini", stream=True)
        agent = Agent(model="gpt-4o-mini", provider=p, approval="allow", home=home, db=home + "/s.duckdb",
                      context_window_tokens=1_100, keep_recent_tokens=200)
        for prompt in DEMO_PROMPTS[:2]:
            agent.run(prompt)
    return agent.store.requests(agent.session_id), agent.session_id
'''


def _cells() -> list[str]:
    cells = [SESSION, "reported, rsid = session(True)\nunreported, usid = session(False)"]
    for name in ("reported", "unreported"):
        cells.append(f"ContextGauge.from_request({name}.iloc[-2])")
        cells.append(f"TokenTimeline({name}, session_id={name[0]}sid, title='{name}: prompt tokens per call')")
    return cells


def test_e1_e3_the_cache_in_gauge_and_timeline_light_and_dark(jupyterlab: Any) -> None:
    base, root = jupyterlab
    write_notebook(root / "cost.ipynb", _cells())
    shots = shots_dir("mxclaw-cost-")
    with chromium_page({"width": 1300, "height": 900}) as page:
        open_notebook(page, base, "cost.ipynb")
        run_all(page)
        page.wait_for_function("document.querySelectorAll('.mx-timeline-caption').length >= 2", timeout=180_000)
        gauges, captions = page.locator(f"{PANEL} .mx-gauge"), page.locator(f"{PANEL} .mx-timeline-caption")
        assert "prompt cache (reported)" in gauges.nth(0).inner_text()
        assert "read from the provider's cache (reported)" in gauges.nth(0).inner_text()
        assert "shared prefix (est.)" in gauges.nth(1).inner_text()
        assert "the provider reports no cache figure" in gauges.nth(1).inner_text()
        assert "read from cache (reported)" in captions.nth(0).inner_text()
        assert "est.; the provider reported no cache figure" in captions.nth(1).inner_text()
        assert "est. cost $" in captions.nth(0).inner_text() and "as of 2025-06" in captions.nth(0).inner_text()
        page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
        theme_shots(page, shots, "cost-{theme}-{what}.png", [
            (f"{what}-{name}", page.locator(f"{PANEL} {cls}").nth(k))
            for k, name in enumerate(("reported", "unreported"))
            for cls, what in ((".mx-gauge", "gauge"), (".mx-timeline", "timeline"))])
        assert all((shots / f"cost-{t}-{w}-{n}.png").stat().st_size > 5_000 for t in ("light", "dark")
                   for w in ("gauge", "timeline") for n in ("reported", "unreported"))
