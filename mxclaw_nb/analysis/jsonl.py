"""The one JSON-lines reader of the analysis layer: `.jsonl` or `.jsonl.gz`, blank lines skipped, a BOM (also at the
start of a later line, as in concatenated files) and undecodable bytes tolerated, each line parsed or reported
(SPEC S4: imports lose nothing silently).

A byte that is not UTF-8 (a log written in Latin-1, a cut multi-byte character) is read as its surrogateescape
code point (U+DC80..U+DCFF), not replaced by U+FFFD: the store then keeps it with the reversible escape of
SPEC L7 (shown as ``\\xHH``), so the original bytes can still be told.

Why one: the OpenAI-format importer, the agent-log importers (Claude Code, Codex) and the accuracy tables
each read JSON lines; they now agree on what a readable line is and on the line numbers they report.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A `.gz` file that is cut short (an interrupted download or copy) or is no gzip at all: the whole lines before the
# problem are read, the problem is one error row (S4: nothing lost silently, no exception past the reader).
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def gzip_problem(exc: BaseException) -> str:
    """What is wrong with a `.gz` file, in a few words."""
    if isinstance(exc, EOFError):
        return f"the compressed file is cut short here ({exc}); the lines before it were read"
    if isinstance(exc, gzip.BadGzipFile):
        return f"not a gzip file, though named .gz ({exc})"
    return f"the compressed data is damaged here ({exc}); the lines before it were read"


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed value or None, error or None) for each non-blank line of a file."""
    file = Path(path)
    opener = gzip.open if file.name.endswith(".gz") else open
    line_no = 0
    with opener(file, "rt", encoding="utf-8-sig", errors="surrogateescape") as handle:
        try:
            for line_no, line in enumerate(handle, 1):
                line = line.removeprefix("\ufeff")  # files with a BOM each, concatenated: a BOM on a later line
                if not line.strip():
                    continue
                try:
                    yield line_no, json.loads(line), None
                except ValueError as exc:
                    yield line_no, None, f"not JSON: {exc}"
        except GZIP_ERRORS as exc:
            yield line_no + 1, None, gzip_problem(exc)
