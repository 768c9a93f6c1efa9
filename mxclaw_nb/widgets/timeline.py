"""The token timeline: prompt tokens per model call across a session, with compactions marked.

Why: a session's context grows call by call and drops at compactions; seeing the saw-tooth against
the threshold and window lines shows whether the policy is working (and whether the estimate and
the provider's reported count agree). What is shown is computed once (`timeline_layers`) and written
directly as an inline SVG (`timeline_svg`, the small writer in `svgplot`: matplotlib's fixed cost was
most of the time, N2) whose text, ticks and frame use `currentColor`, so the plot follows the
notebook's light or dark theme; the same layers draw a matplotlib figure on request (`draw_timeline`,
for a PNG). Displayed on its own it is static HTML (no widget view), so it renders the same in
JupyterLab, after a reopen without a kernel, in an exported notebook and in a headless test. A
compaction marker sits at the call's tokens before compaction (where the threshold was crossed), with
a line down to what was sent.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

import ipywidgets as widgets
import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from mxclaw_nb.palette import PLOT_INK, PLOT_STYLE
from mxclaw_nb.records import SUMMARY_CALL
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
from mxclaw_nb.widgets.svgplot import Canvas, nice_ticks, polyline, step_mid, text_width

STR = pd.StringDtype(na_value=math.nan)  # pandas' default text dtype (missing: NaN)
INK = "#010203"  # drawn in this colour, then replaced by currentColor in the SVG

NEEDED = ("turn", "estimate_tokens")
# Turn labels are placed only where the previous one has ended (a 1-call turn beside the next printed
# "turn 3turn 4"): the plot is PLOT_WIDTH_PX wide, a label is drawn at 7 pt with LABEL_GAP_PX after it.
PLOT_WIDTH_PX = 850.0 * (0.71 - 0.115)
LABEL_SIZE = 7 * 100 / 72
LABEL_GAP_PX = 4.0
SUMMARY_COLOR = "#ef6c00"  # C11: a summary call's marker (a diamond)
SUMMARY_LABEL = "summary call (C11), its prompt tokens"
SUMMARY_OFFSET = 0.3  # drawn this far left of the call it was made for (it happened before that call)
MAX_MARKERS = 200  # above this many calls the lines carry no per-call markers (they would merge anyway)
MARK_R = 5.4  # a compaction marker's size in the SVG (px)
KEPT_WARM_LABEL = "kept the warm prefix (E4)"  # a compaction deferred to keep the cached prefix


def timeline_frame(requests: pd.DataFrame) -> pd.DataFrame:
    """One row per model call in order, with `call` (1-based x position) and a `compacted` flag."""
    missing = [c for c in NEEDED if c not in requests.columns]
    if missing:
        raise ValueError(f"requests DataFrame lacks column(s) {missing}; pass store.requests(session_id)")
    # S4: each step only when it changes something (a replay's 500 calls: no summary call, in order, no retry)
    df = requests.copy(deep=False)  # copy-on-write: the caller's frame is never changed
    summary = df["purpose"] == SUMMARY_CALL if "purpose" in df.columns else None
    summaries = None
    if summary is not None and summary.any():
        summaries = df[summary]
        df = df.drop(summaries.index)  # C11: summary calls are not the turn's calls; drawn as their own markers
    order = [c for c in ("seq",) if c in df.columns] or [c for c in ("turn", "iteration") if c in df.columns]
    if not (order == ["seq"] and df["seq"].is_monotonic_increasing):  # a stable sort of sorted rows: no change
        df = df.sort_values(order, kind="stable")
    index = df.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None):
        df = df.reset_index(drop=True)
    for col in ("iteration", "calibrated_tokens", "prompt_tokens_reported", "threshold", "window_tokens",
                "before_tokens", "after_tokens", "cached_tokens_reported", "prefix_tokens"):
        if col not in df.columns:
            df[col] = None
    if "stage" not in df.columns:
        df["stage"] = "unchanged"
    if "retry" in df.columns:  # a C9 retry shows its own stage
        retry = df["retry"] if df["retry"].dtype == bool else df["retry"].fillna(False).astype(bool)
        if retry.any():
            df.loc[retry, "stage"] = "prompt_too_long_retry"
    df["call"] = range(1, len(df) + 1)
    stage = df["stage"]
    if stage.dtype == STR:  # text with NaN for missing (pandas' default): a missing stage is unchanged
        df["compacted"] = np.array([s == s and s != "unchanged" for s in stage.tolist()], dtype=bool)
    else:
        df["compacted"] = stage.fillna("unchanged") != "unchanged"
    if "cache_decision" not in df.columns and "extra" in df.columns:  # E4: a stored record's `extra.cache_decision`
        df["cache_decision"] = [None if e is None else _decision(e) for e in df["extra"].tolist()]
    df.attrs["summary_calls"] = _summary_calls(df, summaries) if summaries is not None else []
    return df


def _summary_calls(df: pd.DataFrame, summaries: pd.DataFrame) -> list[dict[str, Any]]:
    """C11: each summary call, placed just before the call it was made for (same turn and call), with its
    prompt tokens (reported, else est.), completion tokens and outcome (accepted, rejected, failed)."""
    out: list[dict[str, Any]] = []
    for _, row in summaries.iterrows():
        match = df[(df["turn"] == row.get("turn")) & (df["iteration"] == row.get("iteration"))]
        call = float(match["call"].iloc[0]) if len(match) else float(len(df) + 1)
        reported = opt_int(row.get("prompt_tokens_reported"))
        extra = row.get("extra")
        extra = json.loads(extra) if isinstance(extra, str) else extra if isinstance(extra, dict) else {}
        out.append({"x": call - SUMMARY_OFFSET, "turn": opt_int(row.get("turn")),
                    "iteration": opt_int(row.get("iteration")),
                    "tokens": reported if reported is not None else opt_int(row.get("estimate_tokens")) or 0,
                    "reported": reported is not None, "completion": opt_int(row.get("completion_tokens_reported")),
                    "outcome": extra.get("outcome") or ("failed" if isinstance(row.get("error"), str) else "made"),
                    "model": row.get("model") if isinstance(row.get("model"), str) else None})
    return out


def _decision(extra: Any) -> str | None:
    """E4: the cache decision (`deferred`, `compacted`, ...) a stored record's `extra` carries, else None."""
    if isinstance(extra, str):
        if '"cache_decision"' not in extra:  # most records: no JSON parse
            return None
        try:
            extra = json.loads(extra)
        except ValueError:
            return None
    decision = extra.get("cache_decision") if isinstance(extra, dict) else None
    value = decision.get("decision") if isinstance(decision, dict) else decision
    return value if isinstance(value, str) else None


