"""Approvals in a real ipykernel (the installed 7.x): clicks arrive while the turn waits (SPEC N1, N2).

A jupyter_client frontend plays the browser: it watches IOPub for the Approve/Deny button models
the approver opens and sends the same `comm_msg` a click in JupyterLab sends. The turn runs on the
kernel's main thread the whole time, so these tests prove the kernel serves widget messages while a
cell is blocked, that a cell queued meanwhile runs afterwards (in order), that answered buttons
leave nothing behind, and that an unanswered text prompt is denied after its timeout.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_kernel import CELL_TIMEOUT, kernel_env

pytestmark = pytest.mark.timeout(120)


class Frontend:
    """A kernel and a client that records IOPub and can click widget buttons by description."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=kernel_env(tmp_path / "approve.duckdb", **env), cwd=str(tmp_path))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=CELL_TIMEOUT)
        self.buttons: dict[str, list[str]] = {}  # description -> comm ids, oldest first
        self.messages: list[dict[str, Any]] = []

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def drain(self, timeout: float = 0.2) -> None:
        """Read IOPub for `timeout` seconds, remembering button comms."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                msg = self.kc.get_iopub_msg(timeout=left)
            except Exception:  # queue.Empty
                return
            self.messages.append(msg)
            if msg["msg_type"] == "comm_open":
                state = msg["content"].get("data", {}).get("state", {})
                if state.get("_model_name") == "ButtonModel":
                    self.buttons.setdefault(state.get("description"), []).append(msg["content"]["comm_id"])

    def click(self, description: str, nth: int, timeout: float = 40) -> None:
        """Wait for the nth button called `description` and click it (what JupyterLab sends)."""
        deadline = time.monotonic() + timeout
        while len(self.buttons.get(description, [])) <= nth:
            assert time.monotonic() < deadline, f"no button {description!r} #{nth} within {timeout} s"
            self.drain()
        comm_id = self.buttons[description][nth]
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id,
                                               "data": {"method": "custom", "content": {"event": "click"}}})
        self.kc.shell_channel.send(msg)

    def reply(self, msg_id: str, timeout: float = CELL_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def texts(self, msg_id: str) -> str:
        out = []
        for m in self.messages:
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            c = m["content"]
            out.append(c.get("text") or c.get("data", {}).get("text/plain", ""))
        return "".join(out)


@pytest.fixture
def frontend(tmp_path: Path):
    fe = Frontend(tmp_path)
    try:
        yield fe
    finally:
        fe.close()


def test_n1_approve_and_deny_clicks_reach_a_running_turn(frontend: Frontend) -> None:
    """A demo turn asks twice: Approve runs the command, Deny is told to the model and the turn goes on."""
    fe = frontend
    fe.reply(fe.kc.execute("%load_ext mxclaw_nb"))
    turn = fe.kc.execute("%%agent\nfix the failing tests", allow_stdin=True)
    fe.click("Approve", 0)
    fe.click("Deny", 1)
    for n in range(2, 8):  # any later request is approved
        try:
            fe.click("Approve", n, timeout=8)
        except AssertionError:
            break
    assert fe.reply(turn)["content"]["status"] == "ok"
    fe.drain(0.5)
    check = fe.kc.execute("%agent sql SELECT json_extract_string(payload, '$.decision') AS d, "
                          "json_extract_string(payload, '$.by') AS b FROM events "
                          "WHERE type = 'approval.decided' ORDER BY seq")
    fe.reply(check)
    fe.drain(0.5)
    table, log = fe.texts(check), fe.texts(turn)
    assert "allow  user" in table and "deny  user" in table and "nobody" not in table, table
    assert "Not run because you denied it" in log and "click Approve" not in log, log[-2000:]
    # answered buttons leave nothing behind: their display ends empty
    updates = [m for m in fe.messages if m["msg_type"] == "update_display_data"
               and m["content"]["data"].get("text/plain") == ""]
    assert len(updates) >= 2


def test_n1_a_cell_queued_during_an_approval_runs_after_the_turn(frontend: Frontend) -> None:
    """Messages that are not widget clicks wait for the turn: the next cell runs after it, in order."""
    fe = frontend
    fe.reply(fe.kc.execute("%load_ext mxclaw_nb\n%agent config approval_timeout=60"))
    turn = fe.kc.execute("%%agent\nfix the failing tests", allow_stdin=True)
    fe.click("Approve", 0)
    queued = fe.kc.execute("print('queued cell ran')")
    for n in range(1, 8):
        try:
            fe.click("Approve", n, timeout=8)
        except AssertionError:
            break
    first = fe.reply(turn)
    second = fe.reply(queued)
    fe.drain(0.5)
    assert first["content"]["status"] == "ok" and second["content"]["status"] == "ok"
    assert first["content"]["execution_count"] < second["content"]["execution_count"]
    assert "queued cell ran" in fe.texts(queued)


def test_n1_an_unanswered_text_prompt_is_denied_after_its_timeout(frontend: Frontend) -> None:
    """widgets off: the stdin prompt says its timeout; without an answer the command is denied, the kernel free."""
    fe = frontend
    fe.reply(fe.kc.execute("%load_ext mxclaw_nb\n%config AgentMagics.widgets = False\n"
                           "%config AgentMagics.approval_timeout = 1.5"))
    started = time.monotonic()
    turn = fe.kc.execute("%%agent\nfix the failing tests", allow_stdin=True)
    prompts = []
    deadline = time.monotonic() + CELL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            msg = fe.kc.get_stdin_msg(timeout=0.5)
            prompts.append(msg["content"]["prompt"])
        except Exception:  # queue.Empty: keep not answering
            pass
        fe.drain(0.1)
        if any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
               and m["parent_header"].get("msg_id") == turn for m in fe.messages):
            break
    assert fe.reply(turn)["content"]["status"] == "ok"
    assert prompts and "denied after 1.5 s without an answer" in prompts[0]
    assert time.monotonic() - started < CELL_TIMEOUT
    assert "denied: no answer within 1.5 s" in fe.texts(turn)


def test_n6_unanswered_buttons_count_down_and_end_with_a_visible_line(frontend: Frontend) -> None:
    """N6: the question counts down to its deadline; unanswered, it ends with a line saying it was denied (not an
    empty output), and the live log's spinner said whom the turn waited for."""
    fe = frontend
    fe.reply(fe.kc.execute("%load_ext mxclaw_nb\n%agent config approval_timeout=2.5"))
    turn = fe.kc.execute("%%agent\nfix the failing tests", allow_stdin=True)
    assert fe.reply(turn)["content"]["status"] == "ok"
    fe.drain(0.5)
    values = [m["content"]["data"].get("state", {}).get("value", "") for m in fe.messages
              if m["msg_type"] in ("comm_msg", "comm_open")]
    countdown = [v for v in values if "mx-countdown" in v]
    assert any(">0:02<" in v for v in countdown) and any(">0:01<" in v for v in countdown), countdown[:3]
    assert all("Enter: Approve · Esc: Deny" in v for v in countdown)
    assert any("waiting for your approval of a shell command" in v for v in values)
    ends = [m["content"]["data"].get("text/plain", "") for m in fe.messages if m["msg_type"] == "update_display_data"]
    assert any(e.startswith("✗ no answer within 2.5 s: denied ") for e in ends), ends
    buttons = {d for d in fe.buttons}
    assert {"Approve", "Allow for this turn", "Deny"} <= buttons


