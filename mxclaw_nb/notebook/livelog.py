"""The live turn log of `%%agent`: streamed text, tool calls, compaction notices, as they happen.

Why: a turn can take minutes and the point of this project is to *see* the context being managed, so
the magic renders the loop's events while they arrive (UX.md, "A turn in a notebook"). One small
state object (`LiveLog`) turns events into lines; two outputs read it. In a kernel it is shown once
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

import json
import sys
import time
from typing import Any

from mxclaw_nb.tools.policy import shown_command, terminal_safe
from mxclaw_nb.widgets.livetext import (
    SPINNER_STYLE,
    activity_html,
    answer_html,
    narration_html,
    pretty_arguments,
    tool_line_html,
)
from mxclaw_nb.widgets.style import (
    FONT,
    MONO_FONT,
    MUTED,
    STAGE_COLORS,
    THEME_STYLE,
    WARN_CSS,
    chip,
    counted,
    counter_label,
    esc,
    fmt_int,
)

BAR_CELLS = 18
TOOL_PREVIEW_CHARS = 300  # text shown under a tool line
ARG_CHARS = 60
RUNNING_SHOW_CHARS = 600  # of a tool result under [show] while the turn runs (all of the preview at its end)


def gauge_line(view: Any, reported: int | None = None) -> str:
    """`[ctx ▓▓▓░░ 41,210 est. / 51,200 threshold / 64,000 window · unchanged]` for a RequestView."""
    window = max(int(view.window), 1)
    filled = min(BAR_CELLS, round(BAR_CELLS * view.after_tokens / window))
    bar = "▓" * filled + "░" * (BAR_CELLS - filled)
    extra = f" · {fmt_int(reported)} reported" if reported else ""
    return (f"[ctx {bar} {fmt_int(view.after_tokens)} {counter_label(view.counter)} / {fmt_int(view.threshold)} "
            f"threshold / {fmt_int(view.window)} window · {view.stage}{extra}]")


def args_summary(arguments: Any) -> str:
    """The one argument that says what a tool call does (command, path, pattern...), shortened."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        args = arguments
    if isinstance(args, dict):
        key = next((k for k in ("command", "path", "pattern", "query", "artifact_id") if k in args), None)
        values = [args[key]] if key else [v for v in args.values() if isinstance(v, str | int | float)][:2]
        text = " ".join(str(v) for v in values)
    else:
        text = "" if args is None else str(args)
    text = " ".join(text.split())
    return text if len(text) <= ARG_CHARS else text[: ARG_CHARS - 1] + "…"


def _outcome(p: dict[str, Any]) -> str:
    exit_code = p.get("exit_code")
    failed = f"failed (exit {exit_code})" if exit_code not in (None, 0) else "failed"
    state = failed if p.get("is_error") else "ok"
    parts = [state, f"{fmt_int(p.get('chars'))} chars"]
    if p.get("artifact_id"):
        parts.append(f"artifact {p['artifact_id']}")
    return " · ".join(parts)