def _diamond(x: float, y: float, r: float) -> str:
    return f"M{x:.1f} {y - r:.1f}L{x + r:.1f} {y:.1f}L{x:.1f} {y + r:.1f}L{x - r:.1f} {y:.1f}Z"


def _num(series: pd.Series) -> pd.Series:
    if series.dtype.kind in "iuf":  # numbers already (numpy or nullable): what to_numeric returns, without its checks
        return series
    return pd.to_numeric(series, errors="coerce")


def draw_timeline(df: pd.DataFrame, title: str = "prompt tokens per model call", *, ink: str = INK) -> Figure:
    """A `timeline_frame` as a matplotlib figure (est., calibrated and reported lines; compaction markers), e.g.
    for a PNG; the notebook shows `timeline_svg` of the same layers.

    `ink`: colour of text, ticks and frames; INK becomes `currentColor` in the SVG, PLOT_INK (a grey that
    reads on light and dark) suits a PNG."""
    with rc_context({**PLOT_STYLE, **{k: ink for k, v in PLOT_STYLE.items() if v == PLOT_STYLE["text.color"]}}):
        return _draw(df, title, ink)


def sent_unit(df: pd.DataFrame) -> str:
    """The unit of the `sent` line: the counter(s) the policy checked the threshold on, call by call."""
    # distinct first (a few values), in order of appearance
    counters = list(dict.fromkeys(str(v) for v in df["counter"].unique() if not pd.isna(v))) \
        if "counter" in df.columns else []
    labels = [counter_label(c) for c in counters] or ["est."]
    return f"tokens ({' → '.join(labels)})"


