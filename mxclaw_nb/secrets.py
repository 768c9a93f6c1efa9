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

Beyond the exact value (SPEC L6; an outside probe stored and sent each of these): a known value is also
redacted in its base64 and base64url forms (at each of the three byte alignments it can have inside a longer
encoded text, so ``base64 .env`` is caught too), hex (lower and upper case), URL-encoded and reversed forms;
and any run of at least ``MIN_FRAGMENT`` characters of it, so a key split across consecutive tool outputs
(``head -c 20 .env`` then ``tail -c +21 .env``) leaves no part long enough to matter in any of them. Values
of secret-named variables in a workspace ``.env`` are registered like the provider key (``register_env``).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

REDACTED = "[redacted]"
_MIN_SECRET_CHARS = 6  # shorter values would redact ordinary words
MIN_FRAGMENT = 9  # a run of this many characters of a known value is redacted wherever it appears
_GRAM = (MIN_FRAGMENT + 1) // 2  # every run of MIN_FRAGMENT characters holds one aligned gram of this length
_MIN_FORM_CHARS = 8  # encoded forms shorter than this would redact ordinary text
_PLACEHOLDERS = frozenset({"demo", "not-needed", "none", "null", "EMPTY", "sk-no-key-required"})
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*?)\s*$")
_known: set[str] = set()
_forms: set[str] = set()  # encoded forms of the known values (base64, hex, URL-encoded, reversed)
_grams: dict[str, list[tuple[int, str]]] = {}  # value -> its aligned grams (offset, text), for fragments
# Narrow on purpose: the agent edits source code, and a redacted line no longer matches the file. Each
# pattern runs only when a cheap substring test says it can match, and none can backtrack far: a 20 MB
# tool output costs a few substring scans.
_BEARER = re.compile(r"((?i:bearer)\s+)[A-Za-z0-9._~+/-]{20,}=*")  # a header value echoed back
_URL_CREDENTIALS = re.compile(r"(?<=://)([^\s/@:]{0,256}:)[^\s/@]{1,1024}(?=@)")  # scheme://user:password@
_PARAM = re.compile(r"([?&](?i:api[_-]?key|key|access[_-]?token|token|password|secret)=)[^\s&#\"']+")


def register(value: str | None) -> None:
    """Remember a secret value (an API key, a URL password) so that it is redacted everywhere."""
    if isinstance(value, str) and len(value) >= _MIN_SECRET_CHARS and value not in _PLACEHOLDERS:
        if value in _known:
            return
        _known.add(value)
        _forms.update(f for f in encoded_forms(value) if len(f) >= _MIN_FORM_CHARS and f != value)
        if len(value) >= MIN_FRAGMENT:
            _grams[value] = [(i, value[i:i + _GRAM]) for i in range(0, len(value) - _GRAM + 1, _GRAM)]


def forget(value: str) -> None:
    """Stop redacting `value` (and its forms): for tests and for a key that was replaced."""
    if value in _known:
        _known.discard(value)
        _grams.pop(value, None)
        _forms.clear()
        for other in _known:
            _forms.update(f for f in encoded_forms(other) if len(f) >= _MIN_FORM_CHARS and f != other)


def encoded_forms(value: str) -> set[str]:
    """The forms a value takes when a tool encodes it: base64/base64url cores at the three byte alignments it can
    have inside longer encoded text (the characters that depend on its bytes alone), hex, URL-encoded, reversed."""
    raw = value.encode("utf-8", "surrogatepass")
    forms = {raw.hex(), raw.hex().upper(), quote(value, safe=""), quote(value), quote_plus(value), value[::-1]}
    for start in range(3):
        whole = raw[start:][: (len(raw) - start) // 3 * 3]
        if whole:
            forms.add(base64.b64encode(whole).decode())
            forms.add(base64.urlsafe_b64encode(whole).decode())
    return forms


def register_env(text: str) -> int:
    """Register the values of secret-named variables (KEY, SECRET, TOKEN, PASSWORD, CREDENTIAL) in `.env` text
    (``NAME=value``, ``export NAME="value"``); returns how many were registered."""
    count = 0
    for line in text.splitlines():
        m = _ENV_LINE.match(line)
        if not m or not SECRET_NAME.search(m.group(1)):
            continue
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        before = len(_known)
        register(value)
        count += len(_known) > before
    return count


def _fragments(text: str) -> str:
    """`text` with every run of at least MIN_FRAGMENT characters of a known value replaced (a key split across
    outputs). Each value's aligned grams are found with `str.find` (a few C scans); a hit is extended both ways
    along the value, and replaced only when the run is long enough."""
    spans: list[tuple[int, int]] = []
    for value, grams in _grams.items():
        for offset, gram in grams:
            pos = text.find(gram)
            while pos >= 0:
                a, b = pos, offset
                while a > 0 and b > 0 and text[a - 1] == value[b - 1]:
                    a, b = a - 1, b - 1
                c, d = pos + _GRAM, offset + _GRAM
                while c < len(text) and d < len(value) and text[c] == value[d]:
                    c, d = c + 1, d + 1
                if c - a >= MIN_FRAGMENT:
                    spans.append((a, c))
                pos = text.find(gram, pos + 1)
    if not spans:
        return text
    spans.sort()
    out, last = [], 0
    for a, c in spans:
        if a < last:  # overlapping runs: one replacement
            if c > last:
                last = c
            continue
        out += [text[last:a], REDACTED]
        last = c
    out.append(text[last:])
    return "".join(out)


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
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    if _grams:
        text = _fragments(text)
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
        for value in (*_known, *_forms):
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
