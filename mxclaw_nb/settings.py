"""The settings table: `Settings`, one frozen dataclass whose fields are the settings (SPEC N1).

Each field is one row, written once: its name, type, default, help, environment variable and accepted range
or choices. From it come `SETTINGS` (the rows as data), the `%config AgentMagics.*` traits, the `%agent config`
rows, `%agent help`'s settings list and `Agent(...)`'s keywords and signature; the README tables are checked
against it (tests/test_settings_table.py). `Agent(settings=Settings(...), **overrides)` takes it whole; the loop
(`TurnContext.settings`) and the tools (`ToolContext.settings`) receive it. Adding a setting is one field here,
its README line and the code that reads it.

Accepted values are checked in one place, `check_setting`, when a value is set.

Why: a bad value used to be accepted and fail much later (`max_iterations=-3` gave "Stopped after -3
model calls", `context_window_tokens=0` silently meant the default, `threshold_ratio=5` or
`approval_timeout=-1` broke only in the middle of a turn). Every way of setting a value
(`Settings(...)`, `Agent(...)`, `%config AgentMagics.x = ...`, `%agent config x=...`, `ipython_config.py`)
goes through `check_setting`, so all of them refuse the same values with the same sentence, and the
accepted range is stated in it and in the README. Standard library only: the agent and the magics both
import it.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable
from dataclasses import Field, dataclass, field, fields
from typing import Any, get_args, get_type_hints

MIN_WINDOW_TOKENS = 1_000  # below this the frozen context alone (system prompt, AGENTS.md) does not fit
MAX_PROMPT_BYTES = 1_048_576  # default limit of one prompt (1 MB, UTF-8)
MAX_IMAGE_BYTES = 20 * 1_048_576  # per attached image, the common provider limit (20 MB)
DEMO_MODEL = "mxclaw-demo"  # the offline demo model's name (L2): the demo server, the provider's window table, the UI


@dataclass(frozen=True)
class Range:
    """An accepted range: integer or number, lower bound (inclusive or not), optional upper bound."""

    integer: bool
    low: float | None = None
    low_open: bool = False  # True: value > low; False: value >= low
    high: float | None = None
    allow_none: bool = False

    def describe(self) -> str:
        """The range in words, e.g. `an integer >= 1` or `a number in (0, 1]`."""
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            return f"{kind} in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}"
        return kind

    def accepts(self, value: Any) -> bool:
        """True when `value` is of the right kind and inside the range (NaN never is)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or value <= self.high


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else str(x)


COUNTER_MODES = ("auto", "estimate", "calibrated", "o200k_base", "cl100k_base")  # T2/T3
APPROVAL_MODES = ("ask", "allow", "deny")  # L2
SANDBOX_MODES = ("auto", "bwrap", "landlock", "off")  # L5
NETWORK_MODES = ("off", "on")  # L5
MAX_TOOL_CALLS = 64  # default bound on tool calls run per model response (L3)
DEFAULT_CALL_DEADLINE = 600.0  # seconds one model call may take, retries included (L7)
# L2, L7: tokens one answer may generate. Without a bound a small local model may generate until the server's
# whole context is full (minutes on a laptop, then a context shift); 4,096 is far above any tool call or answer.
DEFAULT_MAX_TOKENS = 4096
TEXT_CALL_MODES = ("auto", "on", "off")  # L2: read tool calls written as text (auto: on but for api.openai.com)
MAX_TOOL_ARGS_BYTES = 4 * 1_048_576  # L10: one tool call's arguments (4 MB); larger ones are not run
MAX_ANSWER_BYTES = 16 * 1_048_576  # L10: one model answer (text, reasoning, tool-call arguments), or a plain body
MAX_STREAM_LINE_BYTES = 8 * 1_048_576  # L10: one line of a streamed (SSE) answer

_POSITIVE = Range(False, 0, low_open=True)