@dataclass(frozen=True)
class Series:
    """One line of the timeline: y per call (NaN where unknown), its colour, dash and marker."""

    label: str
    y: list[float]
    color: str
    dash: str  # "-", ":" or "--"
    marker: str = ""  # "o", "s" or "" (none: a dense session)
    step: bool = False  # a step line changing half way between calls (threshold, window)
    width: float = 1.5
    fill: bool = False  # an area from 0 up to y (alpha 0.3, no outline; the cached part, E1/E2)


@dataclass(frozen=True)
class Layers:
    """What the timeline shows, renderer-free: the SVG writer and the matplotlib figure draw the same layers."""

    x: list[int]
    series: list[Series]
    boundaries: list[float]  # x of turn boundaries (between calls)
    marks: list[tuple[int, float, float, str, str]]  # compactions: (call, sent, before, stage, colour)
    stages: list[str]  # stages with a marker, in registry order (legend)
    turn_labels: list[tuple[int, str]]
    unit: str
    title: str
    summary_calls: list[tuple[float, float, str]] = field(default_factory=list)  # C11: (x, prompt tokens, outcome)
    kept_warm: list[tuple[int, float]] = field(default_factory=list)  # E4: (call, sent) where a compaction was deferred


WINDOW_INK = "ink"  # the window line is drawn in the plot's ink (follows the theme)


def timeline_layers(df: pd.DataFrame, title: str = "prompt tokens per model call") -> Layers:
    """The layers of a `timeline_frame`: est., calibrated and reported lines, threshold and window steps,
    turn boundaries and labels, compaction markers."""
    # The main line is what the threshold was checked on (after_tokens, the policy's counter), so the
    # threshold line, the compaction markers and this line share one unit; est. is a second line
    # only when another counter decided.
    # S4: each column is read once into a list of floats (NaN where missing); the rest is plain Python (a few
    # hundred calls, where each pandas step costs more than the work)
    dense = len(df) > MAX_MARKERS
    unit = sent_unit(df)
    estimated = _num(df["estimate_tokens"])
    after = _num(df["after_tokens"])
    sent = after.fillna(estimated) if after.hasnans else after  # (a copy of it when nothing is missing)
    sent_y = _floats(sent)
    series = [Series(f"sent, {unit}", sent_y, "#5c8bd6", "-", "" if dense else "o")]
    cached = cached_part(df)  # E1/E2: the cached part of each call, reported share or est.
    if cached is not None:
        series.append(Series(cached[1], _floats(cached[0]), CACHE_COLOR, "-", fill=True, width=0.0))
    est_y = _floats(estimated)
    if _known(est_y) and not estimated.equals(sent):
        series.append(Series("same request, C1 tokens (est.)", est_y, "#5c8bd6", ":", width=1.0))
    sent_known = not any(map(math.isnan, sent_y))
    for col, color, label in (("calibrated_tokens", "#ab47bc", "calibrated"),
                              ("prompt_tokens_reported", "#00a88f", "reported by the provider")):
        if df[col].isna().all():  # nothing known (most replays: no calibrated or reported count)
            continue
        y = _num(df[col])
        ys = _floats(y)
        if not _known(ys):
            continue
        if sent_known:
            copy = all(a == b for a, b in zip(ys, sent_y, strict=True) if a == a)
        else:  # a missing sent value compares as pandas' nullable types say
            known = y.notna()
            copy = bool((y[known] == sent[known]).all())
        if not copy:  # not a copy of the main line
            series.append(Series(label, ys, color, "--", "" if dense else "s"))
    for col, color, label in (("threshold", THRESHOLD_COLOR, "threshold"), ("window_tokens", WINDOW_INK, "window")):
        ys = _floats(_num(df[col]))
        if _known(ys):
            series.append(Series(label, ys, color, ":" if col == "window_tokens" else "-", step=True, width=1.0))
    turns = df["turn"].tolist()
    starts = [i for i in range(1, len(turns)) if turns[i] != turns[i - 1]]
    calls = df["call"].tolist() if df["call"].dtype == np.int64 else [int(c) for c in df["call"]]
    compacted = df["compacted"].to_numpy(dtype=bool).tolist()
    marks = []
    if any(compacted):
        # the marker sits where compaction was decided (tokens before, over the threshold), the line
        # runs down to what was sent
        marks = [(c, a, b if b == b else a, str(s), STAGE_COLORS.get(s, "#999"))
                 for c, a, b, s, k in zip(calls, sent_y, _floats(_num(df["before_tokens"])), df["stage"].tolist(),
                                          compacted, strict=True) if k]
    present = {m[3] for m in marks}
    kept_warm: list[tuple[int, float]] = []
    if "cache_decision" in df.columns:  # E4: the calls a cache-aware strategy sent with the warm prefix kept
        kept_warm = [(c, y) for c, y, d in zip(calls, sent_y, df["cache_decision"].tolist(), strict=True)
                     if isinstance(d, str) and d == "deferred"]
    return Layers(x=calls, series=series, boundaries=[i + 0.5 for i in starts], marks=marks,
                  stages=[s for s in ALL_STAGES if s in present],
                  turn_labels=spaced_turn_labels(calls, [turns[i] for i in (0, *starts)], [0, *starts]),
                  unit=unit, title=title,
                  summary_calls=[(float(c["x"]), float(c["tokens"]), str(c["outcome"]))
                                 for c in df.attrs.get("summary_calls", [])], kept_warm=kept_warm)


