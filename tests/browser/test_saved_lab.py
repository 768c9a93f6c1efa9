"""Real-browser test of saved notebooks (SPEC N1, N2): what a reader sees without the kernel that ran them.

1. JupyterLab: a notebook runs two demo turns in two sessions and ends with `%agent sessions --browse` (the
   last cell: nothing freezes it). While the kernel runs, the browser is a live widget and its static
   snapshot below it is hidden; a click on the other session's row opens it and the snapshot follows.
   The notebook is saved, its kernel shut down, and it is reopened: no "Error displaying widget" shows,
   and the snapshot shows the session that was clicked, its timeline and the numbers, in light and dark; an
   unsigned copy (untrusted: sanitized HTML) shows the same numbers and the timeline as an image.
2. Exported: the notebook of `tests/test_saved_forms.py` (every command, run by nbclient in a real kernel,
   saved with its widget state as nbclient does) is rendered by nbconvert (GitHub and nbviewer show the
   same static outputs) and opened in Chromium with no kernel and no network, light and dark: the
   turn logs, gauge, inspector, timeline and both session-browser snapshots are visible with their numbers.

Screenshots go to $MXCLAW_SHOTS or a new temporary folder (printed); docs/screenshots/ holds the ones
looked at (saved-browser-*.png, exported-*.png).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nbformat
import pytest

from .harness import (
    PANEL,
    block_requests,
    chromium_page,
    close_and_shut_down,
    kernel_idle,
    light_then_dark,
    open_notebook,
    open_untrusted_copy,
    require_chromium,
    save_notebook,
    shots_dir,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(480)]

CELLS = ["%load_ext mxclaw_nb",
         "%agent config approval=allow context_window_tokens=6000 keep_recent_tokens=1500",
         "%%agent\nfix the failing tests",
         "%agent --new look at the build log",
         "%agent sessions --browse"]
NOT_FOUND = "Error displaying widget"


def _snapshot_shot(page: Any, scope: str, path: Path) -> None:
    """The last snapshot's output from its top: the sessions table, the timeline and the gauge."""
    page.locator(f"{scope} .mx-snapshot").last.evaluate("e => e.scrollIntoView({block: 'start'})")
    time.sleep(0.4)
    page.screenshot(path=str(path))


def test_n2_last_cell_session_browser_reopens_as_its_snapshot(agent_views_lab: Any) -> None:
    base, root = agent_views_lab
    write_notebook(root / "browse.ipynb", CELLS)
    shots = shots_dir("mxclaw-saved-")
    with chromium_page({"width": 1400, "height": 1100}, failed=shots / "failed-saved-browser.png") as page:
        open_notebook(page, base, "browse.ipynb")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        live = page.locator(f"{PANEL} .mx-session-browser")
        live.wait_for(timeout=300_000)
        kernel_idle(page)
        snapshot = page.locator(f"{PANEL} .mx-snapshot").last
        # live: the widget shows the browser, its snapshot below is hidden (no second copy)
        assert live.is_visible() and not snapshot.is_visible()
        options = live.locator(".mx-session-list select option")
        assert options.count() == 2
        other = next(i for i in range(2) if "current" not in options.nth(i).inner_text())
        other_id = options.nth(other).inner_text().strip()[:8]
        assert f"session {other_id} · prompt tokens" not in snapshot.evaluate("e => e.innerHTML")
        live.locator(".mx-session-list select").select_option(index=other)
        # the click opens that session in the widget, and the snapshot follows it
        page.wait_for_function(f"[...document.querySelectorAll('.mx-snapshot')].pop().innerHTML.includes("
                               f"'session {other_id} · prompt tokens per model call')", timeout=60_000)
        assert f"session {other_id}" in live.locator(".mx-timeline-caption").inner_text()
        # the call the widget opened for that session (its last compaction): "turn 1 · call 6 · micro"
        call = live.locator(".widget-dropdown select").first.evaluate("e => e.options[e.selectedIndex].text")
        turn, number, stage = (part.split()[-1] for part in call.replace("\u00a0", " ").split(" · "))
        call_line = f"call: turn {turn}, call {number}"
        assert f"turn {turn}, call {number}" in live.locator(".mx-gauge").inner_text()

        save_notebook(page)
        saved = nbformat.read(root / "browse.ipynb", as_version=4)
        last = [o for o in saved.cells[-1].outputs if o["output_type"] == "display_data"]
        assert len(last) == 2 and f"session {other_id} · prompt tokens" in last[1]["data"]["text/html"]
        # the whole snapshot is of the clicked session: its timeline and the gauge/inspector of that call
        assert f"{call_line} · {stage}" in last[1]["data"]["text/plain"], last[1]["data"]["text/plain"][:800]
        close_and_shut_down(page)

        open_notebook(page, base, "browse.ipynb")
        kernel_idle(page)
        time.sleep(2.0)  # the widget manager has restored: a missing model would now say so
        text = page.locator(PANEL).inner_text()
        assert NOT_FOUND not in text and "Loading widget" not in text
        snapshot = page.locator(f"{PANEL} .mx-snapshot").last
        assert snapshot.is_visible()
        shown = snapshot.inner_text()
        assert "static snapshot of the session browser (as last shown; the live one needs its kernel)" in shown
        assert "2 sessions" in shown and "tokens saved (est.)" in shown
        assert f"session {other_id}" in snapshot.locator(".mx-timeline-caption").inner_text()
        assert snapshot.locator(".mx-timeline svg").is_visible()
        assert "until compaction" in snapshot.locator(".mx-gauge").inner_text()
        assert call_line in shown and f"turn {turn}, call {number}" in snapshot.locator(".mx-gauge").inner_text()
        light_then_dark(page, lambda theme: _snapshot_shot(page, PANEL, shots / f"saved-browser-{theme}.png"))

        # a copy nobody signed (from a git clone): the widget view is not trusted, the sanitized snapshot shows
        open_untrusted_copy(page, base, root, "browse.ipynb")
        text = page.locator(PANEL).inner_text()
        assert NOT_FOUND not in text and "2 sessions" in text and "tokens saved (est.)" in text
        assert f"session {other_id} · prompt tokens" in text and "until compaction" in text
        image = page.locator(f"{PANEL} .mx-snapshot .mx-timeline img").last  # the sanitizer dropped the <svg>
        assert image.is_visible() and image.evaluate("e => e.complete && e.naturalWidth > 0")
        _snapshot_shot(page, PANEL, shots / "saved-browser-untrusted.png")


