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
from mxclaw_nb.widgets.style import (
    BORDER,
    FAIL_CSS,
    FONT,
    MONO_FONT,
    MUTED,
    OK_CSS,
    THEME_STYLE,
    chip,
    color_of,
    counter_label,
    esc,
    fmt_int,
    preview_text,
)

ARG_KEYS = ("path", "command", "pattern", "query", "url", "artifact_id")
STREAM_INTERVAL = 0.05
SHOW_CHARS = 4_000  # of a tool result, opened with [show] in the log
LIVE_STYLE = ("<style>@keyframes mx-spin{to{transform:rotate(360deg)}}.mx-spinner{display:inline-block;width:8px;"
              "height:8px;margin-right:6px;border:2px solid currentColor;border-right-color:transparent;"
              "border-radius:50%;animation:mx-spin .8s linear infinite}"
              ".mx-live-log details>summary{cursor:pointer}.mx-live-log details>summary::marker{font-size:9px}</style>")
FINISHED = ("done", "failed", "interrupted", "stopped")


@dataclass
class LogLine:
    """One line of the live log: a tool call or a compaction."""

    kind: str  # "tool" | "compaction" | "note" | "text" (the model's narration, in event order)
    text: str
    status: str = ""  # tool: running|ok|failed
    color: str = ""
    call_id: str | None = None
    iteration: int | None = None
    decision: str = ""  # tool: "approved by user", "denied by policy"...
    content: str = ""  # tool: the start of the result, shown on demand


