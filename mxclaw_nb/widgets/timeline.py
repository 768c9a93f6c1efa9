"""The token timeline: prompt tokens per model call across a session, with compactions marked.

Why: a session's context grows call by call and drops at compactions; seeing the saw-tooth against
the threshold and window lines shows whether the policy is working (and whether the estimate and
the provider's reported count agree). Drawn with matplotlib's object API (no pyplot state, no GUI
backend) into an inline SVG whose text, ticks and frame use `currentColor`, so the plot follows the
notebook's light or dark theme; displayed on its own it is static HTML (no widget view), so it
renders the same in JupyterLab, after a reopen without a kernel, in an exported notebook and in a
headless test. A compaction marker sits at the call's tokens before compaction (where the threshold
was crossed), with a line down to what was sent.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import ipywidgets as widgets
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from mxclaw_nb.palette import PLOT_INK, PLOT_STYLE
from mxclaw_nb.widgets.cost import CACHE_COLOR, cached_part, cost_caption
from mxclaw_nb.widgets.data import opt_int
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    ALL_STAGES,
    FONT,
    MUTED,
    STAGE_COLORS,
    THEME_STYLE,
    THRESHOLD_COLOR,
    counted,
    counter_label,
    esc,
    fmt_int,
)

INK = "#010203"  # drawn in this colour, then replaced by currentColor in the SVG

NEEDED = ("turn", "estimate_tokens")
MAX_TURN_LABELS = 24
MAX_MARKERS = 200  # above this many calls the lines carry no per-call markers (they would merge anyway)


def timeline_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per model call in order, with `call` (1-based x position) and a `compacted` flag."""
    missing = [c for c in NEEDED if c not in requests.columns]
    if missing:
        raise ValueError(f"requests DataFrame lacks column(s) {missing}; pass store.requests(session_id)")
    df = requests.copy()
    order = [c for c in ("seq",) if c in df.columns] or [c for c in ("turn", "iteration") if c in df.columns]
    df = df.sort_values(order, kind="stable").reset_index(drop=True)
    for col in ("iteration", "calibrated_tokens", "prompt_tokens_reported", "threshold", "window_tokens",
                "before_tokens", "after_tokens", "cached_tokens_reported", "prefix_tokens"):
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


def draw_timeline(df: pd.DataFrame, title: str = "prompt tokens per model call", *, ink: str = INK) -> Figure:
    """The timeline figure of a `timeline_frame` (est., calibrated and reported lines; compaction markers).

    `ink`: colour of text, ticks and frames; INK becomes `currentColor` in the SVG, PLOT_INK (a grey that
    reads on light and dark) suits a PNG."""
    with rc_context({**PLOT_STYLE, **{k: ink for k, v in PLOT_STYLE.items() if v == PLOT_STYLE["text.color"]}}):
        return _draw(df, title, ink)


def sent_unit(df: pd.DataFrame) -> str:
    """The unit of the `sent` line: the counter(s) the policy checked the threshold on, call by call."""
    counters = list(dict.fromkeys(df["counter"].dropna().astype(str))) if "counter" in df.columns else []
    labels = [counter_label(c) for c in counters] or ["est."]
    return f"tokens ({' → '.join(labels)})"


def _draw(df: pd.DataFrame, title: str, ink: str) -> Figure:
    fig = Figure(figsize=(8.5, 3.4), dpi=100)
    # fixed margins (room for the y unit, the title over the turn labels and the legend on the right):
    # a constrained layout cost more than drawing the lines of a 1,000-call session (N2)
    fig.subplots_adjust(left=0.115, right=0.71, bottom=0.15, top=0.85)
    ax = fig.add_subplot()
    x = df["call"]
    handles: list[Any] = []
    # The main line is what the threshold was checked on (after_tokens, the policy's counter), so the
    # threshold line, the compaction markers and this line share one unit; est. is a second line
    # only when another counter decided.
    dense = len(df) > MAX_MARKERS
    unit = sent_unit(df)
    sent = _num(df["after_tokens"]).fillna(_num(df["estimate_tokens"]))
    handles += ax.plot(x, sent, "-" if dense else "-o", ms=3, color="#5c8bd6", label=f"sent, {unit}")
    cached = cached_part(df)  # E1/E2: the cached part of each call, reported share or est.
    if cached is not None:
        handles.append(ax.fill_between(x, 0, cached[0], color=CACHE_COLOR, alpha=0.3, lw=0, label=cached[1]))
    estimated = _num(df["estimate_tokens"])
    if estimated.notna().any() and not estimated.equals(sent):
        handles += ax.plot(x, estimated, ":", lw=1, color="#5c8bd6", label="same request, C1 tokens (est.)")
    for col, color, label in (("calibrated_tokens", "#ab47bc", "calibrated"),
                              ("prompt_tokens_reported", "#00a88f", "reported by the provider")):
        y = _num(df[col])
        known = y.notna()
        if known.any() and not (y[known] == sent[known]).all():  # not a copy of the main line
            handles += ax.plot(x, y, "--" if dense else "--s", ms=3, color=color, label=label)
    for col, color, label in (("threshold", THRESHOLD_COLOR, "threshold"), ("window_tokens", ink, "window")):
        y = _num(df[col])
        if y.notna().any():
            handles += ax.step(x, y, where="mid", color=color, lw=1, ls=":" if col == "window_tokens" else "-",
                               label=label)
    turns = df["turn"].tolist()
    starts = [i for i in range(1, len(turns)) if turns[i] != turns[i - 1]]
    if starts:  # before the compaction markers (they stay on top); one collection, not an axvline per turn
        bounds = ax.vlines([i + 0.5 for i in starts], 0, 1, transform=ax.get_xaxis_transform(), colors=ink,
                           alpha=0.35, lw=0.8, linestyles="--")
        bounds.set_gid("turn-boundaries")
    comp = df[df["compacted"]]
    if len(comp):
        before, after = _num(comp["before_tokens"]), sent[comp.index]
        top = before.fillna(after)
        colors = [STAGE_COLORS.get(s, "#999") for s in comp["stage"]]
        # the marker sits where compaction was decided (tokens before, over the threshold), the line
        # runs down to what was sent
        ax.vlines(comp["call"], after, top, colors=colors, lw=1.5, alpha=0.8)
        ax.scatter(comp["call"], top, s=60, marker="v", zorder=3, edgecolors=ink, linewidths=0.5, c=colors)
        for stage in ALL_STAGES:
            if stage in set(comp["stage"]):
                handles.append(Line2D([], [], ls="", marker="v", color=STAGE_COLORS[stage], mec=ink,
                                      label=f"compaction: {stage} (before → sent)"))
    firsts = [0, *starts]
    step = -(-len(firsts) // MAX_TURN_LABELS)  # label at most MAX_TURN_LABELS turns (text is the costly artist)
    for i in firsts[::step]:
        ax.annotate(f"turn {turns[i]}", (int(df["call"].iloc[i]), 1.0), xycoords=("data", "axes fraction"),
                    fontsize=7, color=ink,
                    va="bottom")
    ax.set_xlabel("model call")
    ax.set_ylabel(f"prompt {unit}", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10, loc="left", pad=12)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{int(v):,}")
    if len(df):
        ax.set_xlim(0.5, len(df) + 0.5)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def svg_document(fig: Figure) -> str:
    """The figure as a standalone SVG document (its own size, its own ink), e.g. for an <img>."""
    buf = io.StringIO()
    # text stays glyph paths: as <text> it would leak as loose words when an untrusted notebook's
    # sanitizer drops the <svg> (seen in the untrusted-copy screenshot)
    fig.savefig(buf, format="svg", transparent=True)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)


