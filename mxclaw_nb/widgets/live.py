"""What `%agent` shows while a turn runs: a compact log, streamed text, the gauge and the inspector.

Why: UX.md's progressive disclosure — a turn prints one line per tool call and per compaction, the
model's text streams in, and the details (gauge per iteration, the inspector of any call) sit one
click away. The view is driven only by the loop's events through `handle(event_type, payload)` (it
is also callable, so it can be passed as the loop's subscriber), keeps its state in plain Python,
and renders that state both as widgets and as static HTML/text: it works in a headless test, in a
frontend without widgets, and never needs a running kernel. Streamed text is pushed to the frontend
at most every 50 ms so a long answer does not flood the comm channel.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

import ipywidgets as widgets

from mxclaw_nb.context import RequestView
from mxclaw_nb.widgets.data import CallData, from_view, opt_int
from mxclaw_nb.widgets.gauge import ContextGauge, gauge_html, gauge_text
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import FAILURE_COLOR, FONT, chip, color_of, counter_label, esc, fmt_int, preview_text

ARG_KEYS = ("path", "command", "pattern", "query", "url", "artifact_id")
STREAM_INTERVAL = 0.05


@dataclass
class LogLine:
    """One line of the live log: a tool call or a compaction."""

    kind: str  # "tool" | "compaction" | "note"
    text: str
    status: str = ""  # tool: running|ok|failed
    color: str = ""
    call_id: str | None = None
    iteration: int | None = None


def _arg_summary(arguments: Any) -> str:
    args = arguments
    if isinstance(arguments, str):
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return preview_text(arguments, 60)
    if not isinstance(args, dict):
        return preview_text(str(args), 60)
    for key in ARG_KEYS:
        if isinstance(args.get(key), str):
            return preview_text(args[key], 60)
    first = next((v for v in args.values() if isinstance(v, str)), "")
    return preview_text(first, 60)


class LiveTurnView(StaticReprMixin, widgets.VBox):
    """Live display of one agent turn, fed by loop events (`handle` or call the instance)."""

    def __init__(self, *, max_log_lines: int = 500, **kwargs: Any) -> None:
        self.session_id: str | None = None
        self.turn: int | None = None
        self.model_label = ""
        self.status = "waiting"
        self.error: str | None = None
        self.text = ""
        self.entries: list[LogLine] = []
        self.calls: dict[int, CallData] = {}  # iteration -> call shown by the gauge/inspector
        self.views: dict[int, RequestView] = {}
        self.max_log_lines = max_log_lines
        self._iteration: int | None = None
        self._last_push = 0.0
        self._header = widgets.HTML()
        self.gauge = ContextGauge()
        self._log = widgets.HTML()
        self._text = widgets.HTML()
        self.call_picker = widgets.Dropdown(options=[], description="inspect")
        self.call_picker.observe(lambda _: self._show_inspector(), names="value")
        self._inspector_box = widgets.VBox()
        self.inspector: CompactionInspector | None = None
        details = widgets.Accordion(children=[widgets.VBox([self.call_picker, self._inspector_box])])
        details.set_title(0, "inspect a model call (request view: what the model saw)")
        self._details = details
        super().__init__(children=[self._header, self.gauge, self._log, self._text, details], **kwargs)
        self.add_class("mx-live-turn")
        self._render_header()

    def __call__(self, event_type: str, payload: dict[str, Any]) -> None:
        self.handle(event_type, payload)

    def handle(self, event_type: str, payload: dict[str, Any]) -> None:
        """Update the state and the widgets from one loop event; unknown events are ignored."""
        method = getattr(self, "_on_" + event_type.replace(".", "_"), None)
        if method is not None:
            method(payload or {})

    # -- events -----------------------------------------------------------------------------------

    def _on_turn_started(self, p: dict[str, Any]) -> None:
        self.session_id = p.get("session_id", self.session_id)
        self.turn = opt_int(p.get("turn"))
        self.model_label = str(p.get("model_label") or self.model_label)
        self.status = "running"
        self._render_header()

    def _on_request_built(self, p: dict[str, Any]) -> None:
        view = p.get("view")
        if not isinstance(view, RequestView):
            return
        it = opt_int(p.get("iteration")) or (max(self.calls) + 1 if self.calls else 1)
        self._iteration = it
        self._new_call = True  # the next streamed text starts a new paragraph
        self.views[it] = view
        data = from_view(view, turn=opt_int(p.get("turn")) or self.turn, iteration=it,
                         calibrated_tokens=opt_int(p.get("counter_tokens")))
        if p.get("retry"):  # C9: the same call resent with the fallback window
            data = replace(data, retry=True)
        self.calls[it] = data
        self.gauge.update(data)
        self.call_picker.options = [(self._call_label(i), i) for i in sorted(self.calls)]
        self.call_picker.value = it
        self._show_inspector()

    def _on_model_delta(self, p: dict[str, Any]) -> None:
        piece = str(p.get("text") or "")
        if getattr(self, "_new_call", False) and piece:
            if self.text and not self.text.endswith("\n"):
                self.text += "\n\n"  # text of separate model calls must not run together
            self._new_call = False
        self.text += piece
        now = time.monotonic()
        if now - self._last_push >= STREAM_INTERVAL:
            self._last_push = now
            self._render_text()

    def _on_model_completed(self, p: dict[str, Any]) -> None:
        usage = p.get("usage") or {}
        reported = opt_int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        it = opt_int(p.get("iteration")) or self._iteration
        if reported is not None and it in self.calls:
            self.gauge.update(self.calls[it], reported_prompt_tokens=reported)
            self.calls[it] = self.gauge.data  # type: ignore[assignment]
        self._render_text()

    def _on_tool_started(self, p: dict[str, Any]) -> None:
        head = f"→ {p.get('name') or '?'} {_arg_summary(p.get('arguments'))}".rstrip()
        self._add(LogLine("tool", head, "running", call_id=str(p.get("call_id")), iteration=self._iteration))

    def _on_tool_finished(self, p: dict[str, Any]) -> None:
        call_id = str(p.get("call_id"))
        line = next((ln for ln in reversed(self.entries) if ln.kind == "tool" and ln.call_id == call_id), None)
        if line is None:
            line = LogLine("tool", f"→ {p.get('name') or '?'}", call_id=call_id)
            self.entries.append(line)
        failed = bool(p.get("is_error"))
        code = p.get("exit_code")
        status = ("failed" + (f" (exit {code})" if code not in (None, 0) else "")) if failed else "ok"
        chars = opt_int(p.get("chars"))
        if chars is None and isinstance(p.get("content"), str):
            chars = len(p["content"])
        detail = f" · {fmt_int(chars)} chars" if chars else ""
        if p.get("artifact_id"):
            detail += f" · artifact {p['artifact_id']}"
        content = p.get("content")
        if isinstance(content, str) and content.strip():
            detail += f" · {preview_text(content.strip().splitlines()[0], 60)}"
        line.status, line.color = status + detail, FAILURE_COLOR if failed else ""
        self._render_log()

    def _on_context_compacted(self, p: dict[str, Any]) -> None:
        it = opt_int(p.get("iteration")) or self._iteration
        stage = str(p.get("stage") or "?")
        unit = p.get("tokens_are") or "estimate"
        unit = counter_label("estimate" if unit == "estimates" else str(unit))
        text = (f"⟳ context compacted before call {it}: {stage} · {fmt_int(p.get('before_tokens'))} → "
                f"{fmt_int(p.get('after_tokens'))} {unit} tokens")
        self._add(LogLine("compaction", text, color=color_of("stage", stage), iteration=it))

    def _on_turn_finished(self, p: dict[str, Any]) -> None:
        if p.get("text") and not self.text:
            self.text = str(p["text"])
        iterations = opt_int(p.get("iterations"))
        self.status = f"done · {iterations} model call{'s' if iterations != 1 else ''}" if iterations else "done"
        self._render_text()
        self._render_header()

    def _on_turn_failed(self, p: dict[str, Any]) -> None:
        self.status, self.error = "failed", str(p.get("error") or "unknown error")
        self._render_text()
        self._render_header()

    def _on_turn_max_iterations(self, p: dict[str, Any]) -> None:
        self._add(LogLine("note", f"stopped after {p.get('limit')} model calls (max-iterations bound)",
                          color=FAILURE_COLOR))

    def _on_turn_interrupted(self, p: dict[str, Any]) -> None:
        self.status = "interrupted"
        self._render_header()

    # -- rendering --------------------------------------------------------------------------------

    def _call_label(self, it: int) -> str:
        d = self.calls[it]
        retry = " · prompt-too-long retry" if d.retry else ""
        return f"call {it} · {d.stage} · {d.after_tokens:,} tokens{retry}"

    def _add(self, line: LogLine) -> None:
        self.entries.append(line)
        self._render_log()

    def _show_inspector(self) -> None:
        it = self.call_picker.value
        if it is None or it not in self.calls:
            return
        self.inspector = CompactionInspector(self.calls[it])
        self._inspector_box.children = [self.inspector]

    def header_text(self) -> str:
        """`demo model (offline) · session 3f2a · turn 2 · running`."""
        parts = [self.model_label or "model", f"session {str(self.session_id or '?')[:8]}"]
        if self.turn is not None:
            parts.append(f"turn {self.turn}")
        return " · ".join([*parts, self.status])

    def _render_header(self) -> None:
        self._header.value = self._header_html()

    def _header_html(self) -> str:
        err = f'<div class="mx-error" style="color:{FAILURE_COLOR}">{esc(self.error)}</div>' if self.error else ""
        return f'<div class="mx-live-head" style="{FONT}color:#555">{esc(self.header_text())}</div>{err}'

    def log_lines(self) -> list[str]:
        """The compact log as text lines."""
        return [f"{ln.text}  {ln.status}".rstrip() if ln.kind == "tool" else ln.text for ln in self.entries]

    def _log_html(self) -> str:
        lines = self.entries[-self.max_log_lines:]
        items = []
        for ln in lines:
            if ln.kind == "tool":
                status = f'<span style="color:{ln.color or "#2e7d32"}">{esc(ln.status)}</span>'
                items.append(f'<div>{esc(ln.text)} &nbsp; {status}</div>')
            elif ln.kind == "compaction":
                stage = ln.text.split(": ", 1)[1].split(" ·", 1)[0]
                items.append(f'<div style="color:{ln.color}">{esc(ln.text)} {chip(stage, ln.color)} '
                             f'<span style="color:#777">[inspect below]</span></div>')
            else:
                items.append(f'<div style="color:{ln.color}">{esc(ln.text)}</div>')
        more = f'<div style="color:#777">showing {len(lines):,} of {len(self.entries):,} lines</div>' \
            if len(lines) < len(self.entries) else ""
        return (f'<div class="mx-live-log" style="{FONT}font-family:monospace;margin:4px 0">{more}{"".join(items)}'
                '</div>')

    def _render_log(self) -> None:
        self._log.value = self._log_html()

    def _text_html(self) -> str:
        if not self.text:
            return ""
        return f'<div class="mx-live-text" style="{FONT}white-space:pre-wrap;margin:4px 0">{esc(self.text)}</div>'

    def _render_text(self) -> None:
        self._text.value = self._text_html()

    def to_html(self) -> str:
        """Header, gauge, log, text and the last call's inspector as static HTML."""
        last = self.calls[max(self.calls)] if self.calls else None
        insp = CompactionInspector(last).to_html() if last is not None else ""
        return (f'<div class="mx-live">{self._header_html()}{gauge_html(self.gauge.data)}{self._log_html()}'
                f'{self._text_html()}{insp}</div>')

    def to_text(self) -> str:
        """Header, text gauge, log lines and the answer as plain text."""
        lines = [self.header_text(), gauge_text(self.gauge.data), *self.log_lines()]
        if self.text:
            lines.append(self.text)
        if self.error:
            lines.append(self.error)
        return "\n".join(lines)
