"""SPEC N1: the binder/ folder builds a JupyterLab image that installs this package and opens the quickstart.

`jupyter-repo2docker --no-build --debug .` prints the Dockerfile it would build, without Docker.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_repo2docker_dockerfile_installs_the_package_and_opens_the_quickstart():
    exe = Path(sys.executable).parent / "jupyter-repo2docker"
    if not exe.exists():
        exe = Path(shutil.which("jupyter-repo2docker") or "")
    if not exe.is_file():
        pytest.fail("jupyter-repo2docker is not installed (it is in the test extra)")
    out = subprocess.run([str(exe), "--no-build", "--debug", "."], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-2000:]
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in text
    assert "RUN ./binder/postBuild" in text
    assert "python=3.11" in text or "python3.11" in text or "3.11" in text
    assert (REPO / "binder" / "requirements.txt").read_text().split() == ["-e", "."]
    post_build = (REPO / "binder" / "postBuild").read_text()
    assert "01-quickstart.ipynb" in post_build
    assert "python -m mxclaw_nb.kernel install --sys-prefix" in post_build  # the agent kernel (SPEC N4)
    assert (REPO / "notebooks" / "01-quickstart.ipynb").is_file()
