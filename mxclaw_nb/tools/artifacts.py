"""Large tool results and artifact reading as pure text functions (SPEC A1-A3).

Why this module exists: a single build log or search result can be larger than everything else in
the context window together. SPEC A1 keeps such a result whole *outside* the context (an artifact
in the store) and sends the model a bounded head/tail preview; A2 lets the model read the rest back
by byte range, line range or search; A3 says that a failing artifact write must not turn a
successful tool call into a failure. All of that is text logic, so it lives here without any I/O:
the caller passes a ``put`` callable that stores the text (``store.put_artifact`` bound to a
session) and gets back the content for the model plus the artifact id.

Decisions pinned by tests:

- Sizes are UTF-8 bytes for the threshold (``> 51,200``) and for the ``N`` of the
  ``[N bytes omitted from context]`` line: N is the UTF-8 size of exactly the characters that are
  neither in the 6,000-character head nor in the 3,000-character tail.
- The preview is ``head``, the omitted line, ``tail`` and the artifact line joined by ``\\n``.
- Byte ranges are 0-based and end-exclusive (Python slices); line ranges are 1-based and
  inclusive (like an editor). Reader output is bounded to 20,000 characters and 48,000 UTF-8
  bytes, so a read never becomes a new artifact itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable

ARTIFACT_THRESHOLD_BYTES = 51_200
FALLBACK_MAX_CHARS = 50_000
PREVIEW_HEAD_CHARS = 6_000
PREVIEW_TAIL_CHARS = 3_000
MAX_READ_CHARS = 20_000
MAX_READ_BYTES = 48_000
DEFAULT_LINE_COUNT = 200
MAX_CONTEXT_LINES = 50
MAX_SEARCH_HITS = 500
_LINE_CLIP = 400


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def needs_artifact(text: str) -> bool:
    """True when a tool result is over the A1 threshold (51,200 UTF-8 bytes)."""
    return _nbytes(text) > ARTIFACT_THRESHOLD_BYTES


def artifact_preview(text: str, artifact_id: str) -> str:
    """The A1 preview: first 6,000 chars, omitted-bytes line, last 3,000 chars, artifact line."""
    head = text[:PREVIEW_HEAD_CHARS]
    tail_start = max(PREVIEW_HEAD_CHARS, len(text) - PREVIEW_TAIL_CHARS)
    omitted = _nbytes(text[PREVIEW_HEAD_CHARS:tail_start])
    tail = text[tail_start:]
    return "\n".join(
        [
            head,
            f"[{omitted} bytes omitted from context]",
            tail,
            f"[artifact {artifact_id}] ... Use read_artifact for byte, line, or search access.",
        ]
    )


def truncated_fallback(text: str) -> str:
    """A3 fallback: at most 50,000 characters in total, head and tail around a truncation marker."""
    if len(text) <= FALLBACK_MAX_CHARS:
        return text
    # The marker's own length depends on the number it reports; size it with the worst case first.
    probe = _fallback_marker(len(text), len(text))
    budget = FALLBACK_MAX_CHARS - len(probe) - 2
    head_len = budget * 2 // 3
    tail_len = budget - head_len
    omitted = len(text) - head_len - tail_len
    return "\n".join([text[:head_len], _fallback_marker(omitted, len(text)), text[len(text) - tail_len :]])


def _fallback_marker(omitted: int, total: int) -> str:
    return (
        f"[truncated: {omitted} of {total} characters omitted from context; "
        "artifact storage was unavailable, so the full output could not be kept]"
    )


def record_tool_output(
    text: str,
    put: Callable[[str], str] | None,
    *,
    on_error: Callable[[Exception], None] | None = None,
) -> tuple[str, str | None]:
    """Apply A1/A3 to one tool result: (content for the model, artifact id or None)."""
    if not needs_artifact(text):
        return text, None
    if put is None:
        return truncated_fallback(text), None
    try:
        artifact_id = put(text)
    except Exception as exc:  # A3: any storage failure degrades to truncation, never to a tool failure
        if on_error is not None:
            on_error(exc)
        return truncated_fallback(text), None
    return artifact_preview(text, artifact_id), artifact_id


def bound_output(text: str, *, max_chars: int = MAX_READ_CHARS, max_bytes: int = MAX_READ_BYTES) -> str:
    """Cut text to max_chars characters and max_bytes UTF-8 bytes, appending a marker when cut."""
    cut = text[:max_chars]
    while _nbytes(cut) > max_bytes:
        over = _nbytes(cut) - max_bytes
        cut = cut[: len(cut) - max(1, over // 4)]
    if len(cut) == len(text):
        return text
    return cut + f"\n[output cut: showing {len(cut)} of {len(text)} characters; request a smaller range]"


def read_bytes(text: str, start: int, end: int | None = None) -> str:
    """Bytes [start, end) of the UTF-8 text (0-based, end exclusive), decoded, bounded."""
    data = text.encode("utf-8", "surrogatepass")
    total = len(data)
    if not isinstance(start, int) or start < 0:
        return f"Invalid byte range: byte_start must be an integer >= 0 (got {start!r})"
    if end is not None and (not isinstance(end, int) or end < start):
        return f"Invalid byte range: byte_end must be an integer >= byte_start {start} (got {end!r})"
    if start >= total and total > 0:
        return f"Invalid byte range: byte_start {start} is past the end (the artifact has {total} bytes)"
    stop = total if end is None else min(end, total)
    chunk = data[start:stop].decode("utf-8", errors="replace")
    return f"[bytes {start}-{stop} of {total}]\n" + bound_output(chunk)


def read_lines(text: str, start_line: int = 1, end_line: int | None = None) -> str:
    """Lines start_line..end_line (1-based, inclusive), each prefixed by its number, bounded."""
    lines = text.splitlines()
    total = len(lines)
    if not isinstance(start_line, int) or start_line < 1:
        return f"Invalid line range: line_start must be an integer >= 1 (got {start_line!r})"
    if end_line is not None and (not isinstance(end_line, int) or end_line < start_line):
        return f"Invalid line range: line_end must be >= line_start {start_line} (got {end_line!r})"
    if start_line > total:
        return f"Invalid line range: line_start {start_line} is past the end (the artifact has {total} lines)"
    last = min(total, end_line if end_line is not None else start_line + DEFAULT_LINE_COUNT - 1)
    width = len(str(last))
    body = "\n".join(f"{n:>{width}}: {lines[n - 1]}" for n in range(start_line, last + 1))
    return f"[lines {start_line}-{last} of {total}]\n" + bound_output(body)


def _clip_line(line: str, at: int = 0) -> str:
    """Show at most _LINE_CLIP chars of a line, centred near column `at` when the line is long."""
    if len(line) <= _LINE_CLIP:
        return line
    begin = max(0, min(at - _LINE_CLIP // 4, len(line) - _LINE_CLIP))
    piece = line[begin : begin + _LINE_CLIP]
    before = f"[{begin} chars]…" if begin else ""
    after_n = len(line) - begin - len(piece)
    after = f"…[{after_n} chars]" if after_n else ""
    return before + piece + after


def search(text: str, pattern: str, *, regex: bool = False, context: int = 2, max_hits: int = 20) -> str:
    """Find lines matching a literal or regex pattern; show hits with context lines, bounded."""
    if not isinstance(pattern, str) or pattern == "":
        return "Invalid search: the pattern is empty"
    if not isinstance(context, int) or not 0 <= context <= MAX_CONTEXT_LINES:
        return f"Invalid search: context must be an integer from 0 to {MAX_CONTEXT_LINES} (got {context!r})"
    if not isinstance(max_hits, int) or not 1 <= max_hits <= MAX_SEARCH_HITS:
        return f"Invalid search: max_hits must be an integer from 1 to {MAX_SEARCH_HITS} (got {max_hits!r})"
    try:
        compiled = re.compile(pattern if regex else re.escape(pattern))
    except re.error as exc:
        return f"Invalid regex {pattern!r}: {exc}"
    lines = text.splitlines()
    hits: list[tuple[int, int]] = []  # (0-based line index, match column)
    total_hits = 0
    for i, line in enumerate(lines):
        m = compiled.search(line)
        if m:
            total_hits += 1
            if len(hits) < max_hits:
                hits.append((i, m.start()))
    kind = "regex" if regex else "literal"
    header = f"[search {kind} {pattern!r}: {total_hits} matching lines of {len(lines)}"
    if total_hits > len(hits):
        header += f"; showing the first {len(hits)} (raise max_hits or narrow the pattern)"
    if not hits:
        return header + "]"
    blocks = _hit_blocks(lines, hits, context)
    return header + "]\n" + bound_output("\n--\n".join(blocks))


def _hit_blocks(lines: list[str], hits: list[tuple[int, int]], context: int) -> list[str]:
    """Group hits whose context windows overlap; mark hit lines with '>' and context with ' '."""
    hit_cols = dict(hits)
    width = len(str(len(lines)))
    blocks: list[str] = []
    current: list[str] = []
    shown_until = -1
    for idx, _col in hits:
        lo, hi = max(0, idx - context), min(len(lines) - 1, idx + context)
        if current and lo > shown_until + 1:
            blocks.append("\n".join(current))
            current = []
        for j in range(max(lo, shown_until + 1), hi + 1):
            mark = ">" if j in hit_cols else " "
            current.append(f"{mark}{j + 1:>{width}}: {_clip_line(lines[j], hit_cols.get(j, 0))}")
        shown_until = max(shown_until, hi)
    if current:
        blocks.append("\n".join(current))
    return blocks
