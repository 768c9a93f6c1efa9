"""Static HTML/text representations for every widget, so the numbers survive without a widget frontend.

Why: a notebook exported to HTML, opened on GitHub, or run in a frontend without ipywidgets support
shows only what the output's MIME bundle carries. ipywidgets puts just a short `text/plain` repr
next to the widget view; we add the widget's own `text/html` and `text/plain` renderings (from the
same numbers the live widget shows), so nbconvert — which skips the widget view when no widget state
was saved — and plain-text consoles still show stage, tokens and tables. JupyterLab, however, shows
the widget view or an error, never the fallback, so views whose final state is known display as
static HTML only (`static_display`). A widget that must stay interactive after its cell (the session
browser) is shown by `LiveSnapshot`: the widget, then a static snapshot output that follows it, so the
saved notebook reads the same wherever it is opened (SPEC N2). `saved_progress` does the same for tqdm
bars: their saved output is the finished bar, not its first state.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.widgets.style import FONT, MUTED, esc


class StaticReprMixin:
    """Adds `_repr_html_`, `_repr_pretty_` and a MIME bundle with HTML/text fallbacks to a widget.

    With `static_display` true, displaying the object emits only the HTML/text (no widget view): the
    output then renders the same after the notebook is saved and reopened without a kernel, where a
    widget view would read "Error displaying widget: model not found". Views that never change after
    they are shown (gauge of a stored call, timeline) display this way; a widget used as a child of
    another widget is unaffected (children render through their models).
    """

    static_display: bool = False

    def on_shown_change(self, callback: Any) -> None:
        """Call `callback()` whenever what the widget shows changed and is consistent again (e.g. after a click)."""
        self.__dict__.setdefault("_shown_callbacks", []).append(callback)

    def shown_changed(self) -> None:
        """Tell `on_shown_change` callbacks that the widget's state is complete (widgets call this after an update)."""
        for callback in self.__dict__.get("_shown_callbacks", ()):
            callback()

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


def close_tree(widget: Any) -> None:
    """Close a widget and every widget below it (their comms and models are released)."""
    for child in getattr(widget, "children", ()) or ():
        close_tree(child)
    close = getattr(widget, "close", None)
    if callable(close):
        close()


LIVE_CLASS = "mx-live-widget"  # on an interactive widget shown by `show_live`
SNAPSHOT_CLASS = "mx-snapshot"  # on the static snapshot output that follows it
# JupyterLab / Notebook 7 (and nbconvert's lab template) output areas; Chromium and Firefox >= 121 support :has.
# While the live widget renders, the snapshot right after it is hidden (the widget shows the same). Any other
# state of the widget's output (a saved notebook reopened without its kernel: "Loading widget...", then "Error
# displaying widget: model not found"; an export: a script tag or the pointer text; frozen: emptied) is hidden in
# favour of the snapshot, which says what it is. (:has cannot nest, so "not live" is `:not(:has(...))`.) Frontends
# without these classes (GitHub, VS Code, untrusted copies whose sanitizer drops <style>) show both, each labelled.
SNAPSHOT_CSS = (
    "<style>"
    f".jp-OutputArea-child:has(.{LIVE_CLASS})+.jp-OutputArea-child:has(.{SNAPSHOT_CLASS}){{display:none}}"
    f".jp-OutputArea-child:not(:has(.{LIVE_CLASS})):has(+.jp-OutputArea-child .{SNAPSHOT_CLASS}){{display:none}}"
    "</style>")


def snapshot_bundle(widget: Any, note: str) -> dict[str, str]:
    """The widget's static HTML/text as it is now, labelled with `note` (what it is a snapshot of)."""
    return {"text/plain": f"{note}\n{widget.to_text()}",
            "text/html": f'{SNAPSHOT_CSS}<div class="{SNAPSHOT_CLASS}"><div class="mx-note" style="{FONT}color:{MUTED};'
                         f'margin-bottom:4px">{esc(note)}</div>{widget.to_html()}</div>'}


