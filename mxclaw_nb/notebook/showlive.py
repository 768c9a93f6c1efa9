"""Show an interactive widget with a static snapshot after it, from Python code (SPEC N2).

Why: `LiveSnapshot` needs the shell and IPython's `display`, and only the notebook layer imports IPython
(DESIGN); a widget's own `show()` (e.g. `PolicyLab(...).show()`) asks this module instead.
"""

from __future__ import annotations

from typing import Any


def show_live(widget: Any, *, name: str, again: str, shell: Any = None) -> Any:
    """Display `widget` with a snapshot of its last state after it; returns the `LiveSnapshot`."""
    from IPython import get_ipython
    from IPython.display import display

    from mxclaw_nb.widgets.static import LiveSnapshot

    return LiveSnapshot(shell or get_ipython(), widget, display=display, name=name, again=again)
