"""Real-browser test of approvals and `?` prompts (SPEC N1, N2, L3): clicks in JupyterLab on the installed ipykernel.

A person runs `%%agent fix the failing tests` with the default approval policy (`ask`): the demo model asks
to run shell commands, and the turn waits for Approve/Deny buttons. Chromium clicks Approve on the first
request and Deny on the second; the turn must go on (the model is told of the denial), the decisions
must sit in the live log next to their tool lines, the answered buttons must leave nothing behind, and
the store must record who decided. Then a line prompt ending in `?` (which IPython would otherwise
treat as a help request) must reach the agent instead of opening IPython's help pager.
Screenshots go to $MXCLAW_SHOTS or a new temporary folder (printed).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from .test_agent_views_lab import PANEL, _open, agent_views_lab, write_notebook  # noqa: F401 - the fixture
from .test_jupyterlab import CHROMIUM, CHROMIUM_ARGS, jupyterlab  # noqa: F401 - the server fixture

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

CELLS = ["%load_ext mxclaw_nb",
         "%%agent\nfix the failing tests",
         "%agent sql SELECT json_extract_string(payload, '$.decision') AS decision, "
         "json_extract_string(payload, '$.by') AS by_whom FROM events WHERE type = 'approval.decided' ORDER BY seq",
         "%agent what can you do?"]
APPROVE = f"{PANEL} .mx-approval button:has-text('Approve')"
DENY = f"{PANEL} .mx-approval button:has-text('Deny')"


def _run_cell(page: Any, index: int) -> None:
    page.evaluate("i => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;"
                  " window.jupyterapp.commands.execute('notebook:run-cell'); }", index)


def _done(page: Any, index: int) -> bool:
    """The cell finished (JupyterLab sets its execution count then; the kernel reads idle while a turn waits
    for a click, because it serves the button's comm messages)."""
    return page.evaluate("i => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionCount"
                         " !== null", index)


def _idle(page: Any, timeout: float = 120_000) -> None:
    page.wait_for_function("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status"
                           " === 'idle'", timeout=timeout)


def _finished_with_output(page: Any, index: int, timeout: float = 120_000) -> None:
    """Wait until cell `index` ran and has output: right after `notebook:run-cell` the kernel may still read
    idle (the request not taken yet), so idle alone can read an empty output area."""
    page.wait_for_function("i => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i];"
                           " return c.model.executionCount !== null && c.model.outputs.length > 0; }",
                           arg=index, timeout=timeout)
    _idle(page, timeout)


def _output_text(page: Any, index: int) -> str:
    return page.locator(f"{PANEL} .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()


def test_n1_approve_and_deny_clicks_and_a_question_prompt_in_jupyterlab(agent_views_lab: Any) -> None:  # noqa: F811
    from playwright.sync_api import sync_playwright

    base, root = agent_views_lab
    write_notebook(root / "approvals.ipynb", CELLS)
    shots = Path(os.environ.get("MXCLAW_SHOTS") or tempfile.mkdtemp(prefix="mxclaw-approvals-"))
    shots.mkdir(parents=True, exist_ok=True)
    print("screenshots in", shots)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            _open(page, base, "approvals.ipynb")
            _run_cell(page, 0)
            _idle(page)
            _run_cell(page, 1)
            # the first request: the buttons say what waits, and Approve is clicked
            page.locator(APPROVE).first.wait_for(timeout=120_000)
            question = page.locator(f"{PANEL} .mx-approval").first.inner_text()
            assert "wants to run" in question and "waiting for your answer" in question, question
            page.screenshot(path=str(shots / "approval-asked.png"))
            page.locator(APPROVE).first.click()
            page.locator(f"{PANEL} .mx-approval").first.wait_for(state="detached", timeout=30_000)
            # the second request is denied; any later one is approved
            page.locator(DENY).first.wait_for(timeout=120_000)
            page.locator(DENY).first.click()
            page.locator(f"{PANEL} .mx-approval").first.wait_for(state="detached", timeout=30_000)
            clicks = 2
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                if page.locator(APPROVE).count():
                    page.locator(APPROVE).first.click()
                    clicks += 1
                    time.sleep(0.5)
                elif _done(page, 1):
                    break
                else:
                    time.sleep(0.3)
            _idle(page)
            time.sleep(1.0)
            log = _output_text(page, 1)
            assert "approved by user" in log and "denied by user" in log, log[-3000:]
            assert "click Approve" not in log
            assert page.locator(f"{PANEL} .mx-approval").count() == 0, "answered buttons left behind"
            page.locator(f"{PANEL} .jp-Cell").nth(1).scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "approval-decided.png"))

            # the store names the person who decided each request (the clicks), not the policy or nobody
            _run_cell(page, 2)
            _finished_with_output(page, 2)
            table = _output_text(page, 2)
            assert table.count("user") >= clicks and "deny" in table and "allow" in table, table
            assert "nobody" not in table, table

            # a prompt ending in '?' reaches the agent: no help pager, a turn with the demo model's answer
            _run_cell(page, 3)
            _finished_with_output(page, 3)
            time.sleep(0.5)
            answer = _output_text(page, 3)
            assert "demo model" in answer and "turn" in answer, answer
            assert "Object `" not in answer and "not found" not in answer.lower(), answer
            assert page.locator(".jp-Pager, .jp-OutputArea-pager").count() == 0 or \
                "Docstring" not in page.locator(PANEL).inner_text()
            page.locator(f"{PANEL} .jp-Cell").nth(3).scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "question-prompt.png"))
        except Exception:
            page.screenshot(path=str(shots / "failed.png"))
            raise
        finally:
            browser.close()
