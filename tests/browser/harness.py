"""The browser tests' harness: one JupyterLab on 127.0.0.1, Debian's Chromium through Playwright, and the steps every
test takes in a notebook (open it, run it, wait for a cell's output, switch the theme, take screenshots).

Why one server: starting JupyterLab costs seconds of the two CI cores per test. `LabServer` is started once for the
browser tests of a run (the package-scoped `lab_server` fixture in conftest.py) and handed to each test as if it were
its own: the test's lab settings and its kernels' environment (MXCLAW_*, OPENAI_*, an own IPYTHONDIR; see
kernel_env.py) are laid on before it opens a page, and after it every session and kernel is shut down and the root
folder, the settings (a theme chosen), the workspaces and a test's kernelspec are removed again.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat

from .kernel_env import per_test

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
PANEL = ".jp-NotebookPanel:visible"
# Lab settings a test may ask for ("extension:plugin" -> values), written to the server's user settings folder.
NO_NEWS = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
SAVE_UNTITLED_AS_IT_IS = {"@jupyterlab/docmanager-extension:plugin": {"renameUntitledFileOnSave": False}}
RENDER_EVERY_CELL = {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}
CURRENT = "window.jupyterapp.shell.currentWidget"
LabFactory = Callable[..., tuple[str, Path]]  # the `lab` fixture: LabServer.use for the running test
AGENT_KERNEL = "mx-claw-agent"  # the agent kernelspec's name (SPEC N4)
ALLOW = 'c.AgentMagics.approval = "allow"\n'  # an ipython_kernel_config.py: tools run without asking
TURN_TIMEOUT = 120_000
SESSION = re.compile(r"session ([0-9a-f]{8})")  # a session id in a turn's header


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LabServer:
    """A JupyterLab server on a free loopback port, no token, every Jupyter folder under `home`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "root"
        self.settings = home / "lab-settings"
        self.workspaces = home / "workspaces"
        self.prefix = home / "prefix"  # on JUPYTER_PATH: a test's kernelspec goes to prefix/share/jupyter/kernels
        self.env_file = home / "kernel-env.json"
        self.log = home / "jupyterlab.log"
        self.base = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        for folder in (self.root, self.settings, self.workspaces):
            folder.mkdir(parents=True, exist_ok=True)
        self._defaults()
        env = {k: v for k, v in os.environ.items() if not per_test(k)}  # the kernels get these from the test
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
            env[name] = str(self.home / name.lower())
        env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(self.prefix / "share" / "jupyter"),
                                                          env.get("JUPYTER_PATH", "")) if p)
        env["JUPYTERLAB_SETTINGS_DIR"] = str(self.settings)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env.pop("JUPYTER_TOKEN", None)
        port = _free_port()
        cmd = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--port={port}", "--no-browser",
               "--ServerApp.token=", "--ServerApp.password=", "--ServerApp.open_browser=False",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.news_url=",
               "--LabApp.extension_manager=readonly", f"--LabApp.workspaces_dir={self.workspaces}",
               "--ServerApp.session_manager_class=tests.browser.kernel_env.PerTestEnvSessionManager",
               f"--PerTestEnvSessionManager.env_file={self.env_file}"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        url = f"{self.base}/api/status"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"JupyterLab exited with {self.proc and self.proc.returncode}:\n{self._tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer at {url} within {timeout} s:\n{self._tail()}")

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def use(self, tmp_path: Path, *, settings: Mapping[str, Mapping[str, Any]] | None = None,
            ipython_kernel_config: str | None = None, agent_kernel: bool = False) -> tuple[str, Path]:
        """Make the server this test's: its lab `settings`, its kernels' environment (this process's MXCLAW_* and
        OPENAI_* variables, IPYTHONDIR under `tmp_path` with `ipython_kernel_config` in its default profile), the
        agent kernelspec if asked. Returns (base URL, root folder)."""
        if not self.alive:  # a server that died is started again: one test's failure stays its own
            self.start()
        for plugin, values in (settings or {}).items():
            self._write_setting(plugin, values)
        env = {k: v for k, v in os.environ.items() if per_test(k)}
        ipythondir = tmp_path / "ipythondir"
        env["IPYTHONDIR"] = str(ipythondir)
        if ipython_kernel_config is not None:
            (ipythondir / "profile_default").mkdir(parents=True)
            (ipythondir / "profile_default" / "ipython_kernel_config.py").write_text(ipython_kernel_config)
        if agent_kernel:
            from mxclaw_nb.kernel.spec import install

            install(prefix=str(self.prefix))
        self.env_file.write_text(json.dumps(env), encoding="utf-8")
        return self.base, self.root

    def reset(self) -> None:
        """Shut every session and kernel down; remove what a test left: files, settings, workspaces, kernelspecs."""
        if self.alive:
            self._shut_down_kernels()
        for folder in (self.root, self.settings, self.workspaces, self.prefix):
            if folder.is_dir():
                for child in folder.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
        self._defaults()

    def _defaults(self) -> None:
        self._write_setting(*next(iter(NO_NEWS.items())))  # nothing asks the internet, screenshots stay clean
        # between tests no kernel should start; one that does gets a store of its own, not the per-user one
        self.env_file.write_text(json.dumps({"MXCLAW_DB": str(self.home / "between-tests.duckdb"),
                                             "IPYTHONDIR": str(self.home / "ipythondir")}), encoding="utf-8")

    def _write_setting(self, plugin: str, values: Mapping[str, Any]) -> None:
        extension, name = plugin.split(":")
        path = self.settings / extension / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")

    def _shut_down_kernels(self) -> None:
        # jupyter_server wants the XSRF cookie's value back on a DELETE (no token: nothing else authenticates it)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(f"{self.base}/lab", timeout=30).read()
        xsrf = {"X-XSRFToken": next((c.value for c in jar if c.name == "_xsrf"), "")}
        for kind in ("sessions", "kernels"):  # a session's DELETE shuts its kernel down; then any kernel left
            with opener.open(f"{self.base}/api/{kind}", timeout=30) as resp:
                ids = [item["id"] for item in json.load(resp)]
            for ident in ids:
                req = urllib.request.Request(f"{self.base}/api/{kind}/{ident}", method="DELETE", headers=xsrf)
                try:
                    opener.open(req, timeout=60).read()
                except urllib.error.HTTPError as err:
                    if err.code != 404:  # gone already (its session took it)
                        raise


