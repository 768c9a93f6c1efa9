"""Real-browser test of N4's rename case: JupyterLab renames `Untitled.ipynb` at its first save (its "Rename
file" dialog), and the reopened notebook continues the same session.

Before N4 kept the session id in the notebook's metadata, the reopened notebook started a new session at turn 1
without a word: the session was bound to the old path. Screenshots (light and dark theme) go to the test's
temporary folder, and to docs/screenshots/ with MXCLAW_UPDATE_SCREENSHOT=1.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from .harness import (
    AGENT_KERNEL,
    REPO,
    SESSION,
    TURN_TIMEOUT,
    chromium_page,
    close_and_shut_down,
    kernel_ready,
    run_new_cell,
    switch_theme,
    turn_header,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
SHOTS = REPO / "docs" / "screenshots"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_n4_rename_at_first_save_through_the_dialog_then_reopen_continues(rename_lab: Any, tmp_path: Path,
                                                                          theme: str) -> None:
    base, root = rename_lab
    shots = tmp_path / "shots"
    shots.mkdir()
    with chromium_page({"width": 1300, "height": 1000}, failed=shots / "failed.png") as page:
        page.goto(f"{base}/lab?reset", wait_until="domcontentloaded")
        card = page.locator(".jp-LauncherCard", has_text="mx-claw agent").first
        card.wait_for(timeout=60_000)
        if theme == "dark":
            switch_theme(page, "JupyterLab Dark", light=False)
        card.click()
        kernel_ready(page, AGENT_KERNEL)
        assert page.evaluate("window.jupyterapp.shell.currentWidget.context.path").startswith("Untitled")
        run_new_cell(page, "fix the failing tests")
        first = turn_header(page, 1)
        sid = SESSION.search(first).group(1)  # type: ignore[union-attr]

        page.keyboard.press("Control+s")  # first save of Untitled.ipynb: JupyterLab asks for a name
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=30_000)
        field = dialog.locator("input").first
        field.fill("inventory-fix.ipynb")
        page.screenshot(path=str(shots / f"n4-rename-dialog-{theme}.png"))
        dialog.locator(".jp-mod-accept").click()
        page.wait_for_function("window.jupyterapp.shell.currentWidget.context.path === 'inventory-fix.ipynb'"
                               " && !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000)
        saved = json.loads((root / "inventory-fix.ipynb").read_text())
        assert saved["metadata"]["language_info"]["mxclaw"]["session_id"].startswith(sid)
        assert not list(root.glob("Untitled*.ipynb"))
        close_and_shut_down(page)

        page.evaluate("() => { window.jupyterapp.commands.execute('docmanager:open',"
                      " {path: 'inventory-fix.ipynb'}); }")
        kernel_ready(page, AGENT_KERNEL)
        page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(1).wait_for(timeout=30_000)
        run_new_cell(page, "What did you change?")
        second = turn_header(page, 2)
        note = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output",
                            has_text="Continuing this notebook's session")
        note.first.wait_for(timeout=TURN_TIMEOUT)
        assert "Untitled.ipynb" in note.first.inner_text()
        page.screenshot(path=str(shots / f"n4-reopened-{theme}.png"))
    assert SESSION.search(second).group(1) == sid, (first, second)  # type: ignore[union-attr]
    if os.environ.get("MXCLAW_UPDATE_SCREENSHOT") == "1":
        for shot in shots.glob("n4-*.png"):
            shutil.copyfile(shot, SHOTS / shot.name)
    print("screenshots in", shots)
