"""Notebook widgets that make context management visible (SPEC N2, C10, T3).

Why: the point of mxclaw_nb over a chat box is that users can *see* what fills the context window
and what compaction did. Every widget here reads the one structure the engine produces (the
RequestView and its provenance, live or as stored in a request record), uses one palette
(`style.py`) and one vocabulary (UX.md), and carries a static HTML/text rendering of the same
numbers for exported notebooks and frontends without widget support. Nothing in the project
imports this package except the magics and users.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Lazy names: `%load_ext mxclaw_nb` imports `widgets.style` (palette, labels) but must not pay for
# ipywidgets, pandas and matplotlib until a widget is shown (bench/import_bench.py).
_WHERE = {
    "SessionBrowser": "browser", "CallData": "data", "after_frame": "data", "before_frame": "data",
    "from_request": "data", "from_view": "data", "requests_from_views": "data", "ContextGauge": "gauge",
    "CompactionInspector": "inspector", "LiveTurnView": "live", "ACTION_COLORS": "style", "LAYER_COLORS": "style",
    "STAGE_COLORS": "style", "TokenTimeline": "timeline", "PolicyLab": "lab",
}

if TYPE_CHECKING:
    from mxclaw_nb.widgets.browser import SessionBrowser
    from mxclaw_nb.widgets.data import (
        CallData,
        after_frame,
        before_frame,
        from_request,
        from_view,
        requests_from_views,
    )
    from mxclaw_nb.widgets.gauge import ContextGauge
    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.lab import PolicyLab
    from mxclaw_nb.widgets.live import LiveTurnView
    from mxclaw_nb.widgets.style import ACTION_COLORS, LAYER_COLORS, STAGE_COLORS
    from mxclaw_nb.widgets.timeline import TokenTimeline


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mxclaw_nb.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"mxclaw_nb.widgets.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ACTION_COLORS", "LAYER_COLORS", "STAGE_COLORS", "CallData", "CompactionInspector", "ContextGauge",
    "LiveTurnView", "PolicyLab", "SessionBrowser", "TokenTimeline", "after_frame", "before_frame", "from_request",
    "from_view", "requests_from_views",
]
