"""What `%agent` shows while a turn runs: a compact log, streamed text, the gauge and the inspector.

Why: UX.md's progressive disclosure — a turn prints one line per tool call and per compaction, the
model's text streams in, and the details (gauge per iteration, the inspector of any call) sit one
click away. The view is driven only by the loop's events through `handle(event_type, payload)` (it
is also callable, so it can be passed as the loop's subscriber), keeps its state in plain Python,
and renders that state both as widgets and as static HTML/text: it works in a headless test, in a
frontend without widgets, and never needs a running kernel.

Cost (it runs in the user's kernel on every model call): each log line is its own small HTML widget,
so a streamed token re-sends only the paragraph being written (at most every 50 ms), never the whole
log; the inspector is built only when its section is opened, once per shown call, and the one it
replaces is closed with all its child, layout and style models; `publish_final` turns the finished
turn into static HTML/text and closes every widget, so a finished turn keeps no widget, comm or
request view alive in the kernel — only the strings it shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

from mxclaw_nb.widgets.data import CallData
from mxclaw_nb.widgets.gauge import ContextGauge, gauge_html, gauge_text
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.livetext import (
    SPINNER_STYLE,
    LogLine,
    activity_html,
    answer_html,
    line_html,
    line_text,
    rich_text_html,
)
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    FAIL_CSS,
    FONT,
    MUTED,
    THEME_STYLE,
    esc,
    unit_label,
)
from mxclaw_nb.widgets.turnlog import CallDataMap, TurnLog, TurnRenderer

STREAM_INTERVAL = 0.1  # seconds between pushes of the paragraph being streamed
GAUGE_INTERVAL = 1.0  # seconds between gauge pushes (~7 KB each); the last state is always pushed
SHOW_CHARS = 4_000  # of a tool result, opened with [show] in the log
FINISHED = ("done", "failed", "interrupted", "stopped")


@dataclass(frozen=True)
class CallSummary:
    """What the call picker needs of a call once its rows are released."""

    stage: str
    after_tokens: int
    retry: bool
    counter: str = "estimate"  # the counter `after_tokens` is in (N5: the footer names it)


def close_tree(widget: widgets.Widget) -> None:
    """Close a widget and every widget it holds (children, layout, style...): their comms and registry entries."""
    stack, seen = [widget], set()
    while stack:
        w = stack.pop()
        if id(w) in seen:
            continue
        seen.add(id(w))
        for name in w.keys:
            value = getattr(w, name, None)
            if isinstance(value, widgets.Widget):
                stack.append(value)
            elif isinstance(value, list | tuple):
                stack.extend(v for v in value if isinstance(v, widgets.Widget))
        w.close()
        w.__dict__.pop("_repr_mimebundle_", None)  # close() blanks it; a closed view still renders statically


class _StaticInspector:
    """The inspector's header and summary as static HTML without creating widgets (no comms, nothing to close).

    Borrows CompactionInspector's own rendering methods, so the text cannot drift from the widget's. The
    tables stay out of a finished turn's output (about 1.6 KB a row): `%agent view` shows them."""

    header_html = CompactionInspector.header_html
    summary_html = CompactionInspector.summary_html

    def __init__(self, data: CallData) -> None:
        self.data = data

    def to_html(self) -> str:
        head = 'style="cursor:pointer;font-weight:600;margin:6px 0 2px"'
        return (f'<div class="mx-inspector" style="{FONT}">{self.header_html()}'
                f'<details><summary {head}>Summary</summary>{self.summary_html()}</details></div>')


def static_inspector_html(data: CallData) -> str:
    """The inspector of one call as static HTML (header and summary): what a compaction line opens (N6)."""
    return _StaticInspector(data).to_html()


