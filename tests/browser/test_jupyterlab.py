"""Real-browser test of the widgets (SPEC N2): JupyterLab on 127.0.0.1, Debian's chromium via Playwright.

A temporary JupyterLab (no token, temp config/data/runtime dirs) serves a notebook that builds a real
DuckDB store with one session and displays the context gauge, the token timeline and the compaction
inspector read back from it. Chromium runs all cells; the test asserts that the rendered DOM shows the
inspector's rows with their visible count, the summary text and the stage, and saves
docs/screenshot.png for the README. Every request that is not to 127.0.0.1 is aborted, which also
proves the widgets need no CDN.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from .widgets_notebook import build_notebook, expected

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# The README's picture is refreshed only on request, so a test run leaves the work tree clean.
SCREENSHOT = REPO / "docs" / "screenshot.png"
UPDATE_SCREENSHOT = os.environ.get("MXCLAW_UPDATE_SCREENSHOT") == "1"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    tail = log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"JupyterLab did not answer at {url} within {timeout} s:\n{tail}")


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on a free loopback port with temp dirs; yields (base_url, root_dir)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing under CI: .ci/run must apt-get install chromium")
        pytest.skip("/usr/bin/chromium is not installed (apt-get install -y chromium); CI installs it")
    root = tmp_path / "root"
    root.mkdir()
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        env[name] = str(tmp_path / name.lower())
    settings = tmp_path / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)  # no news/update toasts: nothing asks the internet, the screenshot stays clean
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path / "lab-settings")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("JUPYTER_TOKEN", None)
    port = _free_port()
    log = tmp_path / "jupyterlab.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
           "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.open_browser=False",
           f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=",
           "--LabApp.extension_manager=readonly", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--allow-root")
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(f"{base}/api/status", proc, log)
        yield base, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_n2_widgets_render_in_jupyterlab_chromium(jupyterlab, tmp_path):
    """Gauge, timeline and inspector of a stored session render in JupyterLab; DOM shows rows, summary, stage."""
    from playwright.sync_api import sync_playwright

    base, root = jupyterlab
    want = expected()
    nb = build_notebook(str(tmp_path / "store.duckdb"))
    # the session browser is a live widget: it opens on the current session; a click on a row opens another
    nb.cells.append(nbformat.v4.new_code_cell(
        "from mxclaw_nb.widgets import SessionBrowser\n"
        "other = store.create_session(title='another session')\n"
        "SessionBrowser(store, current=sid)"))
    nbformat.write(nb, root / "widgets.ipynb")
    blocked: list[str] = []

    def only_loopback(route):
        host = urlparse(route.request.url).hostname
        if host in ("127.0.0.1", "localhost") or route.request.url.startswith("data:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1650})
            page.route("**/*", only_loopback)
            page.goto(f"{base}/lab/tree/widgets.ipynb?reset", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget "
                                   "&& window.jupyterapp.shell.currentWidget.sessionContext?.session?.kernel",
                                   timeout=60_000)
            page.evaluate("async () => { const app = window.jupyterapp;"
                          " await app.shell.currentWidget.sessionContext.ready;"
                          " if (app.shell.leftCollapsed === false) { app.shell.collapseLeft(); }"
                          " await app.commands.execute('notebook:run-all-cells'); }")
            insp = page.locator(".mx-inspector").first
            insp.wait_for(timeout=60_000)
            page.locator(".mx-timeline svg").first.wait_for(timeout=30_000)
            gauge = page.locator(".mx-gauge").first
            head = insp.locator(".mx-inspector-head")

            # the stage and the unit, in the inspector header and on the gauge
            assert f"Stage: {want['stage']}" in head.inner_text()
            assert f"after {want['after_tokens']:,} tokens (est.)" in head.inner_text()
            assert want["stage"] in gauge.inner_text() and f"{want['after_tokens']:,} sent" in gauge.inner_text()
            assert "until compaction" in gauge.inner_text() and "% of the" in gauge.inner_text()
            assert gauge.locator(".mx-seg").count() >= 4
            # the before table's rows, capped with a visible count; a row opens its whole message
            before = insp.locator(".mx-table").first
            assert before.is_visible()
            rows = before.locator(".mx-row")
            assert rows.count() == 12
            assert f"showing 12 of {want['before_rows']:,} messages" in before.locator(".mx-count").inner_text()
            assert "summarized" in rows.nth(4).inner_text()
            assert "tokens before (est.)" in before.locator(".mx-thead").inner_text()
            # the timeline drawn inline with the right caption
            assert f"{want['calls']} model calls" in page.locator(".mx-timeline-caption").first.inner_text()
            box = page.locator(".mx-timeline svg").first.bounding_box()
            assert box is not None and box["width"] > 400
            page.evaluate("window.jupyterapp.commands.execute('notebook:hide-all-cell-code')")
            page.evaluate("window.jupyterapp.shell.currentWidget.content.node.scrollTop = 0")
            time.sleep(0.3)
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shot = SCREENSHOT if UPDATE_SCREENSHOT else tmp_path / "screenshot.png"
            page.locator(".jp-NotebookPanel").screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000
            # the summary text, once its section is opened
            insp.locator(":scope > details > summary", has_text="Summary").click()
            summary = insp.locator(".mx-summary")
            summary.wait_for(state="visible", timeout=10_000)
            assert want["summary_first_line"] in summary.inner_text() and "Goals:" in summary.inner_text()
            # the session browser: current session picked and marked, its calls loaded; a row click opens another
            sessions = page.locator(".mx-session-browser")
            sessions.wait_for(timeout=30_000)
            listbox = sessions.locator(".mx-session-list select")
            picked = listbox.evaluate("s => s.options[s.selectedIndex].text")
            assert "current" in picked, picked
            assert sessions.locator(".mx-timeline-plot svg").count() == 1 and sessions.locator(".mx-gauge").count() == 1
            listbox.select_option(index=1)  # the other row, as a click does
            sessions.get_by_text("no model calls recorded in this session").wait_for(timeout=30_000)
            shots = Path(os.environ.get("MXCLAW_SHOTS") or tmp_path)
            sessions.screenshot(path=str(shots / "session-browser.png"))
            print("session browser screenshot in", shots)
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 20_000
    print("blocked non-loopback requests:", blocked)
    assert not blocked, f"the page asked the network for {blocked}"
