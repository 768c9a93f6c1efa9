"""The small SVG writer behind the token timeline (N2: < 100 ms at 1,000 calls; C10: what the timeline shows).

The timeline is written as SVG directly instead of through a matplotlib figure; these tests hold the writer to
what the figure showed: the same lines through the same numbers, the same step lines, markers and legend,
round ticks, text as glyph outlines (no `<text>` a sanitizer could leave loose), ink that follows the theme.
"""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.cbook import pts_to_midstep

from mxclaw_nb.context import ContextPolicy, build_request_view, estimate_messages
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example
from mxclaw_nb.palette import PLOT_INK
from mxclaw_nb.widgets import TokenTimeline
from mxclaw_nb.widgets.data import requests_from_views
from mxclaw_nb.widgets.svgplot import Canvas, glyph, nice_ticks, polyline, step_mid, text_width
from mxclaw_nb.widgets.timeline import BOX, timeline_layers

SVG = "{http://www.w3.org/2000/svg}"
POLICY = ContextPolicy(**WORKED_EXAMPLE_POLICY)


@settings(max_examples=200, deadline=None)
@given(lo=st.floats(-1e6, 1e6), span=st.floats(1e-3, 1e7), max_ticks=st.integers(2, 12), integer=st.booleans())
def test_n2_nice_ticks_are_round_evenly_spaced_and_inside(lo: float, span: float, max_ticks: int,
                                                          integer: bool) -> None:
    hi = lo + span
    ticks = nice_ticks(lo, hi, max_ticks, integer=integer)
    assert len(ticks) <= max_ticks
    assert ticks or (integer and math.floor(hi) < lo)  # only a range without a whole number has no integer tick
    if span > 1e-2 * max(1.0, abs(lo)) and not integer:
        assert len(ticks) >= 2 or max_ticks == 2
    assert all(lo - 1e-6 * span <= t <= hi + 1e-6 * span for t in ticks)
    steps = {round(b - a, 6) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) <= 1  # evenly spaced
    if integer:
        assert all(float(t).is_integer() for t in ticks)
    if steps and not integer:
        step = steps.pop()
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10))


def test_n2_nice_ticks_of_a_token_axis() -> None:
    assert nice_ticks(0, 42_000, 7) == [0, 10_000, 20_000, 30_000, 40_000]
    assert nice_ticks(0.5, 12.5, 9, integer=True) == [2, 4, 6, 8, 10, 12]
    assert nice_ticks(0.5, 1.5, 9, integer=True) == [1]
    assert nice_ticks(3, 3) == [3]


def test_n2_step_mid_is_matplotlibs_mid_step() -> None:
    xs, ys = [1.0, 2.0, 3.0, 5.0], [10.0, 10.0, 20.0, 5.0]
    sx, sy = step_mid(xs, ys)
    mx, my = pts_to_midstep(np.array(xs), np.array(ys))
    assert sx == list(mx) and sy == list(my)


def test_n2_polyline_breaks_at_missing_points() -> None:
    d = polyline([1, 2, 3, 4, 5], [1.0, 2.0, math.nan, 4.0, 5.0])
    assert d == "M1.0 1.0L2.0 2.0M4.0 4.0L5.0 5.0"
    assert polyline([1], [math.nan]) == ""


def _polyline_by_points(xs: list[float], ys: list[float]) -> str:
    """The path's definition, point by point: `M` after a gap (NaN), `L` after a point, one decimal."""
    out, pen_down = [], False
    for x, y in zip(xs, ys, strict=True):
        if math.isnan(x) or math.isnan(y):
            pen_down = False
            continue
        out.append(f"{'L' if pen_down else 'M'}{x:.1f} {y:.1f}")
        pen_down = True
    return "".join(out)


coordinate = st.one_of(st.floats(-1e4, 1e4), st.sampled_from([0.0, -0.0, 0.05, -0.05, 0.25, 12.35, math.nan]))


