"""The session browser: every stored session with its numbers; pick one to see its timeline and calls.

Why: the store keeps months of sessions; the way back into one is a table of sessions (turns, model
calls, compactions, tokens saved) and, for the chosen session, its token timeline plus the gauge and
inspector of any model call — all read from the stored request records, so what is shown is what was
recorded at the time, not a recomputation. Works on any object with the Store's read API
(`sessions()`, `requests(session_id)`), so it also browses Parquet exports loaded into a Store.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import pandas as pd

from mxclaw_nb.messages import modernize_legacy_calls
from mxclaw_nb.notebook.frames import short_ids
from mxclaw_nb.widgets.data import from_request, opt_int
from mxclaw_nb.widgets.gauge import ContextGauge
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    DEFAULT_MAX_ROWS,
    FONT,
    MONO,
    MONO_FONT,
    MUTED,
    chip,
    color_of,
    counted,
    esc,
    fmt_int,
    html_table,
)
from mxclaw_nb.widgets.timeline import TokenTimeline

SESSION_COLUMNS = ("session", "title", "created", "model", "turns", "model calls", "compactions",
                   "tokens saved (est.)")


def _saved_column(df: pd.DataFrame) -> str:
    return next((c for c in ("tokens_saved_est", "tokens_saved") if c in df.columns), "")


class SessionBrowser(StaticReprMixin, widgets.VBox):
    """Sessions table; selecting one shows its timeline and the gauge + inspector of a chosen call."""

    def __init__(self, store: Any, *, current: str | None = None, max_rows: int = DEFAULT_MAX_ROWS,
                 **kwargs: Any) -> None:
        """`current`: the notebook's session, marked `current` and shown first (else the newest session)."""
        if not hasattr(store, "sessions") or not hasattr(store, "requests"):
            raise TypeError(f"SessionBrowser needs a Store with sessions() and requests(), got {type(store).__name__}")
        self.store, self.max_rows, self.current = store, max_rows, current
        self._transcript_of: str | None = None
        self._transcript_cache: Any = None
        self.sessions_df: pd.DataFrame = store.sessions()
        self.requests_df: pd.DataFrame | None = None
        self.session_id: str | None = None
        self.timeline: TokenTimeline | None = None
        self.inspector: CompactionInspector | None = None
        self.gauge = ContextGauge()
        ids = self.sessions_df["id"].tolist() if len(self.sessions_df) else []
        # N1: each id as `%agent sessions` shows it (8 characters, more where two share them: each resumes its own)
        self.shown_ids: dict[Any, str] = dict(zip(ids, short_ids(self.sessions_df["id"]), strict=True)) if ids else {}
        # The sessions table is a listbox: a click on a row opens that session.
        self.session_picker = widgets.Select(options=[(self._session_label(i), i) for i in ids], value=None,
                                             rows=min(max(len(ids), 2), 10), layout=widgets.Layout(width="100%"))
        self.session_picker.add_class("mx-session-list")
        self.call_picker = widgets.Dropdown(options=[], description="call")
        self._table = widgets.HTML(f'<style>.mx-session-list select{{font-family:{MONO};font-size:12px}}</style>'
                                   f'<div style="{FONT}"><b>sessions</b> <span style="color:{MUTED}">'
                                   f'{len(ids):,} in the store · click a row to open that session</span></div>'
                                   f'<div style="{MONO_FONT};color:{MUTED};white-space:pre;padding-left:4px">'
                                   f'{esc(self._session_label(None))}</div>')
        self._timeline_box = widgets.VBox()
        self._inspector_box = widgets.VBox()
        super().__init__(children=[self._table, self.session_picker, self._timeline_box, self.call_picker,
                                   self.gauge, self._inspector_box], **kwargs)
        self.add_class("mx-session-browser")
        self.session_picker.observe(lambda ch: ch["new"] is not None and self.select(ch["new"]), names="value")
        self._quiet = False
        self.call_picker.observe(lambda ch: ch["new"] is not None and not self._quiet and self._show_call(ch["new"]),
                                 names="value")
        first = current if current in set(ids) else (self._newest() if ids else None)
        if first is not None:
            self.select(first)

    def _newest(self) -> str:
        df = self.sessions_df
        if "created_at" in df.columns and df["created_at"].notna().any():
            return str(df.sort_values("created_at", kind="stable")["id"].iloc[-1])
        return str(df["id"].iloc[-1])

    def _shown(self, sid: Any) -> str:
        """A session id as the sessions table shows it (`shown_ids`; 8 characters for one not listed)."""
        return self.shown_ids.get(sid) or str(sid)[:8]

    def _session_label(self, sid: str | None) -> str:
        """One listbox row in fixed columns (non-breaking spaces: a <select> collapses plain ones); None: header."""
        if sid is None:
            cells = ["session", "created", "turns", "calls", "compactions", "title"]
        else:
            row = self.sessions_df.loc[self.sessions_df["id"] == sid].iloc[0]
            title = row.get("title") if isinstance(row.get("title"), str) else ""
            created = row.get("created_at")
            mark = "*" if sid == self.current else " "
            cells = [f"{self._shown(sid)}{mark}", str(created)[:16] if created is not None else "",
                     fmt_int(opt_int(row.get("turns")) or 0), fmt_int(opt_int(row.get("model_calls")) or 0),
                     fmt_int(opt_int(row.get("compactions")) or 0),
                     f"{'current · ' if sid == self.current else ''}{title}"]
        widths = (max(10, max(map(len, self.shown_ids.values()), default=0) + 2), 17, 6, 6, 12)
        line = "".join(c.ljust(w) if i < 2 else c.rjust(w - 1) + " " for i, (c, w) in enumerate(zip(cells, widths,
                                                                                                  strict=False)))
        return (line + " " + cells[-1]).replace(" ", "\u00a0")

    def sessions_html(self) -> str:
        """The sessions table (capped, with a visible count)."""
        df, saved = self.sessions_df, _saved_column(self.sessions_df)
        rows = []
        for rec in df.head(self.max_rows).to_dict("records"):
            created = rec.get("created_at")
            mark = f" {chip('current', '#1e88e5')}" if rec.get("id") == self.current else ""
            rows.append([esc(self._shown(rec.get("id"))) + mark, esc(rec.get("title") or ""),
                         esc(str(created)[:19] if created is not None else ""), esc(rec.get("model") or ""),
                         fmt_int(rec.get("turns")), fmt_int(rec.get("model_calls")), fmt_int(rec.get("compactions")),
                         fmt_int(rec.get(saved)) if saved else "—"])
        return html_table(SESSION_COLUMNS, rows, total=len(df), noun="sessions", cls="mx-sessions")

    def select(self, session_id: str) -> None:
        """Show a session: its timeline, and the call picker set to its last compaction (or last call)."""
        if session_id not in set(self.sessions_df["id"]):
            raise LookupError(f"no session {session_id!r} in {self.store!r}")
        self.session_id = session_id
        if self.session_picker.value != session_id:
            self.session_picker.value = session_id  # re-enters select via observe; harmless
            return
        self.requests_df = self.store.requests(session_id).reset_index(drop=True)
        self._transcript_cache: list[Any] | None = None
        req = self.requests_df
        self.timeline = TokenTimeline(  # C11: the timeline also marks the session's summary calls
            self.store.requests(session_id, summary_calls=True), session_id=str(session_id)) if len(req) else None
        self._timeline_box.children = [self.timeline] if self.timeline is not None else [
            widgets.HTML(f'<div style="{FONT}color:{MUTED}">no model calls recorded in this session</div>')]
        options = [(self._call_label(k, r), k) for k, r in req.iterrows()]
        self._quiet = True  # setting options may select the first call: show only the one we pick
        self.call_picker.options = options
        self.call_picker.value = None
        self._quiet = False
        if options:
            compacted = req.index[req["stage"].fillna("unchanged") != "unchanged"] if "stage" in req else []
            self.call_picker.value = int(compacted[-1] if len(compacted) else req.index[-1])
        else:
            self.inspector = None
            self._inspector_box.children = []
            self.gauge.update(None)
        self.shown_changed()  # timeline, call picker, gauge and inspector now all show this session

    def select_call(self, turn: int, iteration: int) -> None:
        """Show the gauge and inspector of one model call of the selected session."""
        req = self.requests_df
        if req is None:
            raise LookupError("select a session first")
        match = req.index[(req["turn"] == turn) & (req["iteration"] == iteration)]
        if not len(match):
            raise LookupError(f"session {self.session_id!r} has no call {iteration} in turn {turn}")
        self.call_picker.value = int(match[-1])

    @staticmethod
    def _call_label(k: Any, row: pd.Series) -> str:
        stage = row.get("stage") or "unchanged"
        return f"turn {opt_int(row.get('turn'))} · call {opt_int(row.get('iteration'))} · {stage}"

    def _transcript(self) -> list[Any] | None:
        # The selected session's stored transcript, read once per selection (None if the store cannot say).
        if getattr(self, "_transcript_cache", None) is None and hasattr(self.store, "load_transcript"):
            self._transcript_cache = modernize_legacy_calls(self.store.load_transcript(self.session_id))  # C4
        return getattr(self, "_transcript_cache", None)

    def _show_call(self, index: int) -> None:
        assert self.requests_df is not None
        row = self.requests_df.loc[index]
        data = from_request(row, self._transcript())
        self.gauge.update(data)
        self.inspector = CompactionInspector(data, max_rows=self.max_rows)
        self._inspector_box.children = [self.inspector]
        self.shown_changed()

    def _transcript(self) -> Any:
        """The selected session's stored transcript, so a call's rows agree with `%agent view` (SPEC N3)."""
        load = getattr(self.store, "load_transcript", None)
        if load is None or self.session_id is None:
            return None
        if self._transcript_of != self.session_id:
            # as the engine read it (C4: legacy function calls as tool calls), so the rows agree with what was sent
            self._transcript_cache, self._transcript_of = modernize_legacy_calls(load(self.session_id)), self.session_id
        return self._transcript_cache

    def to_html(self) -> str:
        """Sessions table, and for the selected session its timeline, gauge and inspector."""
        parts = [f'<div class="mx-browser" style="{FONT}">', self.sessions_html()]
        if self.timeline is not None:
            parts.append(self.timeline.to_html())
        if self.inspector is not None:
            d = self.inspector.data.record
            parts.append(f"<div>call: turn {d.turn}, call {d.iteration} {chip(d.stage, color_of('stage', d.stage))}"
                         "</div>")
            parts += [self.gauge.to_html(), self.inspector.to_html()]
        return "".join(parts) + "</div>"

    def to_text(self) -> str:
        """The sessions as text lines, plus the selected call's inspector text."""
        saved = _saved_column(self.sessions_df)
        lines = [counted(len(self.sessions_df), "session")]
        for rec in self.sessions_df.head(50).to_dict("records"):
            lines.append(f"  {self._shown(rec.get('id'))}  turns {fmt_int(rec.get('turns'))}  calls "
                         f"{fmt_int(rec.get('model_calls'))}  compactions {fmt_int(rec.get('compactions'))}  saved "
                         f"{fmt_int(rec.get(saved)) if saved else '—'} est.")
        if self.timeline is not None:  # the selected session: its timeline's first line, the call's gauge
            lines.append(self.timeline.to_text().splitlines()[0])
        if self.inspector is not None:
            d = self.inspector.data.record
            lines += [f"call: turn {d.turn}, call {d.iteration} · {d.stage}", self.gauge.to_text(),
                      self.inspector.to_text()]
        return "\n".join(lines)
