"""What `%agent` commands may use of the magics object: a typed Protocol instead of `Any` (DESIGN: typed seams).

Why: the commands (`commands.py`, `shown.py`) are plain functions so each is small and testable; they read
the current agent, the store, the last request view and the settings through this one surface, so a
command cannot reach into the magics' private state and a type checker sees what each one needs.
`AgentMagics` satisfies it structurally (settings are its traits, read with `getattr(host, name)`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # DuckDB and the provider load with the first command, not at %load_ext
    from mxclaw_nb.agent import Agent
    from mxclaw_nb.store.writer import Store


class CommandHost(Protocol):
    """The magics as the `%agent` commands see them."""

    shell: Any  # the IPython shell (its `kernel` is None in a terminal)
    workspace: str | None
    db: str | None
    api_key_env: str
    last_view: Any  # RequestView of the last model call made from this shell
    last_view_session: str | None
    last_reported: int | None
    widgets: bool  # ipywidgets in a kernel (HTML/text otherwise)

    def get_agent(self) -> Agent: ...

    def store(self) -> Store: ...

    def caption(self, text: str = "") -> str: ...

    def new_session(self) -> Agent: ...

    def switch_session(self, session_id: str) -> Agent: ...

    def traits(self, **metadata: Any) -> dict[str, Any]: ...

    def trait_values(self, **metadata: Any) -> dict[str, Any]: ...