def _decided(line: LogLine) -> str:
    """`✓ approved by user · ` before a tool line's outcome ('' when nobody was asked)."""
    if not line.decision:
        return ""
    return f"{'✓' if line.decision.startswith('approved') else '✗'} {line.decision} · "


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
        self.activity = ""  # what a running turn waits for: the spinner's label
        self.error: str | None = None
        self.text = ""
        self.entries: list[LogLine] = []
        self.calls: dict[int, CallData] = {}  # iteration -> call shown by the gauge/inspector
        self.views: dict[int, RequestView] = {}
        self.max_log_lines = max_log_lines
        self._iteration: int | None = None
        self._last_push = 0.0
        self._header = widgets.HTML()
        self.gauge = ContextGauge(live=True)
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
        self.activity = f"waiting for the model (call {it})"
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
        last = self.entries[-1] if self.entries else None
        if last is not None and last.kind == "text" and last.iteration == self._iteration:
            last.text += piece
        elif piece:
            self.entries.append(LogLine("text", piece, iteration=self._iteration))
        self.activity = "the model is writing"
        now = time.monotonic()
        if now - self._last_push >= STREAM_INTERVAL:
            self._last_push = now
            self._render_log()

    def _on_model_completed(self, p: dict[str, Any]) -> None:
        usage = p.get("usage") or {}
        reported = opt_int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        it = opt_int(p.get("iteration")) or self._iteration
        if reported is not None and it in self.calls:
            self.gauge.update(self.calls[it], reported_prompt_tokens=reported)
            self.calls[it] = self.gauge.data  # type: ignore[assignment]
        self.activity = ""
        self._render_log()

    def _on_tool_started(self, p: dict[str, Any]) -> None:
        head = f"→ {p.get('name') or '?'} {_arg_summary(p.get('arguments'))}".rstrip()
        self.activity = f"running {p.get('name') or 'a tool'}"
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
        line.status, line.color = status + detail, FAIL_CSS if failed else ""
        line.content = content[:SHOW_CHARS] + (f"\n… ({len(content):,} chars in all)" if len(content) > SHOW_CHARS
                                               else "") if isinstance(content, str) else ""
        self.activity = ""
        self._render_log()

    def _on_approval_decided(self, p: dict[str, Any]) -> None:
        verb = "approved" if p.get("decision") == "allow" else "denied"
        text = f"{verb} by {p.get('by') or '?'}"
        line = next((ln for ln in reversed(self.entries) if ln.kind == "tool" and ln.status == "running"
                     and not ln.decision), None)
        if line is None:  # no tool line to sit next to: a line of its own
            self._add(LogLine("note", f"{'✓' if verb == 'approved' else '✗'} {text}: {p.get('command') or ''}",
                              color="" if verb == "approved" else FAIL_CSS))
            return
        line.decision = text
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
        self._finish()

    def _on_turn_failed(self, p: dict[str, Any]) -> None:
        self.status, self.error = "failed", str(p.get("error") or "unknown error")
        self._finish()

    def _on_turn_max_iterations(self, p: dict[str, Any]) -> None:
        self._add(LogLine("note", f"stopped after {p.get('limit')} model calls (max-iterations bound)",
                          color=FAIL_CSS))
        self.status = "stopped · max_iterations"
        self._finish()

    def _on_turn_interrupted(self, p: dict[str, Any]) -> None:
        self.status = "interrupted"
        self._finish()

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

    @property
    def finished(self) -> bool:
        """True once the turn ended (done, failed, interrupted, stopped)."""
        return self.status.startswith(FINISHED)

    def _finish(self) -> None:
        self.activity = ""
        self._render_log()
        self._render_text()
        self._render_header()

    def _header_html(self) -> str:
        err = f'<div class="mx-error" style="color:{FAIL_CSS}">{esc(self.error)}</div>' if self.error else ""
        return (f'{THEME_STYLE}<div class="mx-live-head" style="{FONT}color:{MUTED}">{esc(self.header_text())}</div>'
                f'{err}')

    def log_lines(self) -> list[str]:
        """The compact log as text lines (tool calls, compactions, notes; the narration is in `text`)."""
        return [f"{ln.text}  {_decided(ln)}{ln.status}".rstrip() if ln.kind == "tool" else ln.text
                for ln in self.entries if ln.kind != "text"]

    def final_answer(self) -> str:
        """The text of the last model call once the turn is done (what the answer says)."""
        if not self.finished or not self.entries or self.entries[-1].kind != "text":
            return ""
        return self.entries[-1].text

    def _line_html(self, ln: LogLine, answer: LogLine | None) -> str:
        if ln.kind == "tool":
            status = f'<span style="color:{ln.color or OK_CSS}">{esc(ln.status)}</span>'
            if ln.status == "running":
                status = f'<span style="color:{MUTED}">running…</span>'
            decided = ""
            if ln.decision:
                color = OK_CSS if ln.decision.startswith("approved") else FAIL_CSS
                decided = f'<span class="mx-decision" style="color:{color}">{esc(_decided(ln))}</span>'
            head = f'{esc(ln.text)} &nbsp; {decided}{status}'
            if not ln.content.strip():
                return f'<div class="mx-tool" style="{MONO_FONT}">{head}</div>'
            return (f'<details class="mx-tool" style="{MONO_FONT}"><summary>{head} '
                    f'<span style="color:{MUTED}">[show]</span></summary><pre style="white-space:pre-wrap;'
                    f'margin:2px 0 4px 1.5em;padding:4px;border-left:2px solid {BORDER};{MONO_FONT}">'
                    f'{esc(ln.content)}</pre></details>')
        if ln.kind == "compaction":
            stage = ln.text.split(": ", 1)[1].split(" ·", 1)[0]
            return (f'<div style="{MONO_FONT}">{esc(ln.text)} {chip(stage, ln.color)} '
                    f'<span style="color:{MUTED}">[inspect below]</span></div>')
        if ln.kind == "text":
            if ln is answer:
                return ""  # shown set apart below the log
            return f'<div class="mx-narration" style="white-space:pre-wrap;margin:2px 0">{esc(ln.text)}</div>'
        return f'<div style="{MONO_FONT}color:{ln.color or "inherit"}">{esc(ln.text)}</div>'

    def _log_html(self) -> str:
        lines = self.entries[-self.max_log_lines:]
        answer = self.entries[-1] if self.final_answer() else None
        items = [self._line_html(ln, answer) for ln in lines]
        more = f'<div style="color:{MUTED}">showing {len(lines):,} of {len(self.entries):,} lines</div>' \
            if len(lines) < len(self.entries) else ""
        spin = ""
        if self.status == "running" and self.activity:
            spin = f'<div class="mx-activity" style="color:{MUTED}"><span class="mx-spinner"></span>' \
                   f'{esc(self.activity)}…</div>'
        return (f'{LIVE_STYLE}<div class="mx-live-log" style="{FONT}margin:4px 0">{more}{"".join(items)}{spin}'
                '</div>')

    def _render_log(self) -> None:
        self._log.value = self._log_html()

    def _text_html(self) -> str:
        answer = self.final_answer()
        if not answer:
            return ""
        return (f'<div class="mx-live-text mx-answer" style="{FONT}white-space:pre-wrap;margin:6px 0;padding:6px 10px;'
                f'border-left:3px solid {OK_CSS};background:var(--jp-layout-color2, transparent)">'
                f'<div style="color:{MUTED};font-size:11px;margin-bottom:2px">answer</div>{esc(answer)}</div>')

    def _render_text(self) -> None:
        self._text.value = self._text_html()

    def to_html(self) -> str:
        """The whole turn as static HTML: header, gauge, log in event order, the answer, each call's inspector."""
        parts = []
        for it in sorted(self.calls):
            insp = CompactionInspector(self.calls[it]).to_html()
            parts.append(f'<details><summary style="cursor:pointer">{esc(self._call_label(it))}</summary>'
                         f'{insp}</details>')
        calls = (f'<div class="mx-calls" style="{FONT}margin-top:4px"><div style="color:{MUTED}">inspect a model call '
                 f'(request view: what the model saw)</div>{"".join(parts)}</div>') if parts else ""
        return (f'<div class="mx-live mx-static">{self._header_html()}{gauge_html(self.gauge.data)}{self._log_html()}'
                f'{self._text_html()}{calls}</div>')

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        if self.finished:  # the final state as plain HTML/text: a saved notebook shows it without a kernel
            return {"text/plain": self.to_text(), "text/html": self.to_html()}
        return super()._repr_mimebundle_(**kwargs)

    def to_text(self) -> str:
        """Header, text gauge, log lines and the answer as plain text."""
        lines = [self.header_text(), gauge_text(self.gauge.data), *self.log_lines()]
        if self.text:
            lines.append(self.text)
        if self.error:
            lines.append(self.error)
        return "\n".join(lines)
