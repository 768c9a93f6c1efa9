"""Notebook widgets that make context management visible (SPEC N2, C10, T3).

Why: the point of mxclaw_nb over a chat box is that users can *see* what fills the context window
and what compaction did. Every widget here reads the one structure the engine produces (the
RequestView and its provenance, live or as stored in a request record), uses one palette
(`style.py`) and one vocabulary (UX.md), and carries a static HTML/text rendering of the same
numbers for exported notebooks and frontends without widget support. Nothing in the project
imports this package except the magics and users.
"""

from mxclaw_nb.widgets.browser import SessionBrowser
from mxclaw_nb.widgets.data import CallData, after_frame, before_frame, from_request, from_view, requests_from_views
from mxclaw_nb.widgets.gauge import ContextGauge
from mxclaw_nb.widgets.inspector import CompactionInspector
from mxclaw_nb.widgets.live import LiveTurnView
from mxclaw_nb.widgets.style import ACTION_COLORS, LAYER_COLORS, STAGE_COLORS
from mxclaw_nb.widgets.timeline import TokenTimeline

__all__ = [
    "ACTION_COLORS", "LAYER_COLORS", "STAGE_COLORS", "CallData", "CompactionInspector", "ContextGauge",
    "LiveTurnView", "SessionBrowser", "TokenTimeline", "after_frame", "before_frame", "from_request", "from_view",
    "requests_from_views",
]
