"""mxclaw_nb: a Jupyter-native coding agent whose context management is visible.

The package root stays light: importing it must not pull in IPython, ipywidgets or DuckDB, so the
pure context engine (`mxclaw_nb.context`) can be used on its own. The IPython extension hooks
live here because IPython looks for them on the package named in `%load_ext`.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.version import __version__ as __version__


def load_ipython_extension(ipython: Any) -> None:
    """Register the %agent / %%agent magics (called by `%load_ext mxclaw_nb`)."""
    from mxclaw_nb.notebook.magics import load_ipython_extension as _load

    _load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Close the store and forget the magics' state (called by `%unload_ext mxclaw_nb`)."""
    from mxclaw_nb.notebook.magics import unload_ipython_extension as _unload

    _unload(ipython)


def __getattr__(name: str) -> Any:
    # Lazy public names: `from mxclaw_nb import Agent` without importing the loop at package import.
    if name == "Agent":
        from mxclaw_nb.agent import Agent

        return Agent
    if name == "Settings":  # N1: the one settings table, `Agent(settings=Settings(...))`
        from mxclaw_nb.settings import Settings

        return Settings
    raise AttributeError(name)
