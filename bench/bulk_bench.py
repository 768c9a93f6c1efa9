"""Bulk writes: seeding a long session and importing conversations (SPEC S1, S4).

Why: analysts import hundreds of sessions and benchmarks seed 10k-100k-message sessions; a row per
INSERT statement (~0.7 ms each in DuckDB) made both run at ~1k rows/s. Prints rows/s for
`Store.append_messages` of a synthetic session (500-message calls) and ms per session for
`import_openai_jsonl` of the shared transcripts, medians of several runs.

    .venv/bin/python bench/bulk_bench.py [--runs 3] [--messages 10000] [--path BASELINE_CHECKOUT]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if "--path" in sys.argv:  # a baseline checkout: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, sys.argv[sys.argv.index("--path") + 1])
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.analysis import import_openai_jsonl  # noqa: E402
from mxclaw_nb.demo.examples import synthetic_transcript  # noqa: E402
from mxclaw_nb.store.writer import Store  # noqa: E402

TRANSCRIPTS = Path(__file__).resolve().parents[3] / "shared" / "transcripts"


def seed_rows_per_s(n: int) -> float:
    """Rows/s appending an n-message session in calls of 500 messages."""
    messages = synthetic_transcript(n)
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "seed.duckdb") as store:
        sid = store.create_session()
        start = time.perf_counter()
        for k in range(0, n, 500):
            store.append_messages(sid, messages[k:k + 500], turn=k // 500)
        return n / (time.perf_counter() - start)


def import_ms_per_session(folder: Path) -> tuple[float, int]:
    """Ms per imported session over every *.jsonl in `folder`, and the sessions imported."""
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "imp.duckdb") as store:
        start = time.perf_counter()
        n = sum(len(import_openai_jsonl(store, f, progress=False).sessions) for f in sorted(folder.glob("*.jsonl")))
        return 1e3 * (time.perf_counter() - start) / max(n, 1), n


def main() -> None:
    """Print the medians."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    ap.add_argument("--path", help="run against another checkout (e.g. the baseline) instead of this one")
    args = ap.parse_args()
    seed = statistics.median(seed_rows_per_s(args.messages) for _ in range(args.runs))
    print(f"seed: {seed:,.0f} rows/s appending {args.messages:,} messages in calls of 500 (median of {args.runs})")
    if args.transcripts.is_dir():
        got = [import_ms_per_session(args.transcripts) for _ in range(args.runs)]
        print(f"import: {statistics.median(g[0] for g in got):.1f} ms per session ({got[0][1]} sessions from "
              f"{args.transcripts}, median of {args.runs})")


if __name__ == "__main__":
    main()
