"""One colour per action, layer and stage, and the few formatting helpers every widget shares.

Why: UX.md asks for one vocabulary and one colour scheme everywhere (tables, bars, plots, the live
log, static HTML). Keeping the palette and the number/label formatting here means the gauge, the
inspector, the timeline and the live view cannot drift apart, and a test can check that every
action/layer/stage of the engine has exactly one colour. Everything here is plain Python: no
widgets, so the static HTML fallbacks use the same code as the live widgets.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

from mxclaw_nb.palette import (  # noqa: E402,F401 - the palette lives in a UI-free module; re-exported here
    ACTION_COLORS,
    ALL_STAGES,
    BORDER,
    BORDER_STRONG,
    FAIL_CSS,
    FAILURE_COLOR,
    LAYER_COLORS,
    MONO,
    MUTED,
    OK_CSS,
    STAGE_COLORS,
    TEXT,
    THEME_STYLE,
    THRESHOLD_COLOR,
    TRACK,
    WARN_CSS,
    WINDOW_COLOR,
    WINDOW_CSS,
    ink_on,
)

#: How a token figure is labelled, by the counter that produced it (UX: "est." vs "reported" vs "calibrated").
COUNTER_LABELS = {"estimate": "est.", "calibrated": "calibrated"}

DEFAULT_MAX_ROWS = 200
FONT = f"font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: 12px; color: {TEXT};"
MONO_FONT = f"font-family: {MONO}; font-size: 12px;"


def color_of(kind: str, name: str | None) -> str:
    """Colour of an action, layer or stage name (`kind` in action|layer|stage); grey when unknown."""
    table = {"action": ACTION_COLORS, "layer": LAYER_COLORS, "stage": STAGE_COLORS}.get(kind)
    if table is None:
        raise ValueError(f"unknown colour kind {kind!r}: use 'action', 'layer' or 'stage'")
    return table.get(str(name), "#9e9e9e")


def counted(n: Any, noun: str, plural: str | None = None) -> str:
    """`1 call`, `2 calls`, `1,024 sessions`: a number and its noun in the right number (UX: one wording)."""
    try:
        value = int(n)
    except (TypeError, ValueError):
        return f"{n} {plural or noun + 's'}"
    return f"{value:,} {noun if value == 1 else plural or noun + 's'}"


def counter_label(counter: str | None) -> str:
    """Label of figures from a token counter: `est.`, `calibrated`, or `counted (<name>)`."""
    if not counter:
        return "est."
    return COUNTER_LABELS.get(counter, f"counted ({counter})")


def unit_label(counter: str | None) -> str:
    """The one unit a view names in its headers and columns: `tokens (est.)`, `tokens (calibrated)`."""
    label = counter_label(counter)
    return f"tokens ({label[len('counted ('):-1] if label.startswith('counted (') else label})"


def fmt_int(value: Any) -> str:
    """A token/char count with thousands separators; an em dash when unknown."""
    if value is None:
        return "—"
    try:
        if value != value:  # NaN from pandas
            return "—"
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return str(value)


def esc(value: Any) -> str:
    """HTML-escaped text of any value."""
    return html.escape("" if value is None else str(value))


def preview_text(text: str, limit: int = 200) -> str:
    """A whitespace-collapsed preview of a long text, with its full length when cut."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    return f"{flat[: limit - 1]}… ({len(text):,} chars)"


def chip(label: str, color: str, *, title: str | None = None) -> str:
    """A small coloured label (used for stages and actions in HTML)."""
    tip = f' title="{esc(title)}"' if title else ""
    return (f'<span class="mx-chip" data-color="{color}"{tip} style="background:{color};color:{ink_on(color)};'
            f'border-radius:3px;padding:0 5px;font-weight:600">{esc(label)}</span>')


def swatch(color: str, fallback: str = "#808080") -> str:
    """A small colour square for legends.

    A theme colour (`var(...)`) is preceded by a plain `fallback` that reads on light and dark: the HTML
    sanitizer of an untrusted notebook drops `var()` declarations and would leave the square empty."""
    plain = f"background:{fallback};" if color.lstrip().startswith("var(") else ""
    return (f'<span style="display:inline-block;width:10px;height:10px;{plain}background:{color};'
            'margin-right:3px"></span>')


def shown_count(shown: int, total: int, noun: str = "rows") -> str:
    """`showing 200 of 10,000 rows` (or `10 rows`) — the visible count of a capped table."""
    return f"{total:,} {noun}" if shown >= total else f"showing {shown:,} of {total:,} {noun}"


def html_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, total: int, row_colors: Sequence[str] = (),
               cls: str = "mx-table", noun: str = "rows") -> str:
    """A compact HTML table with a left colour bar per row and a visible `showing N of M` count."""
    body = []
    for i, row in enumerate(rows):
        color = row_colors[i] if i < len(row_colors) else "transparent"
        # Short columns never wrap; the last (the preview) wraps anywhere, so long unbroken runs stay in bounds.
        cells = "".join(f'<td style="text-align:left;padding:1px 6px;border-bottom:1px solid {BORDER};'
                        f'{"overflow-wrap:anywhere" if j == len(row) - 1 else "white-space:nowrap"}">{c}</td>'
                        for j, c in enumerate(row))
        body.append(f'<tr style="box-shadow: inset 4px 0 0 {color}">{cells}</tr>')
    head = "".join(f'<th style="text-align:left;padding:1px 6px;border-bottom:1px solid {BORDER_STRONG}">{esc(c)}</th>'
                   for c in columns)
    count = shown_count(len(body), total, noun)
    return (f'<div class="{cls}" style="{FONT}"><div class="mx-count" style="color:{MUTED}">{esc(count)}</div>'
            f'<table style="border-collapse:collapse;{FONT}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def legend(colors: dict[str, str], values: dict[str, int] | None = None) -> str:
    """An inline legend: swatch + name (+ token count when given)."""
    items = []
    for name, color in colors.items():
        extra = f" {fmt_int(values.get(name, 0))}" if values is not None else ""
        items.append(f'<span style="margin-right:10px;white-space:nowrap">{swatch(color)}{esc(name)}{extra}</span>')
    return f'<div class="mx-legend" style="{FONT}">{"".join(items)}</div>'
