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

import html
import sys
import time
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


def button_approver(command: str, timeout: float, poll: float = 0.05, *, shell: Any = None) -> bool | None:
    """Show Approve/Deny buttons and wait (serving widget messages) for a click or the timeout.

    The buttons are removed once answered; the decision shows in the live log next to the tool line.
    """
    import ipywidgets as widgets
    from IPython import get_ipython
    from IPython.display import display

    waiter = _waiter(shell if shell is not None else get_ipython())
    if waiter is None:
        raise RuntimeError("this kernel cannot deliver button clicks while a cell runs")
    step, stop = waiter
    decision: dict[str, bool] = {}
    text = widgets.HTML(f"<b>mxclaw_nb wants to run</b> <code>{html.escape(shown_command(command))}</code> — "
                        f"waiting for your answer (denied after {timeout:g} s without one)")
    approve = widgets.Button(description="Approve", button_style="success", icon="check")
    deny = widgets.Button(description="Deny", button_style="danger", icon="times")
    approve.on_click(lambda _b: decision.setdefault("allow", True))
    deny.on_click(lambda _b: decision.setdefault("allow", False))
    box = widgets.VBox([text, widgets.HBox([approve, deny])])
    box.add_class("mx-approval")
    handle = display(box, display_id=True)
    deadline = time.monotonic() + timeout
    try:
        while "allow" not in decision and time.monotonic() < deadline:
            step()
            if "allow" not in decision:
                time.sleep(poll)
    finally:
        stop()
        box.close()
        if handle is not None:  # nothing left behind: the live log carries the decision
            handle.update({"text/plain": ""}, raw=True)
    return decision.get("allow")


def make_approver(shell: Any, *, widgets: bool, timeout: float) -> Approver:
    """The approver for this shell: buttons in a notebook, text in a terminal, nobody when headless."""

    def approve(command: str) -> bool | None:
        if not has_frontend(shell):
            return None
        kernel = getattr(shell, "kernel", None)
        if widgets and kernel is not None and (ShellPump.attach(shell) is not None or ui_poll_works(shell)):
            return button_approver(command, timeout, shell=shell)
        if kernel is not None:
            return kernel_text_approver(shell, command, timeout)
        return text_approver(command)

    return approve
