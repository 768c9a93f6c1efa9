"""Bulk writes: seeding a long session and importing conversations (SPEC S1, S4).

Why: analysts import hundreds of sessions and benchmarks seed 10k-100k-message sessions; a row per
INSERT statement (~0.7 ms each in DuckDB) made both run at ~1k rows/s. Prints rows/s for
`Store.append_messages` of a synthetic session (500-message calls) and ms per session for
`import_openai_jsonl` of the shared transcripts, medians of several runs.

    .venv/bin/python bench/bulk_bench.py [--runs 3] [--messages 10000] [--path CHECKOUT] [--baseline CHECKOUT]

With --baseline (e.g. `git archive main | tar -x -C /tmp/base`), the baseline runs in a subprocess in the
same run and both are printed side by side.
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

REPO = Path(__file__).resolve().parents[1]


def default_transcripts() -> Path:
    """`../shared/transcripts` from the repo root (a clean clone beside `shared/`); a worktree nested deeper
    (`/work/wt/<name>`) finds the same folder further up. The first that exists, else the clone's own."""
    for folder in REPO.parents:
        if (folder / "shared" / "transcripts").is_dir():
            return folder / "shared" / "transcripts"
    return REPO.parent / "shared" / "transcripts"


TRANSCRIPTS = default_transcripts()


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


def parquet_rows_per_s(n: int) -> float:
    """Rows/s of `Store.import_parquet` for a folder holding an n-message session (messages + events + requests)."""
    messages = synthetic_transcript(n)
    with tempfile.TemporaryDirectory() as tmp:
        with Store(Path(tmp) / "src.duckdb") as src:
            sid = src.create_session()
            for k in range(0, n, 500):
                src.append_messages(sid, messages[k:k + 500], turn=k // 500)
            src.export_parquet(Path(tmp) / "pq")
        with Store(Path(tmp) / "dst.duckdb") as dst:
            start = time.perf_counter()
            added = sum(dst.import_parquet(Path(tmp) / "pq").values())
            return added / (time.perf_counter() - start)


def measure(args: argparse.Namespace) -> dict[str, float]:
    """The medians of this checkout (or of --path)."""
    out = {"seed rows/s": statistics.median(seed_rows_per_s(args.messages) for _ in range(args.runs)),
           "parquet import rows/s": statistics.median(parquet_rows_per_s(args.messages) for _ in range(args.runs))}
    got = [import_ms_per_session(args.transcripts) for _ in range(args.runs)]
    if not got[0][1]:
        sys.exit(f"bulk_bench: importing {args.transcripts} gave 0 sessions")
    out["import ms/session"] = statistics.median(g[0] for g in got)
    rows = _transcript_messages(args.transcripts)
    out["import rows/s"] = rows / (out["import ms/session"] * got[0][1] / 1e3)
    out["sessions"] = got[0][1]
    return out


def check_transcripts(folder: Path) -> None:
    """Fail loudly (exit 2) when the shared transcripts are missing or hold no session: a bench that prints
    "0 sessions" measures nothing."""
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not files:
        sys.exit(f"bulk_bench: no *.jsonl transcripts in {folder} (expected ../shared/transcripts beside the "
                 "repo root); pass --transcripts FOLDER")


def _transcript_messages(folder: Path) -> int:
    from mxclaw_nb.analysis.importers import read_openai_jsonl

    return sum(len(c.messages) for f in sorted(folder.glob("*.jsonl")) for _, c in read_openai_jsonl(f)[0])


def main() -> None:
    """Print the medians; with --baseline, this checkout and the baseline side by side (one run)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--transcripts", type=Path, default=TRANSCRIPTS)
    ap.add_argument("--path", help="run against another checkout (e.g. the baseline) instead of this one")
    ap.add_argument("--baseline", help="also run a baseline checkout (a subprocess) and print both")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    check_transcripts(args.transcripts)
    base: dict[str, float] = {}
    if args.baseline:
        import json
        import subprocess

        cmd = [sys.executable, __file__, "--path", args.baseline, "--json", "--runs", str(args.runs),
               "--messages", str(args.messages), "--transcripts", str(args.transcripts)]
        base = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    now = measure(args)
    if args.json:
        import json

        print(json.dumps(now))
        return
    print(f"bulk writes, medians of {args.runs} runs; seed = {args.messages:,} messages appended in calls of 500; "
          f"parquet = import_parquet of that session; import = import_openai_jsonl of {args.transcripts} "
          f"({int(now.get('sessions', 0))} sessions)\n")
    print(f"| {'metric':<24} | {'baseline':>10} | {'this':>10} | {'this/baseline':>13} |")
    print(f"| {'-' * 24} | {'-' * 9}: | {'-' * 9}: | {'-' * 12}: |")
    for key in ("seed rows/s", "parquet import rows/s", "import rows/s", "import ms/session"):
        if key not in now:
            continue
        b = base.get(key)
        print(f"| {key:<24} | {b if b is not None else float('nan'):>10,.1f} | {now[key]:>10,.1f} | "
              f"{now[key] / b if b else float('nan'):>13.2f} |")


if __name__ == "__main__":
    main()
