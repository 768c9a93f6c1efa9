"""Who approves a shell command when the policy is "ask": buttons, a text prompt, or nobody.

Why: the bash tool asks its approver and runs the command only on an explicit yes (a `None` answer
means nobody could answer and the command is denied; the tools layer stores every decision as an
`approval.decided` event, which the live log shows next to the tool line). In a notebook the cell
is still running while the agent waits, so the kernel does not process button clicks on its own.

- ipykernel 6 has `do_one_iteration`; `jupyter_ui_poll.ui_events` pumps widget events with it.
- ipykernel 7 has none: the shell channel thread forwards every shell message to the main thread
  over an inproc socket that the (now blocked) main event loop reads. `ShellPump` reads that socket
  itself while the approver waits: comm messages (the click) are dispatched at once, exactly as
  ipykernel 7 dispatches comms concurrently with a running async cell; every other message (the
  next cell's execute_request, completion requests...) is held and handed back to the kernel, in
  order, when the wait ends. It touches ipykernel internals (`shell_channel_thread.manager`,
  `dispatch_shell`), so `ShellPump.attach` returns None when they are not there, and the approver
  falls back to the text prompt.
- Otherwise (no widgets, terminal IPython) the approver asks through stdin. In a kernel the prompt
  has the same timeout as the buttons: an unanswered prompt is denied instead of keeping the kernel
  busy forever. A kernel driven headlessly (nbclient, papermill, nbconvert) sends
  `allow_stdin=False` and has no one to answer, so it is denied at once rather than hanging.

The buttons disappear once answered (no pile of answered prompts); the decision is in the live log.
"""

from __future__ import annotations

import contextlib
import html
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from mxclaw_nb.tools.policy import shown_command

Approver = Callable[[str], "bool | None"]
COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})


def has_frontend(shell: Any) -> bool:
    """True when a person can answer: a kernel whose current request allows input, or a terminal."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    return bool(sys.stdin and sys.stdin.isatty())


def ui_poll_works(shell: Any) -> bool:
    """True when jupyter_ui_poll can pump widget events in this kernel (it needs `do_one_iteration`)."""
    return callable(getattr(getattr(shell, "kernel", None), "do_one_iteration", None))


class ShellPump:
    """Serves widget comm messages while the main thread blocks inside a cell (ipykernel 7).

    `pump()` reads what the shell channel forwarded to the main thread: comm messages are dispatched
    now, anything else is held. `close()` hands the held messages back to the kernel's event loop in
    arrival order, so a cell queued meanwhile runs after this one, as it would have.
    """

    def __init__(self, kernel: Any, socket: Any, stream: Any) -> None:
        self.kernel, self.socket, self.stream = kernel, socket, stream
        self.held: list[Any] = []
        self.dispatched = 0

    @classmethod
    def attach(cls, shell: Any) -> ShellPump | None:
        """A pump for this shell's kernel, or None when the kernel is not an ipykernel 7 we know."""
        kernel = getattr(shell, "kernel", None)
        if kernel is None or not callable(getattr(kernel, "dispatch_shell", None)):
            return None
        thread = getattr(kernel, "shell_channel_thread", None)
        try:
            if thread is not None:
                pair = thread.manager._shell_channel_to_main
                socket, stream = pair.to_socket, pair.to_stream
            else:
                stream = kernel.shell_stream
                socket = stream.socket
        except AttributeError:
            return None
        if socket is None or stream is None or not callable(getattr(kernel, "shell_main", None)):
            return None
        return cls(kernel, socket, stream)

    def _msg_type(self, frames: list[Any]) -> str | None:
        session = self.kernel.session
        try:
            _idents, rest = session.feed_identities(frames, copy=False)
            return str(session.deserialize(rest, content=False, copy=False)["header"]["msg_type"])
        except Exception:  # not a message we understand: hand it back to the kernel untouched
            return None

    def pump(self, limit: int = 50) -> int:
        """Dispatch up to `limit` waiting comm messages; hold the rest. Returns how many were dispatched."""
        import zmq

        done = 0
        while done < limit and self.socket.poll(0, zmq.POLLIN):
            frames = self.socket.recv_multipart(copy=False)
            if self._msg_type(frames) in COMM_MESSAGES:  # a click does not wait behind a queued cell
                self._dispatch(frames)
                done += 1
            else:
                self.held.append(frames)
        self.dispatched += done
        return done

    def _dispatch(self, frames: list[Any]) -> None:
        kernel = self.kernel
        parent = kernel.get_parent("shell")
        getter = getattr(kernel, "_get_shell_context_var", None)
        ident = getter(kernel._shell_parent_ident) if getter and hasattr(kernel, "_shell_parent_ident") else None
        coro = kernel.dispatch_shell(frames, subshell_id=None, concurrent=True)
        try:
            while True:  # comm handlers are synchronous: the coroutine finishes without suspending
                coro.send(None)
        except StopIteration:
            pass
        except Exception:  # a failing widget callback must not break the approval
            kernel.log.error("mxclaw_nb: comm message failed", exc_info=True)
        finally:
            coro.close()
            kernel.set_parent(ident, parent, channel="shell")  # outputs go to the running cell again

    def close(self) -> None:
        """Give held messages back to the kernel, in order, and let the stream read what is left."""
        held, self.held = self.held, []
        loop = self.kernel.io_loop
        for frames in held:
            loop.add_callback(self.kernel.shell_main, None, frames)
        handle = getattr(self.stream, "_handle_events", None)
        if callable(handle):  # we read its socket behind its back: make it look again
            loop.add_callback(handle, self.socket, 0)