def test_n2_exported_saved_notebook_shows_every_snapshot_light_and_dark(tmp_path: Path) -> None:
    from nbconvert import HTMLExporter

    from tests.test_saved_forms import execute_and_save

    require_chromium()
    nb = execute_and_save(tmp_path / "commands.ipynb", tmp_path / "agent.duckdb")  # with widget state, as nbclient
    gauge_line = next(o for c in nb.cells if "gauge" in c.metadata["tags"] for o in c.outputs
                      if o["output_type"] == "execute_result")["data"]["text/plain"]
    sent = gauge_line.split("▓")[-1].split("░")[-1].split(" / ")[0].strip()  # e.g. "4,655 calibrated"
    shots = shots_dir("mxclaw-saved-")
    pages = {}
    for theme in ("light", "dark"):
        html, _ = HTMLExporter(template_name="lab", theme=theme).from_notebook_node(nb)
        path = tmp_path / f"commands-{theme}.html"
        path.write_text(html, encoding="utf-8")
        pages[theme] = path

    def offline(url: str) -> bool:  # no CDN: the widget manager script cannot load, as for a reader offline
        return urlparse(url).scheme in ("file", "data")

    with chromium_page({"width": 1300, "height": 1000}) as page:
        block_requests(page, offline)
        for theme, path in pages.items():
            page.goto(path.as_uri(), wait_until="load")
            dark = page.evaluate("document.body.dataset.jpThemeLight") == "false"
            assert dark == (theme == "dark")
            for cls in (".mx-live", ".mx-gauge", ".mx-inspector", ".mx-timeline svg", ".mx-snapshot"):
                assert page.locator(cls).last.is_visible(), (theme, cls)
            snaps = page.locator(".mx-snapshot")
            assert snaps.count() == 2
            assert "frozen when the next cell ran" in snaps.nth(0).inner_text()
            assert "as last shown; the live one needs its kernel" in snaps.nth(1).inner_text()
            gauges = page.locator(".mx-gauge")
            assert any(sent.split()[0] in gauges.nth(i).inner_text() for i in range(gauges.count())), sent
            text = page.locator("body").inner_text()
            assert NOT_FOUND not in text and "tokens saved (est.)" in text
            # readable in both themes: the snapshot's text is not the page's background colour
            fg, bg = page.evaluate("() => { const s = document.querySelector('.mx-snapshot .mx-sessions td');"
                                   " const b = getComputedStyle(document.body);"
                                   " return [getComputedStyle(s).color, b.backgroundColor]; }")
            assert fg != bg, (theme, fg, bg)
            _snapshot_shot(page, "body", shots / f"exported-browser-{theme}.png")
            page.locator(".mx-gauge").last.evaluate("e => e.scrollIntoView({block: 'start'})")
            time.sleep(0.3)
            page.screenshot(path=str(shots / f"exported-gauge-{theme}.png"))
