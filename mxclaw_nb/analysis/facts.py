"""Fact survival: which concrete facts of compacted messages are still visible in a request view (SPEC S4).

Why: "tokens saved" alone rewards a policy that throws everything away. What an agent needs after a
compaction are the concrete handles it was working with — file paths, error lines, numbers (ids,
line numbers, sizes, prices) and the shell commands it ran. This module extracts those facts from
messages with simple, documented regexes and checks, for one compaction, what share of the facts
from the compacted messages (summarized, replaced by a placeholder, or dropped) can still be found
anywhere in the text the model receives. A fact repeated in a kept message counts as visible: the
model can still see it. Pure: standard library only, deterministic, no I/O.

Matching: paths and numbers are compared as whole tokens (the view's own path/number tokens), so the
number 123 is not "visible" inside 51234; error lines and commands are compared as substrings of
the whitespace-normalised view text (the C6 summary collapses whitespace and cuts lines, so an error
line survives when at least its first ``FACT_CHARS`` characters do).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from mxclaw_nb.messages import Message, content_text, tool_call_args, tool_call_name

FACT_KINDS = ("path", "error", "number", "command")
FACT_CHARS = 160  # error lines and commands are compared on their first FACT_CHARS characters

_EXTS = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|md|rst|txt|yaml|yml|toml|cfg|ini|conf|sh|bash|c|h|cc|cpp|hpp|go|rs|"
    "java|kt|rb|php|cs|swift|html|css|scss|sql|lock|csv|tsv|log|xml|env|dockerfile|gradle|proto|vue|svelte|lua|r|pl"
)
# A path: two or more segments joined by "/" (optionally rooted, ~ or ./), or one bare file name with a
# known extension. Characters allowed in a segment are deliberately narrow (no quotes, brackets, commas).
_PATH_RE = re.compile(
    r"(?<![\w@.+\-/:])(?:~|\.{1,2})?/?(?:[\w@.+\-]+/)+[\w@.+\-]*[\w]"
    rf"|(?<![\w@.+\-/])[\w\-][\w.\-]*\.(?:{_EXTS})\b",
    re.IGNORECASE,
)
# A number: digits (optionally with thousands commas and a decimal part), optionally followed by a unit.
_UNITS = r"%|ms|us|ns|s|sec|secs|min|h|kb|mb|gb|tb|kib|mib|gib|b|bytes|px|tokens|usd|eur"
_NUMBER_RE = re.compile(
    rf"(?<![\w.])(\d{{1,3}}(?:,\d{{3}})+|\d+)(\.\d+)?(?![\d.]\d)(?:\s?({_UNITS})(?!\w))?", re.IGNORECASE
)
_ERROR_RE = re.compile(
    r"Error|Exception|Traceback|(?i:\bfailed\b|tool failed|permission denied|forbidden|\binvalid\b|\berror:)"
)
SHELL_TOOLS = frozenset({
    "bash", "shell", "sh", "run_shell", "run_command", "execute_command", "exec", "terminal", "run_terminal_cmd",
    "Bash", "local_shell", "container.exec",
})
_COMMAND_KEYS = ("command", "cmd", "script")


class Fact(NamedTuple):
    """One extracted fact: its kind (one of FACT_KINDS) and its normalised text."""

    kind: str
    text: str


def normalize(text: str) -> str:
    """Collapse runs of whitespace to one space and strip (how facts and views are compared)."""
    return " ".join(text.split())  # = re.sub(r"\s+", " ", text).strip(): `\s` is str.isspace on every code point


def _clean_path(raw: str) -> str | None:
    path = raw.rstrip(".:,;)")
    if len(path) < 3 or not any(c.isalpha() for c in path) or "//" in path:
        return None
    segments = path.split("/")
    if len(segments) == 2 and path[0] not in "/~." and "." not in segments[-1]:
        return None  # "and/or", "n/a", "inputting/reading": prose, not a path
    return path


def path_tokens(text: str) -> set[str]:
    """Every path-like token in ``text`` (see module doc)."""
    # the matches are collected at C speed and each distinct one is cleaned once (a log repeats its paths)
    found = map(_clean_path, set(_PATH_RE.findall(text)))
    return {p for p in found if p}


@lru_cache(maxsize=256)
def _number_matches(text: str) -> frozenset[tuple[str, str, str]]:
    """(digits, decimals, unit) of each number in `text` ("" for a missing group), each distinct match once; kept
    for the last texts: a replay asks for a message's facts and for its view text, of the same text."""
    return frozenset(_NUMBER_RE.findall(text))


def number_tokens(text: str, *, facts_only: bool = False) -> set[str]:
    """Number tokens in ``text``; with ``facts_only`` only those that are facts (>= 3 digits, decimals, units)."""
    found = _number_matches(text)
    if not facts_only:
        return {digits + decimals for digits, decimals, _ in found}
    return {digits + decimals for digits, decimals, unit in found
            if decimals or unit or sum(c.isdigit() for c in digits) >= 3}


