"""What the user typed, before it reaches `%agent`: the `?` help syntax and command-name typos (SPEC N1).

Why: IPython reads a line ending in `?` as a help request (`obj?`), so `%agent what next?` used to print
the docstring of `next()` and never reach the agent. `agent_input_guard` is an input transformer
registered in `shell.input_transformers_cleanup`, the documented hook that runs before IPython's own
special syntax (magics, `!`, help): a line that starts with `%agent <text>` becomes the same
`get_ipython().run_line_magic('agent', ...)` call IPython itself would write for the magic, so the
help transformer never sees a trailing `?` (and a long prompt is one string literal, not thousands
of tokens for IPython's tokenizer). Everything else is left exactly as typed, including `%agent?`
(help on the magic), lines continued with a backslash, and the body of any cell magic.

A one-word prompt one or two edits from a command name (`%agent sesions`) is almost surely a typo;
`near_command` finds the command so the magic can ask instead of sending the typo to the model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_AGENT_LINE = re.compile(r"^(?P<indent>[ \t]*)%agent[ \t]+(?P<args>\S.*?)[ \t]*(?P<eol>\r?\n?)$", re.DOTALL)
_TRIPLE = re.compile(r'"""|\'\'\'')


def agent_input_guard(lines: list[str]) -> list[str]:
    """Input transformer: `%agent <text>` lines become the magic call, so a final `?` is not read as help."""
    if not lines or lines[0].lstrip().startswith("%%"):
        return lines  # a cell magic: its body is text, not Python
    out: list[str] = []
    in_string = False  # inside a triple-quoted string started on an earlier line
    continued = False  # the previous line ended with a backslash
    for line in lines:
        ends_continued = line.rstrip("\r\n").endswith("\\")
        match = None if in_string or continued or ends_continued else _AGENT_LINE.match(line)
        if match is not None:
            call = f"get_ipython().run_line_magic('agent', {match['args']!r})"
            line = f"{match['indent']}{call}{match['eol'] or chr(10)}"
        else:
            in_string ^= len(_TRIPLE.findall(line)) % 2 == 1
        continued = ends_continued
        out.append(line)
    return out


def edit_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions, adjacent swaps."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def near_command(word: str, commands: Iterable[str]) -> str | None:
    """The command `word` is a likely typo of (1 edit for names up to 4 letters, else 2), or None."""
    lowered = word.lower()
    best: tuple[int, str] | None = None
    for name in commands:
        if word == name:
            return None
        allowed = 1 if len(name) <= 4 else 2
        distance = edit_distance(lowered, name)
        if distance <= allowed and (best is None or distance < best[0]):
            best = (distance, name)
    return None if best is None else best[1]
