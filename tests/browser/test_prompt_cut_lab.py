"""A prompt the server cut, said in the live log, in real Chromium + JupyterLab, light and dark (SPEC T3, L2, C10).

A session runs in a JupyterLab kernel against the shipped test server playing Ollama past num_ctx (the
`prompt_truncated` quirk: a prompt over 2,048 tokens answered, its usage reporting 2,048). The live log of the turn
(`LiveTurnView`) carries the warning line once, in the warning style, after the call it judges; a second turn adds
none.
Screenshots (light and dark) go to MXCLAW_SHOTS (or a temporary folder).
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import chromium_page, open_notebook, run_all, shots_dir, theme_shots, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
PANEL = ".jp-NotebookPanel"

SESSION = '''\
import tempfile
from pathlib import Path
from IPython.display import display
from mxclaw_nb import Agent
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.widgets import LiveTurnView

home = Path(tempfile.mkdtemp())
(home / "ws").mkdir()
report = "".join(f"Line {i}: shelf {i % 17} counts {i * 7} units on day {i % 31}.\\n" for i in range(500))
server = TestServer(quirks={"prompt_truncated"}).__enter__()
server.enqueue_text("Shelves 3, 7 and 11 hold the most.")
server.enqueue_text("Shelf 3 first.")
agent = Agent(workspace=home / "ws", db=str(home / "cut.duckdb"), base_url=server.base_url, api_key="k",
              model="qwen2.5-coder", home=home / "home", approval="allow", context_window_tokens=32_000)
'''
LIVE = '''\
view = LiveTurnView()
view.model_label, view.session_id = agent.label, agent.session_id
display(view)
stop = agent.subscribe(view)
agent.run("Which shelves hold the most units?\\n\\n" + report)
stop()
'''
AGAIN = LIVE.replace('"Which shelves hold the most units?\\n\\n" + report', '"which one first?"')
assert AGAIN != LIVE
CELLS = [SESSION, LIVE, AGAIN]


def test_t3_a_cut_prompt_is_a_warning_line_light_and_dark(jupyterlab: Any) -> None:
    base, root = jupyterlab
    write_notebook(root / "cut.ipynb", CELLS)
    shots = shots_dir("mxclaw-cut-")
    with chromium_page({"width": 1300, "height": 900}) as page:
        open_notebook(page, base, "cut.ipynb")
        run_all(page)
        page.wait_for_function("document.body.innerText.includes('Shelf 3 first.')", timeout=180_000)
        turns = page.locator(f"{PANEL} .mx-live-turn, {PANEL} .mx-static")
        first, second = turns.nth(0), turns.nth(1)
        text = first.inner_text()
        assert "⚠ The provider at" in text and "num_ctx" in text and "OLLAMA_CONTEXT_LENGTH" in text
        assert text.count("⚠ The provider at") == 1  # after the call whose report it judges
        assert "num_ctx" not in second.inner_text()  # said once per session
        page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
        theme_shots(page, shots, "prompt-cut-{theme}-{what}.png", [("live-log", first)])
        assert all((shots / f"prompt-cut-{t}-live-log.png").stat().st_size > 5_000 for t in ("light", "dark"))
