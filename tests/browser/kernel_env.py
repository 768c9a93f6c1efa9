"""Loaded by the browser tests' shared JupyterLab server (not by pytest): each test's kernels get that test's env.

One server serves every browser test of a run (tests/browser/conftest.py), but a kernel inherits the server's
environment, and each test wants its own store (MXCLAW_DB), provider variables and IPYTHONDIR. The harness writes the
current test's values to `env_file` before the test opens a notebook; this session manager lays them over the
server's environment for every kernel it starts (and for a renamed session's kernel, which jupyter_server updates).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_server.services.sessions.sessionmanager import SessionManager
from traitlets import Unicode

# The variables a test sets for its kernels: these come from the test, never from the server's own environment.
PER_TEST_PREFIXES = ("MXCLAW_", "OPENAI_")
PER_TEST_NAMES = ("IPYTHONDIR",)


def per_test(name: str) -> bool:
    return name.startswith(PER_TEST_PREFIXES) or name in PER_TEST_NAMES


class PerTestEnvSessionManager(SessionManager):
    """A SessionManager whose kernels get the variables of the JSON object in `env_file` (the running test's)."""

    env_file = Unicode("", help="JSON object of the running test's kernel variables").tag(config=True)

    def get_kernel_env(self, path: str | None, name: Any = None) -> dict[str, str]:
        env = super().get_kernel_env(path, name)
        if self.env_file and Path(self.env_file).is_file():
            env = {k: v for k, v in env.items() if not per_test(k)}
            env.update(json.loads(Path(self.env_file).read_text(encoding="utf-8")))
        return env