def figure_svg(fig: Figure, document: str | None = None) -> str:
    """The figure as inline SVG markup whose ink is `currentColor` (it follows the page's text colour)."""
    svg = svg_document(fig) if document is None else document
    svg = re.sub(r'(<svg[^>]*?) width="[^"]*" height="[^"]*"', r'\1 width="100%" style="max-width:850px"', svg,
                 count=1)
    # INK (the timeline's) and PLOT_INK (the analysis plots' grey) become the page's text colour
    return svg.replace(INK, "currentColor").replace(PLOT_INK, "currentColor")


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
        # drawn once in PLOT_INK (a grey that reads on light and dark) and rendered once: inline, the SVG's
        # ink becomes currentColor; beside it the same SVG document as an <img> (for sanitized outputs: an
        # untrusted notebook drops <svg> but keeps a data: image; CSS hides it otherwise) keeps the grey.
        # One render instead of an SVG and a PNG: a 1,000-call timeline is drawn in well under 100 ms (N2)
        self.figure = draw_timeline(self.data, self.title, ink=PLOT_INK)
        document = svg_document(self.figure)
        self.svg = figure_svg(self.figure, document)
        self._image_b64 = base64.b64encode(document.encode()).decode()
        self.static_display = True  # it never changes once drawn: static HTML survives a reopen
        self._caption = widgets.HTML(self.caption_html())
        self._plot = widgets.HTML(f'<div class="mx-timeline-plot" style="color:{MUTED}">{self.svg}</div>')
        super().__init__(children=[self._caption, self._plot], **kwargs)
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
        sent = _num(d["after_tokens"]).fillna(_num(d["estimate_tokens"]))
        peak = opt_int(sent.max()) if len(d) else None
        calls = counted(len(d), "model call")
        cost = cost_caption(d)  # E1-E3: cache-read share and est. cost, labelled
        return (f'<div class="mx-timeline-caption" style="{FONT}">{esc(self.title)} · {calls} · '
                f'{counted(d["turn"].nunique(), "turn")} · compactions: {esc(comp)} · peak sent {fmt_int(peak)} '
                f'{esc(sent_unit(d))}{"<br>" + cost if cost else ""}</div>')

    @property
    def png(self) -> bytes:
        """The figure as PNG bytes (for saving; the notebook shows the SVG)."""
        return figure_png(self.figure)

    def to_html(self) -> str:
        """Caption and the figure as inline SVG in the theme's colours."""
        return (f'{THEME_STYLE}<style>.mx-timeline-plot svg~img{{display:none}}</style>'
                f'<div class="mx-timeline" style="{FONT}">{self.caption_html()}'
                f'<div class="mx-timeline-plot" role="img" aria-label="{esc(self.title)}" style="color:{MUTED}">'
                f'{self.svg}<img alt="{esc(self.title)}" style="max-width:850px;width:100%" '
                f'src="data:image/svg+xml;base64,{self._image_b64}"></div></div>')

    def to_text(self) -> str:
        """Calls, compactions and the est. tokens per call as text."""
        d = self.data
        lines = [f"{self.title}: {counted(len(d), 'model call')}, {counted(d['compacted'].sum(), 'compaction')}"]
        for rec in d.head(50).to_dict("records"):
            mark = f"  ⟳ {rec['stage']}" if rec["compacted"] else ""
            lines.append(f"  turn {rec['turn']} call {rec['call']}: {fmt_int(rec['estimate_tokens'])} est.{mark}")
        if len(d) > 50:
            lines.append(f"  … showing 50 of {len(d):,} calls")
        return "\n".join(lines)
