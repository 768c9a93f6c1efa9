"""The context gauge: what fills the window, as sent and before compaction, against threshold and window.

Why: a single number ("41,210 tokens") says nothing about *what* fills the context. The article
separates boundary layers (system prompt, project instructions, skills, memory, user input) from the
process record (assistant text, tool results, summaries); two stacked bars — the request view as
sent, and the transcript before compaction underneath — make both the composition and the effect of
compaction visible at a glance. The bars are plain inline-styled HTML so they render in JupyterLab,
classic Notebook, VS Code, exported HTML and GitHub alike; figures say which counter produced them
("est.", "calibrated", "reported"), as UX.md requires.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from mxclaw_nb.context import LAYERS, RequestView
from mxclaw_nb.store.records import opt_int
from mxclaw_nb.widgets.cost import cache_strip
from mxclaw_nb.widgets.data import CallData, from_request, from_view, layer_split
from mxclaw_nb.widgets.static import StaticReprMixin
from mxclaw_nb.widgets.style import (
    BORDER_STRONG,
    FAIL_CSS,
    FONT,
    LAYER_COLORS,
    MUTED,
    THEME_STYLE,
    THRESHOLD_COLOR,
    TRACK,
    WINDOW_CSS,
    chip,
    color_of,
    counter_label,
    esc,
    fmt_int,
    swatch,
    unit_label,
)

BAR_CHARS = 18


def _as_data(view: RequestView | CallData | None, reported: int | None, calibrated: int | None) -> CallData | None:
    if view is None or isinstance(view, CallData):
        if view is not None and (reported is not None or calibrated is not None):
            rec = view.record
            return view.with_record(
                prompt_tokens_reported=reported if reported is not None else rec.prompt_tokens_reported,
                calibrated_tokens=calibrated if calibrated is not None else rec.calibrated_tokens)
        return view
    return from_view(view, reported_prompt_tokens=reported, calibrated_tokens=calibrated)


def totals(data: CallData) -> tuple[int, int, int, int]:
    """(after, before, threshold, window) tokens of the call, 0 where the record does not say (before: after)."""
    rec = data.record
    after = rec.after_tokens or 0
    return after, rec.before_tokens or after, rec.threshold or 0, rec.window_tokens or 0


def _bar(label: str, figure: str, total: int, layers: dict[str, int], scale: int, data: CallData, unit: str,
         title: str = "") -> str:
    """One bar `total` long (in `unit`); `layers` (any unit) take their share of it."""
    segs = []
    rows = sum(layers.values())
    for name in LAYERS:
        n = layers.get(name, 0)
        if n <= 0:
            continue
        pct = 100.0 * (n / rows) * total / scale if rows else 0.0
        segs.append(f'<div class="mx-seg" data-layer="{esc(name)}" title="{esc(name)}: '
                    f'{fmt_int(round(total * n / rows))} {unit} ({100.0 * n / rows:.0f}%)" '
                    f'style="width:{pct:.3f}%;background:{LAYER_COLORS[name]}"></div>')
    lines = ""
    _, _, threshold, window = totals(data)
    for value, color, name in ((threshold, THRESHOLD_COLOR, "threshold"), (window, WINDOW_CSS, "window")):
        if value:
            left = min(100.0, 100.0 * value / scale)
            # plain values first: a sanitizer (an untrusted notebook) drops var()/calc() but keeps these
            lines += (f'<div class="mx-line mx-{name}" title="{name} {fmt_int(value)} {unit}" style="position:absolute;'
                      f'top:-4px;bottom:-4px;left:{left:.3f}%;margin-left:-3px;width:3px;background:#808080;'
                      f'background:{color}"></div>')
    tip = f' title="{esc(title)}"' if title else ""
    return (f'<div style="display:flex;align-items:center;margin:5px 0;gap:8px">'
            f'<div style="width:190px;flex:none;color:{MUTED}">{esc(label)}</div>'
            f'<div class="mx-track" style="position:relative;flex:1;min-width:120px;height:16px;'
            f'background:rgba(128,128,128,.18);background:{TRACK};border:1px solid rgba(128,128,128,.5);'
            f'border-color:{BORDER_STRONG};border-radius:2px">'
            f'<div style="display:flex;height:100%;overflow:hidden">{"".join(segs)}</div>{lines}</div>'
            f'<div class="mx-bar-figure" style="width:150px;flex:none;text-align:right;white-space:nowrap"{tip}>'
            f'{esc(figure)}</div></div>')


def row_scale(data: CallData) -> float:
    """N5: the factor that puts the per-message rows (`row_counter`, the C1 estimate) into the unit of the
    counter that decided the call: this call's own ratio of its decided count to the estimate of what it sent.
    1.0 when the rows are already in that unit."""
    if data.row_counter == data.record.counter:
        return 1.0
    sent_rows = sum(layer_split(data.after, "tokens").values())
    # the tool definitions are in the total as estimated, on no row (T1-T3): the rows scale to the rest
    after = (data.record.after_tokens or 0) - (opt_int((data.record.extra or {}).get("tool_definitions_tokens")) or 0)
    return after / sent_rows if sent_rows > 0 and after > 0 else 1.0


def _with_tool_definitions(layers: dict[str, int], data: CallData) -> dict[str, int]:
    """N2/T3: the request's tool definitions (est., stored with the record) as their own layer."""
    layers["tool definitions"] = opt_int((data.record.extra or {}).get("tool_definitions_tokens")) or 0
    return layers


