"""SPEC N1 in a real Jupyter kernel: notebooks executed headlessly through nbclient.

The kernel is a separate process configured only by environment variables (MXCLAW_DB, and
OPENAI_BASE_URL / OPENAI_API_KEY / MXCLAW_MODEL for the test server), as a user's notebook server
would start it. nbclient applies `update_display_data` to the stored outputs, so what we assert on
is what a saved notebook shows: the final state of the live display with its text/HTML fallback.
nbclient sends `allow_stdin=False`, so these runs also check that approval "ask" never hangs a
headless kernel.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from mxclaw_nb.demo.server import TestServer

ROOT = Path(__file__).resolve().parents[1]
CELL_TIMEOUT = 50


def kernel_env(db: Path, **extra: str) -> dict[str, str]:
    """The parent environment without provider/store settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MXCLAW_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["MXCLAW_DB"] = str(db)
    env.update(extra)
    return env


def run_notebook(sources: list[str], folder: Path, env: dict[str, str]) -> tuple[nbformat.NotebookNode, float]:
    """Execute the cells in a fresh kernel; returns the executed notebook and the seconds it took."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}})
    started = time.monotonic()
    client.execute(env=env)
    return nb, time.monotonic() - started


def texts(cell: nbformat.NotebookNode, mime: str = "text/plain") -> list[str]:
    """Every text of a cell's outputs: stream text, or the given MIME type of display/execute results."""
    out = []
    for o in cell.outputs:
        if o.output_type == "stream":
            out.append(o.text)
        elif mime in o.get("data", {}):
            out.append(o.data[mime])
    return out


def test_n1_kernel_cell_magic_on_the_demo_model(tmp_path: Path) -> None:
    """%%agent in a kernel with nothing configured: the demo model answers, labelled; approval never hangs."""
    nb, seconds = run_notebook([
        "%load_ext mxclaw_nb",
        "%%agent\nfix the failing tests",
        "%agent sql SELECT json_extract_string(payload, '$.by') AS decided_by FROM events "
        "WHERE type = 'approval.decided'",
        "%agent view --after",
    ], tmp_path, kernel_env(tmp_path / "demo.duckdb"))
    assert seconds < 60
    turn = nb.cells[1]
    live = [o for o in turn.outputs if o.output_type == "display_data"]
    assert len(live) == 1  # one live display, updated in place
    plain, html = live[0].data["text/plain"], live[0].data["text/html"]
    assert plain.startswith("demo model (offline) · session ") and "turn 1 · done" in plain
    assert "→ list_dir ." in plain and "→ read_file inventory/stock.py  ok" in plain and "[demo model]" in plain
    assert "est." in plain and "threshold" in plain and "mx-live" in html
    events = "".join(texts(nb.cells[2]))
    assert "demo model (offline)" in events and "nobody" in events  # headless: denied at once, recorded
    view = "".join(texts(nb.cells[3]))
    assert "what the model saw" in view and "fix the failing tests" in view
    assert not any(o.output_type == "error" for c in nb.cells for o in c.outputs)


def test_n1_kernel_on_the_test_server_with_env_configuration(tmp_path: Path) -> None:
    """%%agent against the scripted server, configured by env vars; the display-handle log; a 401 paragraph."""
    with TestServer(api_key="sk-kernel") as srv:
        base_url = srv.base_url
        srv.enqueue_tool_calls([("list_dir", {"path": "."})])
        srv.enqueue_text("There is one notebook here. 一个笔记本。")
        env = kernel_env(tmp_path / "server.duckdb", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-kernel",
                         MXCLAW_MODEL="test-model", WRONG_KEY="sk-wrong")
        nb, seconds = run_notebook([
            "%load_ext mxclaw_nb\n%config AgentMagics.widgets = False",
            "%%agent\nwhat is in this folder?",
            "%config AgentMagics.api_key_env = 'WRONG_KEY'",
            "%agent -- new question",
            "%agent sql SELECT content FROM messages WHERE role = 'user' ORDER BY seq",
        ], tmp_path, env)
        requests = list(srv.requests)
    assert seconds < 60
    live = [o for o in nb.cells[1].outputs if o.output_type == "display_data"]
    assert len(live) == 1
    plain, html = live[0].data["text/plain"], live[0].data["text/html"]
    assert plain.startswith(f"test-model @ {base_url} · session ")
    assert "→ list_dir .  ok" in plain and "There is one notebook here. 一个笔记本。" in plain
    assert "(done · 2 model calls)" in plain and "<details" in html and "一个笔记本" in html
    assert requests[0]["messages"][-1] == {"role": "user", "content": "what is in this folder?"}
    assert requests[0]["model"] == "test-model"
    errors = [o for o in nb.cells[3].outputs if o.output_type == "stream" and o.name == "stderr"]
    paragraph = "".join(o.text for o in errors).strip()
    # names the setting the user used: the key variable that %config AgentMagics.api_key_env points at (L7)
    assert paragraph.startswith(f"Provider at {base_url} refused the key (401). Set WRONG_KEY (the variable "
                                "%config AgentMagics.api_key_env names). Your message is stored (session ")
    assert "Traceback" not in paragraph and not any(o.output_type == "error" for o in nb.cells[3].outputs)
    assert len(requests) == 2  # the server refused the third call before reading it
    assert "new question" in "".join(texts(nb.cells[4]))  # ... but the message is stored