class LiveSnapshot:
    """An interactive widget displayed with a static snapshot output right after it (SPEC N2).

    Why: a saved notebook keeps a widget output only as a reference to a model that lives in the kernel;
    reopened without it, JupyterLab shows "Error displaying widget: model not found" and never the
    widget's HTML fallback. The snapshot output carries the widget's own `to_html()`/`to_text()` (the same
    numbers and labels) and is re-published whenever the widget reports a complete change (`shown_changed`,
    after the reader's clicks; never halfway through one), so whenever the notebook is saved, the snapshot is
    what the widget showed then: in a reopened
    notebook, an export (nbconvert, GitHub, nbviewer), an untrusted copy and a text console. When the next
    cell runs, the widget is closed and its output emptied; the snapshot stays, marked as frozen. The live
    widget itself is unchanged.
    """

    def __init__(self, shell: Any, widget: Any, *, display: Any, name: str, again: str) -> None:
        """`display`: IPython's `display` (passed in: only the notebook layer imports IPython)."""
        self.shell, self.widget, self.name, self.again = shell, widget, name, again
        self._sent = ""
        widget.add_class(LIVE_CLASS)
        pointer = f"{name}: a live widget (it needs its kernel); the static snapshot after it is what it shows"
        widget_bundle = dict(widget._repr_mimebundle_() or {})
        widget_bundle.update({"text/plain": pointer, "text/html": f'<div class="mx-note">{pointer}</div>'})
        self.widget_handle = display(widget_bundle, raw=True, display_id=True)
        self.snapshot_handle = display(self._bundle(), raw=True, display_id=True)
        widget.on_shown_change(self.refresh)
        events = getattr(shell, "events", None)
        self._events = events
        if events is not None:
            events.register("pre_run_cell", self.freeze)

    def note(self, frozen: bool) -> str:
        """What the snapshot is: of the live widget above, or frozen when the next cell ran."""
        when = "frozen when the next cell ran" if frozen else "as last shown; the live one needs its kernel"
        return f"static snapshot of the {self.name} ({when}) · {self.again} opens it again"

    def _bundle(self, frozen: bool = False) -> dict[str, str]:
        bundle = snapshot_bundle(self.widget, self.note(frozen))
        self._sent = bundle["text/html"]
        return bundle

    def refresh(self, *_: Any) -> None:
        """Re-publish the snapshot if what the widget shows changed (one click may change several controls)."""
        bundle = snapshot_bundle(self.widget, self.note(False))
        if bundle["text/html"] != self._sent and self.snapshot_handle is not None:
            self._sent = bundle["text/html"]
            self.snapshot_handle.update(bundle, raw=True)

    def freeze(self, *_: Any) -> None:
        """The next cell runs: keep only the snapshot (marked frozen), close the widget and empty its output."""
        if self._events is not None:
            self._events.unregister("pre_run_cell", self.freeze)
        try:
            if self.snapshot_handle is not None:
                self.snapshot_handle.update(self._bundle(frozen=True), raw=True)
            if self.widget_handle is not None:
                self.widget_handle.update({"text/plain": ""}, raw=True)
        finally:
            close_tree(self.widget)


def saved_progress(display: Any) -> Any:
    """A tqdm class for notebooks whose saved output is the finished bar, not its first state (SPEC N2).

    Why: tqdm's notebook bar is a widget displayed once, so its saved `text/plain` is the text it had
    when first shown ("0%| | 0/73"), which GitHub, nbconvert and text consoles show for a loop that finished,
    and its widget view reads "Error displaying widget" after a reopen. This bar is displayed with a display
    id; when it closes, its output becomes its final text (`leave=True`) or nothing (`leave=False`, the bar
    only said something was running). Live it is tqdm's own bar. `display`: IPython's `display`.
    """
    from tqdm.notebook import tqdm as notebook_tqdm

    class SavedProgress(notebook_tqdm):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._handle: Any = None
            kwargs["display"] = False  # shown by _show, with a display id
            super().__init__(*args, **kwargs)
            if not self.disable and self.delay <= 0:
                self._show()

        def _show(self) -> None:
            if self._handle is None:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def display(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("check_delay", True) and self.delay > 0 and not self.displayed:
                self._show()  # the delay passed: shown now (tqdm would display without an id)
            return super().display(*args, **kwargs)

        def close(self) -> None:
            if self.disable:
                return
            final = "" if not self.leave else self.format_meter(**self.format_dict)
            super().close()
            if self._handle is not None:
                self._handle.update({"text/plain": final}, raw=True)
                self._handle = None

    return SavedProgress