class LiveLog:
    """Turns loop events into log entries and shows them (display handle, printed lines, or nothing)."""

    def __init__(self, label: str, session_id: str, *, mode: str = "display", throttle: float = 0.3,
                 widget: Any = None) -> None:
        if mode not in ("display", "print", "off"):
            raise ValueError(f"mode must be display, print or off (got {mode!r})")
        self.label, self.session_id, self.mode, self.throttle = label, session_id, mode, throttle
        self.widget = widget
        self.turn: int | None = None
        self.gauge: str | None = None
        self.entries: list[dict[str, Any]] = []
        self.status: str | None = None
        self.activity = ""  # what the running turn waits for (shown with a spinner)
        self._iteration: int | None = None
        self._reported: int | None = None
        self._view: Any = None
        self._handle: Any = None
        self._last_update = 0.0
        self._streaming = False  # print mode: the cursor is inside streamed text

    # -- events ------------------------------------------------------------------------------------
    def header(self) -> str:
        """`demo model (offline) · session 3f2a91c0 · turn 2`."""
        turn = f" · turn {self.turn}" if self.turn is not None else ""
        return f"{self.label} · session {self.session_id[:8]}{turn}"

    def handle(self, kind: str, payload: dict[str, Any]) -> None:
        """Subscriber for `Agent.subscribe`: record the event and refresh the output."""
        if self.widget is not None:
            self.widget.handle(kind, payload)
        method = getattr(self, "_on_" + kind.replace(".", "_"), None)
        if method is not None:
            method(payload)

    def _on_turn_started(self, p: dict[str, Any]) -> None:
        self.turn = p.get("turn")
        if self.mode == "display":
            from IPython.display import display

            self._handle = display(self, display_id=True)
        self._print(self.header())
        if p.get("sandbox_warning"):
            note = f"⚠ {p['sandbox_warning']}"
            self.entries.append({"kind": "note", "text": note, "warning": True})
            self._print("  " + note)

    def _on_request_built(self, p: dict[str, Any]) -> None:
        self._iteration = p.get("iteration")
        call = f" (call {self._iteration})" if self._iteration else ""
        self.activity = f"waiting for the model{call}"
        self._view = p.get("view")
        if self._view is not None:
            self.gauge = gauge_line(self._view, self._reported)
            if p.get("iteration") == 1 or self._view.compacted:  # terminal: no per-call noise
                self._print("  " + self.gauge)
            self._refresh()

    def _on_model_completed(self, p: dict[str, Any]) -> None:
        usage = p.get("usage") or {}
        self._reported = usage.get("prompt_tokens")
        self.activity = ""
        if self._view is not None and self._reported:
            self.gauge = gauge_line(self._view, self._reported)
        self._refresh(force=False)  # a tool line or the turn's end follows at once and is always shown

    def _on_model_delta(self, p: dict[str, Any]) -> None:
        text = str(p.get("text") or "")
        if not text:
            return
        first = not (self.entries and self.entries[-1]["kind"] == "text"
                     and self.entries[-1].get("iteration") == self._iteration)
        if first:
            self.entries.append({"kind": "text", "text": text, "iteration": self._iteration})
            self.activity = ""
        else:
            self.entries[-1]["text"] += text
        if self.mode == "print":
            if not self._streaming:
                sys.stdout.write("  ")
                self._streaming = True
            sys.stdout.write(terminal_safe(text).replace("\n", "\n  "))
            sys.stdout.flush()
        self._refresh(force=first)  # the spinner leaves at once; then throttled

    def _on_tool_started(self, p: dict[str, Any]) -> None:
        self.entries.append({"kind": "tool", "call_id": p.get("call_id"), "name": p.get("name"),
                             "args": args_summary(p.get("arguments")), "outcome": "running…", "content": "",
                             "is_error": False, "arguments": pretty_arguments(p.get("arguments") or "")})
        self.activity = f"running {p.get('name') or 'a tool'}"
        self._refresh()

    def _on_tool_finished(self, p: dict[str, Any]) -> None:
        entry = next((e for e in reversed(self.entries) if e["kind"] == "tool" and e["call_id"] == p.get("call_id")),
                     None)
        if entry is None:
            entry = {"kind": "tool", "call_id": p.get("call_id"), "name": p.get("name"), "args": ""}
            self.entries.append(entry)
        entry.update(outcome=_outcome(p), content=str(p.get("content") or ""), is_error=bool(p.get("is_error")),
                     chars=p.get("chars"))
        self.activity = ""
        self._print(f"  → {entry['name']} {entry['args']}  {entry['outcome']}")
        preview = " ".join(entry["content"].split())[:TOOL_PREVIEW_CHARS]
        if preview and self.mode == "print":
            print(f"      {terminal_safe(preview)}{'…' if len(entry['content']) > TOOL_PREVIEW_CHARS else ''}")
        self._refresh(force=False)  # the next tool line or model call follows at once and is always shown

    def _on_context_compacted(self, p: dict[str, Any]) -> None:
        unit = str(p.get("tokens_are") or "estimate")
        entry = {"kind": "compaction", "stage": p.get("stage"), "iteration": p.get("iteration"),
                 "unit": counter_label("estimate" if unit == "estimates" else unit),
                 "before": p.get("before_tokens"), "after": p.get("after_tokens"), "summary": p.get("summary") or ""}
        self.entries.append(entry)
        self._print("  " + self._compaction_line(entry))
        self._refresh()

    def _on_approval_decided(self, p: dict[str, Any]) -> None:
        verb = "approved" if p.get("decision") == "allow" else "denied"
        command = shown_command(str(p.get("command") or ""))
        mark = "✓" if verb == "approved" else "✗"
        self._print(f"  {mark} {verb} by {p.get('by')}: {command}")
        entry = next((e for e in reversed(self.entries) if e["kind"] == "tool" and e["outcome"] == "running…"
                      and not e.get("decision")), None)
        if entry is not None:  # the decision sits on its tool line
            entry["decision"] = f"{mark} {verb} by {p.get('by')}"
        else:
            self.entries.append({"kind": "note", "text": f"{mark} {verb} by {p.get('by')}: {command}"})
        self._refresh()

    def _on_provider_note(self, p: dict[str, Any]) -> None:
        """L2: what the adapter did about this server (e.g. asked again without stream_options), one line."""
        text = f"ⓘ {' '.join(str(p.get('note') or '').split())}"
        self.entries.append({"kind": "note", "text": text})
        self._print("  " + text)
        self._refresh()

    def _on_context_summary(self, p: dict[str, Any], kind: str = "context.summary") -> None:
        """C11: the summary call, as its own line (accepted, merged, or rejected with the reason)."""
        from mxclaw_nb.context.model_summary import summary_note

        text = summary_note(kind, p)
        self.entries.append({"kind": "note", "text": text})
        self._print("  " + text)
        self._refresh()

    def _on_context_summary_rejected(self, p: dict[str, Any]) -> None:
        self._on_context_summary(p, "context.summary_rejected")

    def _on_frozen_note(self, p: dict[str, Any]) -> None:
        """L9: a project file of the frozen context was refused (a link out, a FIFO, ...): a warning line."""
        text = f"⚠ {' '.join(str(p.get('note') or '').split())}"
        self.entries.append({"kind": "note", "text": text, "warning": True})
        self._print("  " + text)
        self._refresh()

    def _on_turn_finished(self, p: dict[str, Any]) -> None:
        self.finish(f"done · {counted(p.get('iterations'), 'model call')}")

    def _on_turn_max_iterations(self, p: dict[str, Any]) -> None:
        self.finish(f"stopped: {p.get('limit')} model calls without a final answer (max_iterations)")

    def _on_turn_failed(self, p: dict[str, Any]) -> None:
        self.finish("failed (see below)")

    def _on_turn_interrupted(self, p: dict[str, Any]) -> None:
        self.finish("interrupted")

    # -- output ------------------------------------------------------------------------------------
    @staticmethod
    def _compaction_line(e: dict[str, Any]) -> str:
        return (f"⟳ context compacted before call {e['iteration']}: {e['stage']} · {fmt_int(e['before'])} → "
                f"{fmt_int(e['after'])} {e['unit']} tokens")

    def finish(self, status: str) -> None:
        """Mark the turn's end and make sure the last state is shown."""
        self.status, self.activity = status, ""
        if self.gauge and self._view is not None and not self._view.compacted:
            self._print("  " + self.gauge)
        self._print(f"  ({status})")
        self._refresh(force=True)

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

    def answer(self) -> dict[str, Any] | None:
        """The final answer's entry: the last model text, once the turn is done ('done' status)."""
        if not (self.status or "").startswith("done") or not self.entries or self.entries[-1]["kind"] != "text":
            return None
        return self.entries[-1]

    def to_text(self) -> str:
        """The whole log as plain text, in event order; the answer last, after a blank line."""
        lines = [self.header()]
        if self.gauge:
            lines.append("  " + self.gauge)
        answer = self.answer()
        for e in self.entries:
            if e is answer:
                continue
            if e["kind"] == "tool":
                decided = f"{e['decision']} · " if e.get("decision") else ""
                lines.append(f"  → {e['name']} {e['args']}  {decided}{e['outcome']}")
            elif e["kind"] == "compaction":
                lines.append("  " + self._compaction_line(e))
            elif e["kind"] == "note":
                lines.append("  " + e["text"])
            else:
                lines.extend("  " + line for line in e["text"].splitlines() or [""])
        if answer is not None:
            lines += [""] + ["  " + line for line in answer["text"].splitlines() or [""]]
        if self.status:
            lines.append(f"  ({self.status})")
        return terminal_safe("\n".join(lines))  # the text/plain form may reach a terminal (jupyter console)

    def _tool_html(self, e: dict[str, Any]) -> str:
        """A tool line; while the turn runs its [show] holds a shorter preview (every update re-sends the log)."""
        decision = str(e.get("decision") or "")
        if decision[:2] in ("✓ ", "✗ "):
            decision = decision[2:]
        running = e["outcome"] == "running…"
        return tool_line_html(f"→ {e['name']} {e['args']}".rstrip(), e["outcome"], running=running,
                              failed=bool(e.get("is_error")), decision=decision, arguments=e.get("arguments") or "",
                              output=(e.get("content") or "")[:None if self.status else RUNNING_SHOW_CHARS],
                              chars=e.get("chars") or len(e.get("content") or ""))

    def to_html(self) -> str:
        """The whole log as HTML in event order: tool lines open on [show], the answer set apart, a spinner."""
        out = [f'{THEME_STYLE}{SPINNER_STYLE}<div class="mx-live mx-live-log" style="{FONT}">'
               f'<div style="color:{MUTED}">{esc(self.header())}</div>']
        if self.gauge:
            out.append(f'<div style="{MONO_FONT}">{esc(self.gauge)}</div>')
        answer = self.answer()
        for e in self.entries:
            if e is answer:
                continue
            if e["kind"] == "tool":
                out.append(self._tool_html(e))
            elif e["kind"] == "compaction":
                color = STAGE_COLORS.get(str(e["stage"]), "#9e9e9e")
                out.append(f'<details><summary>⟳ context compacted before call {esc(e["iteration"])}: '
                           f'{chip(str(e["stage"]), color)} {fmt_int(e["before"])} → {fmt_int(e["after"])} '
                           f'{e["unit"]} tokens'
                           f'</summary><pre style="white-space:pre-wrap;{MONO_FONT}">{esc(e["summary"])}</pre>'
                           '</details>')
            elif e["kind"] == "note":
                warn = f"color:{WARN_CSS};font-weight:bold;" if e.get("warning") else ""
                out.append(f'<div style="{MONO_FONT}{warn}">{esc(e["text"])}</div>')
            else:
                out.append(narration_html(e["text"], e.get("iteration")))
        if answer is not None:
            out.append(answer_html(answer["text"]))
        if self.activity and not self.status:
            out.append(activity_html(self.activity))
        if self.status:
            out.append(f'<div style="color:{MUTED}">({esc(self.status)})</div>')
        return "".join(out) + "</div>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {"text/plain": self.to_text(), "text/html": self.to_html()}
