"""How one line of the live turn log reads, as HTML and text: narration, tool lines, the answer, the spinner.

Why: the live log is drawn twice — `LiveTurnView` (ipywidgets) and `LiveLog` (a display handle, or
printed lines in a terminal), both over the one turn model (`widgets.turnlog.TurnLog`) — and both
must read the same (UX.md, "A turn in a notebook"): events
in the order they happened, each tool line openable (`[show]`: its arguments and its output, in
monospace), the approval decision on its tool line, narration between calls visibly not the answer,
the final answer set apart, a spinner while the model has not said anything yet. The rendering is
plain functions over plain values (a log line is a `LogLine`), so both views and a saved notebook's
static HTML share it.
Model text is shown as written: code spans, indented/fenced blocks and tracebacks in monospace, the
rest as prose; nothing is cut at a period.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mxclaw_nb.widgets.style import BORDER, FAIL_CSS, FONT, MONO_FONT, MUTED, OK_CSS, chip, esc, preview_text

ARG_KEYS = ("path", "command", "pattern", "query", "url", "artifact_id")
SPINNER_STYLE = ("<style>@keyframes mx-spin{to{transform:rotate(360deg)}}.mx-spinner{display:inline-block;width:8px;"
                 "height:8px;margin-right:6px;border:2px solid currentColor;border-right-color:transparent;"
                 "border-radius:50%;animation:mx-spin .8s linear infinite}"
                 ".mx-live-log details>summary{cursor:pointer}.mx-live-log details>summary::marker{font-size:9px}"
                 ".mx-live-log code{font-family:var(--jp-code-font-family,monospace);font-size:11.5px}</style>")
# ipywidgets' HTML sets line-height to the 28 px widget row height; log text reads better at text height
LINE = "line-height:1.45;"
PRE = f"white-space:pre-wrap;margin:2px 0;{MONO_FONT}{LINE}"
ARGS_CHARS = 4_000  # of a tool call's arguments, shown under [show]
_FENCE = re.compile(r"^\s*```")
_TRACEBACK_START = re.compile(r"^(Traceback \(most recent call last\):|\s*File \".*\", line \d+)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _kind(line: str, previous: str | None) -> str:
    if not line.strip() and previous is not None:
        return previous  # a blank line stays in its block
    return "code" if line.startswith(("    ", "\t")) or _TRACEBACK_START.match(line) else "prose"


def _blocks(text: str) -> list[tuple[str, str]]:
    """(`prose` | `code`, text) blocks: fenced blocks, indented runs and tracebacks are code."""
    blocks: list[tuple[str, list[str]]] = []
    fenced = traceback = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            kind = "code"
        elif line.startswith("Traceback (most recent call last):"):
            traceback, kind = True, "code"
        elif traceback:
            kind = "code"
            traceback = not (line and not line[0].isspace())  # the exception line ends a traceback
        else:
            kind = _kind(line, blocks[-1][0] if blocks else None)
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    out = []
    for i, (kind, lines) in enumerate(blocks):
        text = "\n".join(lines)
        if kind == "code":
            text = text.strip("\n")
        else:
            text = text.lstrip("\n") if i else text
            text = text.rstrip("\n") if i + 1 < len(blocks) else text
        if text:
            out.append((kind, text))
    return out


def rich_text_html(text: str) -> str:
    """Model text as HTML: prose keeps its line breaks, `code` spans, code blocks and tracebacks in monospace."""
    parts = []
    for kind, block in _blocks(text):
        if kind == "code":
            parts.append(f'<pre class="mx-code" style="{PRE}">{esc(block)}</pre>')
        else:
            prose = _CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", esc(block))
            parts.append(f'<span style="white-space:pre-wrap">{prose}</span>')
    return "".join(parts)


def pretty_arguments(arguments: Any) -> str:
    """A tool call's arguments as indented JSON (the raw string when it is not JSON), bounded."""
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else arguments
        text = json.dumps(value, ensure_ascii=False, indent=1)
    except (TypeError, ValueError):
        text = str(arguments)
    return text if len(text) <= ARGS_CHARS else text[:ARGS_CHARS] + f"\n… ({len(text):,} chars in all)"


def decision_html(decision: str) -> str:
    """`✓ approved by user · ` (green) or `✗ denied by policy · ` (red); '' when nobody was asked."""
    if not decision:
        return ""
    ok = decision.startswith("approved")
    return (f'<span class="mx-decision" style="color:{OK_CSS if ok else FAIL_CSS}">'
            f'{"✓" if ok else "✗"} {esc(decision)} · </span>')


def tool_line_html(head: str, outcome: str, *, running: bool = False, failed: bool = False, decision: str = "",
                   arguments: str = "", output: str = "", chars: int | None = None) -> str:
    """One tool line; `[show]` opens its arguments and output (a <details>, so static HTML opens it too)."""
    color = FAIL_CSS if failed else OK_CSS
    status = (f'<span style="color:{MUTED}">running…</span>' if running
              else f'<span style="color:{color}">{esc(outcome)}</span>')
    summary = f"{esc(head)} &nbsp; {decision_html(decision)}{status}"
    if not arguments and not output:
        return f'<div class="mx-tool" style="{MONO_FONT}{LINE}">{summary}</div>'
    more = f"\n… ({chars:,} chars in all; the full result is stored)" if chars and chars > len(output) else ""
    body = f'<div style="color:{MUTED}">arguments</div><pre style="{PRE}">{esc(arguments)}</pre>' if arguments else ""
    if output or not running:
        body += (f'<div style="color:{MUTED}">output</div><pre class="mx-tool-output" style="{PRE}">'
                 f'{esc(output) or "(empty)"}{esc(more)}</pre>')
    return (f'<details class="mx-tool" style="{MONO_FONT}{LINE}"><summary>{summary} '
            f'<span style="color:{MUTED}">[show]</span></summary><div style="margin:2px 0 4px 1.5em;padding:2px 6px;'
            f'border-left:2px solid {BORDER}">{body}</div></details>')


