"""The token timeline: prompt tokens per model call across a session, with compactions marked.

Why: a session's context grows call by call and drops at compactions; seeing the saw-tooth against
the threshold and window lines shows whether the policy is working (and whether the estimate and
the provider's reported count agree). Drawn with matplotlib's object API (no pyplot state, no GUI
backend) into PNG bytes held by an ipywidgets Output, so it renders the same in JupyterLab, in an
exported notebook and in a headless test, and never needs a running kernel to build.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import ipywidgets as widgets
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from mxclaw_nb.widgets.data import opt_int
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    ALL_STAGES,
    FONT,
    STAGE_COLORS,
    THRESHOLD_COLOR,
    WINDOW_COLOR,
    esc,
    fmt_int,
)

NEEDED = ("turn", "estimate_tokens")


def timeline_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per model call in order, with `call` (1-based x position) and a `compacted` flag."""
    missing = [c for c in NEEDED if c not in requests.columns]
    if missing:
        raise ValueError(f"requests DataFrame lacks column(s) {missing}; pass store.requests(session_id)")
    df = requests.copy()
    order = [c for c in ("seq",) if c in df.columns] or [c for c in ("turn", "iteration") if c in df.columns]
    df = df.sort_values(order, kind="stable").reset_index(drop=True)
    for col in ("iteration", "calibrated_tokens", "prompt_tokens_reported", "threshold", "window_tokens",
                "before_tokens", "after_tokens"):
        if col not in df.columns:
            df[col] = None
    if "stage" not in df.columns:
        df["stage"] = "unchanged"
    if "retry" in df.columns:  # a C9 retry shows its own stage
        df.loc[df["retry"].fillna(False).astype(bool), "stage"] = "prompt_too_long_retry"
    df["call"] = range(1, len(df) + 1)
    df["compacted"] = df["stage"].fillna("unchanged") != "unchanged"
    return df


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce")


def draw_timeline(df: pd.DataFrame, title: str = "prompt tokens per model call") -> Figure:
    """The timeline figure of a `timeline_frame` (est., calibrated and reported lines; compaction markers)."""
    fig = Figure(figsize=(8.5, 3.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    x = df["call"]
    handles: list[Any] = []
    handles += ax.plot(x, _num(df["estimate_tokens"]), "-o", ms=3, color="#455a64", label="est. (sent)")
    for col, color, label in (("calibrated_tokens", "#6a1b9a", "calibrated"),
                              ("prompt_tokens_reported", "#00897b", "reported")):
        y = _num(df[col])
        if y.notna().any():
            handles += ax.plot(x, y, "--s", ms=3, color=color, label=label)
    for col, color, label in (("threshold", THRESHOLD_COLOR, "threshold"), ("window_tokens", WINDOW_COLOR, "window")):
        y = _num(df[col])
        if y.notna().any():
            handles += ax.step(x, y, where="mid", color=color, lw=1, ls=":" if col == "window_tokens" else "-",
                               label=label)
    comp = df[df["compacted"]]
    if len(comp):
        before, after = _num(comp["before_tokens"]), _num(comp["estimate_tokens"])
        colors = [STAGE_COLORS.get(s, "#999") for s in comp["stage"]]
        ax.vlines(comp["call"], after, before.fillna(after), colors=colors, lw=1.5, alpha=0.7)
        ax.scatter(comp["call"], after, s=60, marker="v", zorder=3, edgecolors="black", linewidths=0.5, c=colors)
        for stage in ALL_STAGES:
            if stage in set(comp["stage"]):
                handles.append(Line2D([], [], ls="", marker="v", color=STAGE_COLORS[stage], mec="black",
                                      label=f"compaction: {stage}"))
    turns = df["turn"].tolist()
    for i in range(1, len(turns)):
        if turns[i] != turns[i - 1]:
            ax.axvline(i + 0.5, color="#bdbdbd", lw=0.8, ls="--")
    for t in dict.fromkeys(turns):
        first = int(df.loc[df["turn"] == t, "call"].iloc[0])
        ax.annotate(f"turn {t}", (first, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color="#757575",
                    va="bottom")
    ax.set_xlabel("model call")
    ax.set_ylabel("prompt tokens")
    ax.set_title(title, fontsize=10, loc="left", pad=12)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{int(v):,}")
    if len(df):
        ax.set_xlim(0.5, len(df) + 0.5)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def figure_png(fig: Figure) -> bytes:
    """PNG bytes of a figure (Agg canvas, no pyplot)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


class TokenTimeline(StaticReprMixin, widgets.VBox):
    """Est. (and calibrated/reported) prompt tokens per call, threshold/window lines, compaction markers."""

    def __init__(self, requests: pd.DataFrame | None = None, *, store: Any = None, session_id: str | None = None,
                 title: str | None = None, **kwargs: Any) -> None:
        if requests is None:
            if store is None or session_id is None:
                raise ValueError("TokenTimeline needs a requests DataFrame, or store= and session_id=")
            requests = store.requests(session_id)
        if not isinstance(requests, pd.DataFrame):
            raise TypeError(f"requests must be a pandas DataFrame, got {type(requests).__name__}")
        self.data = timeline_frame(requests)
        self.title = title or (f"session {str(session_id)[:8]} · prompt tokens per model call" if session_id
                               else "prompt tokens per model call")
        self.figure = draw_timeline(self.data, self.title)
        self.png = figure_png(self.figure)
        self.output = widgets.Output()
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": base64.b64encode(self.png).decode("ascii"),
                                         "text/plain": self.to_text()}},)
        self._caption = widgets.HTML(self.caption_html())
        super().__init__(children=[self._caption, self.output], **kwargs)
        self.add_class("mx-token-timeline")

    @property
    def compactions(self) -> pd.DataFrame:
        """The calls where compaction happened (turn, iteration, stage, before/after tokens)."""
        cols = [c for c in ("call", "turn", "iteration", "stage", "before_tokens", "after_tokens", "estimate_tokens")
                if c in self.data.columns]
        return self.data.loc[self.data["compacted"], cols].reset_index(drop=True)

    def caption_html(self) -> str:
        """One line of numbers: calls, turns, compactions by stage, peak est. tokens."""
        d = self.data
        stages = d.loc[d["compacted"], "stage"].value_counts()
        comp = ", ".join(f"{s} {int(n)}" for s, n in stages.items()) or "none"
        peak = opt_int(_num(d["estimate_tokens"]).max()) if len(d) else None
        return (f'<div class="mx-timeline-caption" style="{FONT}">{esc(self.title)} · {len(d):,} model calls · '
                f'{d["turn"].nunique():,} turns · compactions: {esc(comp)} · peak {fmt_int(peak)} est.</div>')

    def to_html(self) -> str:
        """Caption and the figure as an inline PNG."""
        img = base64.b64encode(self.png).decode("ascii")
        return f'<div class="mx-timeline">{self.caption_html()}<img alt="{esc(self.title)}" ' \
               f'src="data:image/png;base64,{img}"/></div>'

    def to_text(self) -> str:
        """Calls, compactions and the est. tokens per call as text."""
        d = self.data
        lines = [f"{self.title}: {len(d):,} model calls, {int(d['compacted'].sum())} compactions"]
        for rec in d.head(50).to_dict("records"):
            mark = f"  ⟳ {rec['stage']}" if rec["compacted"] else ""
            lines.append(f"  turn {rec['turn']} call {rec['call']}: {fmt_int(rec['estimate_tokens'])} est.{mark}")
        if len(d) > 50:
            lines.append(f"  … showing 50 of {len(d):,} calls")
        return "\n".join(lines)
