"""Real-browser test of the quickstart's "biggest compaction" cell (SPEC N3): a stored `requests` row found by
`%agent sql` opens the full inspector, in the outputs the notebook ships and in a live run in JupyterLab.

Before N3's row lookup, `CompactionInspector(biggest.iloc[0])` showed `Before (transcript, 0 msgs)` and
`After (sent, 0 msgs)`: a bare row had no transcript to rebuild its rows from. Screenshots (light, dark) go
to $MXCLAW_SHOTS or a new temporary folder (printed).
"""

from __future__ import annotations

import re
import shutil
import time
from typing import Any

import pytest

from .harness import PANEL, REPO, chromium_page, open_notebook, run_new_cell, shots_dir, switch_theme

pytestmark = [pytest.mark.browser, pytest.mark.timeout(480)]

QUICKSTART = REPO / "notebooks" / "01-quickstart.ipynb"
COUNTS = re.compile(r"(Before \(transcript, (\d+) msgs?\)|After \(sent, (\d+) msgs?\))")


def _inspector_counts(page: Any) -> tuple[int, int, Any]:
    """(before rows, after rows, output locator) of the inspector under the `biggest` cell."""
    cell = page.locator(f"{PANEL} .jp-CodeCell", has_text="CompactionInspector(biggest").first
    out = cell.locator(".jp-OutputArea-output", has_text="Before (transcript").first
    out.wait_for(timeout=60_000)
    text = out.inner_text()
    before = next(int(m.group(2)) for m in COUNTS.finditer(text) if m.group(2))
    after = next(int(m.group(3)) for m in COUNTS.finditer(text) if m.group(3))
    return before, after, out


def test_n3_quickstart_biggest_compaction_inspector_is_full_shipped_and_live(agent_views_lab: Any) -> None:
    base, root = agent_views_lab
    shutil.copyfile(QUICKSTART, root / "quickstart.ipynb")
    shots = shots_dir("mxclaw-quickstart-")
    with chromium_page({"width": 1400, "height": 1000}, failed=shots / "failed.png") as page:
        open_notebook(page, base, "quickstart.ipynb")
        before, after, out = _inspector_counts(page)  # the outputs the notebook ships
        assert before > 0 and after > 0, (before, after)
        out.evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(0.4)
        page.screenshot(path=str(shots / "quickstart-inspector-shipped-light.png"))

        page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        cell = page.locator(f"{PANEL} .jp-CodeCell", has_text="CompactionInspector(biggest").first
        cell.locator(".jp-OutputArea-output", has_text="Before (transcript").first.wait_for(timeout=300_000)
        before, after, out = _inspector_counts(page)  # the live run
        assert before > 0 and after > 0, (before, after)
        assert "no summary" not in out.inner_text()
        out.evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(0.4)
        page.screenshot(path=str(shots / "quickstart-inspector-live-light.png"))
        # the live widget form: its tab titles are whole (ipywidgets' 144 px tabs cut them to
        # "Before (transcript, 19")
        run_new_cell(page, "CompactionInspector(biggest.iloc[0], live=True)")
        labels = page.locator(f"{PANEL} .mx-compaction-inspector .lm-TabBar-tabLabel")
        labels.first.wait_for(timeout=60_000)
        cut = labels.evaluate_all("ls => ls.map(l => [l.textContent, l.scrollWidth > l.clientWidth])")
        assert cut[0][0].startswith("Before (transcript, ") and cut[0][0].endswith(" msgs)"), cut
        assert not any(c for _, c in cut), cut
        bar = "e => e.closest('.mx-compaction-inspector').scrollIntoView({block: 'start'})"
        labels.first.evaluate(bar)
        time.sleep(0.4)
        page.screenshot(path=str(shots / "quickstart-inspector-widget-light.png"))
        switch_theme(page, "JupyterLab Dark", light=False)
        labels.first.evaluate(bar)
        time.sleep(0.4)
        page.screenshot(path=str(shots / "quickstart-inspector-widget-dark.png"))
        out.evaluate("e => e.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(shots / "quickstart-inspector-live-dark.png"))
