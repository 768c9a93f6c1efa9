"""The text policy (SPEC L7): text that is not valid Unicode is escaped, reversibly, and never raises.

Why: Python strings can hold code points no UTF-8 encoder accepts — lone surrogates. They arrive from
`os.fsdecode`/`os.scandir` (a file name byte that is not UTF-8 becomes U+DC80..U+DCFF, "surrogateescape"),
from JSON (`"\\udcff"` decodes to a lone surrogate: a model's tool arguments or text), and from users.
DuckDB, the `openai` client and most servers refuse them, so one such character used to abort a whole
turn. Every edge where text leaves the process (the store, the request sent to the provider, tool
results) therefore passes it through the functions here. Pure, standard library only, no I/O.

The escaped form (`escape`), applied only where needed:

- a surrogateescape byte U+DC80..U+DCFF is written ``\\xHH`` (``\\udcff`` -> ``\\xff``), lowercase hex;
- any other lone surrogate U+D800..U+DFFF is written ``\\uHHHH`` (``\\ud800``), lowercase hex;
- a literal backslash is written ``\\x5c`` only where it would otherwise look like one of these escapes,
  i.e. when the text after it is ``x5c``, ``x`` + two lowercase hex digits from 80 to ff, or ``ud`` + three
  lowercase hex digits from 800 to fff; every other backslash (``\\n`` in code, Windows paths) is kept;
- everything else, including NUL and all valid Unicode, is kept as it is.

`escape` is total (never raises, any str in), its result always encodes as UTF-8, and
``unescape(escape(s)) == s`` for every str: the form is unambiguous, so it can be reversed without a marker.

Where it is used, and what is reversible:

- **Transcript rows** (`store_codec`): a message whose text is all valid is stored byte for byte. A message
  holding any invalid text is stored with every string of it (content, tool calls, names, extra keys)
  passed through `escape`, and the key ``"mxclaw_text_escaped": true`` in its `extra` JSON column;
  `load_transcript` unescapes it, so the appended dict comes back exactly (SPEC S2). The key is reserved.
- **Other JSON columns** (event payloads, request records, session meta): the same, with the key inside
  the JSON object (`unescape_value(json.loads(payload))` gives the original back; the store does not).
- **Other text columns** (request errors, summaries, session titles and workspace, artifact text) and
  **text for the model** (tool results, file contents, the request view): `display`, which escapes the lone
  surrogates only and leaves backslashes alone, so code stays readable and displaying twice changes nothing.
  Not reversible in general: a literal ``\\xff`` in the same text looks like an escaped byte there.
- **Tool-call arguments sent to the provider** (`json_text`): JSON text, so a lone surrogate becomes the
  JSON escape ``\\udcff``, which every JSON parser reads back as the same string.
- File tools show names with `escape` (so two different names never look alike) and take a path in that
  form back (its `unescape` is used when that names a file, else the path as given), so a model can read
  the file ``\\xff.txt`` it was shown.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

__all__ = ["ESCAPED_KEY", "display", "display_value", "escape", "escape_value", "is_valid", "json_text", "unescape",
           "unescape_value", "value_is_valid"]

ESCAPED_KEY = "mxclaw_text_escaped"  # marks a stored JSON object (or message row) whose strings were escaped
_HANDLER = "mxclaw_nb.escape"  # codec error handler: the escapes of a run of lone surrogates
# A backslash that would read as an escape; and, to read them, the escapes (runs of byte escapes at once).
_LOOKALIKE_BACKSLASH = re.compile(r"\\(?=x5c|x[89a-f][0-9a-f]|ud[89a-f][0-9a-f]{2})")
_LOOKALIKE = re.compile(r"\\(?:x5c|x[89a-f][0-9a-f]|ud[89a-f][0-9a-f]{2})")
# (a leading literal backslash lets `re` skip to candidates at C speed: 20x faster than a leading group)
_ESCAPES = re.compile(r"\\(?:x[89a-f][0-9a-f](?:\\x[89a-f][0-9a-f])*|x5c|ud[89a-f][0-9a-f]{2})")


def is_valid(text: str) -> bool:
    """True when `text` encodes as UTF-8 (holds no lone surrogate)."""
    if text.isascii():  # O(1) in CPython
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate_run(exc: UnicodeError) -> tuple[str, int]:
    # The UTF-8 encoder calls this once per run of consecutive lone surrogates. A run of surrogateescape
    # bytes (the usual case: a non-UTF-8 name or file) is escaped at C speed (bytes.hex, str.replace).
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    run = exc.object[exc.start:exc.end]
    try:
        data = run.encode("utf-8", "surrogateescape")  # U+DC80..U+DCFF -> the bytes 0x80..0xff
    except UnicodeEncodeError:
        return "".join(f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"
                       for c in map(ord, run)), exc.end
    return "\\x" + data.hex(":").replace(":", "\\x"), exc.end  # bytes ff fe -> "ff:fe" -> two byte escapes


codecs.register_error(_HANDLER, _surrogate_run)


def escape(text: str) -> str:
    """The reversible escaped form of `text` (see the module docstring); valid UTF-8 always."""
    valid = is_valid(text)
    if valid and ("\\" not in text or not _LOOKALIKE.search(text)):
        return text
    if "\\" in text:
        text = _LOOKALIKE_BACKSLASH.sub(r"\\x5c", text)
    return text if valid else text.encode("utf-8", _HANDLER).decode("utf-8")


def _unescape_one(match: re.Match[str]) -> str:
    seq = match.group()
    if seq[1] == "u":
        return chr(int(seq[2:], 16))
    if seq == "\\x5c":
        return "\\"
    # a run of byte escapes: bytes 0x80..0xff, and the ASCII codec's surrogateescape maps each to U+DC80+
    return bytes.fromhex(seq.replace("\\x", "")).decode("ascii", "surrogateescape")


def unescape(text: str) -> str:
    """Inverse of `escape`: the original str (surrogates and all) of an escaped text."""
    if "\\" not in text:
        return text
    return _ESCAPES.sub(_unescape_one, text)


def display(text: str) -> str:
    """`text` with each lone surrogate escaped (``\\xHH``, ``\\uHHHH``) and nothing else changed: for text that is
    shown or sent. Idempotent, so text quoted again (a summary quoting tool results) is never escaped twice."""
    return text if is_valid(text) else text.encode("utf-8", _HANDLER).decode("utf-8")


def json_text(text: str) -> str:
    """JSON text (e.g. tool-call arguments) with each lone surrogate as a JSON ``\\uXXXX`` escape."""
    if is_valid(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # U+DCFF -> the six characters of its JSON escape


def value_is_valid(value: Any) -> bool:
    """True when every str inside `value` (dict keys and values, lists, tuples) is valid UTF-8."""
    if isinstance(value, str):
        return is_valid(value)
    if isinstance(value, dict):
        return all(value_is_valid(k) and value_is_valid(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(map(value_is_valid, value))
    return True


def escape_value(value: Any) -> Any:
    """A copy of `value` with `escape` applied to every str in it (keys included); other values kept."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escape_value(k): escape_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [escape_value(v) for v in value]
    return value


def display_value(value: Any) -> Any:
    """A copy of `value` with `display` applied to every str in it (keys included); other values kept."""
    if isinstance(value, str):
        return display(value)
    if isinstance(value, dict):
        return {display_value(k): display_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [display_value(v) for v in value]
    return value


def unescape_value(value: Any) -> Any:
    """Inverse of `escape_value` (tuples come back as lists, as from JSON)."""
    if isinstance(value, str):
        return unescape(value)
    if isinstance(value, dict):
        return {unescape_value(k): unescape_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unescape_value(v) for v in value]
    return value
