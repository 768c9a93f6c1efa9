"""Accepted ranges of the numeric settings and input sizes, checked in one place when a value is set.

Why: a bad value used to be accepted and fail much later (`max_iterations=-3` gave "Stopped after -3
model calls", `context_window_tokens=0` silently meant the default, `threshold_ratio=5` or
`approval_timeout=-1` broke only in the middle of a turn). Every way of setting a value
(`Agent(...)`, `%config AgentMagics.x = ...`, `%agent config x=...`, `ipython_config.py`) goes
through `check_setting`, so all of them refuse the same values with the same sentence, and the
accepted range is stated in it and in the README. The table is keyed by setting name; a new numeric
setting adds one row here. Standard library only: the agent and the magics both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_WINDOW_TOKENS = 1_000  # below this the frozen context alone (system prompt, AGENTS.md) does not fit
MAX_PROMPT_BYTES = 1_048_576  # default limit of one prompt (1 MB, UTF-8)
MAX_IMAGE_BYTES = 20 * 1_048_576  # per attached image, the common provider limit (20 MB)


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


LIMITS: dict[str, Range] = {
    "context_window_tokens": Range(True, MIN_WINDOW_TOKENS, allow_none=True),
    "threshold_ratio": Range(False, 0, low_open=True, high=1),
    "keep_recent_tokens": Range(True, 0),
    "max_iterations": Range(True, 1),
    "approval_timeout": Range(False, 0, low_open=True),
    "shell_timeout": Range(False, 0, low_open=True),
    "max_prompt_bytes": Range(True, 1),
    "call_deadline": Range(False, 0, low_open=True),
    "max_tool_calls": Range(True, 1),
}


def describe_setting(name: str) -> str:
    """The accepted range of a setting in words (empty for settings without a range)."""
    limit = LIMITS.get(name)
    if limit is None:
        return ""
    return limit.describe() + (" (or unset)" if limit.allow_none else "")


def check_setting(name: str, value: Any) -> Any:
    """Return `value` if it is inside the range of setting `name`, else raise ValueError stating the range."""
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
