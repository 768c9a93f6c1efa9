"""`%load_ext mxclaw_nb`: the `%agent` / `%%agent` magics, configured with traitlets (SPEC N1).

Why: the notebook is the product's home, so the magic is the main door into the agent, but it must
stay thin: `Agent` owns configuration resolution, sessions and the loop; this module parses what the
user typed, keeps one lazily built Agent per shell (rebuilt, same session, when the configuration
changes), shows the live turn log, and turns failures into one readable paragraph instead of a
traceback wall. Settings are traitlets with `config=True`, so `%config AgentMagics.model = ...`,
`ipython_config.py` and `%agent config key=value` all work; unset settings fall back to the same
environment variables as `Agent` (OPENAI_BASE_URL, MXCLAW_MODEL, MXCLAW_DB, MXCLAW_CONTEXT_WINDOW,
the key from the variable named by `api_key_env`). Sub-commands live in `notebook.commands`, the live
log in `notebook.livelog`, approval prompts in `notebook.approvals`. No asyncio.run, no global hooks.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand
from traitlets import Bool, Enum, Float, Integer, MetaHasTraits, TraitError, TraitType, Unicode, observe, validate
from traitlets.config import Configurable

from mxclaw_nb.agent import Agent, check_prompt_size, image_part
from mxclaw_nb.loop import TurnFailed
from mxclaw_nb.notebook.approvals import make_approver
from mxclaw_nb.notebook.commands import COMMANDS, HELP, parse_cell_options, parse_line_prompt, run_command
from mxclaw_nb.notebook.livelog import LiveLog
from mxclaw_nb.notebook.parsing import agent_input_guard, near_command
from mxclaw_nb.notebook.shown import failure_paragraph, show_dry_run
from mxclaw_nb.settings import AGENT_SETTINGS, CONFIG_KEYS, LIMITS, SETTING, SETTINGS, Setting, Settings, check_setting
from mxclaw_nb.store.errors import StoreError
from mxclaw_nb.text_policy import display
from mxclaw_nb.tools.policy import terminal_safe

if TYPE_CHECKING:  # DuckDB loads with the first store use, not at %load_ext
    from mxclaw_nb.store.writer import Store



def _trait(setting: Setting) -> TraitType:
    """The `%config AgentMagics.<name>` trait of one row of the settings table."""
    common: dict[str, Any] = {"allow_none": setting.allow_none, "config": True, "help": setting.help}
    if setting.kind == "choice":
        return Enum(setting.choices, setting.default, **common)
    return {"str": Unicode, "int": Integer, "float": Float, "bool": Bool}[setting.kind](setting.default, **common)


# The traits of AgentMagics, generated from the one settings table (mxclaw_nb.settings.SETTINGS).
if TYPE_CHECKING:
    AgentSettings = Configurable
else:
    AgentSettings = MetaHasTraits("AgentSettings", (Configurable,), {s.name: _trait(s) for s in SETTINGS if s.trait})


@magics_class
class AgentMagics(Magics, AgentSettings):
    """%agent / %%agent: run agent turns and inspect context management from notebook cells."""

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._agent: Agent | None = None
        self._store: Store | None = None
        self._store_key: str | None = None
        self._dirty = False
        self.last_view: Any = None  # RequestView of the last model call made from this shell
        self.last_view_session: str | None = None
        self.last_reported: int | None = None
        self.last_result: Any = None  # TurnResult of the last turn

    @observe(*AGENT_SETTINGS)
    def _settings_changed(self, change: Any) -> None:
        self._dirty = True

    @validate("workspace")
    def _check_workspace(self, proposal: Any) -> Any:
        value = proposal["value"]
        if value and not os.path.isdir(os.path.expanduser(value)):
            raise TraitError(f"workspace must be an existing folder (got {value!r})")
        return value

    @validate(*(k for k in CONFIG_KEYS if k in LIMITS or k == "strategy"))
    def _check_range(self, proposal: Any) -> Any:
        # One table (mxclaw_nb.settings) for %config, %agent config, ipython_config.py and Agent(...).
        try:
            return check_setting(proposal["trait"].name, proposal["value"])
        except ValueError as exc:
            raise TraitError(str(exc)) from None

    # -- agent lifecycle ---------------------------------------------------------------------------
    def store(self) -> Store:
        """The store for the configured database (opened once, reopened when `db` or $MXCLAW_DB changes)."""
        key = self.db or os.environ.get("MXCLAW_DB") or ""  # a notebook run again may point MXCLAW_DB elsewhere
        if self._store is None or key != self._store_key:
            from mxclaw_nb.store.writer import Store

            new = Store(self.db or None)  # may raise: the old store then stays open and in use
            old, self._store, self._store_key = self._store, new, key
            if old is not None:
                old.close()
        return self._store

    def get_agent(self) -> Agent:
        """The current Agent, built on first use and rebuilt (same session) after a configuration change."""
        store = self.store()
        if self._agent is None or self._dirty or self._agent.store is not store:
            old = self._agent
            same_db = old is not None and old.store is store  # another database: a new session there
            self._agent = self._build(old.session_id if old is not None and same_db else None)
            if old is not None and same_db and self._agent.session_id == old.session_id:
                self._agent.calibrated = old.calibrated
                self._agent._told = old._told  # L2, T3: a note said once per session stays said
            self._dirty = False
        return self._agent

    def _build(self, session_id: str | None) -> Agent:
        store = self.store()
        workspace = self.workspace or None
        if session_id is not None and workspace is None:
            ws = store.session_workspace(session_id)
            workspace = ws if ws and os.path.isdir(ws) else None
        try:
            return Agent(settings=self.settings(workspace=workspace), db=store, session_id=session_id,
                         api_key=os.environ.get(self.api_key_env) or None,
                         approver=make_approver(self.shell, widgets=self.widgets, timeout=self.approval_timeout),
                         namespace=self._user_namespace if self.shell is not None else None)
        except ValueError as exc:
            raise UsageError(f"{exc}. Change it with %agent config key=value (or %config AgentMagics.key = value "
                             "or the environment variable).") from None

    def settings(self, **changes: Any) -> Settings:
        """The traits as one `Settings` (N1: the same table); empty text for a setting that may be unset is unset."""
        values = {k: getattr(self, k) for k in CONFIG_KEYS}
        values = {k: None if v == "" and SETTING[k].allow_none else v for k, v in values.items()}
        return Settings(**{**values, **changes})

    def _user_namespace(self) -> dict[str, Any]:
        """The kernel's user namespace, for the K1 tools (read at each call: the user may rebind it)."""
        return self.shell.user_ns  # type: ignore[no-any-return]

    def new_session(self) -> Agent:
        """Start a new session; on the demo model with no configured workspace, in a fresh sample copy.

        The demo's scripts assume the sample project as shipped: a new session in the copy the last one
        already fixed would begin with "nothing to fix", so a new demo session gets a new copy (as at load).
        """
        agent = self.get_agent()
        if agent.is_demo and not self.workspace:
            self._agent = self._build(None)
            return self._agent
        agent.new_session()
        return agent

    def switch_session(self, session_id: str) -> Agent:
        """Continue another stored session (its workspace unless `workspace` is configured)."""
        self._agent = self._build(session_id)
        self._dirty = False
        return self._agent

    def close(self) -> None:
        """Forget the agent and close the store."""
        self._agent = None
        if self._store is not None:
            self._store.close()
        self._store = self._store_key = None

    def caption(self, text: str = "") -> str:
        """`<model label> · session 3f2a91c0 · <text>`: the header every output carries."""
        agent = self.get_agent()
        shell = "" if agent.sandbox.confined else "⚠ shell not sandboxed"
        return " · ".join(p for p in (agent.label, f"session {agent.session_id[:8]}", text, shell) if p)

    # -- the magic -----------------------------------------------------------------------------------
    @line_cell_magic("agent")
    @no_var_expand  # a prompt is literal text: `$x` and `{x}` reach the model as typed
    def agent_magic(self, line: str = "", cell: str | None = None) -> Any:
        """Run an agent turn or a management command. `%agent help` lists everything."""
        try:
            if cell is not None:
                opts = parse_cell_options(line)
                return self.turn(cell, **opts)
            stripped = line.strip()
            if not stripped:
                return run_command(self, "help", "")
            word, _, rest = stripped.partition(" ")
            if word in COMMANDS:
                return run_command(self, word, rest.strip())
            if not rest:
                self._check_one_word(word)
            prompt, opts = parse_line_prompt(stripped)
            return self.turn(prompt, **opts)
        except (StoreError, TurnFailed) as exc:
            print(str(exc), file=sys.stderr)
        except KeyboardInterrupt:
            print("Interrupted: nothing stored was lost.", file=sys.stderr)
        return None

    agent_magic.__doc__ = HELP

    @staticmethod
    def _check_one_word(word: str) -> None:
        """A one-word prompt that is a typo of a command (`sesions`) is a UsageError, not a prompt."""
        suggestion = near_command(word, COMMANDS)
        if word.endswith("?") and word[:-1] in COMMANDS:
            suggestion = f"help {word[:-1]}"
        if suggestion is not None:
            raise UsageError(f"%agent: {word!r} is not a command: did you mean `%agent {suggestion}`? "
                             f"(use -- to send it as a prompt: %agent -- {word})")

    def live_mode(self) -> str:
        """How the live log is shown: `display` (kernel), `print` (terminal) or `off`."""
        if not self.live:
            return "off"
        return "display" if getattr(self.shell, "kernel", None) is not None else "print"

    def _remember(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "request.built":
            self.last_view, self.last_reported = payload.get("view"), None
            self.last_view_session = self._agent.session_id if self._agent else None
        elif kind == "model.completed":
            self.last_reported = (payload.get("usage") or {}).get("prompt_tokens")

    def turn(self, prompt: str, *, dry_run: bool = False, new: bool = False, images: list[str] | None = None) -> Any:
        """Run `prompt` as one turn in the current session with the live log; returns nothing."""
        prompt = prompt.strip()
        for path in images or ():
            try:
                image_part(path)
            except ValueError as exc:
                raise UsageError(f"--image: {exc}") from None
        if not prompt and not dry_run:
            raise UsageError("The prompt is empty: say what the agent should do (%agent help for commands).")
        try:
            check_prompt_size(prompt, self.max_prompt_bytes)
        except ValueError as exc:
            raise UsageError(f"%agent: {exc}.") from None
        agent = self.new_session() if new else self.get_agent()
        if dry_run:
            return show_dry_run(self, prompt or None)
        if agent.store.read_only:
            print(self.caption(str(agent.store.read_only_error("run a turn (nothing was stored or sent)"))),
                  file=sys.stderr)
            return None
        widget, handle = self._live_widget(agent)
        log = LiveLog(agent.label, agent.session_id, mode="off" if widget is not None else self.live_mode())
        unsubscribe = [agent.subscribe(self._remember), agent.subscribe(log.handle), agent.subscribe(_say_waiting)]
        if widget is not None:
            unsubscribe.append(agent.subscribe(widget.handle))
        self.last_result = None
        try:
            new_turn = getattr(agent.approver, "new_turn", None)
            if callable(new_turn):  # N6: "allow for this turn" lasts one turn
                new_turn()
            self.last_result = agent.run(prompt, images=images or None)
        except KeyboardInterrupt:
            print(f"Interrupted. Everything done so far is stored (session {agent.session_id[:8]}); the next turn "
                  "repairs any unfinished tool call.", file=sys.stderr)
        except (TurnFailed, StoreError) as exc:
            paragraph = failure_paragraph(self, agent, exc)
            if widget is not None:  # shown once: in the turn's view (and its saved static HTML), not again below
                widget.error = paragraph
            else:
                print(terminal_safe(paragraph), file=sys.stderr)
        finally:
            for stop in unsubscribe:
                stop()
            if handle is not None:  # the final state as static HTML/text, then every widget of the turn is closed
                widget.publish_final(handle)
        if self.last_result is not None and self.live_mode() == "off" and widget is None:
            print(terminal_safe(display(self.last_result.text)))  # L7: no lone surrogate; no raw escape sequence
        return None

    def _live_widget(self, agent: Agent) -> tuple[Any, Any]:
        """A LiveTurnView shown with a display handle, when in a kernel with widgets enabled."""
        if self.live_mode() != "display" or not self.widgets:
            return None, None
        try:
            from mxclaw_nb.widgets import LiveTurnView
        except ImportError:
            return None, None
        from IPython.display import display

        view = LiveTurnView()
        view.model_label, view.session_id = agent.label, agent.session_id
        return view, display(view, display_id=True)


def _say_waiting(kind: str, payload: dict[str, Any]) -> None:
    """Nothing hangs silently: say whom a turn waits for when another process drives the session."""
    if kind == "turn.waiting":
        print(f"Waiting: session {str(payload.get('session_id'))[:8]} is running a turn in {payload.get('holder')}; "
              "this turn starts when that one ends (interrupt to stop waiting; nothing is stored yet).",
              file=sys.stderr, flush=True)


def load_ipython_extension(ipython: Any) -> None:
    """Register AgentMagics on the shell; loading twice keeps the first instance."""
    if "AgentMagics" in ipython.magics_manager.registry:
        return
    ipython.register_magics(AgentMagics(shell=ipython))
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and agent_input_guard not in cleanup:
        cleanup.append(agent_input_guard)  # before IPython's help syntax: `%agent what next?` is a prompt


def unload_ipython_extension(ipython: Any) -> None:
    """Close the store and remove the magics, so %reload_ext starts clean."""
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and agent_input_guard in cleanup:
        cleanup.remove(agent_input_guard)
    magics = ipython.magics_manager.registry.pop("AgentMagics", None)
    if magics is None:
        return
    magics.close()
    for kind in ("line", "cell"):
        ipython.magics_manager.magics[kind].pop("agent", None)
    if magics in getattr(ipython, "configurables", []):
        ipython.configurables.remove(magics)
