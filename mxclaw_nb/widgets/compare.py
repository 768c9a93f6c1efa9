"""Widgets for replay and comparison results (issue 8): a replayed session's timeline, the comparison box.

They live with the other widgets so the analysis layer stays free of UI imports (DESIGN: nothing imports
UI); the figures themselves come from ``mxclaw_nb.analysis.plots``.
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
from mxclaw_nb.widgets.timeline import TokenTimeline


def timeline(df: pd.DataFrame, session_id: str | None = None, policy: str | None = None) -> Any:
    """The widgets' ``TokenTimeline`` for one replayed session (and policy, for a ``compare`` frame)."""
    if policy is not None:
        df = df[df["policy"] == policy]
    sid = session_id if session_id is not None else str(df["session_id"].iloc[0])
    label = f" · {policy}" if policy else ""
    return TokenTimeline(as_requests(df, sid), title=f"replay of {sid[:24]}{label} · est. tokens per model call")


def comparison_widget(df: pd.DataFrame) -> Any:
    """An ipywidgets box: the comparison figure above the per-policy summary table."""
    buf = io.BytesIO()
    plot_comparison(df).savefig(buf, format="png")
    image = widgets.Image(value=buf.getvalue(), format="png")
    table = summarize_policies(df).round(3).to_html(index=False, classes="mx-table", border=0)
    timing = df.attrs.get("timing", {})
    caption = (f"{timing.get('sessions', df['session_id'].nunique())} sessions · "
               f"{timing.get('ms_per_session_policy', float('nan')):.1f} ms per session and policy")
    box = widgets.VBox([widgets.HTML(f"<b>policy comparison</b> · {caption}"), image, widgets.HTML(table)])
    box.png = base64.b64encode(buf.getvalue()).decode("ascii")  # for static exports
    return box
