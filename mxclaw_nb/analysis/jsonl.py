"""The one JSON-lines reader of the analysis layer: `.jsonl` or `.jsonl.gz`, blank lines skipped, a BOM and
undecodable bytes tolerated, each line parsed or reported (SPEC S4: imports lose nothing silently).

A byte that is not UTF-8 (a log written in Latin-1, a cut multi-byte character) is read as its surrogateescape
code point (U+DC80..U+DCFF), not replaced by U+FFFD: the store then keeps it with the reversible escape of
SPEC L7 (shown as ``\\xHH``), so the original bytes can still be told.

Why one: the OpenAI-format importer, the agent-log importers (Claude Code, Codex) and the accuracy tables
each read JSON lines; they now agree on what a readable line is and on the line numbers they report.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed value or None, error or None) for each non-blank line of a file."""
    file = Path(path)
    opener = gzip.open if file.name.endswith(".gz") else open
    with opener(file, "rt", encoding="utf-8-sig", errors="surrogateescape") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line), None
            except ValueError as exc:
                yield line_no, None, f"not JSON: {exc}"
