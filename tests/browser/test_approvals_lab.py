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

import time
from typing import Any

import pytest

from .harness import (
    CURRENT,
    PANEL,
    cell_done,
    chromium_page,
    kernel_idle,
    open_notebook,
    output_text,
    run_cell,
    shots_dir,
    wait_cell_output,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

CELLS = ["%load_ext mxclaw_nb",
         "%%agent\nfix the failing tests",
         "%agent sql SELECT json_extract_string(payload, '$.decision') AS decision, "
         "json_extract_string(payload, '$.by') AS by_whom FROM events WHERE type = 'approval.decided' ORDER BY seq",
         "%agent what can you do?"]
APPROVE = f"{PANEL} .mx-approval button:has-text('Approve')"
DENY = f"{PANEL} .mx-approval button:has-text('Deny')"


def test_n1_approve_and_deny_clicks_and_a_question_prompt_in_jupyterlab(agent_views_lab: Any) -> None:
    base, root = agent_views_lab
    write_notebook(root / "approvals.ipynb", CELLS)
    shots = shots_dir("mxclaw-approvals-")
    with chromium_page({"width": 1400, "height": 1100}, failed=shots / "failed.png") as page:
        open_notebook(page, base, "approvals.ipynb")
        run_cell(page, 0)
        kernel_idle(page)
        run_cell(page, 1)
        # the first request: the buttons say what waits, and Approve is clicked
        page.locator(APPROVE).first.wait_for(timeout=120_000)
        question = page.locator(f"{PANEL} .mx-approval").first.inner_text()
        assert "wants to run" in question and "waiting for your answer" in question, question
        # N6: the kernel reads busy while the question waits (control-channel requests, e.g. JupyterLab creating a
        # subshell for widget comms, end with an idle status of their own; the waiting cell says busy again)
        states = []
        for _ in range(5):
            states.append(page.evaluate(f"{CURRENT}.sessionContext.session.kernel.status"))
            time.sleep(0.4)
        assert states == ["busy"] * 5, states
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
            elif cell_done(page, 1):
                break
            else:
                time.sleep(0.3)
        kernel_idle(page)
        time.sleep(1.0)
        log = output_text(page, 1)
        assert "approved by user" in log and "denied by user" in log, log[-3000:]
        assert "click Approve" not in log
        assert page.locator(f"{PANEL} .mx-approval").count() == 0, "answered buttons left behind"
        page.locator(f"{PANEL} .jp-Cell").nth(1).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "approval-decided.png"))

        # the store names the person who decided each request (the clicks), not the policy or nobody
        run_cell(page, 2)
        wait_cell_output(page, 2)
        table = output_text(page, 2)
        assert table.count("user") >= clicks and "deny" in table and "allow" in table, table
        assert "nobody" not in table, table

        # a prompt ending in '?' reaches the agent: no help pager, a turn with the demo model's answer
        run_cell(page, 3)
        wait_cell_output(page, 3)
        time.sleep(0.5)
        answer = output_text(page, 3)
        assert "demo model" in answer and "turn" in answer, answer
        assert "Object `" not in answer and "not found" not in answer.lower(), answer
        assert page.locator(".jp-Pager, .jp-OutputArea-pager").count() == 0 or \
            "Docstring" not in page.locator(PANEL).inner_text()
        page.locator(f"{PANEL} .jp-Cell").nth(3).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "question-prompt.png"))
