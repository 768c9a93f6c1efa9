"""Parsing and routing of `%agent` sub-commands; session and configuration commands.

Why: one line magic carries both prompts and management commands, so the grammar must be explicit
and predictable. The first word picks a sub-command from one routing table (`COMMANDS`); anything
else is a prompt, and `%agent -- <text>` (or the cell form) sends a prompt that happens to start
with a command word. Each command has an argparse parser whose `error()` raises IPython's
`UsageError`, so a typo gives one line of usage, never a traceback. The help text is generated from
the same table, so `%agent help` cannot miss a command. Commands that show request views, events
and plots are in `notebook.shown`.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from traitlets import Bool, Enum, TraitError

from mxclaw_nb.notebook import shown as views
from mxclaw_nb.notebook.host import CommandHost
from mxclaw_nb.secrets import redact_obj
from mxclaw_nb.settings import CONFIG_KEYS, ENV_OF, LIMITS, SETTINGS, Setting, describe_setting
from mxclaw_nb.widgets.style import counted


class _HelpShown(Exception):
    """argparse printed `-h` help; nothing else to do."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that reports errors as UsageError instead of exiting."""

    def error(self, message: str) -> Any:
        """Raise UsageError with the usage line and a hint for prompts that start with a command word."""
        word = self.prog.split()[-1]
        hint = f" To send a prompt starting with '{word}', write %agent -- {word} ..." if word in COMMANDS else ""
        raise UsageError(f"{self.format_usage().strip()}\n{self.prog}: {message}.{hint}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        """`-h` ends here: the help is printed already."""
        if message:
            raise UsageError(message.strip())
        raise _HelpShown


@dataclass(frozen=True)
class Command:
    """One sub-command: its one-line help, how to build its parser, and what runs it."""

    summary: str
    usage: str
    handler: Callable[[CommandHost, Any], Any]  # parsed options (argparse.Namespace), or the raw text
    configure: Callable[[Parser], None] | None = None
    raw: bool = False  # the rest of the line is passed as text (SQL, prompts), not parsed


def _parser(name: str, command: Command) -> Parser:
    parser = Parser(prog=f"%agent {name}", description=command.summary, add_help=True)
    if command.configure is not None:
        command.configure(parser)
    return parser


def run_command(magics: CommandHost, name: str, rest: str) -> Any:
    """Parse `rest` for sub-command `name` and run it."""
    command = COMMANDS[name]
    if command.raw and rest not in ("-h", "--help"):
        return command.handler(magics, rest)
    try:
        args = _parser(name, command).parse_args(shlex.split(rest))
    except ValueError as exc:  # shlex: unbalanced quotes
        raise UsageError(f"%agent {name}: cannot parse {rest!r} ({exc}).") from None
    except _HelpShown:
        return None
    return command.handler(magics, args)


# -- turn options --------------------------------------------------------------------------------
_cell_parser = Parser(prog="%%agent", description="Run the cell body as one turn.")
_cell_parser.add_argument("--dry-run", action="store_true", help="show the next request view; no model call")
_cell_parser.add_argument("--new", action="store_true", help="start a new session first")
_cell_parser.add_argument("--image", action="extend", nargs="+", default=[], metavar="PATH",
                          help="attach image file(s) to the message")


def parse_cell_options(line: str) -> dict[str, Any]:
    """Options of `%%agent [--dry-run] [--new] [--image PATH ...]`."""
    try:
        args = _cell_parser.parse_args(shlex.split(line))
    except ValueError as exc:
        raise UsageError(f"%%agent: cannot parse options {line!r} ({exc}).") from None
    except _HelpShown:
        raise UsageError("%%agent: see the options above.") from None
    return {"dry_run": args.dry_run, "new": args.new, "images": list(args.image)}


def parse_line_prompt(line: str) -> tuple[str, dict[str, Any]]:
    """Split `%agent [--new] [--dry-run] [--image PATH] [--] prompt` into prompt and options."""
    opts: dict[str, Any] = {"dry_run": False, "new": False, "images": []}
    rest = line.strip()
    while rest.startswith("-"):
        token, tail = (re.split(r"\s+", rest, maxsplit=1) + [""])[:2]
        if token == "--":
            return tail, opts
        if token in ("--dry-run", "--new"):
            opts[token[2:].replace("-", "_")] = True
        elif token == "--image" or token.startswith("--image="):
            path = token.partition("=")[2]
            if not path:
                path, tail = (re.split(r"\s+", tail, maxsplit=1) + [""])[:2]
            if not path:
                raise UsageError("%agent --image needs a file path.")
            opts["images"].append(path)
        else:
            raise UsageError(f"%agent: unknown option {token!r} (options: --new, --dry-run, --image PATH). To send a "
                             f"prompt that starts with '-', write %agent -- {rest}")
        rest = tail
    return rest, opts


# -- session and configuration commands ---------------------------------------------------------
def cmd_help(m: CommandHost, args: argparse.Namespace) -> None:
    """Print the help, or one command's options."""
    if args.command is None:
        print(HELP)
        return
    if args.command not in COMMANDS:
        from mxclaw_nb.notebook.parsing import near_command

        near = near_command(args.command, COMMANDS)
        hint = f"did you mean `%agent help {near}`? " if near else ""
        raise UsageError(f"%agent help: unknown command {args.command!r}; {hint}commands: {', '.join(COMMANDS)}. "
                         f"To send a prompt starting with 'help', write %agent -- help ...")
    print(_parser(args.command, COMMANDS[args.command]).format_help())


def cmd_new(m: CommandHost, args: argparse.Namespace) -> None:
    """Start a new session (the demo model: in a fresh copy of its sample project)."""
    agent = m.new_session()
    fresh = f" · workspace {agent.workspace} (a fresh sample copy)" if agent.is_demo and not m.workspace else ""
    print(m.caption(f"new session (fresh frozen context on the first turn){fresh}"))


def cmd_sessions(m: CommandHost, args: argparse.Namespace) -> Any:
    """Sessions in the store, with the current one marked."""
    agent = m.get_agent()
    if args.browse:
        from mxclaw_nb.widgets import SessionBrowser

        browser = SessionBrowser(m.store(), current=agent.session_id)
        if getattr(m.shell, "kernel", None) is None:
            return browser
        from IPython.display import display

        from mxclaw_nb.widgets.static import LiveSnapshot

        # interactive while the kernel runs, with a static snapshot right after it that follows the reader's
        # clicks: what is saved reads the same on reopen, also as the last cell (N2); frozen when the next cell runs
        LiveSnapshot(m.shell, browser, display=display, name="session browser", again="%agent sessions --browse")
        return None
    from mxclaw_nb.notebook.frames import sessions_frame

    df = m.store().sessions()
    print(m.caption(f"{counted(len(df), 'session')} in {m.store().path}" + ("" if args.full else
                    " · ids are the first 8 characters, more where two share them (enough for %agent resume)"
                    " · --full: as stored")))
    if args.full:
        df.insert(0, "current", df["id"] == agent.session_id)
        return df
    return sessions_frame(df, agent.session_id)


def cmd_resume(m: CommandHost, args: argparse.Namespace) -> None:
    """Continue a stored session chosen by id prefix."""
    prefix = args.prefix.strip()
    if not prefix:  # N1: an empty prefix starts every id: it would resume whichever session happens to be alone
        raise UsageError("%agent resume: give the first characters of a session id (list them with %agent sessions).")
    args.prefix = prefix
    df = m.store().sessions()
    match = df[df["id"].str.startswith(prefix)]
    if match.empty:
        raise UsageError(f"%agent resume: no session id starts with {args.prefix!r} (list them with %agent sessions).")
    if len(match) > 1:
        ids = ", ".join(i[:12] for i in match["id"])
        raise UsageError(f"%agent resume: {args.prefix!r} matches {len(match)} sessions ({ids}); give more characters.")
    sid = match.iloc[0]["id"]
    m.switch_session(sid)
    store = m.store()
    print(m.caption(f"resumed: {counted(store.turn_count(sid), 'turn')}, "
                    f"{counted(store.message_count(sid), 'message')} stored"))


def _source(m: CommandHost, key: str) -> str:
    import os

    if key == "api_key_env":
        return f"${m.api_key_env} is {'set' if os.environ.get(m.api_key_env) else 'not set'}"
    if m.trait_values()[key] != m.traits()[key].default():
        return "config"
    env = ENV_OF.get(key)
    return f"env ${env}" if env and os.environ.get(env) else "default"


def _effective(m: CommandHost, key: str) -> Any:
    """A setting's value as shown in the table: the environment's when it comes from there, never None/NaN."""
    import os

    value = getattr(m, key)
    if value is None and ENV_OF.get(key) and os.environ.get(ENV_OF[key]):
        value = os.environ[ENV_OF[key]]
    return "" if value is None else _shown_value(value)


def _shown_value(value: Any) -> Any:
    """A setting as shown: URL passwords and known keys replaced (L6)."""
    from mxclaw_nb.secrets import display_url

    return display_url(value) if isinstance(value, str) and "://" in value else redact_obj(value)


def _assign(m: CommandHost, key: str, raw: str) -> None:
    """Set one setting from text; a value outside its range (or a db that cannot open) is a UsageError."""
    from mxclaw_nb.store.writer import StoreError

    previous = getattr(m, key)
    try:
        setattr(m, key, m.traits()[key].from_string(raw))
    except (TraitError, ValueError) as exc:
        trait = m.traits()[key]
        if key in LIMITS:
            text = f"{key} must be {describe_setting(key)} (got {raw!r})"
        elif isinstance(trait, Bool):
            text = f"{key} must be true or false (got {raw!r})"
        elif isinstance(trait, Enum):
            text = f"{key} must be one of {', '.join(map(str, trait.values or ()))} (got {raw!r})"
        else:
            text = str(exc)
        raise UsageError(f"%agent config: {text}; nothing was changed.") from None
    if key == "db":
        try:
            m.store()  # open it now: the current store stays in use unless the new one opens
        except StoreError as exc:
            m.db = previous
            raise UsageError(f"%agent config: db not changed: {exc}") from None


def cmd_config(m: CommandHost, args: argparse.Namespace) -> Any:
    """Show the settings, or set `key=value` pairs."""
    if args.assignments:
        for item in args.assignments:
            key, eq, raw = item.partition("=")
            key = key.strip()
            if not eq or key not in CONFIG_KEYS:
                raise UsageError(f"%agent config: expected key=value with key in {', '.join(CONFIG_KEYS)} "
                                 f"(got {item!r}).")
            _assign(m, key, raw.strip())
            print(f"{key} = {_shown_value(getattr(m, key))!r}")
        return None
    agent = m.get_agent()
    rows = [{"setting": k, "value": _effective(m, k), "source": _source(m, k), "help": m.traits()[k].help}
            for k in CONFIG_KEYS]
    print(m.caption(f"window {agent.policy.context_window_tokens:,} · threshold {agent.policy.threshold:,} est. · "
                    f"db {m.store().path} · workspace {agent.workspace}"))
    print(("⚠ " if not agent.sandbox.confined else "") + agent.sandbox_status)
    if "python" in agent.tools.names():
        print("python tool: runs in this kernel, outside the OS sandbox (K1); the approval policy applies")
    import pandas as pd  # lazy: %load_ext must not import pandas (bench/import_bench.py)

    return pd.DataFrame(rows)


def cmd_lab(m: CommandHost, args: argparse.Namespace) -> Any:
    """The policy lab over this session, the stored ones and the shipped datasets (S4, C12)."""
    agent = m.get_agent()
    pol = agent.policy
    from mxclaw_nb.widgets.lab import PolicyLab

    strategy = getattr(pol.strategy, "name", None) or "article"
    try:
        lab = PolicyLab(store=m.store(), current=agent.session_id, strategy=args.strategy or strategy,
                        compare=args.versus, window=pol.context_window_tokens, threshold_ratio=pol.threshold_ratio,
                        keep_recent=pol.keep_recent_tokens, tool_definitions=pol.tool_definitions)  # T1-T3
    except (ValueError, LookupError, TraitError) as exc:  # TraitError: a value outside a control's range
        raise UsageError(f"%agent lab: {exc}") from None
    if getattr(m.shell, "kernel", None) is None:
        return lab
    lab.show(again="%agent lab")  # with a static snapshot of the last state: what a saved notebook keeps (N2)
    return None


def _configure_lab(p: Parser) -> None:
    from mxclaw_nb.context.strategies import STRATEGIES

    p.add_argument("--strategy", choices=list(STRATEGIES), help="strategy to start with (default: current)")
    p.add_argument("--versus", choices=list(STRATEGIES), help="a second strategy shown side by side")


def _configure_help(p: Parser) -> None:
    p.add_argument("command", nargs="?", help="a command name")


def _configure_sessions(p: Parser) -> None:
    p.add_argument("--browse", action="store_true", help="open the session browser widget")
    p.add_argument("--full", action="store_true", help="the store's frame: full ids, every column")


def _configure_resume(p: Parser) -> None:
    p.add_argument("prefix", help="the first characters of a session id")


def _configure_config(p: Parser) -> None:
    p.add_argument("assignments", nargs="*", metavar="key=value", help="settings to change")


COMMANDS: dict[str, Command] = {
    "help": Command("list commands and options", "help [command]", cmd_help, _configure_help),
    "new": Command("start a new session", "new", cmd_new),
    "sessions": Command("list sessions (DataFrame; --browse opens the session browser)", "sessions [--browse] [--full]",
                        cmd_sessions, _configure_sessions),
    "resume": Command("continue a stored session", "resume <id-prefix>", cmd_resume, _configure_resume),
    "config": Command("show settings, or set them", "config [key=value ...]", cmd_config, _configure_config),
    "view": Command("request view of the last model call: inspector, or the before/after DataFrame",
                    "view [--before | --after]", views.cmd_view, views.configure_view),
    "compact": Command("compact the current transcript now and show what compaction does (nothing is stored)",
                       "compact", views.cmd_compact),
    "dry-run": Command("the next request view and its estimate, without calling the model", "dry-run [prompt]",
                       views.cmd_dry_run, raw=True),
    "events": Command("stored events (DataFrame)", "events [--type T] [--all] [--tail N] [--full]", views.cmd_events,
                      views.configure_events),
    "sql": Command("read-only SQL on the store (DataFrame)", "sql <query>", views.cmd_sql, raw=True),
    "replay": Command("replay this session under other policy values (DataFrame, no model calls)",
                      "replay [--window N] [--ratio R] [--tail N] [--strategy NAME[:k=v,...]] [--all-columns]",
                      views.cmd_replay, views.configure_replay),
    "transcript": Command("the stored transcript of this session (DataFrame)", "transcript [--full]",
                          views.cmd_transcript, views.configure_transcript),
    "timeline": Command("prompt tokens per model call, threshold and compactions (plot)", "timeline",
                        views.cmd_timeline),
    "lab": Command("policy lab: move a policy's numbers and watch a session's calls (widget)",
                   "lab [--strategy NAME] [--versus NAME]", cmd_lab, _configure_lab),
    "gauge": Command("context gauge of the last model call (estimate vs threshold vs window, by layer)", "gauge",
                     views.cmd_gauge),
}



def _setting_line(setting: Setting) -> str:
    """One setting in `%agent help`: help, default, environment variable and accepted range."""
    default = "unset" if setting.default is None else repr(setting.default)
    extra = [f"default {default}"]
    if setting.env:
        extra.append(f"${setting.env}")
    if setting.limit is not None:
        extra.append(describe_setting(setting.name))
    return f"{setting.help} [{'; '.join(extra)}]"


HELP = "\n".join([
    "mxclaw_nb: a coding agent in the notebook.",
    "",
    "Turns:",
    "  %agent <prompt>                        run one turn in the current session (live log)",
    "  %agent [--new] [--dry-run] [--image PATH] [--] <prompt>",
    "                                         options before the prompt; '--' ends them, so",
    "                                         '%agent -- new features please' is a prompt",
    "  %%agent [--new] [--dry-run] [--image PATH ...]",
    "                                         the cell body is the prompt",
    "    --new       start a new session first",
    "    --dry-run   show the next request view and its estimate; no model call",
    "    --image     attach an image file (repeat for more)",
    "",
    "Commands (%agent help <command> for its options):",
    *(f"  %agent {c.usage:<38} {c.summary}" for c in COMMANDS.values()),
    "",
    "Settings (%agent config key=value, %config AgentMagics.key = value, or ipython_config.py):",
    *(f"  {s.name:<22} {_setting_line(s)}" for s in SETTINGS if s.trait),
    "  Numeric ones are checked when set (the range is in the message). With no model configured the",
    "  offline demo model answers.",
    "Token figures marked 'est.' are estimates (SPEC C1); 'reported' ones come from the provider.",
])
