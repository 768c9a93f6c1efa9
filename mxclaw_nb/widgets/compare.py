"""Widgets for replay and comparison results (SPEC S4): a replayed session's timeline, the comparison box.

They live with the other widgets so the analysis layer stays free of UI imports (DESIGN: nothing imports
UI); the figures themselves come from ``mxclaw_nb.analysis.plots``. Displayed, they are static HTML with
the figure as inline SVG whose ink follows the theme, so a reopened notebook shows them without a kernel.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import ipywidgets as widgets
import pandas as pd

from mxclaw_nb.analysis.compare import summarize_policies
from mxclaw_nb.analysis.plots import plot_comparison
from mxclaw_nb.analysis.replay import as_requests
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import FONT, MUTED, counted, esc
from mxclaw_nb.widgets.timeline import TokenTimeline, figure_svg


def timeline(df: pd.DataFrame, session_id: str | None = None, policy: str | None = None) -> Any:
    """The widgets' ``TokenTimeline`` for one replayed session (and policy, for a ``compare`` frame)."""
    if policy is not None:
        df = df[df["policy"] == policy]
    sid = session_id if session_id is not None else str(df["session_id"].iloc[0])
    label = f" · {policy}" if policy else ""
    return TokenTimeline(as_requests(df, sid), title=f"replay of {sid[:24]}{label} · est. tokens per model call")


class ComparisonView(StaticReprMixin, widgets.VBox):
    """The comparison figure above the per-policy summary table; displayed as static HTML (survives a reopen).

    The notebook shows the figure as inline SVG whose ink follows the theme (light or dark); the widget
    children (`Image`, `HTML`) hold the PNG and the table for code that reads them.
    """

    def __init__(self, df: pd.DataFrame) -> None:
        fig = plot_comparison(df)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        self.svg = figure_svg(fig)
        self.table = summarize_policies(df).round(3)
        timing = df.attrs.get("timing", {})
        self.caption = (f"{counted(timing.get('sessions', df['session_id'].nunique()), 'session')} · "
                        f"{timing.get('ms_per_session_policy', float('nan')):.1f} ms per session and policy")
        self.static_display = True
        table = self.table.to_html(index=False, classes="mx-table", border=0)
        super().__init__([widgets.HTML(f"<b>policy comparison</b> · {self.caption}"),
                          widgets.Image(value=buf.getvalue(), format="png"), widgets.HTML(table)])
        self.png = base64.b64encode(buf.getvalue()).decode("ascii")  # for static exports

    def to_html(self) -> str:
        """Caption, the figure as inline SVG in the theme's colours, and the summary table."""
        table = self.table.to_html(index=False, classes="mx-table", border=0)
        return (f'<div class="mx-comparison" style="{FONT}"><b>policy comparison</b> · {esc(self.caption)}'
                f'<div role="img" aria-label="policy comparison" style="color:{MUTED}">{self.svg}</div>{table}</div>')

    def to_text(self) -> str:
        """Caption and the summary table as text."""
        return f"policy comparison · {self.caption}\n{self.table.to_string(index=False)}"


def comparison_widget(df: pd.DataFrame) -> Any:
    """The comparison figure above the per-policy summary table (static HTML once displayed)."""
    return ComparisonView(df)
