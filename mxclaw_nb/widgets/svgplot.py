"""A small SVG writer for line plots: axes, nice ticks, polylines, steps, markers, a legend, text as glyph paths.

Why: matplotlib's fixed cost (figure, artists, layout, the SVG backend) was about 250 ms per plot before a
single line was drawn, most of `%agent timeline` (N2: < 100 ms at 1,000 calls). A plot of a few lines is a
handful of SVG elements; this writes them directly. Text is drawn as glyph outlines (matplotlib's own
font outlines, one `<path>` per glyph in `<defs>`, cached per process, placed with `<use>`), never `<text>`: a
sanitizer that drops `<svg>` (an untrusted notebook) would otherwise leave the words loose on the page.
All ink is one colour (`ink`, e.g. `currentColor`) so the plot follows the page's theme.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from xml.sax.saxutils import quoteattr

UNITS = 100.0  # glyph outlines are cached at this font size (SVG user units)


@lru_cache(maxsize=1)
def _font() -> tuple[object, object, object]:
    from matplotlib.font_manager import FontProperties, findfont, get_font
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=UNITS)
    font = get_font(findfont(prop))
    font.set_size(UNITS, 72)
    return TextToPath(), prop, font


@lru_cache(maxsize=4096)
def glyph(ch: str) -> tuple[str, float]:
    """SVG path data of one character at UNITS size (y up) and its advance width."""
    from matplotlib.ft2font import LoadFlags

    ttp, prop, font = _font()
    verts, codes = ttp.get_text_path(prop, ch)  # type: ignore[attr-defined]
    parts: list[str] = []
    i = 0
    while i < len(codes):
        code = int(codes[i])
        if code == 1:
            parts.append(f"M{verts[i][0]:.1f} {verts[i][1]:.1f}")
            i += 1
        elif code == 2:
            parts.append(f"L{verts[i][0]:.1f} {verts[i][1]:.1f}")
            i += 1
        elif code == 3:
            (a, b), (c, d) = verts[i], verts[i + 1]
            parts.append(f"Q{a:.1f} {b:.1f} {c:.1f} {d:.1f}")
            i += 2
        elif code == 4:
            (a, b), (c, d), (e, f) = verts[i], verts[i + 1], verts[i + 2]
            parts.append(f"C{a:.1f} {b:.1f} {c:.1f} {d:.1f} {e:.1f} {f:.1f}")
            i += 3
        else:  # CLOSEPOLY
            parts.append("Z")
            i += 1
    if font.get_char_index(ord(ch)):  # type: ignore[attr-defined]
        advance = font.load_char(ord(ch), flags=LoadFlags.NO_HINTING).linearHoriAdvance / 65536  # type: ignore[attr-defined]
    else:  # drawn from a fallback font: its outline's extent, one em if it has none
        advance = max((v[0] for v in verts), default=UNITS) + UNITS * 0.1
    return "".join(parts), float(advance)


@lru_cache(maxsize=4096)
def _run(s: str) -> tuple[float, str, frozenset[str]]:
    """`s` set in glyphs: its advance (in UNITS), its `<use>` elements and the characters that have an outline.
    Cached: a plot's tick, turn and legend labels come back at every redraw."""
    uses, pen, drawn = [], 0.0, set()
    for ch in s:
        d, adv = glyph(ch)
        if d:
            drawn.add(ch)
            uses.append(f'<use href="#@@{ord(ch):x}" x="{pen:.0f}"/>')
        pen += adv
    return sum(glyph(ch)[1] for ch in s), "".join(uses), frozenset(drawn)


def text_width(s: str, size: float) -> float:
    """Width of `s` drawn at `size` user units."""
    return _run(s)[0] * size / UNITS


def nice_ticks(lo: float, hi: float, max_ticks: int = 8, *, integer: bool = False) -> list[float]:
    """Round tick values in [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten, at most `max_ticks`
    (`integer`: whole steps only; empty when no whole number lies in the range)."""
    if not hi > lo:
        return [lo]
    power = 10.0 ** math.floor(math.log10((hi - lo) / max(1, max_ticks - 1)))
    while True:
        for mult in (1, 2, 2.5, 5):
            step = mult * power
            if integer and (step < 1 or not float(step).is_integer()):
                continue
            first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
            if last - first + 1 <= max_ticks:
                return [round(k * step, 10) for k in range(first, last + 1)]
        power *= 10


