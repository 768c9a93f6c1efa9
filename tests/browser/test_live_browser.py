"""The live turn view in real Chromium + JupyterLab (SPEC N1, N2; UX.md "A turn in a notebook (live)").

A paced offline-demo turn (`%%agent fix the failing test`) runs in a JupyterLab kernel. While it runs
the view shows a spinner and the model's narration streaming in, call by call, above the tool lines of
that call; a tool line opens on [show] to its arguments and output; once the turn ends the output is
static HTML (no widget left, no "Error displaying widget") with the answer set apart. Screenshots
(mid-turn and final) are saved under the test's tmp folder for a human look.
"""

from __future__ import annotations

import nbformat
import pytest

from .harness import chromium_page, open_notebook, run_all

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def _notebook(ws: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import os\nos.environ['MXCLAW_DEMO_TOKEN_DELAY'] = '0.02'  # watchable streaming\n"
                                  f"%load_ext mxclaw_nb\n%agent config approval=allow workspace={ws}"),
        nbformat.v4.new_code_cell("%%agent\nfix the failing test"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def test_live_view_streams_in_order_and_ends_static(jupyterlab, tmp_path):
    """Spinner and streamed narration while running; [show] opens a tool line; the end is static HTML."""
    from mxclaw_nb.demo.model import copy_demo_workspace

    base, root = jupyterlab
    ws = copy_demo_workspace(root / "ws")
    nbformat.write(_notebook(str(ws)), root / "live.ipynb")
    with chromium_page({"width": 1300, "height": 1400}, failed=tmp_path / "live-failed.png", full_page=True) as page:
        open_notebook(page, base, "live.ipynb")
        run_all(page, wait=False)  # not awaited: watch it run
        live = page.locator(".mx-live-turn")
        live.wait_for(timeout=60_000)
        page.locator(".mx-live-turn .mx-spinner").first.wait_for(timeout=30_000)  # waiting, with a spinner
        page.locator(".mx-live-turn .mx-narration").nth(1).wait_for(timeout=60_000)  # call 2 is streaming
        text = live.inner_text()
        assert text.index("call 1 · model") < text.index("→ list_dir") < text.index("call 2 · model")
        page.screenshot(path=str(tmp_path / "live-running.png"))
        show = live.locator("details.mx-tool summary").first
        show.click()
        assert "arguments" in live.locator("details.mx-tool").first.inner_text()
        page.locator(".mx-static .mx-answer").wait_for(timeout=120_000)  # the turn ended: static HTML
        final = page.locator(".mx-static")
        assert page.locator(".mx-live-turn").count() == 0 and "Error displaying widget" not in page.content()
        final_text = final.inner_text()
        assert final_text.index("call 8 · model") < final_text.index("answer") and "done · 9 model calls" in \
            final_text
        assert final.locator(".mx-answer pre.mx-code").count() >= 1  # the diff and test output in monospace
        page.screenshot(path=str(tmp_path / "live-final.png"), full_page=True)
        print("screenshots:", tmp_path / "live-running.png", tmp_path / "live-final.png")