def secondary_figures(data: CallData) -> list[str]:
    """The labelled extra figures: est. (when the view used another counter), calibrated, reported."""
    out, rec = [], data.record
    if rec.counter != "estimate" and rec.estimate_tokens is not None:
        out.append(f"{fmt_int(rec.estimate_tokens)} tokens (est.)")
    if rec.calibrated_tokens is not None and rec.counter != "calibrated":
        out.append(f"{fmt_int(rec.calibrated_tokens)} tokens (calibrated)")
    if rec.prompt_tokens_reported is not None:
        out.append(f"{fmt_int(rec.prompt_tokens_reported)} tokens (reported by the provider)")
    return out


def room(data: CallData) -> dict[str, Any]:
    """Share of the window used, free tokens and tokens until compaction (negative: over the threshold)."""
    after, _, threshold, window = totals(data)
    return {"percent": 100.0 * after / max(window, 1), "free": window - after, "until_compaction": threshold - after}


def _stat(value: str, label: str, cls: str) -> str:
    return (f'<span class="mx-stat {cls}" style="display:inline-block;margin:0 14px 2px 0;white-space:nowrap">'
            f'<b style="font-size:14px">{value}</b> <span style="color:{MUTED}">{label}</span></span>')


def _layer_table(sent: dict[str, int], before: dict[str, int], unit: str, before_title: str,
                 cls: str = "mx-layers") -> str:
    cell = "padding:0 8px;text-align:right;white-space:nowrap"
    rows = "".join(
        f'<tr><td style="padding:0 8px 0 0;text-align:left;white-space:nowrap">{swatch(LAYER_COLORS[n])}{esc(n)}</td>'
        f'<td style="{cell}">{fmt_int(sent[n])}</td><td style="{cell}">{fmt_int(before[n])}</td></tr>'
        for n in LAYERS if sent[n] or before[n])
    head = (f'<tr style="color:{MUTED}"><th style="text-align:left;font-weight:normal;padding:0 8px 0 0">layer, '
            f'{esc(unit)}</th><th style="{cell};font-weight:normal">sent (request view)</th>'
            f'<th style="{cell};font-weight:normal">{esc(before_title)}</th></tr>')
    return f'<table class="{cls}" style="border-collapse:collapse;margin-top:4px;{FONT}">{head}{rows}</table>'


def _scaled(layers: dict[str, int], factor: float) -> dict[str, int]:
    return {k: round(v * factor) for k, v in layers.items()}


