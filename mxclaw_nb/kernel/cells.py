"""What a cell of the agent kernel is, what IPython runs for it, and Tab completion on `%agent` lines (SPEC N4).

Pure functions of the cell text (no IPython), so the rules are tested without a kernel:

- blank cell: nothing to run;
- first non-blank line starts with `%%python`: the rest of the cell is Python (IPython syntax: `?`, `!`, magics);
- first non-blank line starts with `%` (`%agent view`, `%%agent --new`, `%config ...`): IPython runs it as is,
  so magics behave exactly as in a Python kernel, `?` after a word included;
- anything else is a prompt: IPython runs `%%agent` with the cell as its body, so a `?` in it is text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

PYTHON_HEADER = "%%python"
TURN_OPTIONS = ("--new", "--dry-run", "--image")


@dataclass(frozen=True)
class Cell:
    """A classified cell: `kind` is blank, prompt, python or magic; `code` is what IPython runs;
    `offset` is where `code` starts in the original text (for completion and inspection positions)."""

    kind: str
    code: str
    offset: int = 0


def classify(text: str) -> Cell:
    """Classify a cell and give the code IPython should run for it."""
    stripped = text.lstrip()
    if not stripped:
        return Cell("blank", text)
    first = stripped.split("\n", 1)[0]
    if first.rstrip() == PYTHON_HEADER or first.startswith(PYTHON_HEADER + " "):
        start = len(text) - len(stripped) + len(first)
        body_start = start + 1 if text[start:start + 1] == "\n" else start
        return Cell("python", text[body_start:], body_start)
    if stripped.startswith("%"):
        return Cell("magic", text)
    return Cell("prompt", "%%agent\n" + text)


def touches_agent(text: str) -> bool:
    """True for cells that use the notebook's session (prompts, `%agent ...`/`%%agent` except help and config)."""
    cell = classify(text)
    if cell.kind == "prompt":
        return True
    if cell.kind != "magic":
        return False
    match = re.match(r"%%?agent\b[ \t]*(\S*)", text.lstrip())
    return bool(match) and match.group(1) not in ("help", "config")


def line_at(text: str, cursor: int) -> tuple[str, int]:
    """The line holding `cursor` up to the cursor, and that line's start offset."""
    start = text.rfind("\n", 0, cursor) + 1
    return text[start:cursor], start


def agent_completions(before: str, commands: Iterable[str], settings: Mapping[str, Sequence[str]]
                      ) -> tuple[list[str], int] | None:
    """Completions for a `%agent` / `%%agent` line typed up to the cursor, and the length of the word replaced.

    `settings` maps each setting name to its allowed values (empty when free). None when the line is not
    an `%agent` line or the position is not one we complete (IPython's completer takes over).
    """
    m = re.match(r"(%%?)agent(\s.*)?$", before)
    if not m:
        return None
    words = (m.group(2) or "").split()
    if not (m.group(2) or "").strip() or (m.group(2) or "")[-1:].isspace():
        words.append("")
    if not m.group(2):
        return None  # the cursor is still on the magic's name
    word = words[-1]
    if m.group(1) == "%%":
        return [o for o in TURN_OPTIONS if o.startswith(word)], len(word)
    if len(words) == 1:
        found = [c for c in commands if c.startswith(word)]
        if word.startswith("-"):
            found = [o for o in TURN_OPTIONS if o.startswith(word)]
        return found, len(word)
    command = words[0]
    if command == "help" and len(words) == 2:
        return [c for c in commands if c.startswith(word)], len(word)
    if command == "config":
        key, eq, value = word.partition("=")
        if not eq:
            return [f"{k}=" for k in settings if k.startswith(key)], len(word)
        return [f"{key}={v}" for v in settings.get(key, ()) if v.startswith(value)], len(word)
    return None
