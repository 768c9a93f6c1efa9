"""Plots of policy comparisons and estimator honesty (SPEC S4), in the project's colours.

Why: a comparison of several policies over hundreds of sessions is read at a glance or not at all.
These functions turn ``compare`` / ``estimate_honesty`` frames into small matplotlib figures: share of
tokens saved, stages reached, fact survival by kind, and the estimate/exact ratio per content kind.
They use matplotlib's object API (``Figure``, no pyplot state), like the widgets, so they work
headless and in any notebook; colours come from ``mxclaw_nb.palette`` (one palette everywhere), drawn
on a transparent figure with a grey ink that reads in light and dark themes (``PLOT_STYLE``). The
ipywidgets views of these results live in ``mxclaw_nb.widgets.compare`` (analysis never imports UI).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mxclaw_nb.analysis.facts import FACT_KINDS
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.palette import PLOT_INK, PLOT_STYLE, STAGE_COLORS

_KIND_COLORS = {"path": "#3949ab", "error": "#e53935", "number": "#00897b", "command": "#8d6e63", "all": PLOT_INK}
_SAVED_COLORS = ("#1e88e5", "#90caf9")


def stage_colors() -> dict[str, str]:
    """Stage -> colour (the project's palette)."""
    return dict(STAGE_COLORS)


F = TypeVar("F", bound=Callable[..., Any])


def _themed(fn: F) -> F:
    """Draw with the project's plot style: transparent figure, a grey ink that reads on light and dark."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from matplotlib import rc_context

        with rc_context(PLOT_STYLE):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def _axes(ax: Axes | None, size: tuple[float, float] = (6.0, 3.2)) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = Figure(figsize=size, dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _policy_summary(df: pd.DataFrame) -> pd.DataFrame:
    if "sessions_compacted" in df.columns:  # already summarize_policies output
        return df
    from mxclaw_nb.analysis.compare import summarize_policies

    return summarize_policies(df)


@_themed
def plot_tokens_saved(df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Bars per policy: share of tokens saved over all calls and over compacted calls only."""
    s = _policy_summary(df)
    fig, ax = _axes(ax)
    x = range(len(s))
    width = 0.4
    ax.bar([i - width / 2 for i in x], s["saved_share"] * 100, width, label="all calls", color=_SAVED_COLORS[0])
    ax.bar([i + width / 2 for i in x], s["saved_share_compacted"].fillna(0) * 100, width,
           label="compacted calls", color=_SAVED_COLORS[1])
    ax.set_xticks(list(x), [str(p) for p in s["policy"]], rotation=20, ha="right")
    ax.set_ylabel("tokens saved (%)")
    ax.set_title("tokens saved vs the uncompacted transcript")
    ax.legend(frameon=False)
    return fig


@_themed
def plot_stage_counts(df: pd.DataFrame, ax: Axes | None = None, *, include_unchanged: bool = False) -> Figure:
    """Stacked bars per policy: number of simulated calls reaching each stage."""
    s = _policy_summary(df)
    colors = stage_colors()
    fig, ax = _axes(ax)
    stages = list(STAGES[0 if include_unchanged else 1:])  # the engine's stages, in C0 order (context/stages.py)
    bottom = [0] * len(s)
    for stage in stages:
        values = list(s[f"stage_{stage}"])
        ax.bar([str(p) for p in s["policy"]], values, bottom=bottom, label=stage, color=colors.get(stage))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.tick_params(axis="x", rotation=20)
    ax.set_ylabel("model calls")
    ax.set_title("stage reached per simulated call")
    ax.legend(frameon=False)
    return fig


@_themed
def plot_fact_survival(df: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Grouped bars per policy: share of facts of compacted messages still visible, overall and per kind.

    A kind with no fact in any compacted message gets no bars and no legend entry; the title names it
    ("none found"). A zero-height bar is labelled: ``0`` (facts found, none visible) or ``n/a`` (none found
    under that policy), so an empty slot always says why.
    """
    s = _policy_summary(df)
    fig, ax = _axes(ax, (7.0, 3.2))
    series = [(n, c) for n, c in [("all", "fact_survival"), *((k, f"survival_{k}") for k in FACT_KINDS)] if c in s]
    drawn = [(n, c) for n, c in series if s[c].notna().any()]
    none_found = [n for n, c in series if (n, c) not in drawn]
    width = 0.8 / max(len(drawn), 1)
    for j, (name, col) in enumerate(drawn):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(s))]
        values = s[col] * 100
        bars = ax.bar(xs, values.fillna(0), width, label=name, color=_KIND_COLORS[name])
        marks = ["n/a" if pd.isna(v) else "0" if v == 0 else "" for v in values]
        ax.bar_label(bars, labels=marks, fontsize="x-small", color=PLOT_INK)
    ax.set_xticks(range(len(s)), [str(p) for p in s["policy"]], rotation=20, ha="right")
    ax.set_ylim(0, 118)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("facts still visible (%)")
    title = "fact survival in compacted calls"
    if none_found:
        title += f"\n(none found in compacted messages: {', '.join(none_found)})"
    ax.set_title(title)
    if drawn:
        ax.legend(frameon=False, ncols=len(drawn), fontsize="small", loc="upper left")
    return fig


@_themed
def plot_estimate_error(honesty: pd.DataFrame, ax: Axes | None = None, by: str = "kind") -> Figure:
    """Box plot of estimate / exact per content kind (or role); below the red line the estimate under-counts."""
    fig, ax = _axes(ax)
    groups = [(name, g["ratio"].dropna()) for name, g in honesty.groupby(by, sort=True)]
    groups = [(n, r) for n, r in groups if len(r)]
    ax.boxplot([r for _, r in groups], showfliers=False)
    ax.set_xticks(range(1, len(groups) + 1), [f"{n}\n(n={len(r)})" for n, r in groups])
    ax.axhline(1.0, color="#e53935", linewidth=1)
    ax.set_ylabel("C1 estimate / exact o200k")
    ax.set_title(f"estimate vs exact tokens by {by}")
    return fig


@_themed
def plot_comparison(df: pd.DataFrame) -> Figure:
    """One figure with tokens saved, stage counts and fact survival side by side."""
    fig = Figure(figsize=(15, 3.8), dpi=100, layout="constrained")
    axes: Any = fig.subplots(1, 3)
    summary = _policy_summary(df)
    plot_tokens_saved(summary, axes[0])
    plot_stage_counts(summary, axes[1])
    plot_fact_survival(summary, axes[2])
    return fig