def require_chromium() -> None:
    """Skip without /usr/bin/chromium, except under CI, which must have installed it."""
    if not CHROMIUM.exists():
        import pytest

        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing under CI: .ci/run must apt-get install chromium")
        pytest.skip("/usr/bin/chromium is not installed (apt-get install -y chromium); CI installs it")


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium, launched through Playwright's sync API and closed on the way out; yields the Browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def chromium_page(viewport: Mapping[str, int], *, failed: Path | None = None, full_page: bool = False) -> Iterator[Any]:
    """A page of a new Chromium (`viewport`: width and height); when the block raises, a screenshot of the page goes
    to `failed` (printed) before the error goes on."""
    with chromium() as browser:
        page = browser.new_page(viewport=dict(viewport))
        try:
            yield page
        except Exception:
            if failed is not None:
                page.screenshot(path=str(failed), full_page=full_page)
                print("failure screenshot:", failed)
            raise


def block_requests(page: Any, allowed: Callable[[str], bool]) -> list[str]:
    """Abort every request of `page` whose URL `allowed` refuses; returns the list those URLs are added to."""
    blocked: list[str] = []

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if allowed(url):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    page.route("**/*", route)
    return blocked


def shots_dir(prefix: str) -> Path:
    """Where screenshots go: $MXCLAW_SHOTS, else a new temporary folder (not under tmp_path: pytest prunes old
    ones, and the screenshots are there to be looked at); printed."""
    shots = Path(os.environ.get("MXCLAW_SHOTS") or tempfile.mkdtemp(prefix=prefix))
    shots.mkdir(parents=True, exist_ok=True)
    print("screenshots in", shots)
    return shots