def test_n6_allow_for_this_turn_covers_the_same_command_only_in_that_turn(tmp_path: Path) -> None:
    """N6: "Allow for this turn" runs the exact command again without asking; another command, or the same one in
    the next turn, is asked for."""
    from mxclaw_nb.demo.server import TestServer

    with TestServer() as srv:
        for command in ("echo same", "echo same", "echo other"):
            srv.enqueue_tool_calls([("bash", {"command": command})])
        srv.enqueue_text("ran them")
        srv.enqueue_tool_calls([("bash", {"command": "echo same"})])
        srv.enqueue_text("again")
        fe = Frontend(tmp_path, OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k", MXCLAW_MODEL="test-model")
        try:
            fe.reply(fe.kc.execute("%load_ext mxclaw_nb\n%agent config approval_timeout=60"))
            turn = fe.kc.execute("%%agent\nrun them", allow_stdin=True)
            fe.click("Allow for this turn", 0)
            fe.click("Deny", 1)  # the second question is about `echo other`
            assert fe.reply(turn)["content"]["status"] == "ok"
            second = fe.kc.execute("%%agent\nonce more", allow_stdin=True)
            fe.click("Approve", 2)  # a new turn asks again
            assert fe.reply(second)["content"]["status"] == "ok"
            fe.drain(0.5)
            check = fe.kc.execute("%agent sql SELECT json_extract_string(payload, '$.command') AS c, "
                                  "json_extract_string(payload, '$.decision') AS d FROM events "
                                  "WHERE type = 'approval.decided' ORDER BY seq")
            fe.reply(check)
            fe.drain(0.5)
            table = fe.texts(check)
        finally:
            fe.close()
    rows = [line.split()[-2:] for line in table.splitlines() if "echo" in line]
    assert rows == [["same", "allow"], ["same", "allow"], ["other", "deny"], ["same", "allow"]], table
    assert len(fe.buttons["Deny"]) == 3  # three questions: the repeated command was not asked again
