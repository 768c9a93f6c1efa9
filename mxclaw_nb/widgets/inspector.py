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
from typing import Any

import ipywidgets as widgets
import pandas as pd

from mxclaw_nb.context import ACTIONS, RequestView
from mxclaw_nb.messages import content_text
from mxclaw_nb.widgets.data import CallData, after_frame, before_frame, from_request, from_view
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    ACTION_COLORS,
    DEFAULT_MAX_ROWS,
    FAIL_CSS,
    FONT,
    MUTED,
    THEME_STYLE,
    chip,
    color_of,
    counter_label,
    esc,
    fmt_int,
    html_table,
    preview_text,
    shown_count,
    unit_label,
)

ALL = "(all)"
MESSAGE_CHARS = 20_000


def _cell(col: str, value: Any, failure: bool = False) -> str:
    if col == "action":
        return chip(str(value), color_of("action", value))
    if col in ("tokens", "tokens_before", "tokens_after"):
        return fmt_int(value)
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
              "tokens_after": f"tokens after ({inner})"}
    return titles.get(col, col)


def frame_html(df: pd.DataFrame, *, max_rows: int = DEFAULT_MAX_ROWS, total: int | None = None,
               noun: str = "messages", unit: str = "tokens (est.)") -> str:
    """An inspector table as HTML: action chips, failure marks, rows capped with a visible count."""
    shown = df.head(max_rows)
    cols = [c for c in shown.columns if c != "failure"]
    failures = shown["failure"].tolist() if "failure" in shown.columns else [False] * len(shown)
    records = shown.to_dict("records")
    rows = [[_cell(c, rec[c], fail) for c in cols] for rec, fail in zip(records, failures, strict=True)]
    colors = [ACTION_COLORS.get(str(a), "transparent") for a in shown["action"]]
    return html_table([column_title(c, unit) for c in cols], rows, total=len(df) if total is None else total,
                      row_colors=colors, noun=noun)