def text_approver(command: str) -> bool | None:
    """Ask with input(); None when no input can be read."""
    try:
        answer = input(f"mxclaw_nb wants to run: {shown_command(command)}\nAllow? [y/N] ")
    except (EOFError, OSError, RuntimeError):  # StdinNotImplementedError is a RuntimeError subclass
        return None
    return answer.strip().lower() in ("y", "yes")


def kernel_text_approver(shell: Any, command: str, timeout: float, poll: float = 0.05) -> bool | None:
    """The text prompt through the kernel's stdin channel, denied (None) after `timeout` seconds."""
    kernel = shell.kernel
    session, socket = getattr(kernel, "session", None), getattr(kernel, "stdin_socket", None)
    if session is None or socket is None or not callable(getattr(kernel, "_get_shell_context_var", None)):
        return text_approver(command)
    import zmq

    parent = kernel.get_parent("shell")
    ident = kernel._get_shell_context_var(kernel._shell_parent_ident)
    while socket.poll(0, zmq.POLLIN):  # an old, late answer must not count for this prompt
        socket.recv_multipart()
    prompt = (f"mxclaw_nb wants to run: {shown_command(command)}\nAllow? [y/N] "
              f"(denied after {timeout:g} s without an answer) ")
    sys.stdout.flush()
    sys.stderr.flush()
    session.send(socket, "input_request", {"prompt": prompt, "password": False}, parent, ident=ident)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if socket.poll(int(poll * 1000), zmq.POLLIN):
            _idents, reply = session.recv(socket)
            if reply is None:
                continue
            return str(reply["content"].get("value", "")).strip().lower() in ("y", "yes")
    print(f"denied: no answer within {timeout:g} s: {shown_command(command)}", file=sys.stderr)
    return None


def _waiter(shell: Any) -> tuple[Callable[[], None], Callable[[], None]] | None:
    """(pump one round, stop) to serve widget messages while waiting, or None when clicks cannot arrive."""
    pump = ShellPump.attach(shell)
    if pump is not None:
        return (lambda: pump.pump(), pump.close)
    if ui_poll_works(shell):
        from jupyter_ui_poll import ui_events

        ctx = ui_events()
        poll = ctx.__enter__()
        return (lambda: poll(20), lambda: ctx.__exit__(None, None, None))
    return None


