"""Build the transcripts shipped in ``mxclaw_nb/datasets/`` from the full shared set (data for notebooks 03, 04).

Why: notebooks 03 and 04 should show real agent traffic on a fresh clone, where ``../shared/transcripts``
is absent; the full set (4 MB) is more than a package should carry. The selection is a rule, not a hand
pick, so it can be rebuilt and reviewed:

- ``swe-agent``: all 23 conversations (long shell sessions, outputs up to 24 KB, 17 dangling ``submit``
  calls, ``\\r\\n`` in observations);
- ``tau-bench``: for each of the 50 airline tasks, its longest trial (most bytes; ties: first), which keeps
  every task and 19 conversations that reuse a tool-call id in a later turn.

Lines are copied byte for byte (nothing re-serialised, nothing repaired) into gzip files written with
``mtime=0`` and no file name, so rebuilding gives identical bytes:

    .venv/bin/python scripts/make_datasets.py [/path/to/shared/transcripts]
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "mxclaw_nb" / "datasets"
DEFAULT_SHARED = Path("/work/shared/transcripts")
_TASK = re.compile(r"#task(\d+)-trial(\d+)$")


def longest_trial_per_task(lines: list[str]) -> list[str]:
    """tau-bench: the longest line (trial) of each task, in the file's order."""
    best: dict[int, tuple[int, int]] = {}  # task -> (bytes, line index)
    for k, line in enumerate(lines):
        match = _TASK.search(json.loads(line)["id"])
        if match is None:
            raise ValueError(f"tau-bench line {k + 1}: id without #taskN-trialM")
        task, size = int(match[1]), len(line.encode("utf-8"))
        if task not in best or size > best[task][0]:
            best[task] = (size, k)
    keep = {k for _, k in best.values()}
    return [line for k, line in enumerate(lines) if k in keep]


SELECT = {"swe-agent": lambda lines: lines, "tau-bench": longest_trial_per_task}


def write_gzip(path: Path, lines: list[str]) -> None:
    """Deterministic gzip: no name, mtime 0, level 9."""
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write("".join(lines).encode("utf-8"))


def main(argv: list[str]) -> int:
    shared = Path(argv[0]) if argv else DEFAULT_SHARED
    for name, select in SELECT.items():
        text = (shared / f"{name}.jsonl").read_text(encoding="utf-8")
        lines = [ln + "\n" for ln in text.split("\n") if ln.strip()]  # split on LF only: JSON escapes CR
        chosen = select(lines)
        write_gzip(OUT / f"{name}.jsonl.gz", chosen)
        shutil.copyfile(shared / f"LICENSE.{name}.txt", OUT / f"LICENSE.{name}.txt")
        messages = sum(len(json.loads(ln)["messages"]) for ln in chosen)
        size = (OUT / f"{name}.jsonl.gz").stat().st_size
        print(f"{name}: {len(chosen)} of {len(lines)} conversations, {messages} messages, {size:,} bytes gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
