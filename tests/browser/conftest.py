"""The browser tests' fixtures: one JupyterLab server for the package, made each test's own (see harness.py).

`jupyterlab` gives a test the server as it was started: (base URL, root folder). A test that needs more asks the
`lab` factory: lab settings, a kernel config in its kernels' IPYTHONDIR, the agent kernelspec. Either way, the
kernels get the test's environment as it is when the fixture runs (so a fixture may first monkeypatch MXCLAW_DB),
and everything the test left on the server goes once it is done.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import ALLOW, RENDER_EVERY_CELL, SAVE_UNTITLED_AS_IT_IS, LabFactory, LabServer, require_chromium


@pytest.fixture(scope="package")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """The JupyterLab of the browser tests, started once and stopped after the last of them."""
    require_chromium()
    server = LabServer(tmp_path_factory.mktemp("jupyterlab"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def lab(lab_server: LabServer, tmp_path: Path) -> Iterator[LabFactory]:
    """`lab(settings=..., ipython_kernel_config=..., agent_kernel=...)` -> (base URL, root folder) for this test."""
    try:
        yield lambda **kw: lab_server.use(tmp_path, **kw)
    finally:
        lab_server.reset()


@pytest.fixture
def jupyterlab(lab: LabFactory) -> tuple[str, Path]:
    """The JupyterLab server with its defaults; (base_url, root_dir)."""
    return lab()


@pytest.fixture
def agent_views_lab(lab: LabFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """JupyterLab whose kernels use a temporary store and the offline demo model (no provider variables: the
    autouse `_isolated_env` removed them); Untitled notebooks are saved as they are, and every cell is rendered (no
    content-visibility skipping off-screen outputs)."""
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "agent.duckdb"))
    return lab(settings={**SAVE_UNTITLED_AS_IT_IS, **RENDER_EVERY_CELL})


@pytest.fixture
def agent_lab(lab: LabFactory) -> tuple[str, Path]:
    """JupyterLab with the agent kernelspec (SPEC N4), approval 'allow' in its kernels' config (their IPYTHONDIR's
    ipython_kernel_config.py), and Untitled.ipynb saved as it is (no "rename before saving" dialog)."""
    return lab(agent_kernel=True, ipython_kernel_config=ALLOW, settings=SAVE_UNTITLED_AS_IT_IS)


@pytest.fixture
def rename_lab(lab: LabFactory) -> tuple[str, Path]:
    """As `agent_lab`, with JupyterLab's default settings: it asks to rename Untitled at the first save."""
    return lab(agent_kernel=True, ipython_kernel_config=ALLOW)
