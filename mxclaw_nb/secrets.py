"""Secrets are never stored, shown or sent (SPEC L6).

Why one registry: a key can reach text by many routes -- a provider error that echoes the
``Authorization`` header, a ``base_url`` with ``user:password@``, a workspace ``.env`` file the agent
reads, a shell command that prints the environment. Rather than guarding each route, the provider
registers the values it was given (``register``), and every edge that writes or shows text runs
``redact``: the store (messages, events, request records, artifacts), tool results before the model
sees them, provider errors, and the events the live log and widgets show. URL credentials are
replaced by ``***`` wherever a URL appears (``display_url`` for the ones we print ourselves).

What it does not do: guess at unknown secrets in arbitrary text (no entropy scanning), since the
agent edits source code and a changed line would no longer match its file. Known values, long
``Bearer`` tokens, ``?api_key=``/``&token=`` URL parameters and URL passwords are redacted; anything
else the agent reads is stored as read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "[redacted]"
_MIN_SECRET_CHARS = 6  # shorter values would redact ordinary words
_PLACEHOLDERS = frozenset({"demo", "not-needed", "none", "null", "EMPTY", "sk-no-key-required"})
_known: set[str] = set()
# Narrow on purpose: the agent edits source code, and a redacted line no longer matches the file. Each
# pattern runs only when a cheap substring test says it can match, and none can backtrack far: a 20 MB
# tool output costs a few substring scans.
_BEARER = re.compile(r"((?i:bearer)\s+)[A-Za-z0-9._~+/-]{20,}=*")  # a header value echoed back
_URL_CREDENTIALS = re.compile(r"(?<=://)([^\s/@:]{0,256}:)[^\s/@]{1,1024}(?=@)")  # scheme://user:password@
_PARAM = re.compile(r"([?&](?i:api[_-]?key|key|access[_-]?token|token|password|secret)=)[^\s&#\"']+")


def register(value: str | None) -> None:
    """Remember a secret value (an API key, a URL password) so that it is redacted everywhere."""
    if isinstance(value, str) and len(value) >= _MIN_SECRET_CHARS and value not in _PLACEHOLDERS:
        _known.add(value)


def known() -> tuple[str, ...]:
    """The registered secret values (for the shell's environment filter)."""
    return tuple(_known)


def redact(text: str) -> str:
    """``text`` with known secrets, bearer tokens, URL passwords and secret URL parameters replaced."""
    if not isinstance(text, str) or not text:
        return text
    for value in _known:
        if value in text:
            text = text.replace(value, REDACTED)
    if "://" in text:
        text = _URL_CREDENTIALS.sub(r"\1***", text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(rf"\1{REDACTED}", text)
    if "=" in text and ("?" in text or "&" in text):
        text = _PARAM.sub(rf"\1{REDACTED}", text)
    return text


def redact_obj(obj: Any) -> Any:
    """``redact`` applied to every string inside dicts, lists and tuples (other values unchanged)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    return obj


def display_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (registered as a secret), for storing and showing."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if parts.password:
        register(parts.password)
        register(unquote(parts.password))
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        netloc = f"{parts.username or ''}:***@{host}"
        url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return redact(url)


class StreamRedactor:
    """``redact`` over streamed pieces: a secret split across pieces is still caught.

    Only what could still turn into a secret is held back: the longest tail that begins a known
    secret, or the word being streamed when it is part of a URL (``://``) or follows ``Bearer``.
    Everything else is released at once (CJK text without spaces streams as it comes); ``flush``
    releases the rest. What is released is redacted.
    """

    def __init__(self, hold: int = 2048) -> None:
        self.hold = hold  # a held word longer than this is released anyway
        self._pending = ""

    @staticmethod
    def _held(buffer: str) -> int:
        """How many trailing characters of ``buffer`` may still become part of a secret."""
        keep = 0
        for value in _known:
            for k in range(min(len(value) - 1, len(buffer)), keep, -1):
                if value.startswith(buffer[-k:]):
                    keep = k
                    break
        start = max(buffer.rfind(" "), buffer.rfind("\n"), buffer.rfind("\t")) + 1
        word = buffer[start:]
        before = buffer[max(0, start - 8):start].lower()
        if "://" in word or ":/" in word[-2:] or word.endswith(":") or "bearer" in before:
            keep = max(keep, len(word))
        return keep

    def feed(self, text: str) -> str:
        """Take a piece; return the redacted text that is safe to show now."""
        buffer = self._pending + text
        keep = min(self._held(buffer), self.hold)
        cut = len(buffer) - keep
        self._pending = buffer[cut:]
        return redact(buffer[:cut])

    def flush(self) -> str:
        """Release (redacted) whatever is held back."""
        out, self._pending = redact(self._pending), ""
        return out


# Environment variables the shell never gets (L6), whatever their value.
SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True for an environment variable name the shell must never see (L6)."""
    return bool(SECRET_NAME.search(name))


def check_env_allow(names: Iterable[str]) -> tuple[str, ...]:
    """Validate the ``shell_env`` allow-list: variable names, none of them secret-looking (L6)."""
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"shell_env: {name!r} is not an environment variable name")
        if is_secret_name(name):
            raise ValueError(f"shell_env: {name!r} looks like a secret (its name contains KEY, SECRET, TOKEN, "
                             "PASSWORD or CREDENTIAL); the shell never gets such variables")
        out.append(name)
    return tuple(out)
