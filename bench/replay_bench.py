"""Replay/compare benchmark over the shared transcripts (SPEC S4): the figures for the closing note.

Why: "fast enough for hundreds of sessions" and "what does a policy do to real sessions" are
measurements, so this script takes them the same way every time: every conversation in
``../shared/transcripts`` replayed at several windows (threshold 0.8, tail = window / 4), once with
thresholds in C1-estimated tokens and once in exact o200k tokens, with exact o200k counts of every
view. It prints tokens saved, stage counts, fact survival, how the estimate compares with o200k
(per view and per message kind/role) and the cost per session.

    .venv/bin/python bench/replay_bench.py [--transcripts DIR] [--windows 8,16,32] [--import-store]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.analysis import (  # noqa: E402 - after the path tweak so the script runs from a checkout
    compare,
    estimate_honesty,
    honesty_table,
    import_openai_jsonl,
    summarize_policies,
)
from mxclaw_nb.analysis.sources import read_pairs  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "transcripts"


def _pct(x: float) -> str:
    return "—" if x != x else f"{100 * x:.1f}%"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=DEFAULT)
    ap.add_argument("--windows", default="8,16,32", help="windows in thousands of tokens (tail = window / 4)")
    ap.add_argument("--import-store", action="store_true", help="also time importing into a fresh DuckDB store")
    args = ap.parse_args(argv)
    if not args.transcripts.is_dir():
        print(f"transcripts not found at {args.transcripts}", file=sys.stderr)
        return 2
    pairs = read_pairs(args.transcripts)
    windows = [int(w) * 1000 for w in args.windows.split(",")]
    policies = [{"window": w, "ratio": 0.8, "keep_recent": w // 4} for w in windows]
    policies += [{**p, "counter": "o200k_base"} for p in policies]
    n_msgs = sum(len(m) for _, m in pairs)
    print(f"{len(pairs)} conversations, {n_msgs} messages from {args.transcripts}\n")

    for label, exact in (("estimate only", False), ("with exact o200k counts of every view", True)):
        df = compare(pairs, policies[: len(windows)], progress=False, exact=exact, facts=False)
        t = df.attrs["timing"]
        print(f"cost, {label}, no fact survival: {t['ms_per_session_policy']:.1f} ms per session and policy "
              f"({t['calls']} simulated calls, {t['seconds']:.2f} s)")
    df = compare(pairs, policies, progress=False, exact=True)
    t = df.attrs["timing"]
    print(f"cost, full (exact + facts, {len(policies)} policies): {t['ms_per_session']:.1f} ms per session, "
          f"{t['ms_per_session_policy']:.1f} ms per session and policy ({t['seconds']:.2f} s)\n")

    s = summarize_policies(df)
    table = pd.DataFrame({
        "policy": s["policy"].astype(str),
        "sessions compacted": s["sessions_compacted"],
        "compactions": s["compactions"],
        "micro": s["stage_micro"], "summary": s["stage_summary"], "fallback": s["stage_fallback"],
        "saved (all calls)": s["saved_share"].map(_pct),
        "saved (compacted calls)": s["saved_share_compacted"].map(_pct),
        "fact survival": s["fact_survival"].map(_pct),
        "paths": s["survival_path"].map(_pct), "errors": s["survival_error"].map(_pct),
        "numbers": s["survival_number"].map(_pct), "commands": s["survival_command"].map(_pct),
        "view est/exact median": s["est_over_exact_median"].round(3),
        "view est/exact p5": s["est_over_exact_p5"].round(3),
        "exact > threshold": s["exact_over_threshold"],
        "exact > window": s["exact_over_window"],
    })
    print(f"policies over {len(pairs)} conversations ({int(s['calls'].iloc[0])} simulated model calls each):")
    print(table.to_string(index=False))

    started = time.perf_counter()
    h = estimate_honesty(pairs, progress=False)
    seconds = time.perf_counter() - started
    print(f"\nC1 estimate vs exact o200k per message ({h.attrs['reference']}; {seconds:.2f} s):")
    cols = ["n", "under_share", "median_ratio", "p5_ratio", "total_ratio", "missing_share"]
    for by in ("kind", "role"):
        print(honesty_table(h, by).set_index(by)[cols].round(3).to_string(), "\n")

    if args.import_store:
        from mxclaw_nb.store.writer import Store

        with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
            started = time.perf_counter()
            n = sum(len(import_openai_jsonl(store, f, progress=False).sessions)
                    for f in sorted(args.transcripts.glob("*.jsonl")))
            seconds = time.perf_counter() - started
            print(f"import into DuckDB: {n} sessions in {seconds:.2f} s ({1000 * seconds / max(n, 1):.1f} ms/session)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