def _row(default: Any, help: str, *, choices: tuple[str, ...] = (), env: str | None = None,
         limit: Range | None = None, agent: bool = True, trait: bool = True, rebuilds: bool = True) -> Any:
    """One row of the table below: a `Settings` field carrying its help, accepted values and where else it lives.

    `agent`: an `Agent(...)` keyword of the same name (False: a notebook-only setting). `trait`: a
    `%config AgentMagics.<name>` trait and a `%agent config` key (False: an `Agent` keyword only). `rebuilds`:
    changing it rebuilds the notebook's Agent (same session); False: read where it is used."""
    meta = {"help": help, "choices": choices, "env": env, "limit": limit, "agent": agent, "trait": trait,
            "rebuilds": rebuilds}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Every setting once (N1): name, type, default, help, accepted values. `Agent(settings=...)` takes it; the
    traits, `%agent config`, `%agent help` and `SETTINGS` below are made from it; the README is checked against it.

    Frozen, and checked when made: a value outside its range or choices raises ValueError stating what is
    accepted (the same sentence `%config` and `%agent config` give). None for a setting with an environment
    variable means "not set here": the variable, then the stated default, decide where it is used."""

    model: str | None = _row(None, "Model name (default: $MXCLAW_MODEL, or the demo).", env="MXCLAW_MODEL")
    base_url: str | None = _row(None, "OpenAI-compatible base URL ($OPENAI_BASE_URL).", env="OPENAI_BASE_URL")
    api_key_env: str = _row("OPENAI_API_KEY", "Name of the environment variable holding the key.", agent=False)
    db: str | None = _row(None, "DuckDB file ($MXCLAW_DB, else the per-user data folder).", env="MXCLAW_DB")
    workspace: str | None = _row(
        None, "Folder the tools work in (default: current folder; the demo uses a sample copy).")
    context_window_tokens: int | None = _row(
        None, "Context window ($MXCLAW_CONTEXT_WINDOW, else the model table).", env="MXCLAW_CONTEXT_WINDOW",
        limit=Range(True, MIN_WINDOW_TOKENS, allow_none=True))
    threshold_ratio: float = _row(0.8, "Compaction threshold as a share of the window (C2).",
                                  limit=Range(False, 0, low_open=True, high=1))
    keep_recent_tokens: int = _row(8000, "Safe-tail budget in tokens (C3).", limit=Range(True, 0))
    strategy: str = _row("article", "Compaction strategy (C12): article, masking, clearing or model-summary, "
                         "with numbers as name:key=value,... (e.g. masking:keep_last=5).")
    cache_ttl_seconds: float = _row(300.0, "Prompt-cache time to live in seconds that a -cache strategy assumes "
                                    "(E4: a longer pause means a cold prefix; 300 = 5 min, 3600 = 1 h).",
                                    limit=_POSITIVE)
    approval: str = _row("ask", "Shell commands (bash, sandboxed): ask, allow or deny.", choices=APPROVAL_MODES)
    python_approval: str = _row("ask", "Code of the python tool (runs unsandboxed in the kernel): ask, allow or deny.",
                                choices=APPROVAL_MODES)
    counter: str = _row("auto", "Token counter (T2/T3).", choices=COUNTER_MODES)
    max_iterations: int = _row(20, "Model calls per turn before the loop stops.", limit=Range(True, 1))
    call_deadline: float = _row(DEFAULT_CALL_DEADLINE, "Total seconds one model call may take, retries included (L7).",
                                limit=_POSITIVE)
    max_tokens: int | None = _row(DEFAULT_MAX_TOKENS, "Most tokens one answer may generate (sent with each call; "
                                  "unset: the server's own limit).", limit=Range(True, 1, allow_none=True))
    stream: bool = _row(True, "Stream answers (off for servers that refuse streamed tool calls).")
    text_calls: str = _row("auto", "Read tool calls a model writes as text (L2): auto (on except for "
                           "api.openai.com), on or off.", choices=TEXT_CALL_MODES)
    max_prompt_bytes: int = _row(MAX_PROMPT_BYTES,
                                 "Largest prompt in bytes (UTF-8); a longer one is refused with its size.",
                                 limit=Range(True, 1))
    sandbox: str | None = _row(None, "Shell sandbox (L5): auto, bwrap, landlock or off ($MXCLAW_SANDBOX, else auto).",
                               choices=SANDBOX_MODES, env="MXCLAW_SANDBOX")
    network: str | None = _row(None, "Network inside the shell sandbox: off or on ($MXCLAW_NETWORK, else off).",
                               choices=NETWORK_MODES, env="MXCLAW_NETWORK")
    shell_env: str = _row("", "Comma-separated extra environment variables the shell may see "
                          "($MXCLAW_SHELL_ENV); names with KEY, SECRET, TOKEN, PASSWORD or CREDENTIAL are refused.",
                          env="MXCLAW_SHELL_ENV")
    max_tool_calls: int = _row(MAX_TOOL_CALLS, "Tool calls run per model response; the rest fail.",
                               limit=Range(True, 1))
    max_tool_args_bytes: int = _row(
        MAX_TOOL_ARGS_BYTES, "Largest arguments of one tool call in bytes (L10); a larger call is not run, it fails.",
        limit=Range(True, 1))
    max_answer_bytes: int = _row(
        MAX_ANSWER_BYTES, "Largest model answer in bytes: text, reasoning and tool-call arguments together (L10).",
        limit=Range(True, 1))
    max_stream_line_bytes: int = _row(MAX_STREAM_LINE_BYTES, "Largest line of a streamed answer in bytes (L10).",
                                      limit=Range(True, 1))
    live: bool = _row(True, "Show the live turn log while a turn runs.", agent=False, rebuilds=False)
    widgets: bool = _row(True, "Use ipywidgets in a kernel (HTML/text fallbacks otherwise).", agent=False,
                         rebuilds=False)
    approval_timeout: float = _row(300.0, "Seconds to wait for Approve/Deny before denying.", limit=_POSITIVE,
                                   agent=False, rebuilds=False)
    shell_timeout: float = _row(60.0, "Seconds one shell command may run.", limit=_POSITIVE, trait=False)
    shell_memory_mb: int = _row(4096, "Memory (data) per process of a sandboxed command, in MiB (L8).",
                                limit=Range(True, 16))
    shell_processes: int = _row(512, "Processes and threads of one sandboxed command (L8, bwrap).",
                                limit=Range(True, 8))
    shell_file_mb: int = _row(2048, "Largest file a sandboxed command may write, in MiB (L8).", limit=Range(True, 1))
    shell_tmp_mb: int = _row(1024, "Size of the sandbox's private /tmp, in MiB (L8, bwrap).", limit=Range(True, 1))
    allow_broad_workspace: bool = _row(
        False, "Allow the home folder or a system root (/, /usr, /etc, ...) as the workspace (L11).")

    def __post_init__(self) -> None:
        for f in fields(self):  # in table order: the first bad value is the one reported
            check_setting(f.name, getattr(self, f.name))


@dataclass(frozen=True)
class Setting:
    """One row of `Settings` as data (made from its field, never written by hand): what the traits, `%agent
    help`, `%agent config` and the README check read. `kind` is `str`, `int`, `float`, `bool` or `choice`;
    `allow_none` comes from the field's type (`... | None`)."""

    name: str
    kind: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    allow_none: bool = False
    env: str | None = None
    limit: Range | None = None
    agent: bool = True
    trait: bool = True
    rebuilds: bool = True


