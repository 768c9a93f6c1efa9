"""SPEC C1: the conservative token estimate, and a per-message cache for incremental rebuilds.

No tokenizer is needed: every CJK character counts as one token, other characters as a quarter,
each image as 2,000 and the compact JSON of tool calls as a quarter token per character. It is
deliberately simple so it is stable across providers; the T2 counters (`counters.py`) refine it
when real usage is known. Only what is sent counts: the estimate is taken of the sanitised message,
so display-only fields such as `reasoning` never inflate it. The CJK set is defined here and nowhere
else.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from mxclaw_nb.messages import Message, content_text, image_count, sanitize

IMAGE_TOKENS = 2_000

# Han (incl. extensions A-H, compatibility ideographs), kana, hangul, CJK symbols/punctuation,
# full-width forms. One place, used by every estimate.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),    # Hangul Jamo
    (0x2E80, 0x2FDF),    # CJK radicals, Kangxi radicals
    (0x2FF0, 0x2FFF),    # ideographic description characters
    (0x3000, 0x303F),    # CJK symbols and punctuation
    (0x3040, 0x309F),    # Hiragana
    (0x30A0, 0x30FF),    # Katakana
    (0x3100, 0x312F),    # Bopomofo
    (0x3130, 0x318F),    # Hangul compatibility Jamo
    (0x3190, 0x31FF),    # Kanbun, Bopomofo ext, CJK strokes, Katakana phonetic ext
    (0x3200, 0x33FF),    # enclosed CJK letters, CJK compatibility
    (0x3400, 0x4DBF),    # Han extension A
    (0x4E00, 0x9FFF),    # Han unified ideographs
    (0xA960, 0xA97F),    # Hangul Jamo extended A
    (0xAC00, 0xD7AF),    # Hangul syllables
    (0xD7B0, 0xD7FF),    # Hangul Jamo extended B
    (0xF900, 0xFAFF),    # Han compatibility ideographs
    (0xFE30, 0xFE4F),    # CJK compatibility forms
    (0xFF00, 0xFFEF),    # half-width and full-width forms
    (0x1B000, 0x1B16F),  # Kana supplement / extended A / small kana
    (0x20000, 0x2FA1F),  # Han extensions B-F, compatibility supplement
    (0x30000, 0x323AF),  # Han extensions G-H
)
CJK_PATTERN = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]")
# Counting fast, at C speed, without a per-character class test: a string without characters above U+FFFF
# is encoded as UTF-16 and the high byte of each code unit is looked up. 248 high bytes decide alone
# (U+4E00-U+4EFF is all CJK, U+0000-U+00FF none); for the 6 whose 256 characters are partly CJK
# (U+2E.., U+2F.., U+4D.., U+A9.., U+FE.., U+FF..) a class of just those sub-ranges counts the rest.
# Anything else (characters above U+FFFF, lone surrogates) uses the one-character class.
def _high_byte_sets() -> tuple[bytes, bytes, list[tuple[int, int]]]:
    whole, part, sub = [], [], []
    for high in range(256):
        lo, hi = high << 8, (high << 8) | 0xFF
        inside = [(max(a, lo), min(b, hi)) for a, b in CJK_RANGES if a <= hi and b >= lo]
        if sum(b - a + 1 for a, b in inside) == 256:
            whole.append(high)
        elif inside:
            part.append(high)
            sub += inside
    non_cjk = bytes(b for b in range(256) if b not in whole and b not in part)
    return non_cjk, bytes(part), sub


_NON_CJK_HIGH, _PARTIAL_HIGH, _PARTIAL_RANGES = _high_byte_sets()
_PARTIAL_CHARS = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in _PARTIAL_RANGES) + "]").findall
_CJK_CHARS = CJK_PATTERN.findall
_HIGH = 3 if sys.byteorder == "little" else 2  # first high byte after the 2-byte BOM of str.encode("utf-16")


def _count_cjk(text: str) -> int:
    """CJK characters in a non-ASCII string (the same answer as len(CJK_PATTERN.findall(text)))."""
    try:
        units = text.encode("utf-16")
    except UnicodeEncodeError:  # a lone surrogate
        return len(_CJK_CHARS(text))
    if len(units) != 2 * len(text) + 2:  # a character above U+FFFF (two code units)
        return len(_CJK_CHARS(text))
    candidates = units[_HIGH::2].translate(None, _NON_CJK_HIGH)
    if not candidates:
        return 0
    n = len(candidates.translate(None, _PARTIAL_HIGH))
    return n if n == len(candidates) else n + len(_PARTIAL_CHARS(text))


def count_cjk(text: str) -> int:
    """Number of CJK characters in `text`."""
    if text.isascii():
        return 0
    return _count_cjk(text)


def estimate_text(text: str) -> int:
    """C1 estimate of a bare string: CJK chars + ceil(other chars / 4)."""
    if text.isascii():
        return -(-len(text) // 4)  # exact integer ceil (this runs once per message: keep it lean)
    cjk = _count_cjk(text)
    return cjk + -(-(len(text) - cjk) // 4)


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # built once: dumps() rebuilds per call
_string = json.encoder.encode_basestring  # JSON string literal, non-ASCII kept (as ensure_ascii=False)


def tool_calls_json(tool_calls: Any) -> str:
    """Compact JSON of tool calls as C1 counts it (no spaces, non-ASCII kept)."""
    return _COMPACT.encode(tool_calls)


_CALL_FRAME = len('{"id":,"type":"function","function":{"name":,"arguments":}}')


def _calls_json_length(calls: Any) -> int:
    """len(tool_calls_json(calls)) without building the JSON for the usual well-formed (sanitised) shape."""
    if calls.__class__ is not list:
        return len(_COMPACT.encode(calls))
    n = 1 + len(calls) if calls else 2  # brackets and commas
    for call in calls:
        # exactly the keys id/type/function and name/arguments, all strings (len + get: cheaper than keys())
        if call.__class__ is not dict or len(call) != 3:
            return len(_COMPACT.encode(calls))
        cid, fn = call.get("id"), call.get("function")
        if cid.__class__ is not str or fn.__class__ is not dict or len(fn) != 2 or call.get("type") != "function":
            return len(_COMPACT.encode(calls))
        name, args = fn.get("name"), fn.get("arguments")
        if name.__class__ is not str or args.__class__ is not str:
            return len(_COMPACT.encode(calls))
        # JSON escaping is per character, so one literal of the three strings has their escaped lengths + 2
        n += _CALL_FRAME + 4 + len(_string(cid + name + args))
    return n


def estimate_sent(message: Message) -> int:
    """C1 estimate of a message that is already in its sent (sanitised) form."""
    content = message.get("content")
    if content.__class__ is str:
        tokens = estimate_text(content)
    else:
        tokens = estimate_text(content_text(content)) + IMAGE_TOKENS * image_count(content)
    calls = message.get("tool_calls")
    if calls:
        tokens += -(-_calls_json_length(calls) // 4)
    return tokens


def estimate_tokens(message: Message) -> int:
    """C1 estimate of one message, counting only the fields that are sent."""
    if not isinstance(message, dict):
        return 0
    return estimate_sent(sanitize(message))


def estimate_messages(messages: Iterable[Message]) -> int:
    """C1 request estimate: the sum over messages."""
    return sum(estimate_tokens(m) for m in messages)


class TokenCache:
    """Per-message counts keyed by object identity, so rebuilding a grown view re-counts only new messages.

    A message dict is recognised by identity plus the identity of its content and tool calls (a cheap
    guard against in-place edits); the cache keeps a reference so ids stay valid. It belongs to one
    session/loop; a different counter clears it.

    `append_only=True` (a session's cache: stored rows are values, SPEC S2) promises that no message dict
    it has seen is edited in place later; inputs must still only grow for reuse, which is checked, but the
    contents are not, so a rebuild after one new message costs O(new) (see `incremental.py`).
    """

    def __init__(self, max_entries: int = 500_000, *, append_only: bool = False) -> None:
        self._entries: dict[int, tuple[Message, Any, Any, int, Message]] = {}
        self._counter_key: Any = None
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self.append_only = append_only
        self.prefix: Any = None  # the last build's repair plan, reused when the transcript only grew
        self.slots: list[Any] = []  # the prefixes kept (incremental._Prefix): the last build's first
        self.summary: Any = None  # a summary.StructuredSummaryState, made by the first summary build
        # C7: a C6 state saved by another process (`StructuredSummaryState.snapshot`, plain data), continued by
        # the first summary build instead of a rescan; `resume_note` says why it could not be (then rebuilt once)
        self.resume_summary: Any = None
        # C7: the repair plan and C1 counts saved with it (`incremental.plan_snapshot`), which seed the first
        # build's plan instead of planning the whole stored transcript again
        self.resume_plan: Any = None
        self.saved_plan: Any = None  # the plan data last made or resumed (a save reuses it while it is recent)
        self.resume_note: str | None = None
        # C5/C7: messages (by identity, kept alive here) that never get a placeholder (`micro.stays`): a turn's
        # carried placeholders are not looked at again by every later build (append-only caches only)
        self.stays: dict[int, Message] = {}
        # C5: placeholders made before, by the original's identity: (original, its sent form, seq named,
        # placeholder, its C1 count, characters replaced); a turn's rebuild reuses them (`pipeline.placeholders`)
        self.placeholders: dict[int, tuple[Message, Message, int | None, Message, int, int]] = {}
        # C7: a placeholder's form when planned again as the next input (`incremental.continued_input`), by identity
        self.replanned: dict[int, tuple[Message, Message, int]] = {}

    def lookup(self, message: Message, counter_key: Any, compute: Callable[[Message], tuple[int, Message]]
               ) -> tuple[int, Message]:
        """Return (tokens, sanitised message), computing them on a miss."""
        if counter_key != self._counter_key:
            self._entries.clear()
            self._counter_key = counter_key
        key = id(message)
        hit = self._entries.get(key)
        content, calls = message.get("content"), message.get("tool_calls")
        if hit is not None and hit[0] is message and hit[1] is content and hit[2] is calls:
            self.hits += 1
            return hit[3], hit[4]
        self.misses += 1
        tokens, sent = compute(message)
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = (message, content, calls, tokens, sent)
        return tokens, sent
