"""One colour per action, layer and stage (UX.md), shared by widgets, plots and static HTML.

Plain data with no UI imports, so analysis plots (matplotlib) and the ipywidgets views use the very same
palette without the analysis layer depending on the widgets package.
"""

from __future__ import annotations

from mxclaw_nb.context import STAGES

ACTION_COLORS: dict[str, str] = {
    "kept": "#9e9e9e",  # grey
    "placeholder": "#ffb300",  # amber
    "summarized": "#1e88e5",  # blue
    "dropped": "#d6d6d6",  # light grey
    "synthetic": "#8e24aa",  # purple
    "summary": "#43a047",  # green
}
FAILURE_COLOR = "#e53935"  # red mark on failed tool results, everywhere

LAYER_COLORS: dict[str, str] = {
    "system prompt": "#3949ab",
    "project instructions": "#7e57c2",
    "skill index": "#00897b",
    "memory snapshot": "#8d6e63",
    "user input": "#29b6f6",
    "assistant": "#78909c",
    "tool results": "#ff8f00",
    "summaries": "#66bb6a",
}

STAGE_COLORS: dict[str, str] = {
    "unchanged": "#9e9e9e",
    "micro": "#ffb300",
    "summary": "#43a047",
    "fallback": "#f4511e",
    "prompt_too_long_retry": "#b71c1c",
}
ALL_STAGES = (*STAGES, "prompt_too_long_retry")
THRESHOLD_COLOR = "#e53935"
WINDOW_COLOR = "#212121"
