"""Real-browser test of the `%agent` views (SPEC N2, N3): light and dark theme, and a reopen without a kernel.

In JupyterLab (the temporary server of `test_jupyterlab.py`) and Debian's chromium, a notebook loads the
extension, runs three demo turns with a small window so the context is compacted early and later calls
carry the summary and placeholders (N3), then shows `%agent view`, `%agent gauge` and `%agent timeline`.
The test checks what a reader sees (the view names what the call carries, rows open on a click, the
filters hide rows), takes light and dark screenshots, then saves the notebook, shuts its kernel down and
reopens it: no output may read "Error displaying widget: model not found", and the saved log, gauge,
inspector and timeline must show as static HTML. Screenshots go to $MXCLAW_SHOTS or a new temporary folder (printed).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .harness import (
    PANEL,
    chromium_page,
    close_and_shut_down,
    kernel_idle,
    light_then_dark,
    open_notebook,
    open_untrusted_copy,
    save_notebook,
    shot_from_top,
    shots_dir,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

PROMPTS = ("fix the failing tests", "look at the build log", "review the tests and the code")  # fix, logs, review
CELLS = ["%load_ext mxclaw_nb",
         "%agent config approval=allow context_window_tokens=6000 keep_recent_tokens=1500",
         *[f"%%agent\n{p}" for p in PROMPTS],
         "%agent view", "%agent gauge", "%agent timeline"]
NOT_FOUND = "model not found"


def _shots(page: Any, shots: Path, theme: str) -> None:
    """Screenshots of the gauge, the inspector and the timeline outputs."""
    for cls, name in ((".mx-gauge", "gauge"), (".mx-inspector", "inspector"), (".mx-timeline", "timeline")):
        shot_from_top(page, page.locator(f"{PANEL} {cls}").last, shots / f"{theme}-{name}.png", output=True)
    page.locator(f"{PANEL} .mx-live").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / f"{theme}-live-log.png"))


def test_n2_agent_views_light_dark_and_reopen_without_kernel(agent_views_lab: Any) -> None:
    base, root = agent_views_lab
    write_notebook(root / "views.ipynb", CELLS)
    shots = shots_dir("mxclaw-views-")
    with chromium_page({"width": 1400, "height": 1100}, failed=shots / "failed.png") as page:
        open_notebook(page, base, "views.ipynb")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.locator(f"{PANEL} .mx-timeline svg").wait_for(timeout=300_000)
        kernel_idle(page, 60_000)

        # %agent view of a later call: it names the carried summary and placeholders (N3)
        insp = page.locator(f"{PANEL} .mx-inspector").last
        head = insp.locator(".mx-inspector-head").inner_text()
        assert "carries the summar" in head and "stored transcript up to this call" in head, head
        assert "tokens (" in head
        before = insp.locator(".mx-table").first
        assert "tokens before (" in before.locator(".mx-thead").inner_text()
        rows = before.locator(".mx-row")
        assert rows.count() > 20
        # a row opens the whole message on a click
        row = before.locator(".mx-row[data-action='summarized']").first
        row.locator("summary").click()
        assert row.locator(".mx-full").is_visible()
        row.locator("summary").click()
        # the role filter hides the other rows, without a kernel round trip
        insp.locator(".mx-filter-role label", has_text="tool").first.click()
        visible_roles = {r.get_attribute("data-role") for r in before.locator(".mx-row").all() if r.is_visible()}
        assert visible_roles == {"tool"}, visible_roles
        insp.locator(".mx-filter-role label", has_text="(all)").first.click()
        # the After section: the carried summary row opens the whole summary
        insp.locator(":scope > details > summary", has_text="After (sent").click()
        after = insp.locator(".mx-table").nth(1)
        summary_row = after.locator(".mx-row[data-action='summary']").first
        summary_row.locator("summary").click()
        assert "[compressed conversation context]" in summary_row.locator(".mx-full").inner_text()
        # the gauge names its unit and the room left
        gauge = page.locator(f"{PANEL} .mx-gauge").last.inner_text()
        for text in ("every figure in tokens (", "% of the", "free", "until compaction", "layer, tokens (",
                     "carries the summar", "stored transcript up to this call"):
            assert text in gauge, (text, gauge)
        # N5: one unit per view: bars and layer rows in the caption's unit, est. only on demand
        figures = page.locator(f"{PANEL} .mx-gauge").last.locator(".mx-bar-figure").all_inner_texts()
        assert len(figures) == 2 and not any("est." in f for f in figures), figures
        sent_fig, stored_fig = (int(f.replace(",", "")) for f in figures)
        assert sent_fig < stored_fig, figures  # a later call sends less than the transcript holds

        light_then_dark(page, lambda theme: _shots(page, shots, theme))

        # save, close, shut the kernel down, reopen: the outputs are static HTML, no widget error
        save_notebook(page)
        saved = (root / "views.ipynb").read_text()
        assert "application/vnd.jupyter.widget-view+json" not in saved
        close_and_shut_down(page)
        open_notebook(page, base, "views.ipynb")
        kernel_idle(page, 60_000)
        time.sleep(2.0)  # the widget manager has restored: a missing model would now say so
        text = page.locator(PANEL).inner_text()
        assert NOT_FOUND not in text
        for cls in (".mx-live", ".mx-gauge", ".mx-inspector", ".mx-timeline svg"):
            assert page.locator(f"{PANEL} {cls}").last.is_visible(), cls
        assert "carries the summar" in page.locator(f"{PANEL} .mx-inspector-head").last.inner_text()
        page.screenshot(path=str(shots / "reopened.png"))

        # a copy nobody signed (e.g. from a git clone): JupyterLab sanitizes its HTML; numbers still show
        open_untrusted_copy(page, base, root, "views.ipynb")
        text = page.locator(PANEL).inner_text()
        assert NOT_FOUND not in text and "until compaction" in text and "carries the summar" in text
        # the sanitizer drops the inline <svg>; the same figure as a data: image shows instead
        shown = page.locator(f"{PANEL} .mx-timeline img").last
        assert shown.is_visible() and shown.evaluate("e => e.complete && e.naturalWidth > 0")
        page.screenshot(path=str(shots / "untrusted-copy.png"))
        for cls, name in ((".mx-inspector", "inspector"), (".mx-timeline", "timeline")):
            shot_from_top(page, page.locator(f"{PANEL} {cls}").last, shots / f"untrusted-{name}.png", output=True)