def narration_html(text: str, call: int | None, *, partial: bool = False) -> str:
    """What the model said before its tool calls: muted and labelled, so it is not read as the answer.

    `partial`: cut by an interrupt (L4: stored so, labelled partial)."""
    label = f"call {call} · " if call is not None else ""
    label += "partial: interrupted · " if partial else ""
    return (f'<div class="mx-narration" style="{FONT}{LINE}margin:3px 0;padding-left:8px;'
            f'border-left:2px dotted {BORDER}">'
            f'<span style="color:{MUTED};font-size:11px">{label}model</span> {rich_text_html(text)}</div>')


def answer_html(text: str) -> str:
    """The final answer, set apart: a bordered block titled `answer`."""
    return (f'<div class="mx-live-text mx-answer" style="{FONT}{LINE}margin:6px 0;padding:6px 10px;'
            f'border-left:3px solid {OK_CSS};background:var(--jp-layout-color2, transparent)">'
            f'<div style="color:{MUTED};font-size:11px;margin-bottom:2px">answer</div>{rich_text_html(text)}</div>')


def activity_html(activity: str, *, style: bool = True) -> str:
    """A spinner and what the turn waits for (`waiting for the model (call 2)…`); '' when idle.

    `style=False` leaves out the spinner's CSS (a live view that carries it once already)."""
    if not activity:
        return ""
    return (f'{SPINNER_STYLE if style else ""}<div class="mx-activity" style="{FONT}color:{MUTED}">'
            f'<span class="mx-spinner"></span>{esc(activity)}…</div>')


@dataclass
class LogLine:
    """One line of the live log: a tool call, a compaction, a note or the model's narration."""

    kind: str  # "tool" | "compaction" | "note" | "text" (the model's narration, in event order)
    text: str
    status: str = ""  # tool: running|ok|failed ...
    color: str = ""
    call_id: str | None = None
    iteration: int | None = None
    decision: str = ""  # tool: "approved by user", "denied by policy"...
    content: str = ""  # tool: the start of the result, shown on demand
    arguments: str = ""  # tool: the call's arguments (indented JSON), shown on demand
    chars: int | None = None  # tool: length of the whole result
    warning: bool = False  # note: a warning (L5: the shell runs unconfined), shown in the warning colour
    partial: bool = False  # text: cut by an interrupt, stored labelled partial (L4)
    inspector: str = ""  # compaction: the static inspector of its call, opened in place (N6)


def _decided(line: LogLine) -> str:
    """`✓ approved by user · ` before a tool line's outcome ('' when nobody was asked)."""
    if not line.decision:
        return ""
    return f"{'✓' if line.decision.startswith('approved') else '✗'} {line.decision} · "


def arg_summary(arguments: Any) -> str:
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

def line_text(ln: LogLine) -> str:
    """One log line as text: a tool line with its decision and outcome, else the line's text."""
    if ln.kind == "tool":
        return f"{ln.text}  {_decided(ln)}{ln.status}".rstrip()
    return f"{ln.text}\n(partial: interrupted)" if ln.partial else ln.text


def compaction_html(ln: LogLine) -> str:
    """`⟳ context compacted before call 3: summary · ...` opening its call's inspector (or summary) in place (N6).

    A <details> (no class: static HTML, a saved notebook and a browser without a kernel open it too)."""
    from mxclaw_nb.widgets.style import color_of

    stage = ln.status or ln.text.split(": ", 1)[1].split(" ·", 1)[0]
    summary = ln.content or "(no summary text: this stage dropped or shortened messages; %agent view lists them)"
    body = ln.inspector or f'<pre style="{PRE}">{esc(summary)}</pre>'
    head = (f'{esc(ln.text)} {chip(stage, color_of("stage", stage))} '
            f'<span style="color:{MUTED}">[inspect call {esc(ln.iteration)}]</span>')
    return (f'<details><summary class="mx-compaction" style="{MONO_FONT}{LINE}">{head}</summary>'
            f'<div class="mx-compaction-inspector" style="margin:2px 0 6px 1.5em">{body}</div></details>')


def line_html(ln: LogLine, answer: LogLine | None = None) -> str:
    """One log line as HTML ('' for the answer's text line, which is shown apart by `answer_html`)."""
    if ln.kind == "tool":  # [show] (arguments and output) comes with the result: a line is sent whole once
        running = ln.status == "running"
        return tool_line_html(ln.text, ln.status, running=running, failed=bool(ln.color), decision=ln.decision,
                              arguments="" if running else ln.arguments, output=ln.content, chars=ln.chars)
    if ln.kind == "compaction":
        return compaction_html(ln)
    if ln.kind == "text":
        if ln is answer:
            return ""
        return narration_html(ln.text, ln.iteration, partial=ln.partial)
    weight = "font-weight:bold;" if ln.warning else ""
    text = esc(ln.text)
    if ln.text.startswith("ⓘ "):  # drawn, not a glyph: common UI and monospace fonts lack U+24D8
        text = (f'<span class="mx-info" title="note" style="display:inline-block;width:1.1em;height:1.1em;'
                f'line-height:1.1em;border:1px solid currentColor;border-radius:50%;text-align:center;'
                f'font-size:10px;font-style:italic;font-weight:bold">i</span>{esc(ln.text[1:])}')
    return f'<div class="mx-note" style="{FONT}{LINE}{weight}color:{ln.color or "inherit"}">{text}</div>'
