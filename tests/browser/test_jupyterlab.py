"""Real-browser test of the widgets (SPEC N2): JupyterLab on 127.0.0.1, Debian's chromium via Playwright.

The browser tests' JupyterLab (harness.py: no token, temp config/data/runtime dirs) serves a notebook that builds a real
DuckDB store with one session and displays the context gauge, the token timeline and the compaction
inspector read back from it. Chromium runs all cells; the test asserts that the rendered DOM shows the
inspector's rows with their visible count, the summary text and the stage, and saves
docs/screenshot.png for the README. Every request that is not to 127.0.0.1 is aborted, which also
proves the widgets need no CDN.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from .harness import REPO, block_requests, chromium_page, open_notebook, run_all
from .widgets_notebook import build_notebook, expected

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

# The README's picture is refreshed only on request, so a test run leaves the work tree clean.
SCREENSHOT = REPO / "docs" / "screenshot.png"
UPDATE_SCREENSHOT = os.environ.get("MXCLAW_UPDATE_SCREENSHOT") == "1"


def test_n2_widgets_render_in_jupyterlab_chromium(jupyterlab, tmp_path):
    """Gauge, timeline and inspector of a stored session render in JupyterLab; DOM shows rows, summary, stage."""
    base, root = jupyterlab
    want = expected()
    nb = build_notebook(str(tmp_path / "store.duckdb"))
    # the session browser is a live widget: it opens on the current session; a click on a row opens another
    nb.cells.append(nbformat.v4.new_code_cell(
        "from mxclaw_nb.widgets import SessionBrowser\n"
        "other = store.create_session(title='another session')\n"
        "SessionBrowser(store, current=sid)"))
    nbformat.write(nb, root / "widgets.ipynb")

    def only_loopback(url: str) -> bool:
        return urlparse(url).hostname in ("127.0.0.1", "localhost") or url.startswith("data:")

    with chromium_page({"width": 1400, "height": 1650}) as page:
        blocked = block_requests(page, only_loopback)
        open_notebook(page, base, "widgets.ipynb")
        run_all(page)
        insp = page.locator(".mx-inspector").first
        insp.wait_for(timeout=60_000)
        page.locator(".mx-timeline svg").first.wait_for(timeout=30_000)
        gauge = page.locator(".mx-gauge").first
        head = insp.locator(".mx-inspector-head")

        # the stage and the unit, in the inspector header and on the gauge
        assert f"Stage: {want['stage']}" in head.inner_text()
        assert f"after {want['after_tokens']:,} tokens (est.)" in head.inner_text()
        assert want["stage"] in gauge.inner_text() and f"{want['after_tokens']:,} sent" in gauge.inner_text()
        assert "until compaction" in gauge.inner_text() and "% of the" in gauge.inner_text()
        assert gauge.locator(".mx-seg").count() >= 4
        # the before table's rows, capped with a visible count; a row opens its whole message
        before = insp.locator(".mx-table").first
        assert before.is_visible()
        rows = before.locator(".mx-row")
        assert rows.count() == 12
        assert f"showing 12 of {want['before_rows']:,} messages" in before.locator(".mx-count").inner_text()
        assert "summarized" in rows.nth(4).inner_text()
        assert "tokens before (est.)" in before.locator(".mx-thead").inner_text()
        # the timeline drawn inline with the right caption
        assert f"{want['calls']} model calls" in page.locator(".mx-timeline-caption").first.inner_text()
        box = page.locator(".mx-timeline svg").first.bounding_box()
        assert box is not None and box["width"] > 400
        page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
        page.evaluate("window.jupyterapp.shell.currentWidget.content.node.scrollTop = 0")
        time.sleep(0.3)
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOT if UPDATE_SCREENSHOT else tmp_path / "screenshot.png"
        page.locator(".jp-NotebookPanel").screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
        # the summary text, once its section is opened
        insp.locator(":scope > details > summary", has_text="Summary").click()
        summary = insp.locator(".mx-summary")
        summary.wait_for(state="visible", timeout=10_000)
        assert want["summary_first_line"] in summary.inner_text() and "Goals:" in summary.inner_text()
        # the session browser: current session picked and marked, its calls loaded; a row click opens another
        sessions = page.locator(".mx-session-browser")
        sessions.wait_for(timeout=30_000)
        listbox = sessions.locator(".mx-session-list select")
        picked = listbox.evaluate("s => s.options[s.selectedIndex].text")
        assert "current" in picked, picked
        assert sessions.locator(".mx-timeline-plot svg").count() == 1 and sessions.locator(".mx-gauge").count() == 1
        listbox.select_option(index=1)  # the other row, as a click does
        sessions.get_by_text("no model calls recorded in this session").wait_for(timeout=30_000)
        shots = Path(os.environ.get("MXCLAW_SHOTS") or tmp_path)
        sessions.screenshot(path=str(shots / "session-browser.png"))
        print("session browser screenshot in", shots)
    assert SCREENSHOT.stat().st_size > 20_000
    print("blocked non-loopback requests:", blocked)
    assert not blocked, f"the page asked the network for {blocked}"