def _setting(f: Field[Any], hint: Any) -> Setting:
    kinds = [t for t in get_args(hint) or (hint,) if t is not type(None)]
    meta = dict(f.metadata)
    kind = "choice" if meta["choices"] else kinds[0].__name__
    return Setting(f.name, kind, f.default, allow_none=type(None) in get_args(hint), **meta)


def near_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The names in `known` close to a misspelt `name`, closest first: like the whole name or like one of its
    words (`windw` -> `context_window_tokens`), or containing it (`window`)."""
    def score(candidate: str) -> float:
        whole = difflib.SequenceMatcher(None, name, candidate).ratio()
        words = [difflib.SequenceMatcher(None, name, w).ratio() for w in candidate.split("_") if len(w) >= 4]
        inside = 0.7 if len(name) >= 3 and name.lower() in candidate else 0.0
        return max(whole, max(words, default=0.0) - 0.05, inside)  # a whole-name match ranks first

    scored = sorted(((score(k), k) for k in known), key=lambda sk: -sk[0])
    return [k for s, k in scored if s >= 0.7][:n]


def unknown_keyword(callee: str, name: str, known: tuple[str, ...], settings: tuple[str, ...] = ()) -> str:
    """The TypeError text for an unknown keyword of `callee`: the near names among `known`, else every setting
    (`settings`, default `known`) (N1)."""
    near = near_names(name, known)
    hint = f"; did you mean {' or '.join(near)}?" if near else f"; the settings are {', '.join(settings or known)}"
    return f"{callee} got an unexpected keyword argument {name!r}{hint}"


_NAMES = tuple(f.name for f in fields(Settings))
_dataclass_init = Settings.__init__


@functools.wraps(_dataclass_init)
def _checked_init(self: Settings, *args: Any, **values: Any) -> None:
    """N1: a misspelt name is refused naming the near ones, as `Agent(...)` does (the dataclass's own TypeError
    names none). `Settings(...)` keeps the dataclass's typing (mypy) and signature (`help`, Shift-Tab)."""
    for name in values:
        if name not in _NAMES:
            raise TypeError(unknown_keyword("Settings()", name, _NAMES))
    _dataclass_init(self, *args, **values)