def spaced_turn_labels(calls: list[int], turns: list[Any], firsts: list[int]) -> list[tuple[int, str]]:
    """`turn N` at the first call of each turn, skipping a label that would start before the previous one ends."""
    per_call = PLOT_WIDTH_PX / max(len(calls), 1)
    out: list[tuple[int, str]] = []
    free = -math.inf
    for turn, i in zip(turns, firsts, strict=True):
        label, x = f"turn {turn}", (calls[i] - 0.5) * per_call
        if x >= free:
            out.append((calls[i], label))
            free = x + text_width(label, LABEL_SIZE) + LABEL_GAP_PX
    return out


def _floats(series: pd.Series) -> list[float]:
    """The values as floats, NaN where missing."""
    return series.to_numpy(dtype="float64", na_value=math.nan).tolist()  # type: ignore[no-any-return]


def _known(values: list[float]) -> bool:
    """Any value not missing (not NaN)."""
    return not all(map(math.isnan, values))


def _draw(df: pd.DataFrame, title: str, ink: str) -> Figure:
    layers = timeline_layers(df, title)
    fig = Figure(figsize=(8.5, 3.4), dpi=100)
    # fixed margins (room for the y unit, the title over the turn labels and the legend on the right)
    fig.subplots_adjust(left=0.115, right=0.71, bottom=0.15, top=0.85)
    ax = fig.add_subplot()
    x = layers.x
    handles: list[Any] = []
    for s in layers.series:
        color = ink if s.color == WINDOW_INK else s.color
        if s.fill:
            handles.append(ax.fill_between(x, 0, s.y, color=color, alpha=0.3, lw=0, label=s.label))
        elif s.step:
            handles += ax.step(x, s.y, where="mid", color=color, lw=s.width, ls=s.dash, label=s.label)
        else:
            handles += ax.plot(x, s.y, s.dash + s.marker, ms=3, lw=s.width, color=color, label=s.label)
    if layers.boundaries:  # before the compaction markers (they stay on top); one collection
        bounds = ax.vlines(layers.boundaries, 0, 1, transform=ax.get_xaxis_transform(), colors=ink,
                           alpha=0.35, lw=0.8, linestyles="--")
        bounds.set_gid("turn-boundaries")
    if layers.marks:
        calls, after, top, _, colors = (list(col) for col in zip(*layers.marks, strict=True))
        ax.vlines(calls, after, top, colors=colors, lw=1.5, alpha=0.8)
        ax.scatter(calls, top, s=60, marker="v", zorder=3, edgecolors=ink, linewidths=0.5, c=colors)
        for stage in layers.stages:
            handles.append(Line2D([], [], ls="", marker="v", color=STAGE_COLORS[stage], mec=ink,
                                  label=f"compaction: {stage} (before → sent)"))
    if layers.summary_calls:  # C11: the summary calls, their own marker (a diamond at their prompt tokens)
        xs, ys, _ = (list(col) for col in zip(*layers.summary_calls, strict=True))
        handles.append(ax.scatter(xs, ys, s=40, marker="D", zorder=4, edgecolors=ink, linewidths=0.5,
                                  c=SUMMARY_COLOR, label=SUMMARY_LABEL))
    if layers.kept_warm:  # E4: a ring at what was sent, where the warm prefix was kept (a compaction deferred)
        xs, ys = (list(col) for col in zip(*layers.kept_warm, strict=True))
        handles.append(ax.scatter(xs, ys, s=55, marker="o", zorder=4, facecolors="none", edgecolors=CACHE_COLOR,
                                  linewidths=1.5, label=KEPT_WARM_LABEL))
    for call, label in layers.turn_labels:
        ax.annotate(label, (call, 1.0), xycoords=("data", "axes fraction"), fontsize=7, color=ink, va="bottom")
    ax.set_xlabel("model call")
    ax.set_ylabel(f"prompt {layers.unit}", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title, fontsize=10, loc="left", pad=12)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(lambda v, _: f"{int(v):,}")
    if len(x):
        ax.set_xlim(0.5, len(x) + 0.5)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


