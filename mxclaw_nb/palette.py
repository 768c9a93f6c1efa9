"""One colour per action, layer and stage (UX.md), shared by widgets, plots and static HTML.

Plain data with no UI imports, so analysis plots (matplotlib) and the ipywidgets views use the very same
palette without the analysis layer depending on the widgets package.
"""

from __future__ import annotations

from mxclaw_nb.context.actions import REGISTRY as ACTION_REGISTRY
from mxclaw_nb.context.stages import ALL_STAGES, STAGES  # noqa: F401 - re-exported for the UI
from mxclaw_nb.context.stages import REGISTRY as STAGE_REGISTRY

ACTION_COLORS: dict[str, str] = {a.name: a.colour for a in ACTION_REGISTRY}  # one registry: context/actions.py
FAILURE_COLOR = "#e53935"  # red mark on failed tool results, everywhere

LAYER_COLORS: dict[str, str] = {
    "tool definitions": "#afb42b",  # T1-T3: the schemas every request carries (no message)
    "system prompt": "#3949ab",
    "project instructions": "#7e57c2",
    "skill index": "#00897b",
    "memory snapshot": "#8d6e63",
    "user input": "#29b6f6",
    "assistant": "#78909c",
    "tool results": "#ff8f00",
    "kernel outputs": "#d81b60",  # K1: python / kernel_variables / notebook_cells results, apart from other tools
    "summaries": "#66bb6a",
}

STAGE_COLORS: dict[str, str] = {s.name: s.colour for s in STAGE_REGISTRY}  # one registry: context/stages.py
THRESHOLD_COLOR = "#e53935"
WINDOW_COLOR = "#212121"

# -- theme-following colours for HTML outputs ------------------------------------------------------
# JupyterLab's CSS variables first, VS Code's next, a light-theme value last (GitHub, nbconvert), so
# text, tracks and borders follow light, dark and high-contrast themes. The few colours JupyterLab
# has no variable for (a readable green/red/amber on either background, the window marker) are
# custom properties set by THEME_STYLE (in every top-level output), which flips them on a dark page.
TEXT = "var(--jp-ui-font-color1, var(--vscode-editor-foreground, #212121))"
MUTED = "var(--jp-ui-font-color2, var(--vscode-descriptionForeground, #616161))"
TRACK = "var(--jp-layout-color2, var(--vscode-editorWidget-background, #eeeeee))"
BORDER = "var(--jp-border-color2, var(--vscode-editorWidget-border, #e0e0e0))"
BORDER_STRONG = "var(--jp-border-color1, var(--vscode-editorWidget-border, #bdbdbd))"
MONO = "var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, Consolas, monospace)"
OK_CSS = "var(--mx-ok, #2e7d32)"
FAIL_CSS = "var(--mx-fail, #c62828)"
WARN_CSS = "var(--mx-warn, #e65100)"
WINDOW_CSS = "var(--mx-window, #212121)"
_DARK = 'body[data-jp-theme-light="false"], body.vscode-dark, body.vscode-high-contrast'
THEME_STYLE = ("<style>body{--mx-ok:#2e7d32;--mx-fail:#c62828;--mx-warn:#e65100;--mx-window:#212121}"
               f"{_DARK}{{--mx-ok:#81c784;--mx-fail:#ff8a80;--mx-warn:#ffb74d;--mx-window:#f5f5f5}}</style>")

# Plots: one neutral grey for text, ticks and frames that reads on white and on black, on a
# transparent figure, so a PNG looks right in either theme (SVG outputs use currentColor instead).
PLOT_INK = "#8a8a8a"
PLOT_STYLE: dict[str, object] = {
    "figure.facecolor": "none", "axes.facecolor": "none", "savefig.facecolor": "none", "savefig.transparent": True,
    "text.color": PLOT_INK, "axes.labelcolor": PLOT_INK, "axes.edgecolor": PLOT_INK, "xtick.color": PLOT_INK,
    "ytick.color": PLOT_INK, "axes.titlecolor": PLOT_INK, "legend.labelcolor": PLOT_INK, "grid.color": PLOT_INK,
}


def ink_on(color: str) -> str:
    """Readable text colour (near-black or white) on a `#rrggbb` background."""
    try:
        r, g, b = (int(color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4))
    except ValueError:
        return "#fff"
    lum = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    luminance = 0.2126 * lum[0] + 0.7152 * lum[1] + 0.0722 * lum[2]
    on_white, on_dark = 1.05 / (luminance + 0.05), (luminance + 0.05) / 0.0656  # WCAG contrast, #212121 text
    return "#fff" if on_white >= on_dark else "#212121"
