"""A model's answer never reaches a terminal with raw escape sequences (SPEC L6 hardening, as approval prompts).

An answer (or a tool output, or a server's error text) holding OSC 52 (`ESC ] 52 ; c ; <base64> BEL`: write the
clipboard), a CSI that clears the screen, a carriage return or a C1 CSI byte is shown escaped wherever mxclaw_nb
prints to a terminal: `python -m mxclaw_nb demo`, the live log's terminal (print) mode and its text/plain form,
and the magic's printed answer and failure paragraph. Real parts: the real `openai` client against the shipped
test server, a real DuckDB file, a real IPython shell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
HOSTILE = f"Done.{OSC52}\x1b[2J\rall good\x9b31m 完成"
RAW = ("\x1b", "\x07", "\r", "\x9b")


def _clean(text: str) -> None:
    for ch in RAW:
        assert ch not in text, f"{ch!r} reached the terminal"


def test_cli_demo_prints_the_answer_escaped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    import mxclaw_nb.__main__ as cli
    import mxclaw_nb.connect as client

    with TestServer() as srv:
        srv.enqueue_text(HOSTILE)
        monkeypatch.setattr(client, "demo_provider", lambda **kw: OpenAIProvider(
            base_url=srv.base_url, api_key="k", model="test-model", label="hostile"))
        assert cli.main(["demo", "--turns", "1", "--db", str(tmp_path / "d.duckdb")]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "Done.\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\rall good\\x9b31m 完成" in out


def test_live_log_terminal_mode_and_text_form_escape(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from mxclaw_nb import Agent
    from mxclaw_nb.notebook.livelog import LiveLog

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text(f"file text {OSC52}\n")
    with TestServer() as srv:
        srv.enqueue_tool_calls([("read_file", {"path": "notes.txt"})])
        srv.enqueue_text(HOSTILE)
        agent = Agent(workspace=ws, db=str(tmp_path / "l.duckdb"), home=tmp_path / "home",
                      provider=OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model"))
        log = LiveLog(agent.label, agent.session_id, mode="print")
        agent.subscribe(log.handle)
        assert agent.run("go").text == HOSTILE  # stored as the model sent it; only its display is escaped
    out = capsys.readouterr().out
    _clean(out)
    assert "\\x1b]52;c;" in out and "完成" in out
    _clean(log.to_text())


def test_magic_prints_answer_and_failure_escaped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    with TestServer() as srv:
        for name, value in (("OPENAI_BASE_URL", srv.base_url), ("OPENAI_API_KEY", "k"), ("MXCLAW_MODEL", "test-model"),
                            ("MXCLAW_DB", str(tmp_path / "m.duckdb"))):
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(tmp_path)
        shell: Any = InteractiveShell.instance()
        shell.config.pop("AgentMagics", None)
        shell.run_line_magic("load_ext", "mxclaw_nb")
        try:
            shell.run_line_magic("config", "AgentMagics.live = False")
            srv.enqueue_text(HOSTILE)
            srv.enqueue_error(400, f"bad request {OSC52}")
            with capture_output() as cap:
                shell.run_line_magic("agent", "go")
                shell.run_line_magic("agent", "again")
            _clean(cap.stdout)
            _clean(cap.stderr)
            assert "\\x1b]52" in cap.stdout and "\\x1b]52" in cap.stderr
        finally:
            shell.run_line_magic("unload_ext", "mxclaw_nb")
            shell.config.pop("AgentMagics", None)