# -- the SVG writer's drawing (what the notebook shows; N2: no matplotlib figure on this path) ----------------
W, H = 850.0, 340.0
BOX = (W * 0.115, H * 0.15, W * 0.71, H * 0.85)  # left, top, right, bottom: the same margins as the figure
DASH = {"-": "", ":": ' stroke-dasharray="1.5 2.5"', "--": ' stroke-dasharray="5 3"'}
PT = 100 / 72  # one point in user units (the figure's 100 dpi)


@dataclass(frozen=True, slots=True)
class _Frame:
    """The plot box and its scales (N2: the same margins as the figure): calls x0..x1 across, 0..ymax up."""

    left: float
    top: float
    right: float
    bottom: float
    x0: float
    x1: float
    xscale: float
    yscale: float
    yticks: list[float]

    def px(self, v: float) -> float:
        return self.left + (v - self.x0) * self.xscale

    def py(self, v: float) -> float:
        return self.bottom - v * self.yscale


_Legend = list[tuple[str, str]]  # (the sample's markup, its label), in drawing order


def timeline_svg(layers: Layers, *, ink: str = "currentColor", standalone: bool = False) -> str:
    """The timeline as SVG markup (written directly, about 1/10 of the figure's cost at 1,000 calls): axes, turn
    boundaries, the cached area (E1/E2), the lines, the compaction markers (C10), the summary calls (C11), the
    rings of kept warm prefixes (E4), turn labels, the frame and the legend, in that order."""
    c = Canvas(W, H, ink)
    f = _frame(layers)
    _svg_axes(c, f, layers, ink)
    _svg_boundaries(c, f, layers, ink)
    _svg_areas(c, f, layers)
    legend = _svg_lines(c, f, layers, ink)
    legend += _svg_compactions(c, f, layers, ink)
    legend += _svg_summary_calls(c, f, layers, ink)
    legend += _svg_kept_warm(c, f, layers)
    for call, label in layers.turn_labels:
        c.text(label, f.px(call), f.top - 3, 7 * PT)
    c.add(f'<rect x="{f.left:.1f}" y="{f.top:.1f}" width="{f.right - f.left:.1f}" height="{f.bottom - f.top:.1f}" '
          f'fill="none" stroke="{ink}" stroke-width="0.8"/>')
    _svg_legend(c, f, legend)
    return c.document(title=layers.title, standalone=standalone)


def _frame(layers: Layers) -> _Frame:
    """The scales: x over the calls (half a call of margin), y from 0 to the highest value drawn (lines, markers'
    tokens before compaction, summary calls) plus 5%, up to a round tick."""
    left, top, right, bottom = BOX
    n = len(layers.x)
    x0, x1 = (0.5, n + 0.5) if n else (0.0, 1.0)
    values = [v for s in layers.series for v in s.y if v == v] + [m[2] for m in layers.marks] + [  # v == v: not NaN
        t for _, t, _ in layers.summary_calls]
    ymax = max(values, default=1.0) * 1.05 or 1.0
    yticks = nice_ticks(0, ymax, 7)
    ymax = max(ymax, yticks[-1])
    return _Frame(left, top, right, bottom, x0, x1, (right - left) / (x1 - x0), (bottom - top) / ymax, yticks)


