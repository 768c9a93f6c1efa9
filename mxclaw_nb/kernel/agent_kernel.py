"""`AgentKernel`: ipykernel's IPython kernel in which a plain cell is one agent turn (SPEC N4, N1, L4).

The override is small on purpose: `do_execute` rewrites the cell (see `cells`) and hands it to ipykernel,
so a prompt runs through the very `%%agent` magic of a Python kernel (live log, widgets, DuckDB), magics
run as typed, and `%%python` cells run in the kernel's namespace. Interrupts need nothing special: the
turn runs in the main thread, SIGINT raises KeyboardInterrupt there, `%%agent` ends the turn with what
is stored kept (L4), and the kernel stays usable. Silent executions (frontends' own Python: variable
inspectors, widget helpers) are passed through as Python.

Before the first cell that uses the agent, the kernel looks up the notebook's session (`binding`) and
switches the magics to it; after each cell it records the session the notebook now uses, once stored.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ipykernel.ipkernel import IPythonKernel

from mxclaw_nb import __version__
from mxclaw_nb.kernel import binding
from mxclaw_nb.kernel.cells import agent_completions, classify, line_at, touches_agent

BANNER = ("mx-claw agent kernel (mxclaw_nb {v}): a plain cell is one agent turn in this notebook's session; "
          "%agent help lists the commands; %%python starts a Python cell.")


class AgentKernel(IPythonKernel):
    """IPython kernel whose plain cells are `%%agent` turns in the notebook's session."""

    implementation = "mxclaw_nb"
    implementation_version = __version__
    language_info = {
        "name": "markdown",
        "mimetype": "text/markdown",
        "codemirror_mode": "markdown",
        "pygments_lexer": "markdown",
        "file_extension": ".md",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert self.shell is not None
        self.shell.extension_manager.load_extension("mxclaw_nb")
        self.notebook: str | None = None
        self.bound_session: str | None = None
        self._resolved = False
        self._plan: binding.Plan | None = None
        self._planned = False
        self._plan_error: str | None = None

    @property
    def banner(self) -> str:  # type: ignore[override]
        return BANNER.format(v=__version__)

    @property
    def magics(self) -> Any:
        """The shell's AgentMagics instance (the same object `%agent` and `%config AgentMagics` use)."""
        assert self.shell is not None
        return self.shell.magics_manager.registry["AgentMagics"]

    # -- the notebook's session ------------------------------------------------------------------------
    @property
    def kernel_info(self) -> dict[str, Any]:  # type: ignore[override]
        """ipykernel's reply, with the notebook's session id in `language_info.mxclaw`: JupyterLab and Notebook 7
        copy `language_info` into the notebook's metadata, so the id is saved with the notebook (N4)."""
        info = dict(super().kernel_info)
        plan = self.session_plan()
        meta = {"session_id": plan.session_id} if plan is not None else {}
        info["language_info"] = {**self.language_info, binding.META_KEY: meta}
        return info

    def session_plan(self) -> binding.Plan | None:
        """Once: which session this kernel's notebook uses (`binding.plan`); None where no notebook is named."""
        if self._plan is None and not self._planned:
            self._planned = True
            assert self.shell is not None
            self.notebook = binding.notebook_name(os.environ, self.shell.user_ns)
            if self.notebook is None:
                return None
            try:
                with self.shell.builtin_trap:  # pandas, imported lazily here, must see the kernel's builtins
                    self._plan = binding.plan(self.magics.store(), self.notebook)
            except Exception as exc:  # the first cell reports store and settings problems in its own words
                self._plan_error = str(exc)
        return self._plan

    def ensure_session(self) -> None:
        """Once, before the first cell using the agent: take up the session the notebook's plan names."""
        if self._resolved:
            return
        self._resolved = True
        plan = self.session_plan()
        if self._plan_error is not None:
            print(f"mx-claw agent: could not resume this notebook's session: {self._plan_error}", file=sys.stderr)
        if plan is None:
            return
        magics = self.magics
        try:
            agent = magics._agent  # built already by `%agent config`, say: switch unless it did something
            if agent is not None and binding.is_stored(agent.store, agent.session_id):
                return
            magics.switch_session(plan.session_id)
            if plan.continues:
                if plan.moved:  # renamed or moved: later copies and renames start from this path
                    binding.bind(magics.store(), plan.session_id, self.notebook)
                self.bound_session = plan.session_id
            if plan.message:
                print(plan.message)
        except Exception as exc:  # the cell itself reports store and settings problems in its own words
            print(f"mx-claw agent: could not resume this notebook's session: {exc}", file=sys.stderr)

    def record_session(self) -> None:
        """After a cell: if the notebook now uses another stored session, bind it (newest binding wins), naming
        the session it switched from, so the id in the notebook's metadata leads to it (N4)."""
        agent = self.magics._agent
        if self.notebook is None or agent is None or agent.session_id == self.bound_session:
            return
        try:
            if binding.is_stored(agent.store, agent.session_id):
                previous = self.bound_session or (self._plan.session_id if self._plan is not None else None)
                binding.bind(agent.store, agent.session_id, self.notebook,
                             previous if previous != agent.session_id else None)
                self.bound_session = agent.session_id
        except Exception as exc:
            print(f"mx-claw agent: could not record this notebook's session: {exc}", file=sys.stderr)

    # -- execution -------------------------------------------------------------------------------------
    async def do_execute(self, code: str, silent: bool, store_history: bool = True,  # type: ignore[override]
                         user_expressions: dict[str, Any] | None = None, allow_stdin: bool = False,
                         **kwargs: Any) -> dict[str, Any]:
        """Run a cell: a prompt as `%%agent`, `%%python` as Python, anything starting with `%` as typed."""
        if silent:
            return await super().do_execute(code, silent, store_history, user_expressions, allow_stdin, **kwargs)
        cell = classify(code)
        if touches_agent(code):
            assert self.shell is not None
            with self.shell.builtin_trap:  # as in a cell: pandas, imported lazily here, sees the kernel
                self.ensure_session()
        try:
            return await super().do_execute(cell.code, silent, store_history, user_expressions, allow_stdin,
                                            **kwargs)
        finally:
            if cell.kind in ("prompt", "magic"):
                with self.shell.builtin_trap:
                    self.record_session()

    # -- completion and inspection ---------------------------------------------------------------------
    def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:  # type: ignore[override]
        """Tab: `%agent` commands, options and settings on agent lines; nothing in a prompt; IPython elsewhere."""
        cursor = len(code) if cursor_pos is None else cursor_pos
        cell = classify(code)
        if cell.kind == "prompt":
            return _matches([], cursor, cursor)
        if cell.kind == "python":
            if cursor < cell.offset:
                return _matches([], cursor, cursor)
            reply = super().do_complete(cell.code, cursor - cell.offset)
            return _shift(reply, cell.offset)
        before, _ = line_at(code, cursor)
        found = agent_completions(before, self._commands(), self._settings())
        if found is not None:
            matches, replaced = found
            return _matches(matches, cursor - replaced, cursor)
        return super().do_complete(code, cursor_pos)

    def do_inspect(self, code: str, cursor_pos: int, detail_level: int = 0,  # type: ignore[override]
                   omit_sections: Any = ()) -> dict[str, Any]:
        """Shift-Tab: IPython's inspector in Python and magic cells; a prompt has nothing to inspect."""
        cell = classify(code)
        if cell.kind == "prompt" or (cell.kind == "python" and cursor_pos < cell.offset):
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        if cell.kind == "python":
            return super().do_inspect(cell.code, cursor_pos - cell.offset, detail_level, omit_sections)
        return super().do_inspect(code, cursor_pos, detail_level, omit_sections)

    def do_is_complete(self, code: str) -> dict[str, Any]:  # type: ignore[override]
        """A console sends a prompt on Enter (`%%agent` for a multi-line one); other cells follow IPython's rules
        (a `%%python` or `%%agent` cell, like any cell magic, ends with an empty line)."""
        if classify(code).kind == "prompt":
            return {"status": "complete"}
        return super().do_is_complete(code)

    def _commands(self) -> list[str]:
        from mxclaw_nb.notebook.commands import COMMANDS

        return list(COMMANDS)

    def _settings(self) -> dict[str, list[str]]:
        from traitlets import Bool, Enum

        from mxclaw_nb.settings import CONFIG_KEYS

        traits = type(self.magics).class_traits()
        out: dict[str, list[str]] = {}
        for key in CONFIG_KEYS:
            trait = traits.get(key)
            if isinstance(trait, Enum):
                out[key] = [str(v) for v in trait.values or ()]
            elif isinstance(trait, Bool):
                out[key] = ["true", "false"]
            else:
                out[key] = []
        return out


def _matches(matches: list[str], start: int, end: int) -> dict[str, Any]:
    return {"matches": matches, "cursor_start": start, "cursor_end": end, "metadata": {}, "status": "ok"}


def _shift(reply: dict[str, Any], offset: int) -> dict[str, Any]:
    """Move a completion reply computed on a `%%python` body back to positions in the whole cell."""
    reply = dict(reply)
    reply["cursor_start"] += offset
    reply["cursor_end"] += offset
    meta = dict(reply.get("metadata") or {})
    for key, comps in meta.items():
        if isinstance(comps, list):
            meta[key] = [{**c, "start": c["start"] + offset, "end": c["end"] + offset}
                         if isinstance(c, dict) and "start" in c else c for c in comps]
    reply["metadata"] = meta
    return reply