def test_n1_kernel_usage_errors_are_one_line(tmp_path: Path) -> None:
    """A bad option in a kernel prints IPython's one-line `UsageError: ...`, not a traceback of the magic."""
    lines = ["%agent --bogus", "%agent resume nothing-like-this", "%%agent --image\nhello"]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in ["%load_ext mxclaw_nb", *lines]]
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=kernel_env(tmp_path / "usage.duckdb"))
    for cell in nb.cells[1:]:
        shown = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
        assert shown.startswith("UsageError: ") and len(shown.strip().splitlines()) <= 3, cell.source
        assert "Traceback" not in shown and not any(o.output_type == "error" for o in cell.outputs)


def test_n1_kernel_approval_asks_an_interactive_frontend(tmp_path: Path) -> None:
    """approval=ask, widgets off, a frontend that allows input: the text prompt waits for the answer; stored."""
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=kernel_env(tmp_path / "ask.duckdb"), cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    prompts: list[str] = []
    answers = iter(["y", "n"])
    shown: list[str] = []

    def on_input(msg: dict) -> None:
        prompts.append(msg["content"]["prompt"])
        kc.input(next(answers, "n"))

    def on_output(msg: dict) -> None:
        content = msg["content"]
        shown.append(content.get("text") or content.get("data", {}).get("text/plain", ""))

    try:
        kc.wait_for_ready(timeout=CELL_TIMEOUT)
        kc.execute_interactive("%load_ext mxclaw_nb\n%config AgentMagics.widgets = False", timeout=CELL_TIMEOUT)
        reply = kc.execute_interactive("%%agent\nfix the failing tests", allow_stdin=True, stdin_hook=on_input,
                                       output_hook=on_output, timeout=CELL_TIMEOUT)
        assert reply["content"]["status"] == "ok"
        shown.clear()
        kc.execute_interactive("%agent sql SELECT json_extract_string(payload, '$.decision') AS d, "
                               "json_extract_string(payload, '$.by') AS b FROM events "
                               "WHERE type = 'approval.decided' ORDER BY seq", output_hook=on_output,
                               timeout=CELL_TIMEOUT)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert len(prompts) >= 2, "".join(shown)[-3000:]  # after a denial the turn goes on (and may ask again)
    assert "python tools/gen_log.py" in prompts[0] and "Allow? [y/N]" in prompts[0]
    table = "".join(shown)
    assert "allow  user" in table and "deny  user" in table and "nobody" not in table


def test_n1_kernel_interrupt_stops_the_turn_cleanly(tmp_path: Path) -> None:
    """L4/N1: interrupting the kernel during a slow model call prints one line; what was stored stays."""
    from jupyter_client import KernelManager

    with TestServer() as srv:
        srv.enqueue_delay(20)
        srv.enqueue_text("too late")
        srv.enqueue_text("after the interrupt")
        env = kernel_env(tmp_path / "interrupt.duckdb", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-any",
                         MXCLAW_MODEL="test-model")
        km = KernelManager(kernel_name="python3")
        km.start_kernel(env=env, cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        shown: list[str] = []

        def on_output(msg: dict) -> None:
            content = msg["content"]
            shown.append(content.get("text") or content.get("data", {}).get("text/plain", ""))

        try:
            kc.wait_for_ready(timeout=CELL_TIMEOUT)
            kc.execute_interactive("%load_ext mxclaw_nb\n%config AgentMagics.widgets = False", timeout=CELL_TIMEOUT)
            msg_id = kc.execute("%agent a slow question")
            deadline = time.monotonic() + 15
            while not srv.requests and time.monotonic() < deadline:  # the model call is in flight
                time.sleep(0.05)
            started = time.monotonic()
            km.interrupt_kernel()
            reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = kc.get_shell_msg(timeout=CELL_TIMEOUT)
            stopped_after = time.monotonic() - started
            while True:  # drain the cell's outputs
                msg = kc.get_iopub_msg(timeout=CELL_TIMEOUT)
                if msg["msg_type"] in ("stream", "display_data", "update_display_data"):
                    on_output(msg)
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" \
                        and msg["parent_header"].get("msg_id") == msg_id:
                    break
            interrupted = "".join(shown)
            shown.clear()
            kc.execute_interactive("%agent sql SELECT role, content FROM messages WHERE role = 'user'",
                                   output_hook=on_output, timeout=CELL_TIMEOUT)
            stored = "".join(shown)
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok" and stopped_after < 10
    assert "Interrupted. Everything done so far is stored (session " in interrupted
    assert "Traceback" not in interrupted and "(interrupted)" in interrupted
    assert "a slow question" in stored


def test_n2_session_browser_is_frozen_to_static_html_when_the_next_cell_runs(tmp_path: Path) -> None:
    """`%agent sessions --browse` is interactive, then a snapshot: what is saved has no widget reference."""
    nb, _ = run_notebook([
        "%load_ext mxclaw_nb",
        "%agent config approval=allow",
        "%agent fix the failing tests",
        "%agent sessions --browse",
        "open_comms = [w for w in __import__('ipywidgets').Widget.widgets.values()"
        " if type(w).__name__ == 'SessionBrowser']\nprint('browsers open:', len(open_comms))",
    ], tmp_path, kernel_env(tmp_path / "demo.duckdb"))
    browse = nb.cells[3]
    shown = [o for o in browse.outputs if o.output_type in ("display_data", "execute_result")]
    # the live widget's output is emptied when it is frozen; the snapshot output beside it stays
    assert all(o.data == {"text/plain": ""} for o in shown[:-1]) and len(shown) <= 2, browse.outputs
    data = shown[-1].data
    assert "application/vnd.jupyter.widget-view+json" not in data  # nothing that needs the kernel's models
    assert "mx-browser" in data["text/html"] and "static snapshot of the session browser" in data["text/html"]
    assert "current" in data["text/html"] and "1 session" in data["text/plain"]
    assert "browsers open: 0" in "".join(texts(nb.cells[4]))  # the widget and its comm were closed
