"""The compaction inspector: for one model call, what the transcript held and what the model saw.

Why: SPEC N2 asks for the before/after request views as DataFrames, one row per message with what
happened to it. Users debugging "why did the agent forget X" need exactly that: find the message,
see its action (kept, placeholder, summarized, dropped, synthetic, summary) and read the summary
that replaced it. The DataFrames are public (`before_df`, `after_df`) so they can be queried in
pandas; the widget filters them by role/action, colours rows per action with the shared palette,
and caps the rendered rows with a visible count so a 10,000-message session stays responsive.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import pandas as pd

from mxclaw_nb.context import ACTIONS, RequestView
from mxclaw_nb.messages import content_text, modernize_legacy_calls
from mxclaw_nb.records import summary_parts
from mxclaw_nb.store.records import opt_int
from mxclaw_nb.widgets.cost import cache_header
from mxclaw_nb.widgets.data import (
    BY_CALL,
    CallData,
    after_frame,
    before_frame,
    from_request,
    from_view,
    table_choices,
    table_columns,
    table_rows,
)
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    ACTION_COLORS,
    BORDER,
    BORDER_STRONG,
    DEFAULT_MAX_ROWS,
    FAIL_CSS,
    FONT,
    MONO_FONT,
    MUTED,
    THEME_STYLE,
    chip,
    color_of,
    counted,
    counter_label,
    esc,
    fmt_int,
    ink_on,
    preview_text,
    shown_count,
    unit_label,
)

ALL = "(all)"
MESSAGE_CHARS = 20_000
ROW_CHARS = 1_500  # of a message opened from a row of the static HTML (each call's log repeats the transcript)
PRE = (f"white-space:pre-wrap;overflow-wrap:anywhere;margin:2px 0 6px 1.6em;max-height:24em;overflow:auto;"
       f"{MONO_FONT}")


def _cell(col: str, value: Any, failure: bool = False) -> str:
    if col == "action":
        return chip(str(value), color_of("action", value))
    if col in ("tokens", "tokens_before", "tokens_after"):
        return fmt_int(value)
    if col == BY_CALL:
        return "" if value is None or value is pd.NA else esc(value)
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    text = esc(value)
    if col == "role" and failure:
        return f'{text} <span style="color:{FAIL_CSS}" title="failed tool result">✖ failed</span>'
    return text


def column_title(col: str, unit: str) -> str:
    """Shown column name: token columns name their unit (`tokens before (est.)`)."""
    inner = unit[len("tokens ("):-1] if unit.startswith("tokens (") else unit
    titles = {"tokens": f"tokens ({inner})", "tokens_before": f"tokens before ({inner})",
              "tokens_after": f"tokens after ({inner})", BY_CALL: "by call", "position": "#", "source": "from #"}
    return titles.get(col, col)


# Column widths of the row grid; the preview takes the rest and wraps.
WIDTHS = {"position": "3.2em", "source": "3.8em", "role": "8.5em", "tool": "7.5em", "tokens": "6.5em",
          "tokens_before": "6.5em", "tokens_after": "6.5em", "action": "8.6em", BY_CALL: "3.5em"}
NUMERIC = ("position", "source", "tokens", "tokens_before", "tokens_after", BY_CALL)


def _grid(cols: list[str]) -> str:
    return ("display:grid;grid-template-columns:" + " ".join(WIDTHS.get(c, "minmax(12em,1fr)") for c in cols)
            + ";column-gap:8px;align-items:baseline;padding:1px 6px")


def frame_html(df: pd.DataFrame, *, max_rows: int = DEFAULT_MAX_ROWS, total: int | None = None,
               noun: str = "messages", unit: str = "tokens (est.)",
               full_text: Callable[[dict[str, Any]], str | None] | None = None) -> str:
    """An inspector table as HTML rows that open on a click: action chips, failure marks, a visible count.

    Each row is a `<details>` element, so "a row opens the whole message" (UX.md) works in a live
    widget, in static HTML after a reopen and in an exported notebook alike, without a kernel.
    """
    shown = df.head(max_rows)
    return rows_html(list(shown.columns), shown.to_dict("records"), total=len(df) if total is None else total,
                     noun=noun, unit=unit, full_text=full_text)


def rows_html(columns: list[str], records: list[dict[str, Any]], *, total: int, noun: str = "messages",
              unit: str = "tokens (est.)", full_text: Callable[[dict[str, Any]], str | None] | None = None) -> str:
    """`frame_html` of the rows shown (`records`, as a frame's `to_dict("records")` gives them, of `total`)."""
    cols = [c for c in columns if c != "failure"]
    grid = _grid(cols)
    head = "".join(f'<div style="{"text-align:right" if c in NUMERIC else ""}">{esc(column_title(c, unit))}</div>'
                   for c in cols)
    rows = []
    for rec in records:
        fail = bool(rec.get("failure", False))
        color = ACTION_COLORS.get(str(rec.get("action")), "transparent")
        cells = "".join(
            f'<div style="{_cell_style(c, j == len(cols) - 1)}">{_cell(c, rec[c], fail)}</div>'
            for j, c in enumerate(cols))
        text = full_text(rec) if full_text is not None else None
        if text is not None and " ".join(text.split()) == str(rec.get("preview") or ""):
            text = "(the preview is the whole message)"  # short: no second copy in the saved notebook
        body = (f'<pre class="mx-full" style="{PRE}">{esc(text)}</pre>' if text is not None else
                f'<div style="color:{MUTED};margin:2px 0 6px 1.6em">the full text is not available here '
                '(a stored record without its transcript)</div>')
        rows.append(f'<details class="mx-row" data-role="{esc(rec.get("role"))}" data-action="{esc(rec.get("action"))}"'
                    f' style="border-bottom:1px solid {BORDER}"><summary title="click: the whole message" '
                    f'style="{grid};cursor:pointer;list-style:none;box-shadow:inset 4px 0 0 {color}">{cells}</summary>'
                    f'{body}</details>')
    count = shown_count(len(rows), total, noun)
    return (f'<div class="mx-table" style="{FONT}"><div class="mx-count" style="color:{MUTED}">{esc(count)} · '
            f'click a row to open the whole message</div><div class="mx-thead" style="{grid};color:{MUTED};'
            f'border-bottom:1px solid {BORDER_STRONG}">{head}</div>{"".join(rows)}</div>')


def _cell_style(col: str, last: bool) -> str:
    if last:
        return "overflow-wrap:anywhere;min-width:0"
    # min-width:0 lets a grid cell shrink below its text; an ellipsis says the text goes on (a click opens it)
    return ("text-align:right;" if col in NUMERIC else "") + "white-space:nowrap;overflow:hidden;min-width:0;" \
        "text-overflow:ellipsis"


# ipywidgets gives every tab 144 px, which cut "Before (transcript, 19 msgs)" to "Before (transcript, 19": the
# inspector's tabs take the width of their titles
TAB_STYLE = ("<style>.mx-compaction-inspector .widget-tab > .lm-TabBar .lm-TabBar-tab,"
             ".mx-compaction-inspector .widget-tab > .p-TabBar .p-TabBar-tab{flex:0 0 auto;max-width:none}</style>")


class CompactionInspector(StaticReprMixin, widgets.VBox):
    """Stage, tokens, summary and the before/after DataFrames of one model call, with filters."""

    def __init__(self, view_or_request: RequestView | CallData | Any, *, max_rows: int = DEFAULT_MAX_ROWS,
                 transcript: Any = None, live: bool = False, **kwargs: Any) -> None:
        """`transcript`: the session's stored messages, so a stored record's rows are the transcript (SPEC N3).

        `live=False` (default): displayed as static HTML — sections and rows open on a click, role/action
        filters work without a kernel — so a saved notebook shows it after a reopen; `live=True`: displayed
        as the widget (tabs, dropdown filters, `open #`), which needs its kernel."""
        self.static_display = not live
        if isinstance(view_or_request, RequestView):
            data = from_view(view_or_request)
        elif isinstance(view_or_request, CallData):
            data = view_or_request
        elif isinstance(view_or_request, (dict, pd.Series)):
            data = from_request(view_or_request, transcript)
        else:
            raise TypeError("CompactionInspector needs a RequestView, a stored request row (dict/Series) or CallData, "
                            f"got {type(view_or_request).__name__}")
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.data, self.max_rows = data, max_rows
        self.before_df = before_frame(data)
        self.after_df = after_frame(data)
        roles = sorted({*self.before_df["role"].dropna(), *self.after_df["role"].dropna()})
        present = {*self.before_df["action"], *self.after_df["action"]}
        self.role_filter = widgets.Dropdown(options=[ALL, *roles], value=ALL, description="role")
        self.action_filter = widgets.Dropdown(options=[ALL, *[a for a in ACTIONS if a in present]], value=ALL,
                                              description="action")
        self._header = widgets.HTML(TAB_STYLE + self.header_html())
        self._before = widgets.HTML()
        self._after = widgets.HTML()
        summary = widgets.HTML(self.summary_html())
        self.tabs = widgets.Tab(children=[self._before, self._after, summary])
        before_title = "Before (transcript, " if data.transcript_relative else "Before ("
        self.tabs.titles = (f"{before_title}{counted(len(self.before_df), 'msg')})",
                            f"After (sent, {counted(len(self.after_df), 'msg')})", "Summary")
        children: list[widgets.Widget] = [self._header, widgets.HBox([self.role_filter, self.action_filter]),
                                          self.tabs]
        if data.inputs is not None:
            self.open_position = widgets.BoundedIntText(value=0, min=0, max=max(len(data.inputs) - 1, 0),
                                                        description="open #")
            self._message = widgets.HTML()
            self.open_position.observe(lambda _: self._show_message(), names="value")
            children.append(widgets.VBox([self.open_position, self._message]))
        super().__init__(children=children, **kwargs)
        self.add_class("mx-compaction-inspector")
        self.role_filter.observe(lambda _: self._refresh(), names="value")
        self.action_filter.observe(lambda _: self._refresh(), names="value")
        self._refresh()

    @classmethod
    def from_request(cls, store: Any, session_id: str, turn: int, iteration: int, **kwargs: Any) -> CompactionInspector:
        """The inspector of a stored model call, read from `store.requests(session_id)` (last record wins)."""
        match = store.requests(session_id, turn=turn, iteration=iteration)  # only the records asked for
        if not len(match):
            raise LookupError(f"no stored request for session {session_id!r}, turn {turn}, call {iteration}")
        kwargs.setdefault("transcript", modernize_legacy_calls(store.load_transcript(session_id)))  # C4, N3
        return cls(match.iloc[-1], **kwargs)

    def filtered(self, which: str = "before") -> pd.DataFrame:
        """The before/after DataFrame with the current role/action filters applied."""
        if which not in ("before", "after"):
            raise ValueError("which must be 'before' or 'after'")
        df = self.before_df if which == "before" else self.after_df
        if self.role_filter.value != ALL:
            df = df[df["role"] == self.role_filter.value]
        if self.action_filter.value != ALL:
            df = df[df["action"] == self.action_filter.value]
        return df

    def styled(self, which: str = "before") -> Any:
        """The filtered DataFrame as a pandas Styler with the action colours (needs jinja2)."""
        try:
            import jinja2  # noqa: F401 - pandas' Styler needs it
        except ImportError as exc:
            raise ImportError("styled() needs jinja2 (pip install jinja2); the widget itself does not") from exc
        df = self.filtered(which)
        def cell(action: Any) -> str:
            color = color_of("action", action)
            return f"background-color: {color}; color: {ink_on(color)}"
        return df.style.map(cell, subset=["action"])

    def header_html(self) -> str:
        """`Stage: summary · before 72,060 → after 17,391 tokens (est.) · threshold 51,200 · tail starts at #37`."""
        d, r = self.data, self.data.record
        unit, row_unit = unit_label(r.counter), unit_label(d.row_counter)
        tail = f" · tail starts at #{d.tail_start}" if d.tail_start is not None else ""
        where = f" · turn {r.turn}, call {r.iteration}" if r.turn is not None else ""
        retry = " · prompt-too-long retry" if r.retry else ""
        err = "".join(f'<div style="color:{FAIL_CSS}">{esc(e)}</div>' for e in (r.compactor_error, r.error) if e)
        carries = _carries(d)
        carried = f" · {esc(carries)}" if carries else ""
        stored = (f'<div style="color:{MUTED}">Before: the stored transcript up to this call, '
                  f'{counted(len(d.before), "msg")}, {fmt_int(sum(int(r.get("tokens_before", 0)) for r in d.before))} '
                  f'{esc(row_unit)}; actions are relative to it across the turn (SPEC N3)</div>'
                  if d.transcript_relative else "")
        rows = (f'<div class="mx-unit-note" style="color:{MUTED}">rows: {esc(row_unit)}, the C1 estimate of each '
                f'message; the stage was decided on {esc(unit)} (the totals above)</div>' if row_unit != unit else "")
        extra = r.extra or {}
        defs = opt_int(extra.get("tool_definitions_tokens"))
        tools = (f'<div class="mx-tool-defs" style="color:{MUTED}">tool definitions: {fmt_int(defs)} tokens (est.), '
                 'in the totals above, on no row (the schemas every request carries; T1-T3)</div>' if defs else "")
        gain = extra.get("nothing_to_gain")
        no_gain = (f'<div class="mx-no-gain" style="color:{MUTED}">{esc(str(gain.get("stage")))} compaction tried: '
                   f'nothing to gain ({fmt_int(opt_int(gain.get("before_tokens")))} → '
                   f'{fmt_int(opt_int(gain.get("after_tokens")))}), sent unchanged</div>'
                   if isinstance(gain, dict) else "")
        return (f'<div class="mx-inspector-head" style="{FONT}">Stage: {chip(r.stage, color_of("stage", r.stage))}'
                f'{carried} · before {fmt_int(r.before_tokens)} → after <b>{fmt_int(r.after_tokens)}</b> '
                f'<b>{esc(unit)}</b> · threshold {fmt_int(r.threshold)}{tail}{where}{retry}'
                f'<div style="color:{MUTED}">request view: what the model saw — the stored transcript is unchanged'
                f'</div>{tools}{no_gain}{cache_header(r)}{stored}{rows}{err}</div>')  # E1-E3: cache figures

    def summary_html(self) -> str:
        """The summary (or micro/fallback note) text, in full; carried summaries name the call that made them."""
        d = self.data
        summary, sent = _sent_summaries(d)
        if sent:
            mine = summary and all(text != summary for _, text in sent)
            own = [(d.record.iteration, summary)] if mine else []
            parts = [f'<div style="color:{MUTED}">{esc(_summary_title(d, call))}</div>'
                     f'<pre class="mx-summary" style="white-space:pre-wrap;{FONT}">{esc(text)}</pre>'
                     for call, text in [*own, *sent]]
            return "".join(parts)
        if not summary:
            return f'<div class="mx-summary" style="{FONT}color:{MUTED}">no summary: nothing was compacted</div>'
        return (f'<pre class="mx-summary" style="white-space:pre-wrap;{FONT}">{esc(summary)}</pre>')

    def message_text(self, position: int) -> str:
        """Full text of transcript message `position` (live views, and stored records read with their transcript)."""
        if self.data.inputs is None:
            raise LookupError("full messages need a live RequestView or a stored record read with its transcript")
        return _message_text(self.data.inputs[position])

    def _show_message(self) -> None:
        pos = int(self.open_position.value)
        text = self.message_text(pos)
        shown = text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + f"\n… ({len(text):,} chars in all)"
        self._message.value = f'<pre style="white-space:pre-wrap;{FONT}">#{pos}: {esc(shown)}</pre>'

    def full_text(self, which: str, rec: dict[str, Any]) -> str | None:
        """The whole text behind a before/after row (capped for display), or None when it is not at hand."""
        d = self.data
        pos, src = rec.get("position"), rec.get("source")
        text: str | None = None
        if which == "after" and d.sent is not None and _ok(pos) and int(pos) < len(d.sent):
            text = _message_text(d.sent[int(pos)])
        elif which == "after" and rec.get("action") == "summary":
            head = " ".join(str(rec.get("preview") or "").split())[:40]
            own, sent = _sent_summaries(d)
            text = next((t for _, t in sent if " ".join(t.split()).startswith(head)), own)
        elif d.inputs is not None:
            at = pos if which == "before" else src
            if _ok(at) and int(at) < len(d.inputs):
                text = _message_text(d.inputs[int(at)])
                if which == "after":
                    text = f"stored message #{int(at)} (sent as: {rec.get('preview')}):\n{text}"
        if text is None:
            return None
        return text if len(text) <= ROW_CHARS else text[:ROW_CHARS] + f"\n… ({len(text):,} chars in all)"

    def _table(self, which: str, df: pd.DataFrame) -> str:
        return frame_html(df, max_rows=self.max_rows, unit=unit_label(self.data.row_counter),
                          full_text=lambda rec: self.full_text(which, rec))

    def _static_table(self, which: str) -> str:
        """The unfiltered table of the static HTML: the first `max_rows` rows of the call's, read without making
        its frame (S4: the policy lab redraws it at every call-slider move)."""
        d = self.data
        return rows_html(table_columns(d, which), table_rows(d, which, self.max_rows),
                         total=len(d.before if which == "before" else d.after), unit=unit_label(d.row_counter),
                         full_text=lambda rec: self.full_text(which, rec))

    def _refresh(self) -> None:
        self._before.value = self._table("before", self.filtered("before"))
        self._after.value = self._table("after", self.filtered("after"))

    def to_html(self) -> str:
        """Header, role/action filters, both tables (capped, rows open on a click) and the summary, as static HTML.

        The filters are radio buttons and CSS (`:has()`), so they work without a kernel; the visible
        `showing N of M` count is that of the unfiltered table.
        """
        uid = f"mx-i{uuid.uuid4().hex[:10]}"  # radio groups and CSS rules of this output only
        head = 'style="cursor:pointer;font-weight:600;margin:6px 0 2px"'
        choices = table_choices(self.data)
        return (f'{THEME_STYLE}{_filter_style(uid, choices)}'
                f'<div class="mx-inspector" id="{uid}" style="{FONT}">{self.header_html()}'
                f'{_filter_html(uid, choices)}'
                f'<details open><summary {head}>Before (transcript, {counted(len(self.data.before), "msg")})</summary>'
                f'{self._static_table("before")}</details>'
                f'<details><summary {head}>After (sent, {counted(len(self.data.after), "msg")})</summary>'
                f'{self._static_table("after")}</details>'
                f'<details><summary {head}>Summary</summary>{self.summary_html()}</details></div>')

    def to_text(self) -> str:
        """Header, action counts and the summary preview as text."""
        d, r = self.data, self.data.record
        unit = counter_label(r.counter)
        counts = self.before_df["action"].value_counts()
        acts = ", ".join(f"{a} {int(counts[a])}" for a in ACTIONS if a in counts)
        tail = f"   tail starts at #{d.tail_start}" if d.tail_start is not None else ""
        carries = _carries(d)
        stage = r.stage + (" · " + carries if carries else "")
        lines = [f"Stage: {stage}    before {fmt_int(r.before_tokens)} {unit}  →  after {fmt_int(r.after_tokens)} "
                 f"{unit}   threshold {fmt_int(r.threshold)}{tail}",
                 f"Before (transcript): {shown_count(len(self.before_df), len(self.before_df), 'msgs')} · {acts}",
                 f"After (sent): {counted(len(self.after_df), 'msg')}"]
        own, sent = _sent_summaries(d)
        if sent:
            lines += [f"{_summary_title(d, call)}: " + preview_text(text, 300) for call, text in sent]
        elif own:
            lines.append("Summary: " + preview_text(own, 300))
        return "\n".join(lines)


def _ok(value: Any) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and value != value)


