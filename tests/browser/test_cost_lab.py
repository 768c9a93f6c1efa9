"""The prompt cache in real Chromium + JupyterLab (SPEC E1-E3; UX "Money is a view too"), light and dark.

Two demo sessions run in a JupyterLab kernel against the shipped test server: one that reports
`cached_tokens` (the gauge shows "prompt cache (reported)", the timeline says "(reported)") and one that
reports nothing (the gauge shows "shared prefix (est.)" and says the provider reports no cache figure; the
timeline says "est."). Screenshots of both gauges and timelines, light and dark, go to MXCLAW_SHOTS (or a
temporary folder) for a human look.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .test_jupyterlab import CHROMIUM, CHROMIUM_ARGS, jupyterlab  # noqa: F401 - the JupyterLab fixture

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


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cells = [SESSION, "reported, rsid = session(True)\nunreported, usid = session(False)"]
    for name in ("reported", "unreported"):
        cells.append(f"ContextGauge.from_request({name}.iloc[-2])")
        cells.append(f"TokenTimeline({name}, session_id={name[0]}sid, title='{name}: prompt tokens per call')")
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _theme(page: Any, name: str, light: bool) -> None:
    page.evaluate("t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name)
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)
    time.sleep(1.0)


def test_e1_e3_the_cache_in_gauge_and_timeline_light_and_dark(jupyterlab: Any, tmp_path: Path) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    base, root = jupyterlab
    nbformat.write(_notebook(), root / "cost.ipynb")
    shots = Path(os.environ.get("MXCLAW_SHOTS") or tempfile.mkdtemp(prefix="mxclaw-cost-"))
    shots.mkdir(parents=True, exist_ok=True)
    print("screenshots in", shots)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.goto(f"{base}/lab/tree/cost.ipynb?reset", wait_until="domcontentloaded")
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext?.session?.kernel",
                                   timeout=60_000)
            page.evaluate("async () => { const app = window.jupyterapp;"
                          " await app.shell.currentWidget.sessionContext.ready;"
                          " if (app.shell.leftCollapsed === false) { app.shell.collapseLeft(); }"
                          " await app.commands.execute('notebook:run-all-cells'); }")
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
            for theme, light in (("light", True), ("dark", False)):
                _theme(page, "JupyterLab Light" if light else "JupyterLab Dark", light)
                for k, name in enumerate(("reported", "unreported")):
                    for cls, what in ((".mx-gauge", "gauge"), (".mx-timeline", "timeline")):
                        target = page.locator(f"{PANEL} {cls}").nth(k)
                        target.scroll_into_view_if_needed()
                        time.sleep(0.3)
                        target.screenshot(path=str(shots / f"cost-{theme}-{what}-{name}.png"))
            assert all((shots / f"cost-{t}-{w}-{n}.png").stat().st_size > 5_000 for t in ("light", "dark")
                       for w in ("gauge", "timeline") for n in ("reported", "unreported"))
        finally:
            browser.close()