def gauge_html(data: CallData | None, *, compact: bool = False) -> str:
    """The gauge as self-contained HTML (used by the widget and by the static fallback).

    `compact` (the live turn's gauge): the layer table folds into a closed "layers" line, so the log that
    follows the gauge stays where the user is looking.

    N5, one unit per view: every bar, figure and layer row is in the unit of the counter that decided the
    call (named in the caption). Per-message rows are C1 estimates; when another counter decided, they are
    put in its unit with this call's own ratio (`row_scale`), so the stored-transcript bar and the sent bar
    compare like with like. The est. figures are on demand: tooltips and "other counts of this call"."""
    if data is None:
        return f'{THEME_STYLE}<div class="mx-gauge" style="{FONT}color:{MUTED}">context · no model call yet</div>'
    rec = data.record
    after_tokens, before_tokens, threshold, window = totals(data)
    unit, row_unit = unit_label(rec.counter), unit_label(data.row_counter)
    factor = row_scale(data)
    sent_rows = layer_split(data.after, "tokens")
    before_rows = layer_split(data.before, "tokens_before")
    sent, before = _scaled(sent_rows, factor), _scaled(before_rows, factor)
    sent = _with_tool_definitions(sent, data)  # T1-T3: in the totals as counted (est.), on no row
    if not data.transcript_relative:  # the stored transcript carries no tool definitions; a request view does
        before = _with_tool_definitions(before, data)
    # N3 rows: the second bar is the stored transcript up to the call, not this call's input
    stored_rows = sum(before_rows.values()) if data.transcript_relative else None
    stored = round(stored_rows * factor) if stored_rows is not None else None
    scale = max(window, before_tokens, after_tokens, stored or 0, 1)
    r = room(data)
    until = (_stat(fmt_int(r["until_compaction"]), f"until compaction (threshold {fmt_int(threshold)})",
                   "mx-until") if r["until_compaction"] >= 0 else
             _stat(fmt_int(-r["until_compaction"]), f"over the compaction threshold ({fmt_int(threshold)})",
                   "mx-until"))
    pct = f"{r['percent']:.0f}%"
    carried = data.carried.split(" · ", 1)[1] if data.carried and " · " in data.carried else ""
    carries = f" · {esc(carried)}" if carried else ""
    where = f' <span style="color:{MUTED}">· turn {rec.turn}, call {rec.iteration}</span>' if rec.turn else ""
    head = (f'<div style="margin-bottom:3px"><b>context of one model call</b> · every figure in '
            f'<b>{esc(unit)}</b> · stage {chip(rec.stage, color_of("stage", rec.stage))}{carries}{where}</div>'
            f'{_stat(fmt_int(after_tokens), "sent", "mx-sent")}'
            f'{_stat(pct, f"of the {fmt_int(window)} window", "mx-percent")}'
            f'{_stat(fmt_int(r["free"]), "free", "mx-free")}{until}')
    bars = _bar("request view (sent)", fmt_int(after_tokens), after_tokens, sent, scale, data, unit)
    bars += cache_strip(rec, scale)  # E1/E2: the cached part of the sent bar, reported or est.
    if stored is not None and stored_rows is not None:
        before_title = "stored transcript"
        tip = f"{fmt_int(stored_rows)} {row_unit}" if factor != 1.0 else ""
        bars += _bar("stored transcript up to this call", fmt_int(stored), stored, before, scale, data, unit, tip)
    else:
        before_title = "before compaction"
        bars += _bar("before compaction", fmt_int(before_tokens), before_tokens, before, scale, data, unit)
    lines = (f'<div style="color:{MUTED};margin-top:2px">{swatch(THRESHOLD_COLOR)}threshold '
             f'{fmt_int(threshold)} · {swatch(WINDOW_CSS)}window {fmt_int(window)} · every figure in {esc(unit)}'
             '</div>')
    note, est_table = "", ""
    if factor != 1.0:
        note = (f'<div class="mx-unit-note" style="color:{MUTED}">the stored transcript and the layers are the C1 '
                f'estimate of each message put in {esc(unit)} with this call\'s ratio (×{factor:.2f}); their est. '
                'figures are under "other counts of this call"</div>')
        est_table = _layer_table(sent_rows, before_rows, row_unit, before_title, "mx-layers-est")
    extra = secondary_figures(data)
    if stored_rows is not None and factor != 1.0:
        extra.append(f"stored transcript {fmt_int(stored_rows)} tokens (est.)")
    other = (f'<details class="mx-other-counts" style="color:{MUTED}"><summary style="cursor:pointer">'
             f'other counts of this call</summary>{" · ".join(esc(x) for x in extra)}{est_table}</details>'
             ) if extra else ""
    warn = ""
    if after_tokens > threshold:
        warn = (f'<div style="color:{FAIL_CSS}">still over the threshold after every allowed step '
                f'({fmt_int(after_tokens)} &gt; {fmt_int(threshold)} {esc(unit)})</div>')
    if rec.compactor_error:
        warn += f'<div style="color:{FAIL_CSS}">compactor error: {esc(rec.compactor_error)}</div>'
    if rec.error:
        warn += f'<div style="color:{FAIL_CSS}">the call failed: {esc(rec.error)}</div>'
    table = _layer_table(sent, before, unit, before_title)
    legend = (f'<details class="mx-legend" style="color:{MUTED}"><summary style="cursor:pointer">layers</summary>'
              f'{table}</details>') if compact else f'<div class="mx-legend">{table}</div>'
    return (f'{THEME_STYLE}<div class="mx-gauge" style="{FONT}"><div class="mx-gauge-head">{head}</div>{bars}'
            f'{lines}{legend}{note}{other}{warn}</div>')


