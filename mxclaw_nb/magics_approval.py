"""Who approves a shell command when the policy is "ask": buttons, a text prompt, or nobody.

Why: the bash tool asks its approver and runs the command only on an explicit yes (a `None` answer
means nobody could answer and the command is denied; the tools layer stores every decision as an
`approval.decided` event). In a notebook the cell is still running while the agent waits, so the
kernel cannot process button clicks on its own. `jupyter_ui_poll.ui_events` lets a running cell pump
widget events, but it needs the kernel's `do_one_iteration` (ipykernel 6); ipykernel 7 dispatches
messages on the blocked main loop instead, so clicks would never arrive. There the approver asks
through the kernel's stdin channel (`input()`), which every interactive frontend shows as a text box.
A kernel driven headlessly (nbclient, papermill, nbconvert) sends `allow_stdin=False` and has no one
to answer, so it is denied at once rather than hanging; unanswered buttons are denied after a
timeout. Terminal IPython gets the same text prompt.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from mxclaw_nb.tools.policy import shown_command

Approver = Callable[[str], "bool | None"]


def has_frontend(shell: Any) -> bool:
    """True when a person can answer: a kernel whose current request allows input, or a terminal."""
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        return bool(getattr(kernel, "_allow_stdin", False))
    return bool(sys.stdin and sys.stdin.isatty())


def ui_poll_works(shell: Any) -> bool:
    """True when jupyter_ui_poll can pump widget events in this kernel (it needs `do_one_iteration`)."""
    return callable(getattr(getattr(shell, "kernel", None), "do_one_iteration", None))


def text_approver(command: str) -> bool | None:
    """Ask with input(); None when no input can be read."""
    try:
        answer = input(f"mxclaw_nb wants to run: {shown_command(command)}\nAllow? [y/N] ")
    except (EOFError, OSError, RuntimeError):  # StdinNotImplementedError is a RuntimeError subclass
        return None
    return answer.strip().lower() in ("y", "yes")


def button_approver(command: str, timeout: float, poll: float = 0.05) -> bool | None:
    """Show Approve/Deny buttons and wait (pumping UI events) for a click or the timeout."""
    import ipywidgets as widgets
    from IPython.display import display
    from jupyter_ui_poll import ui_events

    decision: dict[str, bool] = {}
    text = widgets.HTML(f"<b>mxclaw_nb wants to run</b> <code>{_escape(shown_command(command))}</code> — waiting "
                        f"for your answer (denied after {timeout:g} s without one)")
    approve = widgets.Button(description="Approve", button_style="success", icon="check")
    deny = widgets.Button(description="Deny", button_style="danger", icon="times")
    approve.on_click(lambda _b: decision.setdefault("allow", True))
    deny.on_click(lambda _b: decision.setdefault("allow", False))
    box = widgets.VBox([text, widgets.HBox([approve, deny])])
    handle = display(box, display_id=True)
    deadline = time.monotonic() + timeout
    with ui_events() as pump:
        while "allow" not in decision and time.monotonic() < deadline:
            pump(20)
            time.sleep(poll)
    answer = decision.get("allow")
    outcome = {True: "approved", False: "denied"}.get(answer, f"denied: no answer within {timeout:g} s")  # type: ignore[arg-type]
    box.close()
    if handle is not None:
        handle.update({"text/plain": f"{outcome}: {shown_command(command)}"}, raw=True)
    return answer


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def make_approver(shell: Any, *, widgets: bool, timeout: float) -> Approver:
    """The approver for this shell: buttons in a notebook, text in a terminal, nobody when headless."""

    def approve(command: str) -> bool | None:
        if not has_frontend(shell):
            return None
        if widgets and ui_poll_works(shell):
            return button_approver(command, timeout)
        return text_approver(command)

    return approve