def _message_text(msg: Any) -> str:
    if not isinstance(msg, dict):
        return str(msg)
    text = content_text(msg.get("content"))
    if msg.get("tool_calls"):
        text += "\n" + json.dumps(msg["tool_calls"], ensure_ascii=False, indent=1)
    return text


def _filter_style(uid: str, choices: dict[str, list[str]]) -> str:
    rules = [f'#{uid}:has(#{uid}-{kind}-{i}:checked) .mx-row:not([data-{kind}="{esc(v)}"]){{display:none}}'
             for kind, values in choices.items() for i, v in enumerate(values)]
    return f"<style>{''.join(rules)}</style>"


def _filter_html(uid: str, choices: dict[str, list[str]]) -> str:
    out = []
    for kind, values in choices.items():
        radios = [f'<label style="margin-right:8px;white-space:nowrap;cursor:pointer"><input type="radio" '
                  f'name="{uid}-{kind}" checked> (all)</label>']
        radios += [f'<label style="margin-right:8px;white-space:nowrap;cursor:pointer"><input type="radio" '
                   f'name="{uid}-{kind}" id="{uid}-{kind}-{i}"> {esc(v)}</label>' for i, v in enumerate(values)]
        out.append(f'<div class="mx-filter-{kind}"><span style="color:{MUTED}">{kind}:</span> {"".join(radios)}</div>')
    return f'<div class="mx-filters" style="margin:4px 0">{"".join(out)}</div>'


def _sent_summaries(d: CallData) -> tuple[str | None, list[tuple[int, str]]]:
    """The call's own compaction text and the (call, text) of every summary it sent (from the lineage, else
    from the stored `summary` column, which names the call that made each carried one: N3)."""
    parts = summary_parts(d.record.summary)
    own = next((t for c, t in parts if c is None), None)
    sent = list(d.summaries) or [(c, t) for c, t in parts if c is not None]
    return own, sent


def _carries(d: CallData) -> str:
    """`carries the summary of call 1 and 2 placeholders` (the part of `d.carried` after the stage)."""
    if not d.carried or " · " not in d.carried:
        return ""
    return d.carried.split(" · ", 1)[1]


def _summary_title(d: CallData, call: int | None) -> str:
    if call is not None and d.record.iteration is not None and call != d.record.iteration:
        return f"summary made by call {call} of this turn, carried (pinned, SPEC C7)"
    return f"summary made by this call (call {call})" if call is not None else "summary"