class CompactionInspector(StaticReprMixin, widgets.VBox):
    """Stage, tokens, summary and the before/after DataFrames of one model call, with filters."""

    def __init__(self, view_or_request: RequestView | CallData | Any, *, max_rows: int = DEFAULT_MAX_ROWS,
                 transcript: Any = None, live: bool = True, **kwargs: Any) -> None:
        """`transcript`: the session's stored messages, so a stored record's rows are the transcript (SPEC N3).

        `live=False`: displayed as static HTML (sections open on click, no filters; survives a reopen)."""
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
        self._header = widgets.HTML(self.header_html())
        self._before = widgets.HTML()
        self._after = widgets.HTML()
        summary = widgets.HTML(self.summary_html())
        self.tabs = widgets.Tab(children=[self._before, self._after, summary])
        before_title = "Before (transcript, " if data.transcript_relative else "Before ("
        self.tabs.titles = (f"{before_title}{len(self.before_df):,} msgs)",
                            f"After (sent, {len(self.after_df):,} msgs)", "Summary")
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
        kwargs.setdefault("transcript", store.load_transcript(session_id))
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
        return df.style.map(lambda a: f"background-color: {color_of('action', a)}; color: white", subset=["action"])

    def header_html(self) -> str:
        """`Stage: summary  before 72,060 est. → after 17,391 est.  threshold 51,200  tail starts at #37`."""
        d, unit = self.data, counter_label(self.data.counter)
        tail = f" · tail starts at #{d.tail_start}" if d.tail_start is not None else ""
        where = f" · turn {d.turn}, call {d.iteration}" if d.turn is not None else ""
        retry = " · prompt-too-long retry" if d.retry else ""
        err = f'<div style="color:{FAIL_CSS}">{esc(d.error)}</div>' if d.error else ""
        carries = _carries(d)
        carried = f" · {esc(carries)}" if carries else ""
        stored = (f'<div style="color:{MUTED}">Before: the stored transcript up to this call, '
                  f'{len(self.before_df):,} msgs, {fmt_int(int(self.before_df["tokens_before"].sum()))} est. tokens; '
                  f'actions are relative to it across the turn (SPEC N3)</div>' if d.transcript_relative else "")
        return (f'<div class="mx-inspector-head" style="{FONT}">Stage: {chip(d.stage, color_of("stage", d.stage))}'
                f'{carried} · before {fmt_int(d.before_tokens)} {esc(unit)} '
                f'→ after {fmt_int(d.after_tokens)} {esc(unit)} '
                f'· threshold {fmt_int(d.threshold)}{tail}{where}{retry} · every figure in '
                f'{esc(unit_label(d.counter))}'
                f'<div style="color:{MUTED}">request view: what the model saw — the stored transcript is unchanged'
                f'</div>{stored}{err}</div>')

    def summary_html(self) -> str:
        """The summary (or micro/fallback note) text, in full; carried summaries name the call that made them."""
        d = self.data
        if d.summaries:
            mine = d.summary and all(text != d.summary for _, text in d.summaries)
            own = [(d.iteration, d.summary)] if mine else []
            parts = [f'<div style="color:{MUTED}">{esc(_summary_title(d, call))}</div>'
                     f'<pre class="mx-summary" style="white-space:pre-wrap;{FONT}">{esc(text)}</pre>'
                     for call, text in [*own, *d.summaries]]
            return "".join(parts)
        if not self.data.summary:
            return f'<div class="mx-summary" style="{FONT}color:{MUTED}">no summary: nothing was compacted</div>'
        return (f'<pre class="mx-summary" style="white-space:pre-wrap;{FONT}">{esc(self.data.summary)}</pre>')

    def message_text(self, position: int) -> str:
        """Full text of transcript message `position` (live views only)."""
        if self.data.inputs is None:
            raise LookupError("full messages are only available for live RequestViews, not stored records")
        msg = self.data.inputs[position]
        if not isinstance(msg, dict):
            return str(msg)
        text = content_text(msg.get("content"))
        if msg.get("tool_calls"):
            text += "\n" + json.dumps(msg["tool_calls"], ensure_ascii=False, indent=1)
        return text

    def _show_message(self) -> None:
        pos = int(self.open_position.value)
        text = self.message_text(pos)
        shown = text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + f"\n… ({len(text):,} chars in all)"
        self._message.value = f'<pre style="white-space:pre-wrap;{FONT}">#{pos}: {esc(shown)}</pre>'

    def _refresh(self) -> None:
        unit = unit_label(self.data.counter)
        self._before.value = frame_html(self.filtered("before"), max_rows=self.max_rows, unit=unit)
        self._after.value = frame_html(self.filtered("after"), max_rows=self.max_rows, unit=unit)

    def to_html(self) -> str:
        """Header, both tables (capped) and the summary as static HTML; each section opens on a click."""
        before, after = self.filtered("before"), self.filtered("after")
        unit = unit_label(self.data.counter)
        head = 'style="cursor:pointer;font-weight:600;margin:6px 0 2px"'
        return (f'{THEME_STYLE}<div class="mx-inspector" style="{FONT}">{self.header_html()}'
                f'<details open><summary {head}>Before (transcript, {len(self.before_df):,} msgs)</summary>'
                f'{frame_html(before, max_rows=self.max_rows, unit=unit)}</details>'
                f'<details><summary {head}>After (sent, {len(self.after_df):,} msgs)</summary>'
                f'{frame_html(after, max_rows=self.max_rows, unit=unit)}</details>'
                f'<details><summary {head}>Summary</summary>{self.summary_html()}</details></div>')

    def to_text(self) -> str:
        """Header, action counts and the summary preview as text."""
        d, unit = self.data, counter_label(self.data.counter)
        counts = self.before_df["action"].value_counts()
        acts = ", ".join(f"{a} {int(counts[a])}" for a in ACTIONS if a in counts)
        tail = f"   tail starts at #{d.tail_start}" if d.tail_start is not None else ""
        carries = _carries(d)
        stage = d.stage + (" · " + carries if carries else "")
        lines = [f"Stage: {stage}    before {fmt_int(d.before_tokens)} {unit}  →  after {fmt_int(d.after_tokens)} "
                 f"{unit}   threshold {fmt_int(d.threshold)}{tail}",
                 f"Before (transcript): {shown_count(len(self.before_df), len(self.before_df), 'msgs')} · {acts}",
                 f"After (sent): {len(self.after_df):,} msgs"]
        if d.summaries:
            lines += [f"{_summary_title(d, call)}: " + preview_text(text, 300) for call, text in d.summaries]
        elif d.summary:
            lines.append("Summary: " + preview_text(d.summary, 300))
        return "\n".join(lines)


def _carries(d: CallData) -> str:
    """`carries the summary of call 1 and 2 placeholders` (the part of `d.carried` after the stage)."""
    if not d.carried or " · " not in d.carried:
        return ""
    return d.carried.split(" · ", 1)[1]


def _summary_title(d: CallData, call: int | None) -> str:
    if call is not None and d.iteration is not None and call != d.iteration:
        return f"summary made by call {call} of this turn, carried (pinned, SPEC C7)"
    return f"summary made by this call (call {call})" if call is not None else "summary"