def write_notebook(path: Path, cells: list[str]) -> None:
    """A Python-kernel notebook of code cells, written to `path`."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nbformat.write(nb, path)


def open_notebook(page: Any, base: str, path: str) -> None:
    """Open `path` (a fresh workspace), wait for its cells and a ready kernel, and fold the left sidebar away."""
    page.goto(f"{base}/lab/tree/{path}?reset", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function("window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel", timeout=60_000)
    page.evaluate(f"async () => {{ const app = window.jupyterapp; await {CURRENT}.sessionContext.ready;"
                  " if (app.shell.leftCollapsed === false) { app.shell.collapseLeft(); } }")


def run_all(page: Any, *, wait: bool = True) -> None:
    """Run every cell of the current notebook; with `wait`, until the last one has finished."""
    command = "window.jupyterapp.commands.execute('notebook:run-all-cells')"
    page.evaluate(f"async () => {{ await {command}; }}" if wait else f"() => {{ {command}; }}")


def kernel_idle(page: Any, timeout: float = 120_000) -> None:
    """The current notebook's kernel reads idle (right after a run request it may still: see wait_cell_output)."""
    page.wait_for_function(f"{CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=timeout)


def kernel_ready(page: Any, name: str, timeout: float = 60_000) -> None:
    """The current notebook runs kernel `name` (its kernelspec's name) and that kernel reads idle."""
    page.wait_for_function(f"window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel?.name"
                           f" === {json.dumps(name)}", timeout=timeout)
    kernel_idle(page, timeout)


def run_cell(page: Any, index: int) -> None:
    """Make cell `index` the active one and run it (not waiting for it)."""
    page.evaluate(f"i => {{ const nb = {CURRENT}.content; nb.activeCellIndex = i;"
                  " window.jupyterapp.commands.execute('notebook:run-cell'); }", index)


def cell_done(page: Any, index: int) -> bool:
    """Cell `index` finished (JupyterLab sets its execution count then; the kernel reads idle while a turn waits
    for a click, because it serves the button's comm messages)."""
    return bool(page.evaluate(f"i => {CURRENT}.content.widgets[i].model.executionCount !== null", index))


def wait_cell_output(page: Any, index: int, timeout: float = 120_000) -> None:
    """Wait until cell `index` ran and has output, then for an idle kernel: right after `notebook:run-cell` the
    kernel may still read idle (the request not taken yet), so idle alone can read an empty output area."""
    page.wait_for_function(f"i => {{ const c = {CURRENT}.content.widgets[i];"
                           " return c.model.executionCount !== null && c.model.outputs.length > 0; }",
                           arg=index, timeout=timeout)
    kernel_idle(page, timeout)


def output_text(page: Any, index: int) -> str:
    """The text of cell `index`'s output area."""
    return str(page.locator(f"{PANEL} .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text())


def run_new_cell(page: Any, text: str) -> None:
    """Type `text` into the notebook's last cell (added if it has content) and run it with Shift+Enter."""
    page.evaluate(f"async () => {{ const nb = {CURRENT}.content;"
                  " nb.activeCellIndex = nb.widgets.length - 1;"
                  " if (nb.activeCell.model.sharedModel.getSource() !== '') {"
                  "   await window.jupyterapp.commands.execute('notebook:insert-cell-below'); } }")
    editor = page.locator(f"{PANEL} .jp-Cell.jp-mod-active .cm-content")
    editor.click()
    page.keyboard.type(text)
    page.keyboard.press("Shift+Enter")


def turn_header(page: Any, turn: int) -> str:
    """The header of the live log of `turn`, once that turn is done."""
    head = page.locator(f"{PANEL} .mx-live-head", has_text=f"turn {turn} · done")
    head.first.wait_for(timeout=TURN_TIMEOUT)
    return str(head.first.inner_text())


def save_notebook(page: Any) -> None:
    """Save the current notebook and wait until JupyterLab has written it."""
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(f"!{CURRENT}.context.model.dirty", timeout=30_000)


def close_and_shut_down(page: Any) -> None:
    """Close the current notebook tab and shut its kernel down (what a reader who comes back later sees next)."""
    session = page.evaluate(f"{CURRENT}.sessionContext.session.id")
    page.evaluate(f"() => {{ {CURRENT}.dispose(); }}")
    page.evaluate("s => { window.__down = false; window.jupyterapp.serviceManager.sessions.shutdown(s)"
                  ".then(() => { window.__down = true; }); }", session)
    page.wait_for_function("window.__down === true", timeout=30_000)


def open_untrusted_copy(page: Any, base: str, root: Path, name: str) -> None:
    """Open a copy of the saved notebook that nobody signed (as from a git clone): JupyterLab sanitizes its HTML."""
    copy = nbformat.read(root / name, as_version=4)
    copy.metadata["mx_untrusted_copy"] = True
    nbformat.write(copy, root / name.replace(".ipynb", "-copy.ipynb"))
    open_notebook(page, base, name.replace(".ipynb", "-copy.ipynb"))
    time.sleep(2.0)  # the widget manager has restored: a missing model would now say so


def switch_theme(page: Any, name: str, light: bool) -> None:
    """Switch JupyterLab to theme `name` ("JupyterLab Dark", "JupyterLab Light") and let its stylesheet apply."""
    page.evaluate("t => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})", name)
    page.wait_for_function(f"document.body.dataset.jpThemeLight === '{str(light).lower()}'", timeout=30_000)
    time.sleep(1.0)  # the theme's stylesheet applies


def themes(page: Any) -> Iterator[str]:
    """Light, then dark: switches the theme and yields its short name (for the screenshots' file names)."""
    for theme, name in (("light", "JupyterLab Light"), ("dark", "JupyterLab Dark")):
        switch_theme(page, name, light=theme == "light")
        yield theme


def theme_shots(page: Any, shots: Path, name: str, targets: Sequence[tuple[str, Any]]) -> None:
    """Light, then dark (`themes`): each `(what, locator)` of `targets` scrolled into view and screenshot on its own
    to `shots / name.format(theme=theme, what=what)`, in that order."""
    for theme in themes(page):
        for what, target in targets:
            target.scroll_into_view_if_needed()
            time.sleep(0.3)
            target.screenshot(path=str(shots / name.format(theme=theme, what=what)))


def light_then_dark(page: Any, shoot: Callable[[str], None]) -> None:
    """`shoot("light")` in the theme the page is in (a test's page opens light), then `shoot("dark")` in the dark
    theme, then back to light for what the test does next."""
    shoot("light")
    switch_theme(page, "JupyterLab Dark", light=False)
    shoot("dark")
    switch_theme(page, "JupyterLab Light", light=True)


def shot_from_top(page: Any, target: Any, path: Path, *, settle: float = 0.3, output: bool = False,
                  scope: str = PANEL) -> None:
    """Scroll `target` (a locator; with `output`, the notebook output holding it) to the top of the notebook, then
    screenshot `scope` (the notebook panel): a tall output is cut at the bottom, not scrolled."""
    scrolled = "e.closest('.jp-OutputArea-output')" if output else "e"
    target.evaluate(f"e => {scrolled}.scrollIntoView({{block: 'start'}})")
    time.sleep(settle)
    page.locator(scope).screenshot(path=str(path))