# N6: nothing waits unseen. The frontend part of a pending approval: bring it into view, take Enter (Approve)
# and Esc (Deny), raise a JupyterLab notification when the app is reachable (window.jupyterapp: JupyterLab with
# expose_app_in_browser, Notebook 7), and mark the browser tab's title while it waits. Plain DOM, no extension.
_ATTENTION_JS = """
(function () {
  const id = %(id)s, message = %(message)s, started = Date.now();
  const timer = setInterval(function () {
    const box = document.querySelector('.mx-approval-' + id);
    if (!box) { if (Date.now() - started > 20000) clearInterval(timer); return; }
    clearInterval(timer);
    box.scrollIntoView({block: 'center'});
    box.tabIndex = 0;
    box.focus({preventScroll: true});
    const press = function (cls) { const b = box.querySelector(cls); if (b) { b.click(); } };
    box.addEventListener('keydown', function (e) {
      if (e.key === 'Enter') { e.preventDefault(); e.stopPropagation(); press('.mx-approve'); }
      else if (e.key === 'Escape') { e.preventDefault(); e.stopPropagation(); press('.mx-deny'); }
    });
    const title = document.title;
    document.title = '\u23f3 approve? ' + title;
    const app = window.jupyterapp;
    let note = null;
    if (app && app.commands && app.commands.hasCommand('apputils:notify')) {
      app.commands.execute('apputils:notify', {message: message, type: 'warning', options: {autoClose: false}})
        .then(function (n) { note = n; }).catch(function () {});
    }
    const gone = setInterval(function () {
      if (document.body.contains(box) && box.offsetParent !== null) return;
      clearInterval(gone);
      document.title = title;
      if (note !== null && app.commands.hasCommand('apputils:dismiss-notification')) {
        app.commands.execute('apputils:dismiss-notification', {id: note}).catch(function () {});
      }
    }, 300);
  }, 100);
})();
"""


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.999))
    return f"{seconds // 60}:{seconds % 60:02d}"


def _question_html(command: str, left: float, deadline: float) -> str:
    until = time.strftime("%H:%M:%S", time.localtime(deadline))
    return (f"<b>mxclaw_nb wants to run</b> <code>{html.escape(shown_command(command))}</code> — waiting for your "
            f"answer: denied in <b class=\"mx-countdown\">{_clock(left)}</b> (at {until}) without one · "
            "<span style=\"opacity:.75\">Enter: Approve · Esc: Deny</span>")


def still_busy(shell: Any) -> None:
    """N6: say again that the kernel is busy with the running cell (its status message, parent that cell's request).

    A frontend shows the last status message it got. While a question waits, control-channel requests are
    answered with their own busy/idle pair (JupyterLab creating a subshell for widget comms, its debugger
    probing), so the kernel read Idle under a pending Approve/Deny (jupyterlab#10701 and #14578, ipykernel#799).
    Uses the kernel's own `_publish_status`; a kernel without it is left as it is."""
    publish = getattr(getattr(shell, "kernel", None), "_publish_status", None)
    if callable(publish):
        with contextlib.suppress(Exception):  # a status line is never worth failing the question
            publish("busy", "shell")


