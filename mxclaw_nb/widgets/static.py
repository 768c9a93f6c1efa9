"""Static HTML/text representations for every widget, so the numbers survive without a widget frontend.

Why: a notebook exported to HTML, opened on GitHub, or run in a frontend without ipywidgets support
shows only what the output's MIME bundle carries. ipywidgets puts just a short `text/plain` repr
next to the widget view; we add the widget's own `text/html` and `text/plain` renderings (from the
same numbers the live widget shows), so nbconvert — which skips the widget view when no widget state
was saved — and plain-text consoles still show stage, tokens and tables.
"""

from __future__ import annotations

from typing import Any


class StaticReprMixin:
    """Adds `_repr_html_`, `_repr_pretty_` and a MIME bundle with HTML/text fallbacks to a widget."""

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
        bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # type: ignore[misc]
        bundle["text/plain"] = self.to_text()
        bundle["text/html"] = self.to_html()
        return bundle
