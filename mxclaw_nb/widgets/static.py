"""Static HTML/text representations for every widget, so the numbers survive without a widget frontend.

Why: a notebook exported to HTML, opened on GitHub, or run in a frontend without ipywidgets support
shows only what the output's MIME bundle carries. ipywidgets puts just a short `text/plain` repr
next to the widget view; we add the widget's own `text/html` and `text/plain` renderings (from the
same numbers the live widget shows), so nbconvert — which skips the widget view when no widget state
was saved — and plain-text consoles still show stage, tokens and tables. JupyterLab, however, shows
the widget view or an error, never the fallback, so views whose final state is known display as
static HTML only (`static_display`).
"""

from __future__ import annotations

from typing import Any


class StaticReprMixin:
    """Adds `_repr_html_`, `_repr_pretty_` and a MIME bundle with HTML/text fallbacks to a widget.

    With `static_display` true, displaying the object emits only the HTML/text (no widget view): the
    output then renders the same after the notebook is saved and reopened without a kernel, where a
    widget view would read "Error displaying widget: model not found". Views that never change after
    they are shown (gauge of a stored call, timeline) display this way; a widget used as a child of
    another widget is unaffected (children render through their models).
    """

    static_display: bool = False

    def to_html(self) -> str:
        """Static HTML of the current state."""
        raise NotImplementedError

    def to_text(self) -> str:
        """Plain-text rendering of the current state."""
        raise NotImplementedError

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.to_text())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        if self.static_display:
            return {"text/plain": self.to_text(), "text/html": self.to_html()}
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # type: ignore[misc]
        bundle["text/plain"] = self.to_text()
        bundle["text/html"] = self.to_html()
        return bundle


class StaticSnapshot:
    """The HTML/text a widget showed, as a plain display object (no widget model behind it)."""

    def __init__(self, html: str, text: str) -> None:
        self.html, self.text = html, text

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        return {"text/plain": self.text, "text/html": self.html}


def close_tree(widget: Any) -> None:
    """Close a widget and every widget below it (their comms and models are released)."""
    for child in getattr(widget, "children", ()) or ():
        close_tree(child)
    close = getattr(widget, "close", None)
    if callable(close):
        close()


def freeze_on_next_cell(shell: Any, widget: Any, handle: Any, note: str) -> None:
    """Replace an interactive widget's output by its static snapshot when the next cell starts (SPEC N2).

    Why: a saved notebook keeps a widget output only as a reference to a model that is gone once the
    kernel stops; JupyterLab then shows "Error displaying widget: model not found" and never the HTML
    fallback. A widget that stays interactive after its cell (the session browser) is frozen into the
    state the reader left it in as soon as another cell runs, so what is saved reads the same on reopen.
    """
    events = getattr(shell, "events", None)
    if events is None or handle is None:
        return

    def freeze(*_: Any) -> None:
        events.unregister("pre_run_cell", freeze)
        try:
            handle.update(StaticSnapshot(f"{widget.to_html()}<div class=\"mx-note\" style=\"opacity:0.75\">"
                                         f"{note}</div>", f"{widget.to_text()}\n{note}"))
        finally:
            close_tree(widget)

    events.register("pre_run_cell", freeze)