def button_approver(command: str, timeout: float, poll: float = 0.05, *, shell: Any = None) -> bool | None | str:
    """Show Approve / Allow for this turn / Deny and wait (serving widget messages) for a click or the timeout.

    N6: the question is brought into view, counts down, takes Enter/Esc, raises a notification where the
    frontend offers one; "turn" is returned for "allow this exact command for the rest of the turn". The buttons
    are removed once answered (the decision shows in the live log next to the tool line); an unanswered
    question ends with a visible line saying it was denied after the timeout."""
    import ipywidgets as widgets
    from IPython import get_ipython
    from IPython.display import Javascript, display

    shell = shell if shell is not None else get_ipython()
    waiter = _waiter(shell)
    if waiter is None:
        raise RuntimeError("this kernel cannot deliver button clicks while a cell runs")
    step, stop = waiter
    decision: dict[str, bool | str] = {}
    deadline = time.monotonic() + timeout
    wall_deadline = time.time() + timeout
    text = widgets.HTML(_question_html(command, timeout, wall_deadline))
    approve = widgets.Button(description="Approve", button_style="success", icon="check")
    for_turn = widgets.Button(description="Allow for this turn", icon="check-double",
                              tooltip="allow this exact command for the rest of the turn",
                              layout=widgets.Layout(width="auto"))
    deny = widgets.Button(description="Deny", button_style="danger", icon="times")
    approve.add_class("mx-approve")
    deny.add_class("mx-deny")
    for_turn.add_class("mx-approve-turn")
    approve.on_click(lambda _b: decision.setdefault("allow", True))
    for_turn.on_click(lambda _b: decision.setdefault("allow", "turn"))
    deny.on_click(lambda _b: decision.setdefault("allow", False))
    box = widgets.VBox([text, widgets.HBox([approve, for_turn, deny])])
    key = uuid.uuid4().hex[:12]
    box.add_class("mx-approval")
    box.add_class(f"mx-approval-{key}")
    handle = display(box, display_id=True)
    attention = display(Javascript(_ATTENTION_JS % {
        "id": json.dumps(key), "message": json.dumps(f"mxclaw_nb waits for your approval: {shown_command(command)}"
                                                     [:300])}), display_id=True)
    shown = timeout
    still_busy(shell)
    try:
        while "allow" not in decision and time.monotonic() < deadline:
            step()
            left = deadline - time.monotonic()
            if int(left) != int(shown):  # the countdown, once a second, and the kernel's busy status again
                shown = left
                text.value = _question_html(command, left, wall_deadline)
                still_busy(shell)
            if "allow" not in decision:
                time.sleep(poll)
    finally:
        stop()
        box.close()
        if attention is not None:
            attention.update({"text/plain": ""}, raw=True)
        if handle is not None:  # answered: nothing left behind (the live log carries the decision)
            if "allow" in decision:
                handle.update({"text/plain": ""}, raw=True)
            else:  # N6: a timeout is said, not silent
                line = f"✗ no answer within {timeout:g} s: denied {shown_command(command)}"
                handle.update({"text/plain": line, "text/html": f'<div class="mx-approval-timeout" style="color:'
                               f'var(--mx-fail, #c62828)">{html.escape(line)}</div>'}, raw=True)
    return decision.get("allow")


class TurnApprover:
    """The approver for this shell: buttons in a notebook, text in a terminal, nobody when headless.

    N6: "Allow for this turn" on the buttons allows that exact command (byte for byte) without asking again
    until `new_turn()` (the magic calls it before each turn)."""

    def __init__(self, shell: Any, *, widgets: bool, timeout: float) -> None:
        self.shell, self.widgets, self.timeout = shell, widgets, timeout
        self.allowed_this_turn: set[str] = set()

    def new_turn(self) -> None:
        self.allowed_this_turn.clear()

    def __call__(self, command: str) -> bool | None:
        if command in self.allowed_this_turn:
            return True
        shell = self.shell
        if not has_frontend(shell):
            return None
        kernel = getattr(shell, "kernel", None)
        if self.widgets and kernel is not None and (ShellPump.attach(shell) is not None or ui_poll_works(shell)):
            answer = button_approver(command, self.timeout, shell=shell)
            if answer == "turn":
                self.allowed_this_turn.add(command)
                return True
            return answer if answer is None else bool(answer)
        if kernel is not None:
            return kernel_text_approver(shell, command, self.timeout)
        return text_approver(command)


def make_approver(shell: Any, *, widgets: bool, timeout: float) -> TurnApprover:
    """The approver for this shell (see TurnApprover)."""
    return TurnApprover(shell, widgets=widgets, timeout=timeout)
