"""Cell sources of the teaching notebooks, one module per notebook (built by scripts/make_notebooks.py).

Why: notebook JSON is unreadable in review; here each notebook is a list of `(kind, source, tags)`
tuples written as plain Python strings. `CHECK` tags a cell whose stored output `pytest --nbval-lax`
compares with a fresh run, so only deterministic cells get it (engine figures, exact summaries).
"""

from __future__ import annotations

from textwrap import dedent

CHECK = "nbval-check-output"
Cell = tuple[str, str, tuple[str, ...]]


def md(text: str) -> Cell:
    """A markdown cell (the text is dedented and stripped)."""
    return ("md", dedent(text).strip(), ())


def code(source: str, *tags: str) -> Cell:
    """A code cell (dedented and stripped), optionally tagged (e.g. CHECK)."""
    return ("code", dedent(source).strip(), tags)


def setup(extra: str = "") -> Cell:
    """The first code cell of every notebook: a throw-away DuckDB store in a temporary folder."""
    head = dedent(
        """
        # A fresh, temporary store for this notebook: runs never pile up in your data folder.
        import os
        import tempfile
        from pathlib import Path

        WORK = Path(tempfile.mkdtemp(prefix="mxclaw-nb-"))
        os.environ["MXCLAW_DB"] = str(WORK / "store.duckdb")
        """
    ).strip()
    tail = 'print("store for this notebook:", os.environ["MXCLAW_DB"])'
    return ("code", "\n".join(p for p in (head, dedent(extra).strip(), tail) if p), ())


SETUP_NOTE = md(
    """
    > **Where data goes.** The first code cell points `MXCLAW_DB` at a new temporary folder, so this
    > notebook's sessions, events and request records go to a throw-away DuckDB file, not to your
    > per-user data folder. Delete that line to keep your sessions.
    """
)
