"""Forbidden-command matching for the shell tool (SPEC L3).

Why tokenised matching: a naive substring test misfires both ways. ``grep -r sudo docs/`` or
``git commit -m "fix reboot"`` mention a forbidden word without running it, while
``/usr/bin/sudo ls``, ``cd x && sudo ls``, ``bash -c "sudo ls"`` or ``curl x | tee f | sh`` run one
without the pattern appearing verbatim. So the command line is split the way a shell would
(``shlex`` with punctuation), into simple commands; wrappers (``env``, ``nohup``, ``timeout 5``,
``xargs`` ...) are skipped to find the program actually run, and ``sh -c``/``eval`` scripts and
``$( )`` substitutions are checked recursively.

Pattern language of a forbidden entry (one string each, so users can pass their own tuple):

- ``"sudo"`` / ``"mkfs*"``: a simple command whose program (basename, fnmatch) matches.
- ``"rm -rf /"``: the program matches, every ``-xy`` cluster's letters are among the command's
  flags (``-r -f``, ``-fr``, ``--recursive --force`` all count) and every other word equals one of
  the command's arguments (after collapsing repeated and trailing slashes).
- ``"curl | sh"``: in one pipeline, a command matching the left side feeds (directly or through
  more stages) a later command matching the right side.
- ``"re:<regex>"``: a regex searched in the raw command text (for shapes that do not tokenise,
  such as a fork bomb).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex

_SHELLS = ("sh", "bash", "zsh", "dash", "ksh")
FORK_BOMB = r"re:(?P<f>[\w:.]+)\s*\(\)\s*\{[^}]*(?P=f)\s*\|\s*&?\s*(?P=f)\s*&"  # :(){ :|:& };:
DEFAULT_FORBIDDEN: tuple[str, ...] = (
    "sudo",
    "su",
    "doas",
    "mkfs*",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "rm -rf /",
    "rm -rf /*",
    "rm -rf ~",
    FORK_BOMB,
    *(f"{fetch} | {shell}" for fetch in ("curl", "wget") for shell in _SHELLS),
)

_WRAPPERS = {"env", "command", "builtin", "exec", "nohup", "time", "nice", "timeout", "xargs", "stdbuf"}
_KEYWORDS = {"{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "fi", "done"}
_LONG_FLAGS = {"--recursive": "r", "--force": "f"}
_FLAG_ALIASES = {"R": "r"}
_PUNCT = set("();<>|&")
_SUBST = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_NUMBERISH = re.compile(r"^\d+(\.\d+)?[smhd]?$")


def _tokens(command: str) -> list[str]:
    """Shell-like tokens; newlines become ';'. Falls back to whitespace split on bad quoting."""
    text = command.replace("\n", " ; ")
    try:
        lex = shlex.shlex(text, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        return list(lex)
    except ValueError:
        return text.split()


def _pipelines(tokens: list[str]) -> list[list[list[str]]]:
    """Split tokens into pipelines (lists of simple commands); '|' and '|&' join stages."""
    pipelines: list[list[list[str]]] = [[[]]]
    for tok in tokens:
        if tok and set(tok) <= _PUNCT:
            if tok in ("|", "|&"):
                pipelines[-1].append([])
            elif tok in (">", ">>", "<", ">&", "&>", "<<", "<<<", "2>", ">|"):
                continue  # redirection: the next word is a file name, not a command
            else:
                pipelines.append([[]])
            continue
        pipelines[-1][-1].append(tok)
    return [[cmd for cmd in p if cmd] for p in pipelines if any(p)]


def _strip_wrappers(words: list[str]) -> list[str]:
    """Drop keywords, VAR=value prefixes and wrapper commands with their options."""
    i = 0
    while i < len(words):
        w = words[i]
        if w in _KEYWORDS or _ASSIGN.match(w):
            i += 1
        elif os.path.basename(w) in _WRAPPERS:
            i += 1
            while i < len(words) and (
                words[i].startswith("-") or _ASSIGN.match(words[i]) or _NUMBERISH.match(words[i])
            ):
                i += 1
        else:
            break
    return words[i:]


def _flags(args: list[str]) -> set[str]:
    letters: set[str] = set()
    for a in args:
        if a.startswith("--"):
            if a in _LONG_FLAGS:
                letters.add(_LONG_FLAGS[a])
        elif a.startswith("-") and len(a) > 1:
            letters.update(_FLAG_ALIASES.get(c, c) for c in a[1:])
    return letters


def _norm_path(word: str) -> str:
    word = re.sub(r"/{2,}", "/", word)
    return word.rstrip("/") or word[:1]


def _matches_simple(pattern: str, words: list[str]) -> bool:
    want = pattern.split()
    if not words or not want:
        return False
    if not fnmatch.fnmatchcase(os.path.basename(words[0]), want[0]):
        return False
    args = words[1:]
    have_flags = _flags(args)
    plain = {_norm_path(a) for a in args if not a.startswith("-")}
    for w in want[1:]:
        if w.startswith("-"):
            if not _flags([w]) <= have_flags:
                return False
        elif _norm_path(w) not in plain:
            return False
    return True


def _commands(command: str, depth: int = 0) -> list[list[list[str]]]:
    """All pipelines of the command, including nested sh -c / eval scripts and $( ) substitutions."""
    out = [[_strip_wrappers(c) for c in p] for p in _pipelines(_tokens(command))]
    if depth >= 3:
        return out
    nested: list[str] = [m.group(1) or m.group(2) or "" for m in _SUBST.finditer(command)]
    for pipeline in out:
        for words in pipeline:
            if not words:
                continue
            prog = os.path.basename(words[0])
            if prog in _SHELLS and "-c" in words[1:-1]:
                nested.append(words[words.index("-c", 1) + 1])
            elif prog == "eval":
                nested.append(" ".join(words[1:]))
    for script in nested:
        out.extend(_commands(script, depth + 1))
    return out


def describe_pattern(pattern: str) -> str:
    """A readable name for a forbidden pattern (the fork-bomb regex is not)."""
    return "fork bomb" if pattern == FORK_BOMB else pattern


def forbidden_match(command: str, forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN) -> str | None:
    """Return the first forbidden pattern the command matches, or None when it is allowed."""
    pipelines = _commands(command)
    for pattern in forbidden:
        if pattern.startswith("re:"):
            if re.search(pattern[3:], command):
                return pattern
        elif "|" in pattern:
            left, right = (p.strip() for p in pattern.split("|", 1))
            for p in pipelines:
                firsts = [i for i, words in enumerate(p) if _matches_simple(left, words)]
                if firsts and any(_matches_simple(right, w) for w in p[firsts[0] + 1 :]):
                    return pattern
        elif any(_matches_simple(pattern, words) for p in pipelines for words in p):
            return pattern
    return None


_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x00": "\\0", "\x08": "\\b", "\x0b": "\\v", "\x0c": "\\f"}


def shown_command(command: str) -> str:
    """The command as a person must see it to approve it: control, bidi and zero-width characters escaped.

    A carriage return or an ANSI escape can make a terminal or a notebook show a harmless line while
    another runs (``echo ok\\r rm -rf ~``); a right-to-left override reorders what is read. Each such
    character is shown as an escape (``\\r``, ``\\x1b``, ``\\u202e``); newlines and tabs stay as they are.
    """
    return terminal_safe(command)


def terminal_safe(text: str) -> str:
    """Text from outside (a model's answer, a tool's output, a server's error) as it may reach a terminal: escaped
    like an approval prompt, so an OSC 52 sequence cannot write the clipboard nor a CSI rewrite the screen."""
    return _INVISIBLE.sub(lambda m: _NAMED.get(m.group(), f"\\u{ord(m.group()):04x}" if ord(m.group()) > 0xff
                                              else f"\\x{ord(m.group()):02x}"), text)
