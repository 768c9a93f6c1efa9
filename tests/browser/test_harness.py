"""The browser tests' shared JupyterLab (harness.py) is each test's own: a test's kernels get that test's environment,
and what a test leaves on the server (kernels, files, a dark theme, settings) is gone before the next one starts."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from .harness import (
    RENDER_EVERY_CELL,
    LabFactory,
    LabServer,
    chromium_page,
    open_notebook,
    output_text,
    run_cell,
    switch_theme,
    wait_cell_output,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

SHOW_ENV = "import os\nprint(*(os.environ.get(k) for k in ('MXCLAW_DB', 'OPENAI_BASE_URL', 'IPYTHONDIR')))"


def _kernel_env(base: str, root: Path, name: str, dark: bool = False) -> tuple[list[str], bool]:
    """Run SHOW_ENV in a new notebook `name`: (its printed words, whether the page opened in the light theme);
    with `dark`, switch to the dark theme before leaving."""
    write_notebook(root / name, [SHOW_ENV])
    with chromium_page({"width": 1200, "height": 800}) as page:
        open_notebook(page, base, name)
        light = page.evaluate("document.body.dataset.jpThemeLight") == "true"
        run_cell(page, 0)
        wait_cell_output(page, 0)
        words = output_text(page, 0).split()
        if dark:
            switch_theme(page, "JupyterLab Dark", light=False)
    return words, light


def _kernels(base: str) -> list[dict]:
    with urllib.request.urlopen(f"{base}/api/kernels", timeout=30) as resp:
        return list(json.load(resp))


def test_one_server_each_tests_kernel_environment_and_nothing_left_after_reset(
        lab_server: LabServer, lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "first.duckdb"))
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    base, root = lab(settings=RENDER_EVERY_CELL)
    words, light = _kernel_env(base, root, "first.ipynb", dark=True)
    assert light and words == [str(tmp_path / "first.duckdb"), "http://127.0.0.1:9/v1", str(tmp_path / "ipythondir")]
    settings = lab_server.settings / "@jupyterlab"
    assert (settings / "apputils-extension" / "themes.jupyterlab-settings").is_file()  # the dark theme, saved
    assert _kernels(base) and (settings / "notebook-extension" / "tracker.jupyterlab-settings").is_file()

    lab_server.reset()  # what the `lab` fixture does after each test
    assert _kernels(base) == [] and list(root.iterdir()) == []
    assert sorted(p.name for p in lab_server.settings.rglob("*.jupyterlab-settings")) == [
        "notification.jupyterlab-settings"]  # the dark theme and the test's settings are gone

    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "second.duckdb"))  # the next test's environment
    monkeypatch.delenv("OPENAI_BASE_URL")
    again, root_again = lab()
    assert (again, root_again) == (base, root)  # the same server
    words, light = _kernel_env(again, root_again, "second.ipynb")
    assert light and words == [str(tmp_path / "second.duckdb"), "None", str(tmp_path / "ipythondir")]
