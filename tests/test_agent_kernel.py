"""SPEC N4: the "mx-claw agent" kernel, as Jupyter runs it: a real kernel process through jupyter_client.

The kernelspec is installed into a temporary prefix (never the environment's share folder) and the
kernels are started from it, with PYTHONPATH pointing at this checkout and MXCLAW_DB at a temporary
database. `JPY_SESSION_NAME` is what Jupyter Server sets for the kernels of a notebook; the tests set it
themselves to play "the same notebook reopened" and "another notebook". The pure cell rules
(`mxclaw_nb.kernel.cells`) are tested without a kernel at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.kernel import DISPLAY_NAME, KERNEL_NAME
from mxclaw_nb.kernel.binding import notebook_name
from mxclaw_nb.kernel.cells import agent_completions, classify, touches_agent
from mxclaw_nb.store.writer import Store

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60
SESSION_ID = "get_ipython().magics_manager.registry['AgentMagics'].get_agent().session_id"


def base_env(db: Path, **extra: str) -> dict[str, str]:
    """The parent environment without provider/store/notebook settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "MXCLAW_", "JPY_SESSION_NAME", "JUPYTER_PATH"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env["MXCLAW_DB"] = str(db)
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary prefix with the kernelspec installed by the command users run."""
    where = tmp_path_factory.mktemp("prefix")
    out = subprocess.run([sys.executable, "-m", "mxclaw_nb.kernel", "install", "--prefix", str(where)],
                         capture_output=True, text=True, timeout=TIMEOUT, env=base_env(where / "unused.duckdb"))
    assert out.returncode == 0, out.stderr
    assert "Installed kernelspec mx-claw-agent" in out.stdout
    return where


class Kernel:
    """A running agent kernel and its client; `run` executes one cell and returns (reply, text shown)."""

    def __init__(self, prefix: Path, env: dict[str, str], cwd: Path) -> None:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager

        ksm = KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])
        self.km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
        self.km.start_kernel(env=env, cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=TIMEOUT)

    def run(self, code: str) -> tuple[dict[str, Any], str]:
        shown: list[str] = []
        reply = self.kc.execute_interactive(code, output_hook=lambda m: shown.append(_text(m)), allow_stdin=False,
                                            timeout=TIMEOUT)
        return reply, "".join(shown)

    def value(self, expr: str) -> str:
        reply, text = self.run(f"%%python\nprint({expr})")
        assert reply["content"]["status"] == "ok", text
        return text.strip()

    def restart(self) -> None:
        self.km.restart_kernel(now=True)
        self.kc.wait_for_ready(timeout=TIMEOUT)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _text(msg: dict[str, Any]) -> str:
    content = msg["content"]
    if msg["msg_type"] == "stream":
        return str(content["text"])
    if msg["msg_type"] in ("display_data", "update_display_data", "execute_result"):
        return str(content.get("data", {}).get("text/plain", "")) + "\n"
    if msg["msg_type"] == "error":
        return f"{content['ename']}: {content['evalue']}\n"
    return ""


@pytest.fixture
def kernels(prefix: Path, tmp_path: Path) -> Iterator[Any]:
    """Start kernels with `start(notebook_name, **env)`; all are shut down at the end."""
    started: list[Kernel] = []

    def start(notebook: str | None = None, **extra: str) -> Kernel:
        if notebook is not None:
            extra["JPY_SESSION_NAME"] = notebook
        kernel = Kernel(prefix, base_env(tmp_path / "agent.duckdb", **extra), tmp_path)
        started.append(kernel)
        return kernel

    yield start
    for kernel in started:
        kernel.close()


def test_n4_install_into_a_prefix_is_listed_with_logos_and_uninstalls(prefix: Path, tmp_path: Path) -> None:
    """`python -m mxclaw_nb.kernel install --prefix P`: `jupyter kernelspec list` shows it; uninstall removes it."""
    env = base_env(tmp_path / "x.duckdb", JUPYTER_PATH=str(prefix / "share" / "jupyter"))
    jupyter = [sys.executable, "-m", "jupyter", "kernelspec", "list"]
    listed = subprocess.run([*jupyter, "--json"], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    specs = json.loads(listed.stdout)["kernelspecs"]
    assert KERNEL_NAME in specs, listed.stdout
    spec = specs[KERNEL_NAME]
    assert spec["spec"]["display_name"] == DISPLAY_NAME == "mx-claw agent"
    assert spec["spec"]["argv"][1:] == ["-m", "mxclaw_nb.kernel", "-f", "{connection_file}"]
    assert spec["spec"]["interrupt_mode"] == "signal"
    folder = Path(spec["resource_dir"])
    for size in (32, 64):
        png = (folder / f"logo-{size}x{size}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(png[16:20], "big") == int.from_bytes(png[20:24], "big") == size
    plain = subprocess.run(jupyter, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert KERNEL_NAME in plain.stdout

    other = tmp_path / "other"
    cmd = [sys.executable, "-m", "mxclaw_nb.kernel"]
    assert subprocess.run([*cmd, "install", "--prefix", str(other)], capture_output=True, timeout=TIMEOUT,
                          env=env).returncode == 0
    assert (other / "share" / "jupyter" / "kernels" / KERNEL_NAME / "kernel.json").is_file()
    gone = subprocess.run([*cmd, "uninstall", "--prefix", str(other)], capture_output=True, text=True,
                          timeout=TIMEOUT, env=env)
    assert gone.returncode == 0 and "Removed kernelspec mx-claw-agent" in gone.stdout
    assert not (other / "share" / "jupyter" / "kernels" / KERNEL_NAME).exists()
    again = subprocess.run([*cmd, "uninstall", "--prefix", str(other)], capture_output=True, text=True,
                           timeout=TIMEOUT, env=env)
    assert again.returncode == 1 and "no kernelspec" in again.stderr


def test_n4_plain_cell_is_a_turn_magics_and_python_cells_work(kernels: Any, tmp_path: Path) -> None:
    """A plain cell runs a demo turn (stored); `%agent` commands, `%%python` and `?` behave as in the spec."""
    k = kernels("notebooks/agent.ipynb")
    info = k.kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]
    assert info["implementation"] == "mxclaw_nb" and "plain cell is one agent turn" in info["banner"]

    reply, turn = k.run("fix the failing tests")
    assert reply["content"]["status"] == "ok", turn
    assert "demo model (offline) · session " in turn and "turn 1 · done" in turn and "[demo model]" in turn

    reply, sessions = k.run("%agent sessions")
    assert reply["content"]["status"] == "ok" and "demo" in sessions, sessions
    _, view = k.run("%agent view --after")
    assert "what the model saw" in view and "fix the failing tests" in view

    reply, python = k.run("%%python\nimport math\nanswer = math.prod([6, 7])\nprint('python says', answer)")
    assert reply["content"]["status"] == "ok" and "python says 42" in python
    assert k.value("answer + 1") == "43"  # the kernel namespace persists across Python cells

    reply, question = k.run("What did you change?")  # a `?` in a prompt is text, not help
    assert reply["content"]["status"] == "ok" and "turn 2 · done" in question

    reply, _ = k.run("%agent?")  # `?` after a word in a magic line is IPython's help (a pager payload)
    pages = [p for p in reply["content"]["payload"] if p.get("source") == "page"]
    assert pages and "mxclaw_nb: a coding agent in the notebook" in pages[0]["data"]["text/plain"]

    reply, error = k.run("%%python\n1/0")
    assert reply["content"]["status"] == "error" and "ZeroDivisionError" in error
    sid = k.value(SESSION_ID)
    k.close()

    with Store(tmp_path / "agent.duckdb") as store:
        users = store.sql("SELECT content FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq", [sid])
        bound = store.sql("SELECT session_id, json_extract_string(payload, '$.notebook') AS nb FROM events "
                          "WHERE type = 'notebook.bound'")
        assert len(store.sessions()) == 1
    assert list(users["content"]) == ["fix the failing tests", "What did you change?"]
    assert bound.values.tolist() == [[sid, "notebooks/agent.ipynb"]]


def test_n4_one_session_per_notebook_resumed_on_reopen_and_restart(kernels: Any) -> None:
    """Same notebook name (reopen, restart): same session; another name: a new one; `%agent new` rebinds."""
    a = kernels("work/a.ipynb")
    assert a.run("fix the failing tests")[0]["content"]["status"] == "ok"
    first = a.value(SESSION_ID)
    a.restart()  # "Restart kernel": a new process with the same environment
    reply, turn = a.run("run the tests again")
    assert reply["content"]["status"] == "ok" and "turn 2 · done" in turn and f"session {first[:8]}" in turn
    assert "Continuing this notebook's session" in turn  # said once per kernel, where it resumes
    assert a.value(SESSION_ID) == first
    a.close()

    reopened = kernels("work/a.ipynb")  # the notebook closed and opened again: a new kernel
    _, turn = reopened.run("and now?")
    assert f"session {first[:8]}" in turn and "turn 3 · done" in turn
    assert turn.startswith(f"Continuing this notebook's session {first[:8]} (2 turns so far); %agent new starts")
    reopened.run("%agent new")
    _, turn = reopened.run("start over")
    fresh = reopened.value(SESSION_ID)
    assert fresh != first and "turn 1 · done" in turn
    reopened.close()

    other = kernels("work/b.ipynb")  # a new notebook
    _, turn = other.run("fix the failing tests")
    assert "turn 1 · done" in turn and other.value(SESSION_ID) not in (first, fresh)
    other.close()

    last = kernels("work/a.ipynb")  # after `%agent new`, the notebook continues the session it used last
    _, turn = last.run("continue")
    assert f"session {fresh[:8]}" in turn and "turn 2 · done" in turn

    nameless = kernels(None)  # a console or papermill: nothing names the notebook, so a new session
    _, turn = nameless.run("fix the failing tests")
    assert "turn 1 · done" in turn and nameless.value(SESSION_ID) not in (first, fresh)


def test_n4_interrupt_during_a_turn_ends_it_and_the_kernel_stays_usable(kernels: Any, tmp_path: Path) -> None:
    """L4: the stop button during a slow model call ends the turn (user message stored); the next cells run."""
    with TestServer() as srv:
        srv.enqueue_delay(20)
        srv.enqueue_text("too late")
        srv.enqueue_text("after the interrupt")
        k = kernels("slow.ipynb", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-any", MXCLAW_MODEL="test-model")
        k.run("%config AgentMagics.widgets = False")
        msg_id = k.kc.execute("a slow question")
        deadline = time.monotonic() + 20
        while not srv.requests and time.monotonic() < deadline:  # the model call is in flight
            time.sleep(0.05)
        assert srv.requests, "the turn never called the model"
        started = time.monotonic()
        k.km.interrupt_kernel()
        shown: list[str] = []
        while True:
            msg = k.kc.get_iopub_msg(timeout=TIMEOUT)
            shown.append(_text(msg))
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle" \
                    and msg["parent_header"].get("msg_id") == msg_id:
                break
        stopped_after = time.monotonic() - started
        reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        interrupted = "".join(shown)
        assert reply["content"]["status"] == "ok" and stopped_after < 10
        assert "Interrupted. Everything done so far is stored (session " in interrupted
        assert "Traceback" not in interrupted
        assert k.value("6 * 7") == "42"
        _, after = k.run("go on")
        assert "after the interrupt" in after and "· turn 2" in after and "(done" in after
        _, stored = k.run("%agent sql SELECT content FROM messages WHERE role = 'user' ORDER BY seq")
    assert "a slow question" in stored and "go on" in stored


def test_n4_tab_completion_offers_agent_commands_and_settings(kernels: Any) -> None:
    """Tab on `%agent` lines: commands, `key=` settings, enum values; nothing in a prompt; Python in %%python."""
    k = kernels("complete.ipynb")

    def complete(code: str, cursor: int | None = None) -> dict[str, Any]:
        return k.kc.complete(code, len(code) if cursor is None else cursor, reply=True, timeout=TIMEOUT)["content"]

    got = complete("%agent ti")
    assert got["matches"] == ["timeline"] and got["cursor_start"] == len("%agent ")
    assert {"view", "sessions", "new", "resume", "config"} <= set(complete("%agent ")["matches"])
    got = complete("%agent config appr")
    assert "approval=" in got["matches"] and "approval_timeout=" in got["matches"]
    assert complete("%agent config approval=")["matches"] == ["approval=ask", "approval=allow", "approval=deny"]
    assert complete("%%agent --n")["matches"] == ["--new"]
    assert complete("fix the fail")["matches"] == []
    code = "%%python\nimport itertools\niterto"
    got = complete(code)
    assert "itertools" in got["matches"] and got["cursor_start"] == len(code) - len("iterto")
    assert "AgentMagics.model" in " ".join(complete("%config AgentMagics.mo")["matches"])


# -- the pure rules, without a kernel --------------------------------------------------------------------

def test_n4_cell_rules() -> None:
    assert classify("fix it?").code == "%%agent\nfix it?" and classify("fix it?").kind == "prompt"
    assert classify("\n  %agent view").kind == "magic" and classify("%agent view").code == "%agent view"
    python = classify("%%python\nx = 1\nx?")
    assert python.kind == "python" and python.code == "x = 1\nx?" and python.offset == len("%%python\n")
    assert classify("  \n").kind == "blank"
    assert classify("# a heading, then a prompt").kind == "prompt"
    assert touches_agent("fix it") and touches_agent("%agent view") and touches_agent("%%agent --new\nx")
    assert not touches_agent("%agent config db=x.duckdb") and not touches_agent("%agent help")
    assert not touches_agent("%config AgentMagics.model = 'x'") and not touches_agent("%%python\n1")


def test_n4_notebook_name_sources() -> None:
    """MXCLAW_NOTEBOOK overrides Jupyter's JPY_SESSION_NAME; VS Code's variable is the fallback; else None."""
    assert notebook_name({"JPY_SESSION_NAME": "/r/a.ipynb"}) == "/r/a.ipynb"
    assert notebook_name({"JPY_SESSION_NAME": "/r/a.ipynb", "MXCLAW_NOTEBOOK": "batch"}) == "batch"
    assert notebook_name({"JPY_SESSION_NAME": " "}, {"__vsc_ipynb_file__": "/v/b.ipynb"}) == "/v/b.ipynb"
    assert notebook_name({}, {}) is None


def test_n4_completion_rules() -> None:
    cmds, settings = ["help", "view", "config"], {"approval": ["ask", "allow"], "model": []}
    assert agent_completions("%agent v", cmds, settings) == (["view"], 1)
    assert agent_completions("%agent", cmds, settings) is None  # still typing the magic's name
    assert agent_completions("%agent help c", cmds, settings) == (["config"], 1)
    assert agent_completions("%agent config model=x a", cmds, settings) == (["approval="], 1)
    assert agent_completions("%agent config approval=a", cmds, settings) == (["approval=ask", "approval=allow"], 10)
    assert agent_completions("%agent view --b", cmds, settings) is None
    assert agent_completions("x = 1", cmds, settings) is None


def test_n4_console_is_complete(kernels: Any) -> None:
    """jupyter console: Enter sends a prompt at once; a `%%python` cell, like any cell magic, waits for more."""
    k = kernels(None)

    def status(code: str) -> str:
        msg_id = k.kc.is_complete(code)
        reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        return str(reply["content"]["status"])

    assert status("fix the failing tests") == "complete"
    assert status("%%python\nfor i in range(3):") == "incomplete"
    assert status("%agent view") == "complete"


def _save_as_jupyterlab(path: Path, info: dict[str, Any]) -> None:
    """Write a notebook file with the kernel's `language_info` in its metadata, as JupyterLab saves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "cells": [],
                                "metadata": {"language_info": info["language_info"]}}))