class LiveTurnView(StaticReprMixin, TurnRenderer, widgets.VBox):
    """Live display of one agent turn, fed by loop events (`handle` or call the instance).

    The events are read by `TurnLog` (the one live turn model, shared with the text log); this class only
    draws: one HTML widget per log line, the gauge (at most every GAUGE_INTERVAL s), the inspector on demand."""

    def __init__(self, *, max_log_lines: int = 500, **kwargs: Any) -> None:
        self.model = TurnLog()
        self.call_summaries: dict[int, CallSummary] = {}
        self.max_log_lines = max_log_lines
        self._gauge_call: int | None = None  # the call the gauge shows
        self._gauge_stale = False  # the gauge's call has figures its HTML does not show yet
        self._last_push = self._last_gauge = 0.0
        self._final: tuple[str, str] | None = None  # (text, html) once published
        self._line_widgets: dict[int, widgets.HTML] = {}  # id(LogLine) -> its widget
        # every log line shares one layout and one style model: a line then costs one comm, not three
        self._line_layout, self._line_style = widgets.Layout(), HTMLStyle()
        shared = {"layout": self._line_layout}  # one layout model for every part that needs no layout of its own
        html = {**shared, "style": self._line_style}
        self._header = widgets.HTML(**html)
        self.gauge = ContextGauge(live=True, **shared)
        self._more = widgets.HTML(**html)
        self._log = widgets.VBox(**shared)
        self._log.add_class("mx-live-log")
        self._activity = widgets.HTML(**html)
        self._text = widgets.HTML(**html)
        self.call_picker = widgets.Dropdown(options=[], description="inspect")
        self.call_picker.observe(lambda _: self._show_inspector(), names="value")
        self._inspector_box = widgets.VBox(**shared)
        self.inspector: CompactionInspector | None = None
        self._inspected: tuple[int, int] | None = None  # (iteration, id of its CallData) shown by the inspector
        self._picking = False
        details = widgets.Accordion(children=[widgets.VBox([self.call_picker, self._inspector_box], **shared)],
                                    selected_index=None)
        details.set_title(0, "inspect a model call (request view: what the model saw)")
        details.observe(lambda _: self._show_inspector(), names="selected_index")
        self._details = details
        style = widgets.HTML(SPINNER_STYLE + THEME_STYLE, **html)
        super().__init__(children=[style, self._header, self.gauge, self._more, self._log, self._activity,
                                   self._text, details], **kwargs)
        self.model.attach(self)
        self.add_class("mx-live-turn")
        self._render_header()

    # the turn's state lives in the model; these read (and, for the magic, set) it
    session_id = property(lambda self: self.model.session_id, lambda self, v: setattr(self.model, "session_id", v))
    turn = property(lambda self: self.model.turn)
    model_label = property(lambda self: self.model.model_label, lambda self, v: setattr(self.model, "model_label", v))
    status = property(lambda self: self.model.status, lambda self, v: setattr(self.model, "status", v))
    activity = property(lambda self: self.model.activity)
    error = property(lambda self: self.model.error, lambda self, v: self._set_error(v))
    text = property(lambda self: self.model.text)
    entries = property(lambda self: self.model.entries)

    @property
    def calls(self) -> CallDataMap:
        """iteration -> CallData of this turn's calls (each derived when first read; released by publish_final)."""
        return CallDataMap(self.model)

    def _set_error(self, value: str | None) -> None:
        self.model.error = value
        self._render_header()

    def __call__(self, event_type: str, payload: dict[str, Any]) -> None:
        self.handle(event_type, payload)

    def handle(self, event_type: str, payload: dict[str, Any]) -> None:
        """Update the state and the widgets from one loop event; unknown events are ignored."""
        self.model.handle(event_type, payload or {})

    # -- what the model says changed (TurnRenderer) ----------------------------------------------

    def started(self) -> None:
        self._render_header()

    def added(self, line: LogLine) -> None:
        self._flush_text(before=line)
        w = widgets.HTML(line_html(line), layout=self._line_layout, style=self._line_style)
        self._line_widgets[id(line)] = w
        children = [*self._log.children, w]
        if len(children) > self.max_log_lines:  # the oldest line leaves the live view (static HTML keeps it)
            gone = children.pop(0)
            self._line_widgets = {k: v for k, v in self._line_widgets.items() if v is not gone}
            gone.close()  # its layout and style are shared with the other lines
            self._more.value = (f'<div style="{FONT}color:{MUTED}">showing the last {len(children):,} of '
                                f'{len(self.entries):,} lines</div>')
        self._log.children = children

    def changed(self, line: LogLine, piece: str = "") -> None:
        if piece:  # streamed text: throttled, only this paragraph is re-sent
            now = time.monotonic()
            if now - self._last_push < STREAM_INTERVAL:
                return
            self._last_push = now
        self._render_line(line)

    def activity_changed(self) -> None:
        self._activity.value = activity_html(self.activity, style=False) if self.status == "running" else ""
        if self.activity.startswith("waiting for your approval"):  # a person is needed: show the current call
            self._push_gauge(force=True)

    def call_built(self, it: int) -> None:
        self._flush_text()
        call = self.model.calls[it]
        self.call_summaries[it] = CallSummary(call.record.stage, call.record.after_tokens or 0, call.record.retry,
                                              call.record.counter)
        self._gauge_call, self._gauge_stale = it, True
        self._push_gauge()
        self._picking = True  # one inspector build per call, not one per trait change
        try:
            self.call_picker.options = [(self._call_label(i), i) for i in sorted(self.call_summaries)]
            self.call_picker.value = it
        finally:
            self._picking = False
        self._show_inspector()

    def call_ended(self, it: int) -> None:
        if it == self._gauge_call:  # the stored record's figures (reported usage) join the gauge's next push
            self._gauge_stale = True
            if self.model.calls[it].data is not None:  # already derived: only the record changes (O(1))
                self.gauge.data = self.model.call_data(it)
        self._flush_text()
        self._push_gauge()

    def turn_ended(self) -> None:
        self._finish()

    # -- state ------------------------------------------------------------------------------------

    def _call_label(self, it: int) -> str:
        d = self.call_summaries[it]
        retry = " · prompt-too-long retry" if d.retry else ""
        return f"call {it} · {d.stage} · {d.after_tokens:,} {unit_label(d.counter)}{retry}"  # N5: labelled

    @property
    def finished(self) -> bool:
        """True once the turn ended (done, failed, interrupted, stopped)."""
        return self.status.startswith(FINISHED)

    def final_answer(self) -> str:
        """The text of the last model call once the turn is done (what the answer says)."""
        return self.model.final_answer() if self.finished else ""

    def header_text(self) -> str:
        """`demo model (offline) · session 3f2a · turn 2 · running`."""
        parts = [self.model_label or "model", f"session {str(self.session_id or '?')[:8]}"]
        if self.turn is not None:
            parts.append(f"turn {self.turn}")
        return " · ".join([*parts, self.status])

    def log_lines(self) -> list[str]:
        """The compact log as text lines (tool calls, compactions, notes; the narration is in `text`)."""
        return [line_text(ln) for ln in self.entries if ln.kind != "text"]

    def open_inspector(self, iteration: int | None = None) -> CompactionInspector | None:
        """Open the inspector section (of call `iteration`, default the picked one) and return the inspector."""
        if iteration is not None:
            self.call_picker.value = iteration
        self._details.selected_index = 0
        self._show_inspector()
        return self.inspector

    def _show_inspector(self) -> None:
        """Build the picked call's inspector, only while the section is open; close the one it replaces."""
        if self._picking or self._details.selected_index is None:
            return
        it = self.call_picker.value
        if it is None or it not in self.model.calls:
            return
        data = self.model.call_data(it)
        if self._inspected == (it, id(data)):
            return
        old = self.inspector
        self.inspector, self._inspected = CompactionInspector(data), (it, id(data))
        self._inspector_box.children = [self.inspector]
        if old is not None:
            close_tree(old)

    # -- rendering --------------------------------------------------------------------------------

    def _render_line(self, line: LogLine, answer: LogLine | None = None) -> None:
        w = self._line_widgets.get(id(line))
        if w is not None:
            value = line_html(line, answer)
            if w.value != value:
                w.value = value

    def _flush_text(self, before: LogLine | None = None) -> None:
        """Send the paragraph being streamed in full (the throttle may have held back its last tokens)."""
        entries = self.entries
        last = entries[-2] if before is not None and len(entries) > 1 and entries[-1] is before else (
            None if before is not None else (entries[-1] if entries else None))
        if last is not None and last.kind == "text":
            self._render_line(last)

    def _render_header(self) -> None:
        self._header.value = self._header_html()

    def _push_gauge(self, force: bool = False) -> None:
        """Show the gauge's call, at most every GAUGE_INTERVAL seconds unless forced (a fast turn skips some).

        N2, C7: the call's rows (for the layer split) are derived only here, so a turn of many fast calls
        derives them about once a second, not once per call."""
        now = time.monotonic()
        it = self._gauge_call
        if self._gauge_stale and it in self.model.calls and (force or now - self._last_gauge >= GAUGE_INTERVAL):
            self.gauge.update(self.model.call_data(it))
            self._gauge_stale, self._last_gauge = False, now

    def _finish(self) -> None:
        self._push_gauge(force=True)
        self._activity.value = ""
        answer = self.entries[-1] if self.final_answer() else None
        if answer is not None:
            self._render_line(answer, answer)  # the answer leaves the log for its own block
        else:
            self._flush_text()
        self._text.value = self._text_html()
        self._render_header()

    def _header_html(self) -> str:
        err = ""
        if self.error:
            err = f'<div class="mx-error" style="{FONT}color:{FAIL_CSS}">{rich_text_html(self.error)}</div>'
        return f'<div class="mx-live-head" style="{FONT}color:{MUTED}">{esc(self.header_text())}</div>{err}'

    def _log_html(self) -> str:
        answer = self.entries[-1] if self.final_answer() else None
        items = "".join(line_html(ln, answer) for ln in self.entries)
        spin = activity_html(self.activity) if self.status == "running" else ""
        return f'{SPINNER_STYLE}<div class="mx-live-log" style="{FONT}margin:4px 0">{items}{spin}</div>'

    def _text_html(self) -> str:
        answer = self.final_answer()
        return answer_html(answer) if answer else ""

    def _calls_html(self) -> str:
        """The finished turn's calls: each named, the last one's inspector inline (bounded rows)."""
        if not self.call_summaries:
            return ""
        last = max(self.call_summaries)
        names = " · ".join(esc(self._call_label(i)) for i in sorted(self.call_summaries))
        insp = ""
        if last in self.model.calls:
            insp = (f'<details><summary style="cursor:pointer">inspect {esc(self._call_label(last))}</summary>'
                    f'{static_inspector_html(self.model.call_data(last))}</details>')
        return (f'<div class="mx-calls" style="{FONT}margin-top:4px"><div style="color:{MUTED}">model calls of this '
                f'turn: {names} — <code>%agent view</code> shows the tables of the last call (request view: what the '
                f'model saw)</div>{insp}</div>')

    def to_html(self) -> str:
        """The whole turn as static HTML: header, gauge, log in event order, the answer, the last call's inspector."""
        if self._final is not None:
            return self._final[1]
        return (f'{THEME_STYLE}<div class="mx-live mx-static">{self._header_html()}{gauge_html(self.gauge.data)}'
                f'{self._log_html()}{self._text_html()}{self._calls_html()}</div>')

    def to_text(self) -> str:
        """Header, text gauge, the log in event order (narration included) and the answer as plain text."""
        if self._final is not None:
            return self._final[0]
        answer = self.entries[-1] if self.final_answer() else None
        lines = [self.header_text(), gauge_text(self.gauge.data)]
        lines += [line_text(ln) for ln in self.entries if ln is not answer]
        if answer is not None:
            lines.append(answer.text)
        if self.error:
            lines.append(self.error)
        return "\n".join(lines)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        if self.finished or self._final is not None:  # final state as plain HTML/text: survives a reopen
            return {"text/plain": self.to_text(), "text/html": self.to_html()}
        return super()._repr_mimebundle_(**kwargs)

    def publish_final(self, handle: Any = None) -> None:
        """Freeze the final static HTML/text, show it through `handle` (a display handle), close every widget.

        After this the view holds only those strings and small call summaries: no widget, comm, CallData or
        request view of the turn stays alive in the kernel."""
        if self._final is None:
            if not self.finished:
                self.status = "stopped"
            self._final = (self.to_text(), self.to_html())
        if handle is not None:
            handle.update(self)
        self.calls.clear()
        self.gauge.data = None
        self.inspector, self._inspected = None, None
        self._line_widgets.clear()
        close_tree(self)
