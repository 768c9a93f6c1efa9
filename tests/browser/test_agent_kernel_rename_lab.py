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

from mxclaw_nb.kernel.spec import install

from .test_agent_kernel_lab import SESSION, TURN_TIMEOUT, _run_new_cell, _turn_header
from .test_agent_views_lab import close_and_shut_down
from .test_jupyterlab import CHROMIUM, CHROMIUM_ARGS, jupyterlab  # noqa: F401 - the server fixture

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


@pytest.fixture
def rename_lab(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """JupyterLab with the agent kernelspec and its default settings (rename Untitled at first save)."""
    prefix = tmp_path / "prefix"
    install(prefix=str(prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    profile = tmp_path / "ipythondir" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text('c.AgentMagics.approval = "allow"\n')
    return request.getfixturevalue("jupyterlab")


def _kernel_idle(page: Any) -> None:
    page.wait_for_function("window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.name"
                           " === 'mx-claw-agent'", timeout=60_000)
    page.wait_for_function("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                           " === 'idle'", timeout=60_000)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_n4_rename_at_first_save_through_the_dialog_then_reopen_continues(rename_lab: Any, tmp_path: Path,
                                                                          theme: str) -> None:
    from playwright.sync_api import sync_playwright

    base, root = rename_lab
    shots = tmp_path / "shots"
    shots.mkdir()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.goto(f"{base}/lab?reset", wait_until="domcontentloaded")
            card = page.locator(".jp-LauncherCard", has_text="mx-claw agent").first
            card.wait_for(timeout=60_000)
            if theme == "dark":
                page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme',"
                              " {theme: 'JupyterLab Dark'})")
                page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
            card.click()
            _kernel_idle(page)
            assert page.evaluate("window.jupyterapp.shell.currentWidget.context.path").startswith("Untitled")
            _run_new_cell(page, "fix the failing tests")
            first = _turn_header(page, 1)
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
            _kernel_idle(page)
            page.locator(".jp-NotebookPanel:visible .jp-Cell").nth(1).wait_for(timeout=30_000)
            _run_new_cell(page, "What did you change?")
            second = _turn_header(page, 2)
            note = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output",
                                has_text="Continuing this notebook's session")
            note.first.wait_for(timeout=TURN_TIMEOUT)
            assert "Untitled.ipynb" in note.first.inner_text()
            page.screenshot(path=str(shots / f"n4-reopened-{theme}.png"))
        except Exception:
            page.screenshot(path=str(shots / "failed.png"))
            raise
        finally:
            browser.close()
    assert SESSION.search(second).group(1) == sid, (first, second)  # type: ignore[union-attr]
    if os.environ.get("MXCLAW_UPDATE_SCREENSHOT") == "1":
        for shot in shots.glob("n4-*.png"):
            shutil.copyfile(shot, SHOTS / shot.name)
    print("screenshots in", shots)