def error_lines(text: str) -> list[str]:
    """Lines of ``text`` that carry an error marker, normalised and cut to FACT_CHARS."""
    out = []
    for line in text.splitlines():
        if _ERROR_RE.search(line):
            norm = normalize(line)[:FACT_CHARS]
            if len(norm) >= 4:
                out.append(norm)
    return out


def shell_commands(message: Message) -> list[str]:
    """Shell commands of a message: shell tool-call commands and text lines starting with ``$ ``."""
    out = []
    for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
        if tool_call_name(call) not in SHELL_TOOLS:
            continue
        args = tool_call_args(call) or {}
        cmd = next((args[k] for k in _COMMAND_KEYS if args.get(k)), None)
        if isinstance(cmd, list):  # argv form; ["bash", "-lc", "<script>"] is the script
            cmd = str(cmd[-1]) if len(cmd) >= 3 and cmd[1] in ("-c", "-lc") else " ".join(str(c) for c in cmd)
        if isinstance(cmd, str) and cmd.strip():
            out.append(normalize(cmd.strip().splitlines()[0])[:FACT_CHARS])
    for line in content_text(message.get("content")).splitlines():
        stripped = line.strip()
        if stripped.startswith("$ ") and len(stripped) > 3:
            out.append(normalize(stripped[2:])[:FACT_CHARS])
    return out


def _arg_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arg_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _arg_strings(v)


def message_text(message: Message) -> str:
    """All text a model reads in a message: content plus tool-call names and argument values."""
    parts = [content_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        name = tool_call_name(call)
        if name:
            parts.append(name)
        args = tool_call_args(call)
        if args is None and isinstance(call, dict) and isinstance(call.get("function"), dict):
            parts.append(str(call["function"].get("arguments") or ""))
        elif args is not None:
            parts.extend(_arg_strings(args))
    return "\n".join(p for p in parts if p)


def extract_facts(message: Message) -> frozenset[Fact]:
    """The facts of one message: paths, error lines, numbers and shell commands."""
    if not isinstance(message, dict):
        return frozenset()
    text = message_text(message)
    facts = {Fact("path", p) for p in path_tokens(text)}
    facts |= {Fact("error", e) for e in error_lines(text)}
    facts |= {Fact("number", n) for n in number_tokens(text, facts_only=True)}
    facts |= {Fact("command", c) for c in shell_commands(message)}
    return frozenset(facts)


def facts_of(messages: Iterable[Message]) -> set[Fact]:
    """Union of the facts of ``messages``."""
    out: set[Fact] = set()
    for m in messages:
        out |= extract_facts(m)
    return out


class ViewText(NamedTuple):
    """What a request view shows, in the forms facts are matched against."""

    text: str  # whitespace-normalised, messages joined by newlines
    numbers: frozenset[str]  # number tokens (a number fact is a whole token, not a substring: "12" is not in "123")


def text_view(text: str) -> ViewText:
    """The matchable form of a message's text (``message_text``)."""
    return ViewText(normalize(text), frozenset(number_tokens(text)))


def message_view(message: Message) -> ViewText:
    """The matchable form of one sent message (combine several with ``combine_views``)."""
    return text_view(message_text(message) if isinstance(message, dict) else "")


def combine_views(parts: Iterable[ViewText]) -> ViewText:
    """One ViewText for a whole request view from its per-message parts."""
    parts = list(parts)
    return ViewText("\n".join(p.text for p in parts), frozenset().union(*(p.numbers for p in parts)))


def is_visible(fact: Fact, view: ViewText) -> bool:
    """True when ``fact`` can be found in the view (numbers as tokens, the rest as substrings)."""
    # a path fact is a token without whitespace of one message's text, so it is in the text whenever a view's
    # message holds it as a token (normalising only collapses whitespace): the substring test covers both
    if fact.kind == "number":
        return fact.text in view.numbers
    return fact.text in view.text


class Survival(NamedTuple):
    """Fact survival of one compaction: totals and per-kind (total, visible) counts."""

    total: int
    visible: int
    by_kind: dict[str, tuple[int, int]]

    @property
    def share(self) -> float | None:
        """visible / total, or None when the compacted messages held no facts."""
        return self.visible / self.total if self.total else None


def survival(facts: Iterable[Fact], view: ViewText) -> Survival:
    """Share of ``facts`` visible in ``view``, overall and per kind."""
    by_kind = {k: [0, 0] for k in FACT_KINDS}
    for fact in facts:
        counts = by_kind.setdefault(fact.kind, [0, 0])
        counts[0] += 1
        counts[1] += is_visible(fact, view)
    total = sum(c[0] for c in by_kind.values())
    visible = sum(c[1] for c in by_kind.values())
    return Survival(total, visible, {k: (c[0], c[1]) for k, c in by_kind.items()})


def fact_survival(compacted: Sequence[Message], view_messages: Sequence[Message]) -> Survival:
    """Share of the facts of ``compacted`` messages still visible in ``view_messages`` (the sent list)."""
    view = combine_views(message_view(m) for m in view_messages)
    return survival(facts_of(m for m in compacted if isinstance(m, dict)), view)
