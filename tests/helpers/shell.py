"""A real IPython shell with the extension loaded, on a fresh store, for tests of the %agent magics."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

ENV_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_DB", "MXCLAW_CONTEXT_WINDOW")


@contextmanager
def agent_shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                forget: Iterable[str] = ()) -> Iterator[InteractiveShell]:
    """The shell with `%load_ext mxclaw_nb` on `tmp_path/store.duckdb` (the demo model: no provider settings);
    `forget`: user variables an earlier test may have left in the shared shell."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "store.duckdb"))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.config.pop("AgentMagics", None)
    for name in forget:
        shell.user_ns.pop(name, None)
    shell.run_line_magic("load_ext", "mxclaw_nb")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "mxclaw_nb")
        shell.config.pop("AgentMagics", None)