@dataclass
class Canvas:
    """An SVG canvas `width` x `height` (user units = CSS px) with a data box for the axes."""

    width: float
    height: float
    ink: str = "currentColor"
    parts: list[str] = field(default_factory=list)
    _used: set[str] = field(default_factory=set)

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, s: str, x: float, y: float, size: float, *, anchor: str = "start", rotate: bool = False,
             fill: str | None = None, label: str | None = None) -> None:
        """`s` at (x, y) (baseline), left/middle/right aligned on x (`anchor`), optionally turned upward."""
        advance, uses, drawn = _run(s)
        width = advance * size / UNITS  # text_width(s, size)
        shift = {"start": 0.0, "middle": -width / 2, "end": -width}[anchor]
        k = size / UNITS
        turn = " rotate(-90)" if rotate else ""
        self._used |= drawn
        attr = f" data-text={quoteattr(label if label is not None else s)}"
        self.add(f'<g transform="translate({x:.1f} {y:.1f}){turn} translate({shift:.1f} 0) '
                 f'scale({k:.4f} {-k:.4f})" fill="{fill or self.ink}"{attr}>{uses}</g>')

    def document(self, *, title: str = "", standalone: bool = False) -> str:
        """The SVG markup; glyph ids carry a prefix from the content (two plots on one page do not clash)."""
        body = "".join(self.parts)
        prefix = "mxg" + hashlib.md5(body.encode(), usedforsecurity=False).hexdigest()[:6] + "-"
        defs = "".join(f'<path id="{prefix}{ord(ch):x}" d="{glyph(ch)[0]}"/>' for ch in sorted(self._used))
        size = (f'width="{self.width:.0f}" height="{self.height:.0f}" ' if standalone
                else f'width="100%" style="max-width:{self.width:.0f}px" ')
        # the title as an attribute, not a <title> element: a sanitizer that drops <svg> keeps element text
        label = f" aria-label={quoteattr(title)}" if title else ""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" {size}'
                f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" preserveAspectRatio="xMinYMin meet"'
                f' role="img"{label}>'
                f"<defs>{defs}</defs>"
                f'{body.replace("@@", prefix)}</svg>')


def polyline(xs: Sequence[float], ys: Sequence[float], *, texts: dict[float, str] | None = None) -> str:
    """SVG path data through the points (xs[i], ys[i]), broken where a point is missing (NaN).

    A step line repeats most coordinates (each x twice, y for a whole run), and lines of one plot share their x:
    there each distinct coordinate is formatted once (`texts`: the formatted ones, shared by a plot's lines)."""
    if len(xs) != len(ys):
        raise ValueError(f"polyline needs as many ys as xs, got {len(ys)} and {len(xs)}")
    texts = {} if texts is None else texts
    if xs and not any(map(math.isnan, xs)) and not any(map(math.isnan, ys)):  # no gap: one run
        if len(set(ys)) * 4 > len(ys):  # a data line: its points mostly distinct, nothing to share
            return "M" + "L".join(map("%.1f %.1f".__mod__, zip(xs, ys, strict=True)))
        get = texts.get  # 0.0 and -0.0 are one key but two texts: a zero is formatted each time
        x_texts = [t if (t := get(v)) is not None and v else _fixed(texts, v) for v in xs]
        y_texts = [t if (t := get(v)) is not None and v else _fixed(texts, v) for v in ys]
        return "M" + "L".join(map(" ".join, zip(x_texts, y_texts, strict=True)))
    out: list[str] = []
    pen_down = False
    for x, y in zip(xs, ys, strict=True):
        if y != y or x != x:  # NaN
            pen_down = False
            continue
        tx, ty = texts.get(x), texts.get(y)
        if tx is None or not x:  # 0.0 and -0.0 are one key but two texts
            tx = texts[x] = f"{x:.1f}"
        if ty is None or not y:
            ty = texts[y] = f"{y:.1f}"
        out.append(f"{'L' if pen_down else 'M'}{tx} {ty}")
        pen_down = True
    return "".join(out)


def _fixed(texts: dict[float, str], v: float) -> str:
    """f"{v:.1f}", kept in `texts`."""
    t = texts[v] = f"{v:.1f}"
    return t


def step_mid(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    """Points of a step line that changes half way between x positions (matplotlib's where="mid")."""
    n = len(xs)
    if n == len(ys) > 1 and not any(map(math.isnan, ys)):  # no gap: each value twice, at the mids around it
        mids = [(a + b) / 2 for a, b in pairwise(xs)]  # (xs[i - 1] + x) / 2, as the loop below computes it
        points_x, points_y = [0.0] * (2 * n), [0.0] * (2 * n)
        points_x[0], points_x[-1], points_x[1:-1:2], points_x[2:-1:2] = xs[0], xs[-1], mids, mids
        points_y[0::2] = points_y[1::2] = ys
        return points_x, points_y
    px: list[float] = []
    py: list[float] = []
    last = len(xs) - 1
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y != y:  # NaN: a gap
            px.append(x)
            py.append(y)
            continue
        px += [xs[0] if i == 0 else (xs[i - 1] + x) / 2, xs[-1] if i == last else (x + xs[i + 1]) / 2]
        py += [y, y]
    return px, py