@settings(max_examples=300, deadline=None)
@given(points=st.lists(st.tuples(coordinate, coordinate), max_size=40), steps=st.booleans())
def test_n2_polyline_is_the_point_by_point_path(points: list[tuple[float, float]], steps: bool) -> None:
    """N2: polyline's quicker ways (one formatting pass over a gapless data line; each repeated coordinate formatted
    once, shared by the lines of one plot) write the path the point-by-point definition writes, 0.0 and -0.0
    apart, gaps included."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if steps:  # a step line: each point twice, as step_mid makes them
        xs, ys = [x for x in xs for _ in (0, 1)], [y for y in ys for _ in (0, 1)]
    shared: dict[float, str] = {}
    for _ in range(2):  # the second time every coordinate is already formatted
        assert polyline(xs, ys, texts=shared) == polyline(xs, ys) == _polyline_by_points(xs, ys)
    with pytest.raises(ValueError, match="as many"):
        polyline([*xs, 1.0], ys)


@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.floats(-1e4, 1e4), min_size=1, max_size=30, unique=True),
       ys=st.lists(st.sampled_from([1.0, 2.5, 7.0, math.nan]), min_size=30, max_size=30))
def test_n2_step_mid_is_matplotlibs_mid_step_with_and_without_gaps(xs: list[float], ys: list[float]) -> None:
    xs, ys = sorted(xs), ys[:len(xs)]
    sx, sy = step_mid(xs, ys)
    if not any(math.isnan(y) for y in ys):  # gapless: matplotlib's own mid step, value for value
        mx, my = pts_to_midstep(np.array(xs), np.array(ys))
        assert sx == list(mx) and sy == list(my)
    assert len(sx) == len(sy) == sum(1 if math.isnan(y) else 2 for y in ys)
    assert [y for y in sy if not math.isnan(y)] == [y for y in ys if not math.isnan(y) for _ in (0, 1)]


def test_n2_text_is_glyph_outlines_not_text_elements() -> None:
    c = Canvas(200, 50)
    c.text("turn 1 → 中", 10, 20, 10)
    c.text("turn 2", 100, 20, 10, anchor="end")
    svg = c.document(title="a <title>")
    root = ET.fromstring(svg)  # well-formed XML
    # no element text at all (no <text>, no <title>): a sanitizer dropping <svg> would leave it loose on the page
    assert "<text" not in svg and all(not (e.text or "").strip() for e in root.iter())
    assert root.get("aria-label") == "a <title>"
    ids = {p.get("id") for p in root.iter(f"{SVG}path")}
    uses = [u.get("href") for u in root.iter(f"{SVG}use")]
    assert uses and {u.lstrip("#") for u in uses} <= ids  # every placed glyph is defined once
    assert len(ids) == len(set("turn1→中2") - {" "})  # one outline per distinct character
    assert [g.get("data-text") for g in root.iter(f"{SVG}g")] == ["turn 1 → 中", "turn 2"]
    assert text_width("turn 10", 10) > text_width("turn 1", 10) > 0
    assert glyph(" ")[0] == "" and glyph(" ")[1] > 0  # a space advances without an outline
    other = Canvas(200, 50)
    other.text("turn 3", 10, 20, 10)
    first = re.search(r'id="(mxg\w+-)', svg).group(1)  # type: ignore[union-attr]
    assert first not in other.document()  # two plots on a page keep their own glyph ids


def _replay() -> tuple[list, list[int]]:
    msgs = worked_example()
    ks = list(range(6, len(msgs) + 1, 6)) + [len(msgs)]
    views = [build_request_view(msgs[:k], POLICY) for k in ks]
    return views, [1 + i // 3 for i in range(len(views))]


def _ys(d: str) -> list[float]:
    return [float(y) for y in re.findall(r"[ML][\d.]+ ([\d.]+)", d)]


def test_c10_timeline_svg_draws_the_figures_lines_markers_and_legend() -> None:
    """The SVG shows what the matplotlib figure of the same layers shows: each line through the same numbers
    (on one linear axis from 0), the threshold and window steps, one marker per compaction at the tokens before,
    turn boundaries, and the same legend entries."""
    views, turns = _replay()
    df = requests_from_views(views, turns)
    df["prompt_tokens_reported"] = [v.after_tokens + 100 for v in views]
    tl = TokenTimeline(df, title="replay")
    root = ET.fromstring(tl.svg)
    series = {p.get("data-label"): p.get("d") for p in root.iter(f"{SVG}path") if p.get("class") == "mx-series"}
    ax = tl.figure.axes[0]
    assert list(series) == [line.get_label() for line in ax.get_lines()]  # same lines, same order
    legend = [g.get("data-label") for g in root.iter(f"{SVG}g") if g.get("class") == "mx-legend"]
    assert legend == [t.get_text() for t in ax.get_legend().get_texts()]
    bottom = BOX[3]
    sent = _ys(series["sent, tokens (est.)"])
    values = [estimate_messages(v.messages) for v in views]
    k = (bottom - sent[values.index(max(values))]) / max(values)  # px per token
    assert len(sent) == len(views) and k > 0
    assert all(abs(bottom - y - k * v) <= 0.1 for y, v in zip(sent, values, strict=True))  # one linear y axis

    def on_axis(px_y: float, tokens: float) -> bool:
        return abs(bottom - px_y - k * tokens) <= 0.1

    threshold = _ys(series["threshold"])
    assert len(threshold) == 2 * len(views)  # a mid step: two points per call
    assert all(on_axis(y, v.threshold) for y, v in zip(threshold[::2], views, strict=True))
    compacted = [v for v in views if v.compacted]
    marks = [p for p in root.iter(f"{SVG}path") if p.get("data-stage")]
    assert [m.get("data-stage") for m in marks] == [v.stage for v in compacted] and compacted
    # a downward triangle's tip is r below its centre, which sits at the tokens before compaction
    tips = [float(re.findall(r"L[\d.]+ ([\d.]+)Z", m.get("d"))[0]) for m in marks]
    assert all(on_axis(t - 5.4, v.before_tokens) for t, v in zip(tips, compacted, strict=True))
    bounds = next(p for p in root.iter(f"{SVG}path") if p.get("class") == "mx-turn-boundaries")
    assert bounds.get("d").count("M") == len(set(turns)) - 1
    # ink: the page's text colour inline; the <img> copy keeps the grey that reads on light and dark
    assert "currentColor" in tl.svg and PLOT_INK not in tl.svg and "<text" not in tl.svg
    assert 'width="100%"' in tl.svg and "max-width:850px" in tl.svg


def test_c10_timeline_layers_of_a_dense_session_and_missing_values() -> None:
    """Above MAX_MARKERS calls the lines carry no per-call markers; a call with no reported count leaves a gap."""
    n = 300
    df = pd.DataFrame({"turn": [1 + i // 5 for i in range(n)], "estimate_tokens": [1000 + i for i in range(n)],
                       "prompt_tokens_reported": [None if i == 7 else 1100 + i for i in range(n)]})
    tl = TokenTimeline(df)
    layers = timeline_layers(tl.data)
    assert all(s.marker == "" for s in layers.series)
    reported = next(s for s in layers.series if s.label == "reported by the provider")
    assert math.isnan(reported.y[7]) and reported.y[8] == 1108
    root = ET.fromstring(tl.svg)
    d = next(p.get("d") for p in root.iter(f"{SVG}path") if p.get("data-label") == "reported by the provider")
    assert d.count("M") == 2  # the line breaks at the missing report
    assert not [p for p in root.iter(f"{SVG}path") if p.get("class") == "mx-points"]
    assert layers.turn_labels[0] == (1, "turn 1")
    assert_labels_apart(layers.turn_labels, n)
    with pytest.raises(ValueError, match="figure or an SVG document"):
        from mxclaw_nb.widgets.timeline import figure_svg

        figure_svg(None)


def test_e1_timeline_svg_fills_the_cached_part_under_the_sent_line() -> None:
    """E1: the cached part of each call (the provider's cached share of what was sent) is a filled area from 0,
    in the figure's legend order, its top at the cached tokens on the same axis as the sent line."""
    from mxclaw_nb.widgets.cost import REPORTED_LABEL

    n = 6
    df = pd.DataFrame({"turn": [1, 1, 2, 2, 3, 3], "estimate_tokens": [1000 * (i + 1) for i in range(n)],
                       "prompt_tokens_reported": [1000 * (i + 1) for i in range(n)],
                       "cached_tokens_reported": [0, 500, 1000, None, 2000, 2500]})
    tl = TokenTimeline(df)
    root = ET.fromstring(tl.svg)
    area = next(p for p in root.iter(f"{SVG}path") if p.get("class") == "mx-area")
    assert area.get("data-label") == REPORTED_LABEL and area.get("fill-opacity") == "0.3"
    legend = [g.get("data-label") for g in root.iter(f"{SVG}g") if g.get("class") == "mx-legend"]
    assert legend == [t.get_text() for t in tl.figure.axes[0].get_legend().get_texts()]
    assert legend.index(REPORTED_LABEL) == 1  # right after the sent line, as in the figure
    sent = _ys(next(p.get("d") for p in root.iter(f"{SVG}path") if p.get("class") == "mx-series"))
    bottom = BOX[3]
    k = (bottom - sent[-1]) / 6000
    tops = _ys(area.get("d"))[1:-1]  # the polygon: base, the tops, base
    cached = [0, 500, 1000, 0, 2000, 2500]  # an unreported share counts as nothing cached
    assert all(abs(bottom - y - k * v) <= 0.1 for y, v in zip(tops, cached, strict=True))


def assert_labels_apart(labels: list[tuple[int, str]], n: int) -> None:
    from mxclaw_nb.widgets.timeline import LABEL_SIZE, PLOT_WIDTH_PX

    per_call = PLOT_WIDTH_PX / n
    for (a, label), (b, _) in itertools.pairwise(labels):
        assert (b - a) * per_call >= text_width(label, LABEL_SIZE), (a, label, b)


@given(st.lists(st.integers(1, 40), min_size=1, max_size=300))
@settings(max_examples=60, deadline=None)
def test_n2_turn_labels_never_overlap_and_the_first_turn_is_named(calls_per_turn: list[int]) -> None:
    """N2: a 1-call turn beside the next printed "turn 3turn 4"; labels keep their own width apart."""
    turns = [t for t, k in enumerate(calls_per_turn, 1) for _ in range(k)]
    df = pd.DataFrame({"turn": turns, "estimate_tokens": [1000 + i for i in range(len(turns))]})
    labels = timeline_layers(TokenTimeline(df).data).turn_labels
    assert labels[0] == (1, "turn 1")
    assert_labels_apart(labels, len(turns))
    firsts = {i + 1 for i in range(len(turns)) if i == 0 or turns[i] != turns[i - 1]}
    assert {c for c, _ in labels} <= firsts
    from mxclaw_nb.widgets.timeline import LABEL_GAP_PX, LABEL_SIZE, PLOT_WIDTH_PX

    room = min(calls_per_turn[:-1], default=0) * PLOT_WIDTH_PX / len(turns)
    if room >= text_width(f"turn {len(calls_per_turn)}", LABEL_SIZE) + LABEL_GAP_PX:  # wide turns: all named
        assert len(labels) == len(calls_per_turn)


def test_c10_a_dense_timeline_marks_only_the_compactions_a_marker_can_show() -> None:
    """Above MAX_MARKERS calls, a compaction whose drop is shorter than its marker (masking's, at every call) is
    not marked: 500 such markers merged into a band over the sent line. The large drops keep marker and line."""
    from mxclaw_nb.analysis.replay import replay_messages, rows_as_requests
    from mxclaw_nb.context.strategies import strategy_from
    from mxclaw_nb.widgets.timeline import MARK_R, MAX_MARKERS, timeline_frame, timeline_svg
    from tests.test_lab import long_session

    rows = replay_messages(long_session(500), ContextPolicy(32_000, 0.8, 2_500, strategy=strategy_from("masking")),
                           facts=False, states=False)
    layers = timeline_layers(timeline_frame(rows_as_requests(rows)))
    root = ET.fromstring(timeline_svg(layers))
    marks = [p for p in root.iter(f"{SVG}path") if p.get("data-stage")]
    tips = [tuple(map(float, re.findall(r"L([\d.]+) ([\d.]+)Z", m.get("d"))[0])) for m in marks]  # (x, y) of the tip
    sent = _ys(next(p.get("d") for p in root.iter(f"{SVG}path") if p.get("data-label") == "sent, tokens (est.)"))
    calls = [round((x - BOX[0]) / (BOX[2] - BOX[0]) * 500 + 0.5) for x, _ in tips]
    tips = [y for _, y in tips]
    assert len(layers.x) > MAX_MARKERS and sum(r["compacted"] for r in rows) > 400  # one at nearly every call
    assert 10 <= len(marks) <= 40  # the turns' large drops only
    assert all(sent[c - 1] - (tip - MARK_R) >= MARK_R - 0.2 for c, tip in zip(calls, tips, strict=True))