Settings.__init__ = _checked_init  # type: ignore[method-assign]
_HINTS = get_type_hints(Settings)
SETTINGS: tuple[Setting, ...] = tuple(_setting(f, _HINTS[f.name]) for f in fields(Settings))
SETTING = {s.name: s for s in SETTINGS}
# What rebuilds the agent when changed (%config / %agent config), and every %agent config key, in table order.
AGENT_SETTINGS = tuple(s.name for s in SETTINGS if s.trait and s.rebuilds)
CONFIG_KEYS = tuple(s.name for s in SETTINGS if s.trait)
AGENT_KEYS = tuple(s.name for s in SETTINGS if s.agent)  # the `Agent(...)` keywords that are settings
ENV_OF = {s.name: s.env for s in SETTINGS if s.env}
LIMITS: dict[str, Range] = {s.name: s.limit for s in SETTINGS if s.limit is not None}


def describe_setting(name: str) -> str:
    """The accepted range of a setting in words (empty for settings without a range)."""
    limit = LIMITS.get(name)
    if limit is None:
        return ""
    return limit.describe() + (" (or unset)" if limit.allow_none else "")


def check_setting(name: str, value: Any) -> Any:
    """Return `value` if setting `name` accepts it (its range, its choices, a known strategy), else raise
    ValueError stating what is accepted."""
    if name == "strategy" and value is not None:  # C12: a registered name with its numbers (the engine's parser)
        from mxclaw_nb.context.strategies import parse_strategy

        try:
            parse_strategy(value)
        except ValueError as exc:
            raise ValueError(f"strategy: {exc}") from None
        return value
    setting = SETTING.get(name)
    if setting is not None and setting.choices and value not in setting.choices:
        if value is None and setting.allow_none:
            return value
        raise ValueError(f"{name} must be one of {', '.join(setting.choices)} (got {value!r})")
    limit = LIMITS.get(name)
    if limit is None or (value is None and limit.allow_none) or limit.accepts(value):
        return value
    raise ValueError(f"{name} must be {describe_setting(name)} (got {value!r})")


def check_settings(**values: Any) -> None:
    """`check_setting` for each keyword; None means "not given" and is skipped."""
    for name, value in values.items():
        if value is not None:
            check_setting(name, value)


def human_bytes(n: int) -> str:
    """`10.0 MB (10,485,760 bytes)`: a size for messages, exact count included."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"
