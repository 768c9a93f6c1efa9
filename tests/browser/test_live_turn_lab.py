"""The live turn in JupyterLab + Chromium, as a newcomer meets it (SPEC N6, N2, L4, L5, L7, C10).

A scripted OpenAI-compatible test server on 127.0.0.1 (with the `strict_params` quirk, so the adapter says
what it did about the server: a `provider.note`) drives three `%%agent` turns in a real kernel, the shell
unsandboxed (`sandbox=off`: the "shell NOT sandboxed" warning) and `approval=ask`:

1. a shell command waits for approval: the question must be inside the viewport, counting down, announced by a
   JupyterLab notification and the tab title, and Enter approves it; the widget log (the one the default
   notebook shows) carries both warnings (screenshots light and dark); then four large reads compact the
   context, and once the turn ended a `⟳ context compacted` line opens that call's inspector in place;
2. a long shell command is interrupted (the kernel's interrupt): its tool line ends `interrupted`;
3. a slowly streamed answer is interrupted: the part shown is labelled partial.
Screenshots go to $MXCLAW_SHOTS or a new temporary folder (printed).
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
    output_text,
    run_cell,
    save_notebook,
    shots_dir,
    switch_theme,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

LONG_ANSWER = "This answer streams slowly, a few characters at a time, so that it can be interrupted " * 6


def _cells(base_url: str) -> list[str]:
    return [f"import os\nos.environ.update(OPENAI_BASE_URL={base_url!r}, OPENAI_API_KEY='k', MXCLAW_MODEL='test-model')"
            "\n%load_ext mxclaw_nb\n%agent config sandbox=off context_window_tokens=4000 keep_recent_tokens=1000 "
            "counter=estimate",
            "%%agent\nsay hello, then read big.txt four times",
            "%agent config approval=allow",
            "%%agent\nwait a while",
            "%%agent\nanswer at length"]


def _in_viewport(page: Any, selector: str) -> dict[str, float]:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not rendered"
    view = page.viewport_size
    assert box["y"] >= 0 and box["y"] + box["height"] <= view["height"], (box, view)
    return box


def _shot(page: Any, shots: Path, name: str, cell: int) -> None:
    page.locator(f"{PANEL} .jp-Cell").nth(cell).screenshot(path=str(shots / name))


def test_n6_live_turn_approval_in_view_warnings_compaction_inspector_and_interrupts(agent_views_lab: Any) -> None:
    from mxclaw_nb.demo.server import TestServer

    base, root = agent_views_lab
    (root / "big.txt").write_text("x" * 6_000, encoding="utf-8")
    shots = shots_dir("mxclaw-live-turn-")
    with (TestServer(quirks=["strict_params"]) as srv,
          chromium_page({"width": 1300, "height": 900}, failed=shots / "failed.png") as page):
        srv.enqueue_tool_calls([("bash", {"command": "echo hello"})], text="First a greeting.")
        for _ in range(4):
            srv.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
        srv.enqueue_text("read it all")
        srv.enqueue_tool_calls([("bash", {"command": "sleep 60"})])
        srv.enqueue_text(LONG_ANSWER)
        write_notebook(root / "live-turn.ipynb", _cells(srv.base_url))
        open_notebook(page, base, "live-turn.ipynb")
        run_cell(page, 0)
        kernel_idle(page)
        title = page.title()
        run_cell(page, 1)

        # N6: the pending approval is in view, counts down, is announced, and Enter answers it
        page.locator(f"{PANEL} .mx-approval").first.wait_for(timeout=120_000)
        time.sleep(1.5)  # the attention script ran (it looks for the box every 0.1 s)
        _in_viewport(page, f"{PANEL} .mx-approval")
        question = page.locator(f"{PANEL} .mx-approval").first.inner_text()
        assert "echo hello" in question and "denied in 4:" in question and "Esc: Deny" in question, question
        assert page.title().startswith("⏳"), page.title()
        toast = page.get_by_text("mxclaw_nb waits for your approval: echo hello")
        toast.first.wait_for(timeout=10_000)
        live = page.locator(f"{PANEL} .mx-live-turn").first
        notes = live.locator(".mx-note").all_inner_texts()
        # C10: both warnings reach the widget log (two renderers used to drift apart here)
        assert any("NOT sandboxed" in n for n in notes), notes
        assert any(n.startswith("i The provider at") and "stream_options" in n for n in notes), notes
        assert "waiting for your approval of a shell command: echo hello" in live.inner_text()
        light_then_dark(page, lambda theme: page.screenshot(path=str(shots / f"{theme}-approval-pending.png")))
        page.locator(f"{PANEL} .mx-approval").first.focus()
        page.keyboard.press("Enter")
        page.locator(f"{PANEL} .mx-approval").first.wait_for(state="detached", timeout=30_000)

        # the turn ends static; a compaction line opens its call's inspector in place (N6)
        page.locator(f"{PANEL} .jp-Cell").nth(1).locator(".mx-static .mx-answer").wait_for(timeout=120_000)
        kernel_idle(page)
        assert page.title() == title, page.title()
        log = output_text(page, 1)
        assert any("→ bash echo hello" in line and "✓ approved by user" in line for line in log.splitlines()), log
        assert "NOT sandboxed" in log and "i The provider at" in log
        cell = page.locator(f"{PANEL} .jp-Cell").nth(1)
        lines = cell.locator("summary.mx-compaction")
        assert lines.count() >= 1
        first = lines.first
        assert "[inspect call" in first.inner_text()
        inspector = first.locator("xpath=..").locator(".mx-compaction-inspector .mx-inspector")
        assert not inspector.is_visible()
        first.click()
        inspector.wait_for(state="visible", timeout=10_000)
        call = first.inner_text().split("before call ", 1)[1].split(":", 1)[0]
        head = inspector.inner_text()
        assert f"call {call}" in head and "Stage" in head, head
        first.scroll_into_view_if_needed()
        _shot(page, shots, "light-compaction-inspector.png", 1)
        switch_theme(page, "JupyterLab Dark", light=False)
        _shot(page, shots, "dark-widget-log-warnings.png", 1)
        switch_theme(page, "JupyterLab Light", light=True)
        _shot(page, shots, "light-widget-log-warnings.png", 1)

        # L7: an interrupt while a tool runs ends its line "interrupted"
        run_cell(page, 2)
        kernel_idle(page)
        run_cell(page, 3)
        running = page.locator(f"{PANEL} .jp-Cell").nth(3).locator(".mx-live-turn .mx-tool", has_text="sleep 60")
        running.first.wait_for(timeout=60_000)
        time.sleep(1.0)
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.interrupt()")
        kernel_idle(page)
        page.locator(f"{PANEL} .jp-Cell").nth(3).locator(".mx-static").wait_for(timeout=30_000)
        out = output_text(page, 3)
        assert any("→ bash sleep 60" in line and "· interrupted" in line
                   for line in out.splitlines()), out[-2000:]
        assert "running…" not in out and "interrupted" in out

        # L4: an interrupt while the answer streams keeps the part shown, labelled partial
        srv.stream_chunk_chars, srv.stream_delay = 6, 0.15
        run_cell(page, 4)
        streaming = page.locator(f"{PANEL} .jp-Cell").nth(4).locator(".mx-live-turn .mx-narration")
        streaming.first.wait_for(timeout=60_000)
        time.sleep(1.5)
        page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.interrupt()")
        kernel_idle(page)
        final = page.locator(f"{PANEL} .jp-Cell").nth(4).locator(".mx-static")
        final.wait_for(timeout=30_000)
        text = final.inner_text()
        assert "partial: interrupted" in text and "This answer streams" in text and "interrupted" in text, text
        assert LONG_ANSWER.strip() not in text  # cut: only the part that was shown
        page.locator(f"{PANEL} .jp-Cell").nth(3).scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "light-interrupts.png"))
        page.locator(f"{PANEL} .jp-Cell").nth(4).screenshot(path=str(shots / "light-interrupt-mid-stream.png"))

        # N6 in the saved notebook: saved, closed, its kernel shut down, reopened: a compaction line still
        # opens its call's inspector (static HTML, no kernel)
        save_notebook(page)
        close_and_shut_down(page)
        open_notebook(page, base, "live-turn.ipynb")
        time.sleep(2.0)
        reopened = page.locator(f"{PANEL} .jp-Cell").nth(1).locator("summary.mx-compaction").last
        reopened.scroll_into_view_if_needed()
        reopened.click()
        saved = reopened.locator("xpath=..").locator(".mx-compaction-inspector .mx-inspector")
        saved.wait_for(state="visible", timeout=10_000)
        assert "Stage" in saved.inner_text()