def test_n4_session_id_in_notebook_metadata_survives_rename_copy_asks_gone_says(kernels: Any, tmp_path: Path
                                                                                  ) -> None:
    """The kernel_info reply puts the session id in `language_info.mxclaw` (JupyterLab saves it in the
    notebook's metadata): a renamed notebook continues its session, a copy starts its own and says how to
    continue the original, a notebook whose session the store lacks says which one it used and how to resume."""
    untitled = tmp_path / "nb" / "Untitled.ipynb"
    _save_as_jupyterlab(untitled, {"language_info": {"name": "markdown"}})  # a new notebook, nothing bound
    k = kernels(str(untitled))
    info = k.kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]
    planned = info["language_info"]["mxclaw"]["session_id"]
    reply, turn = k.run("fix the failing tests")
    assert reply["content"]["status"] == "ok" and f"session {planned[:8]}" in turn
    sid = k.value(SESSION_ID)
    assert sid == planned
    _save_as_jupyterlab(untitled, info)
    k.close()

    renamed = untitled.with_name("inventory-fix.ipynb")  # JupyterLab's rename at first save
    untitled.rename(renamed)
    k = kernels(str(renamed))
    info2 = k.kc.kernel_info(reply=True, timeout=TIMEOUT)["content"]
    assert info2["language_info"]["mxclaw"]["session_id"] == sid
    reply, turn = k.run("run the tests again")
    assert reply["content"]["status"] == "ok" and "turn 2 · done" in turn and f"session {sid[:8]}" in turn
    assert "Continuing this notebook's session" in turn and "Untitled.ipynb" in turn
    _, new = k.run("%agent new")  # a switch later in the kernel's life: the store leads the metadata id to it
    reply, turn = k.run("look at the build log")
    assert reply["content"]["status"] == "ok" and "turn 1 · done" in turn
    second = k.value(SESSION_ID)
    assert second != sid
    k.close()
    renamed.rename(renamed.with_name("moved.ipynb"))  # renamed again, metadata still naming the first session
    moved = renamed.with_name("moved.ipynb")
    k = kernels(str(moved))
    reply, turn = k.run("what did you find?")
    assert f"session {second[:8]}" in turn and "turn 2 · done" in turn, turn
    k.close()

    copy = tmp_path / "nb" / "moved-Copy1.ipynb"
    copy.write_text(moved.read_text())  # JupyterLab's "Duplicate": the same metadata, another path
    k = kernels(str(copy))
    reply, turn = k.run("fix the failing tests")
    assert reply["content"]["status"] == "ok"
    assert f"copy of {moved}" in turn and f"%agent resume {second}" in turn, turn
    forked = k.value(SESSION_ID)
    assert forked not in (sid, second) and "turn 1 · done" in turn
    k.close()

    gone = tmp_path / "elsewhere" / "old.ipynb"  # saved with a session of another database
    other = "0123456789abcdef0123456789abcdef"
    _save_as_jupyterlab(gone, {"language_info": {"name": "markdown", "mxclaw": {"session_id": other}}})
    data = json.loads(gone.read_text())
    data["cells"] = [{"cell_type": "code", "id": "a", "metadata": {}, "source": "fix it", "execution_count": 1,
                      "outputs": [{"output_type": "display_data", "metadata": {},
                                   "data": {"text/plain": f"demo model (offline) · session {other[:8]} · turn 1"}}]}]
    gone.write_text(json.dumps(data))
    k = kernels(str(gone))
    reply, turn = k.run("fix the failing tests")
    assert f"used to continue session {other[:8]}" in turn and f"%agent resume {other}" in turn, turn
    assert k.value(SESSION_ID) != other