def _svg_axes(c: Canvas, f: _Frame, layers: Layers, ink: str) -> None:
    """The ticks and their labels, the axis labels (the y unit, T3) and the title."""
    left, top, right, bottom = f.left, f.top, f.right, f.bottom
    tick = 10 * PT
    for v in f.yticks:
        c.add(f'<path d="M{left:.1f} {f.py(v):.1f}h-{3.5 * PT:.1f}" stroke="{ink}" stroke-width="0.8"/>')
        c.text(f"{int(v):,}", left - 6 * PT, f.py(v) + tick * 0.36, tick, anchor="end")
    for v in nice_ticks(f.x0, f.x1, 9, integer=True):
        c.add(f'<path d="M{f.px(v):.1f} {bottom:.1f}v{3.5 * PT:.1f}" stroke="{ink}" stroke-width="0.8"/>')
        c.text(f"{int(v):,}", f.px(v), bottom + 6 * PT + tick * 0.75, tick, anchor="middle")
    c.text("model call", (left + right) / 2, H - 6, tick, anchor="middle")
    c.text(f"prompt {layers.unit}", 16, (top + bottom) / 2, 8 * PT, anchor="middle", rotate=True)
    c.text(layers.title, left, top - 12 * PT - 4, 10 * PT)


def _svg_boundaries(c: Canvas, f: _Frame, layers: Layers, ink: str) -> None:
    """The turn boundaries, one dashed path (between the calls of two turns)."""
    if layers.boundaries:
        d = "".join(f"M{f.px(b):.1f} {f.top:.1f}V{f.bottom:.1f}" for b in layers.boundaries)
        c.add(f'<path class="mx-turn-boundaries" d="{d}" stroke="{ink}" stroke-opacity="0.35" stroke-width="0.8" '
              f'stroke-dasharray="4 2" fill="none"/>')


def _svg_areas(c: Canvas, f: _Frame, layers: Layers) -> None:
    """E1/E2: the areas (the cached part of each call), under the lines."""
    for s in layers.series:
        if s.fill:
            c.add(f'<path class="mx-area" data-label={quoteattr(s.label)} d="{_area(layers.x, s.y, f.px, f.py)}" '
                  f'fill="{s.color}" fill-opacity="0.3"/>')


def _svg_lines(c: Canvas, f: _Frame, layers: Layers, ink: str) -> _Legend:
    """The lines (sent, est., calibrated, reported; threshold and window as steps, T3/C5) with their per-call
    markers; returns the legend of every series, areas included, in series order."""
    legend: _Legend = []
    texts: dict[float, str] = {}  # the coordinates formatted, shared by the lines
    left, bottom, x0, xscale, yscale = f.left, f.bottom, f.x0, f.xscale, f.yscale
    for s in layers.series:
        color = ink if s.color == WINDOW_INK else s.color
        if s.fill:
            legend.append((f'<rect x="0" y="-4" width="18" height="8" fill="{color}" fill-opacity="0.3"/>', s.label))
            continue
        xs, ys = step_mid(layers.x, s.y) if s.step else (layers.x, s.y)
        sx = [left + (v - x0) * xscale for v in xs]  # f.px and f.py, inlined (thousands of points)
        sy = [bottom - v * yscale for v in ys]
        c.add(f'<path class="mx-series" data-label={quoteattr(s.label)} d="{polyline(sx, sy, texts=texts)}" '
              f'stroke="{color}" stroke-width="{s.width * PT:.2f}"{DASH[s.dash]} fill="none"/>')
        if s.marker:
            c.add(f'<path class="mx-points" d="{_markers(s.marker, sx, sy)}" fill="{color}"/>')
        legend.append((_legend_line(s, color), s.label))
    return legend