def gauge_text(data: CallData | None) -> str:
    """The one-line text gauge of UX.md: `[ctx ▓▓▓░░ 41,210 est. / 51,200 threshold / 64,000 window · stage]`."""
    if data is None:
        return "[ctx · no model call yet]"
    rec = data.record
    after_tokens, before_tokens, threshold, window = totals(data)
    filled = min(BAR_CHARS, round(BAR_CHARS * after_tokens / window)) if window else 0
    bar = "▓" * filled + "░" * (BAR_CHARS - filled)
    r = room(data)
    line = (f"[ctx {bar} {fmt_int(after_tokens)} {counter_label(rec.counter)} / {fmt_int(threshold)} "
            f"threshold / {fmt_int(window)} window · {rec.stage}] {r['percent']:.0f}% of window · "
            f"{fmt_int(r['free'])} free · {fmt_int(r['until_compaction'])} until compaction")
    extra = secondary_figures(data)
    if rec.stage != "unchanged":
        extra.insert(0, f"before {fmt_int(before_tokens)} {counter_label(rec.counter)}")
    return line + ("  " + " · ".join(extra) if extra else "")


class ContextGauge(StaticReprMixin, widgets.VBox):
    """Stacked per-layer bars of the last request view (sent, and before compaction) vs threshold and window."""

    def __init__(self, view: RequestView | CallData | None = None, *, reported_prompt_tokens: int | None = None,
                 calibrated_tokens: int | None = None, live: bool = False, **kwargs: Any) -> None:
        # live=False: displayed on its own it is static HTML (survives a reopen); live=True: a widget
        # whose display follows update()
        self.static_display = not live
        self.compact = live  # the live turn's gauge folds its layer table (the log stays in view)
        self._html = widgets.HTML()
        super().__init__(children=[self._html], **kwargs)
        self.add_class("mx-context-gauge")
        self.data: CallData | None = None
        self.update(view, reported_prompt_tokens=reported_prompt_tokens, calibrated_tokens=calibrated_tokens)

    @classmethod
    def from_request(cls, row: Any, transcript: Any = None) -> ContextGauge:
        """A gauge of one stored request row (`store.requests(sid)` row).

        With the session's stored `transcript`, its layers come from the same transcript-relative rows
        as the inspector's (SPEC N3), so both views show one number for one message."""
        return cls(from_request(row, transcript))

    def update(self, view: RequestView | CallData | None, reported_prompt_tokens: int | None = None,
               calibrated_tokens: int | None = None) -> None:
        """Show another view (or the same one with reported/calibrated figures added)."""
        self.data = _as_data(view, reported_prompt_tokens, calibrated_tokens)
        self._html.value = gauge_html(self.data, compact=self.compact)

    def layers(self, which: str = "after") -> dict[str, int]:
        """Tokens per layer of the sent view (`after`) or the transcript (`before`)."""
        if self.data is None:
            return dict.fromkeys(LAYERS, 0)
        if which not in ("after", "before"):
            raise ValueError("which must be 'after' or 'before'")
        return _with_tool_definitions(layer_split(self.data.after if which == "after" else self.data.before,
                                                  "tokens" if which == "after" else "tokens_before"), self.data)

    def to_html(self) -> str:
        """Static HTML of the current state."""
        return gauge_html(self.data)

    def to_text(self) -> str:
        """One-line text of the current state."""
        return gauge_text(self.data)
