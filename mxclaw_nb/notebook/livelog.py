"""The live turn log of `%%agent`: streamed text, tool calls, compaction notices, as they happen.

Why: a turn can take minutes and the point of this project is to *see* the context being managed, so
the magic renders the loop's events while they arrive (UX.md, "A turn in a notebook"). The events are
read by the one live turn model (`widgets.turnlog.TurnLog`, shared with the widget view, so both show
the same lines, warnings included); `LiveLog` only draws it. In a kernel it is shown once
with a display handle and updated in place, with both `text/html` and `text/plain` in the
bundle so nbconvert, GitHub and plain consoles keep a readable log. Every update re-sends the whole
log, so updates are few: streamed text at most every 0.3 s, and events that are followed at once by
another (a tool's result, the end of a model call) wait for it; lines that start something long (a
model call, a tool run) are shown at once. Both forms render lines through `widgets.livetext`, like
the widget view: event order, [show] per tool line, the answer set apart, a spinner. In terminal IPython, where an
"update" would print the whole log again, lines are printed as they complete and the answer is
streamed straight to stdout. When the widgets package offers a `LiveTurnView`, events are also
forwarded to it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Any

from mxclaw_nb.tools.policy import terminal_safe
from mxclaw_nb.widgets.livetext import SPINNER_STYLE, LogLine, activity_html, answer_html, line_html, line_text
from mxclaw_nb.widgets.style import (
    FONT,
    MONO_FONT,
    MUTED,
    THEME_STYLE,
    counter_label,
    esc,
    fmt_int,
)
from mxclaw_nb.widgets.turnlog import TurnLog, TurnRenderer

BAR_CELLS = 18
TOOL_PREVIEW_CHARS = 300  # text shown under a tool line
ARG_CHARS = 60
RUNNING_SHOW_CHARS = 600  # of a tool result under [show] while the turn runs (all of the preview at its end)


def gauge_line(view: Any, reported: int | None = None) -> str:
    """`[ctx ▓▓▓░░ 41,210 est. / 51,200 threshold / 64,000 window · unchanged]` for a request record (or view)."""
    window = max(int(getattr(view, "window_tokens", None) or getattr(view, "window", 0) or 0), 1)
    after = int(view.after_tokens or 0)
    filled = min(BAR_CELLS, round(BAR_CELLS * after / window))
    bar = "▓" * filled + "░" * (BAR_CELLS - filled)
    extra = f" · {fmt_int(reported)} reported" if reported else ""
    return (f"[ctx {bar} {fmt_int(after)} {counter_label(view.counter)} / {fmt_int(view.threshold)} "
            f"threshold / {fmt_int(window)} window · {view.stage}{extra}]")


class LiveLog(TurnRenderer):
    """Shows the live turn model (`TurnLog`) as one display updated in place, as printed lines, or nothing."""

    def __init__(self, label: str, session_id: str, *, mode: str = "display", throttle: float = 0.3,
                 widget: Any = None) -> None:
        if mode not in ("display", "print", "off"):
            raise ValueError(f"mode must be display, print or off (got {mode!r})")
        self.label, self.session_id, self.mode, self.throttle = label, session_id, mode, throttle
        self.widget = widget
        self.gauge: str | None = None
        self._handle: Any = None
        self._last_update = 0.0
        self._streaming = False  # print mode: the cursor is inside streamed text
        self._printed: set[int] = set()  # print mode: tool lines whose outcome is printed
        TurnLog([self])

    @property
    def turn(self) -> int | None:
        return self.model.turn

    @property
    def entries(self) -> list[LogLine]:
        return self.model.entries

    @property
    def status(self) -> str | None:
        """How the turn ended, as the log's last line says it; None while it runs."""
        status = self.model.status
        if not self.model.finished:
            return None
        if status == "failed":
            return "failed (see below)"
        if status.startswith("stopped"):
            return "stopped: model calls without a final answer (max_iterations)"
        return status

    @property
    def activity(self) -> str:
        return self.model.activity

    def header(self) -> str:
        """`demo model (offline) · session 3f2a91c0 · turn 2`."""
        turn = f" · turn {self.turn}" if self.turn is not None else ""
        return f"{self.label} · session {self.session_id[:8]}{turn}"

    def handle(self, kind: str, payload: dict[str, Any]) -> None:
        """Subscriber for `Agent.subscribe`: the model applies the event, this log shows it."""
        if self.widget is not None:
            self.widget.handle(kind, payload)
        self.model.handle(kind, payload)

    # -- what the model says changed (TurnRenderer) ----------------------------------------------
    def started(self) -> None:
        if self.mode == "display":
            from IPython.display import display

            self._handle = display(self, display_id=True)
        self._print(self.header())

    def added(self, line: LogLine) -> None:
        if line.kind == "text":
            self._stream(line.text)
            self._refresh()  # the spinner leaves at once; then throttled
            return
        if line.kind in ("compaction", "note"):
            self._print("  " + line.text)
        self._refresh()

    def changed(self, line: LogLine, piece: str = "") -> None:
        if piece:
            self._stream(piece)
            self._refresh(force=False)
            return
        if line.kind == "tool" and line.status != "running" and not self._printed_outcome(line):
            self._print(f"  {line_text(line)}")
            preview = " ".join(line.content.split())[:TOOL_PREVIEW_CHARS]
            if preview and self.mode == "print" and line.status != "interrupted":
                print(f"      {terminal_safe(preview)}{'…' if len(line.content) > TOOL_PREVIEW_CHARS else ''}")
            self._refresh(force=False)  # the next tool line or model call follows at once and is always shown
            return
        if line.kind == "tool" and line.decision:
            mark = "✓" if line.decision.startswith("approved") else "✗"
            self._print(f"  {mark} {line.decision}: {line.text.split(' ', 2)[-1]}")  # what was decided
        self._refresh()

    def _printed_outcome(self, line: LogLine) -> bool:
        done = id(line) in self._printed
        self._printed.add(id(line))
        return done

    def activity_changed(self) -> None:
        self._refresh(force=False)

    def call_built(self, it: int) -> None:
        record = self.model.calls[it].record
        self.gauge = gauge_line(record)
        if it == 1 or record.stage != "unchanged":  # terminal: no per-call noise
            self._print("  " + self.gauge)
        self._refresh()

    def call_ended(self, it: int) -> None:
        record = self.model.calls[it].record
        if record.prompt_tokens_reported:
            self.gauge = gauge_line(record, record.prompt_tokens_reported)
        self._refresh(force=False)  # a tool line or the turn's end follows at once and is always shown

    def turn_ended(self) -> None:
        calls = self.model.calls
        if self.gauge and calls and calls[max(calls)].record.stage == "unchanged":
            self._print("  " + self.gauge)
        self._print(f"  ({self.status})")
        self._refresh(force=True)

    def finish(self, status: str) -> None:
        """Mark the turn's end from outside the loop's events (e.g. the magic stopped it) and show it."""
        self.model.status = status
        self.model.set_activity("")
        self.turn_ended()

    # -- output ------------------------------------------------------------------------------------
    def _stream(self, text: str) -> None:
        if self.mode != "print":
            return
        if not self._streaming:
            sys.stdout.write("  ")
            self._streaming = True
        sys.stdout.write(terminal_safe(text).replace("\n", "\n  "))
        sys.stdout.flush()

    def _print(self, line: str) -> None:
        if self.mode != "print":
            return
        if self._streaming:
            sys.stdout.write("\n")
            self._streaming = False
        print(terminal_safe(line), flush=True)

    def _refresh(self, force: bool = True) -> None:
        if self.mode != "display" or self._handle is None:
            return
        now = time.monotonic()
        if not force and now - self._last_update < self.throttle:
            return
        self._last_update = now
        self._handle.update(self)

    def answer(self) -> LogLine | None:
        """The final answer's line: the last model text, once the turn is done."""
        return self.model.answer_line()

    def to_text(self) -> str:
        """The whole log as plain text, in event order; the answer last, after a blank line."""
        lines = [self.header()]
        if self.gauge:
            lines.append("  " + self.gauge)
        answer = self.answer()
        for e in self.entries:
            if e is answer:
                continue
            lines.extend("  " + line for line in line_text(e).splitlines() or [""])
        if answer is not None:
            lines += [""] + ["  " + line for line in answer.text.splitlines() or [""]]
        if self.status:
            lines.append(f"  ({self.status})")
        return terminal_safe("\n".join(lines))  # the text/plain form may reach a terminal (jupyter console)

    def _line_html(self, e: LogLine, answer: LogLine | None) -> str:
        """A log line; while the turn runs a tool's [show] holds a shorter preview (every update re-sends the log)."""
        if e.kind == "tool" and not self.status and len(e.content) > RUNNING_SHOW_CHARS:
            e = replace(e, content=e.content[:RUNNING_SHOW_CHARS])
        return line_html(e, answer)

    def to_html(self) -> str:
        """The whole log as HTML in event order: tool lines open on [show], the answer set apart, a spinner."""
        out = [f'{THEME_STYLE}{SPINNER_STYLE}<div class="mx-live mx-live-log" style="{FONT}">'
               f'<div style="color:{MUTED}">{esc(self.header())}</div>']
        if self.gauge:
            out.append(f'<div style="{MONO_FONT}">{esc(self.gauge)}</div>')
        answer = self.answer()
        out.extend(self._line_html(e, answer) for e in self.entries)
        if answer is not None:
            out.append(answer_html(answer.text))
        if self.activity and not self.status:
            out.append(activity_html(self.activity))
        if self.status:
            out.append(f'<div style="color:{MUTED}">({esc(self.status)})</div>')
        return "".join(out) + "</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {"text/plain": self.to_text(), "text/html": self.to_html()}