def _svg_compactions(c: Canvas, f: _Frame, layers: Layers, ink: str) -> _Legend:
    """C10: each compaction, a line from what was sent up to the tokens before it and a triangle there; one legend
    entry per stage."""
    if not layers.marks:
        return []
    px, py = f.px, f.py
    # above MAX_MARKERS calls a compaction whose drop is shorter than its marker is not marked: one at every
    # call (masking's) would merge into a band over the sent line, hiding it (the line shows those drops)
    shown = layers.marks if len(layers.x) <= MAX_MARKERS else [  # py(after) - py(before), inlined
        m for m in layers.marks if (f.bottom - m[1] * f.yscale) - (f.bottom - m[2] * f.yscale) >= MARK_R]
    c.add("".join(f'<path d="M{px(call):.1f} {py(after):.1f}V{py(before):.1f}" stroke="{color}" '
                  f'stroke-opacity="0.8" stroke-width="{1.5 * PT:.2f}"/>'
                  for call, after, before, _, color in shown))
    c.add('<g class="mx-compactions">' + "".join(
        f'<path data-stage="{stage}" d="{_triangle(px(call), py(before), MARK_R)}" fill="{color}" stroke="{ink}" '
        f'stroke-width="0.7"/>' for call, _, before, stage, color in shown) + "</g>")
    return [(f'<path d="{_triangle(9, 0, 4)}" fill="{STAGE_COLORS[stage]}" stroke="{ink}" stroke-width="0.7"/>',
             f"compaction: {stage} (before → sent)") for stage in layers.stages]


def _svg_summary_calls(c: Canvas, f: _Frame, layers: Layers, ink: str) -> _Legend:
    """C11: each summary call, a diamond at its prompt tokens just before the call it was made for."""
    if not layers.summary_calls:
        return []
    c.add('<g class="mx-summary-calls">' + "".join(
        f'<path data-outcome="{esc(outcome)}" d="{_diamond(f.px(x), f.py(t), 4.5)}" fill="{SUMMARY_COLOR}" '
        f'stroke="{ink}" stroke-width="0.7"><title>summary call ({esc(outcome)}): {int(t):,} prompt tokens'
        f'</title></path>' for x, t, outcome in layers.summary_calls) + "</g>")
    return [(f'<path d="{_diamond(9, 0, 3.6)}" fill="{SUMMARY_COLOR}" stroke="{ink}" stroke-width="0.7"/>',
             SUMMARY_LABEL)]


def _svg_kept_warm(c: Canvas, f: _Frame, layers: Layers) -> _Legend:
    """E4: a ring at what was sent, where a cache-aware strategy kept the warm prefix (a compaction deferred)."""
    if not layers.kept_warm:
        return []
    c.add('<g class="mx-kept-warm">' + "".join(
        f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="4.5" fill="none" stroke="{CACHE_COLOR}" '
        f'stroke-width="1.8"><title>call {x}: kept the warm prefix (E4: compaction deferred), {int(y):,} '
        f'tokens sent</title></circle>'
        for x, y in layers.kept_warm) + "</g>")
    return [(f'<circle cx="9" cy="0" r="3.8" fill="none" stroke="{CACHE_COLOR}" stroke-width="1.6"/>',
             KEPT_WARM_LABEL)]


def _svg_legend(c: Canvas, f: _Frame, legend: _Legend) -> None:
    """The legend, right of the plot: one row per entry, its sample then its label."""
    row, lx, ly = 7 * PT * 1.75, f.right + 0.01 * W + 4, f.top + 10
    for i, (sample, label) in enumerate(legend):
        y = ly + i * row
        c.add(f'<g class="mx-legend" transform="translate({lx:.1f} {y:.1f})" data-label={quoteattr(label)}>'
              f"{sample}</g>")
        c.text(label, lx + 24, y + 7 * PT * 0.35, 7 * PT)


def _legend_line(s: Series, color: str) -> str:
    dots = f'<path d="{_markers(s.marker, [9.0], [0.0])}" fill="{color}"/>' if s.marker else ""
    return f'<path d="M0 0h18" stroke="{color}" stroke-width="{s.width * PT:.2f}"{DASH[s.dash]}/>{dots}'


def _markers(kind: str, xs: Sequence[float], ys: Sequence[float]) -> str:
    r = 1.5 * PT
    if kind == "s":
        return "".join(f"M{x - r:.1f} {y - r:.1f}h{2 * r:.1f}v{2 * r:.1f}h-{2 * r:.1f}Z"
                       for x, y in zip(xs, ys, strict=True) if y == y)
    return "".join(f"M{x - r:.1f} {y:.1f}a{r:.1f} {r:.1f} 0 1 0 {2 * r:.1f} 0a{r:.1f} {r:.1f} 0 1 0 -{2 * r:.1f} 0Z"
                   for x, y in zip(xs, ys, strict=True) if y == y)


def _area(xs: Sequence[float], ys: Sequence[float], px: Any, py: Any) -> str:
    """An area from 0 up to the line through (xs, ys), one polygon per run of known values."""
    out: list[str] = []
    run: list[tuple[float, float]] = []
    for x, y in [*zip(xs, ys, strict=True), (math.nan, math.nan)]:
        if y == y:
            run.append((px(x), py(y)))
        elif run:
            base = py(0)
            out.append(f"M{run[0][0]:.1f} {base:.1f}" + "".join(f"L{a:.1f} {b:.1f}" for a, b in run)
                       + f"L{run[-1][0]:.1f} {base:.1f}Z")
            run = []
    return "".join(out)


def _triangle(x: float, y: float, r: float) -> str:
    """A downward triangle centred on (x, y) (matplotlib's "v" marker)."""
    return f"M{x - r:.1f} {y - r:.1f}h{2 * r:.1f}L{x:.1f} {y + r:.1f}Z"


def svg_document(fig: Figure) -> str:
    """The figure as a standalone SVG document (its own size, its own ink), e.g. for an <img>."""
    buf = io.StringIO()
    # text stays glyph paths: as <text> it would leak as loose words when an untrusted notebook's
    # sanitizer drops the <svg> (seen in the untrusted-copy screenshot)
    fig.savefig(buf, format="svg", transparent=True)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)


def figure_svg(fig: Figure | None, document: str | None = None) -> str:
    """The figure (or a standalone SVG `document`) as inline SVG markup whose ink is `currentColor` (it follows
    the page's text colour)."""
    if document is None:
        if fig is None:
            raise ValueError("figure_svg needs a figure or an SVG document")
        document = svg_document(fig)
    svg = document
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
            requests = store.requests(session_id, summary_calls=True)  # C11: with its summary calls
        if not isinstance(requests, pd.DataFrame):
            raise TypeError(f"requests must be a pandas DataFrame, got {type(requests).__name__}")
        self.data = timeline_frame(requests)
        self.title = title or (f"session {str(session_id)[:8]} · prompt tokens per model call" if session_id
                               else "prompt tokens per model call")
        # written once as SVG (N2: no matplotlib figure on this path, < 100 ms at 1,000 calls): inline, the ink
        # is currentColor (the page's text colour); beside it the same SVG as a standalone document in PLOT_INK
        # (a grey that reads on light and dark) as an <img>, for sanitized outputs: an untrusted notebook drops
        # <svg> but keeps a data: image; CSS hides it otherwise
        self.layers = timeline_layers(self.data, self.title)
        document = timeline_svg(self.layers, ink=INK, standalone=True)  # written once, inked twice
        self.svg = figure_svg(None, document)
        self._image_b64 = base64.b64encode(document.replace(INK, PLOT_INK).encode()).decode()
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
        summaries = d.attrs.get("summary_calls") or []
        if summaries:  # C11: made before the turn's calls, not counted among them
            calls += f" + {counted(len(summaries), 'summary call')}"
        cost = cost_caption(d)  # E1-E3: cache-read share and est. cost, labelled
        return (f'<div class="mx-timeline-caption" style="{FONT}">{esc(self.title)} · {calls} · '
                f'{counted(d["turn"].nunique(), "turn")} · compactions: {esc(comp)} · peak sent {fmt_int(peak)} '
                f'{esc(sent_unit(d))}{"<br>" + cost if cost else ""}</div>')

    @functools.cached_property
    def figure(self) -> Figure:
        """The same layers as a matplotlib figure (drawn on first use: for a PNG or further styling)."""
        return draw_timeline(self.data, self.title, ink=PLOT_INK)

    @property
    def png(self) -> bytes:
        """The figure as PNG bytes (for saving; the notebook shows the SVG)."""
        return figure_png(self.figure)

    def to_html(self) -> str:
        """Caption and the figure as inline SVG in the theme's colours."""
        return (f'{THEME_STYLE}<style>.mx-timeline-plot svg~img{{display:none}}</style>'
                f'<div class="mx-timeline" style="{FONT}">{self._caption.value}'  # drawn once (N2)
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
