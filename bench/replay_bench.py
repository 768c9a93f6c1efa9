"""Replay/compare benchmark over the shared transcripts (SPEC S4): the figures for the closing note.

Why: "fast enough for hundreds of sessions" and "what does a policy do to real sessions" are
measurements, so this script takes them the same way every time: every conversation in
``../shared/transcripts`` replayed at several windows (threshold 0.8, tail = window / 4), once with
thresholds in C1-estimated tokens and once in exact o200k tokens, with exact o200k counts of every
view. It prints tokens saved, stage counts, fact survival, how the estimate compares with o200k
(per view and per message kind/role) and the cost per session.

    .venv/bin/python bench/replay_bench.py [--transcripts DIR] [--windows 8,16,32] [--import-store]

Past one machine (``--sessions N``): N sessions synthesised deterministically from the shared ones
(variant v of conversation i drops the last v % 7 messages and tags the first user message, so every
session differs) x the 3 windows, replayed by ``compare`` with 1 process (inline), 2 local processes
and a Dask LocalCluster of 2 worker processes (127.0.0.1, no dashboard), each mode in a fresh
subprocess so its peak memory is its own. Memory is ``resource.getrusage(...).ru_maxrss`` (peak RSS):
of the driving process, and the highest any worker process reported after a chunk. ``--reduce`` keeps
only ``summarize_comparison`` rows per chunk (the streaming mode: memory no longer grows with calls).

    .venv/bin/python bench/replay_bench.py --sessions 10000 [--reduce] [--chunk-size 25]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.analysis import (  # noqa: E402 - after the path tweak so the script runs from a checkout
    compare,
    estimate_honesty,
    honesty_table,
    import_openai_jsonl,
    summarize_policies,
)
from mxclaw_nb.analysis.compare import summarize_comparison  # noqa: E402
from mxclaw_nb.analysis.dispatch import peak_rss_mb  # noqa: E402
from mxclaw_nb.analysis.sources import read_pairs  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "transcripts"


def _pct(x: float) -> str:
    return "—" if x != x else f"{100 * x:.1f}%"


MODES = ("1 process", "2 processes", "dask 2 workers")


def synthesise(pairs: list, n: int) -> Iterator[tuple[str, list[dict]]]:
    """n sessions from the given ones, deterministic and lazy (one new list and one new dict per session)."""
    for k in itertools.islice(itertools.count(), n):
        sid, messages = pairs[k % len(pairs)]
        v = k // len(pairs)
        kept = messages[: max(2, len(messages) - v % 7)]
        first = next((j for j, m in enumerate(kept) if m.get("role") == "user"), None)
        out = list(kept)
        if first is not None and isinstance(out[first].get("content"), str):
            out[first] = {**out[first], "content": f"[variant {v}] {out[first]['content']}"}
        yield f"{sid}~{v}", out


def run_mode(args: argparse.Namespace, mode: str) -> dict:
    """One mode in this process: seconds, peak RSS of this process and of the workers, a hash of the result."""
    pairs = read_pairs(args.transcripts)
    windows = [int(w) * 1000 for w in args.windows.split(",")]
    policies = [{"window": w, "ratio": 0.8, "keep_recent": w // 4} for w in windows]
    reduce = summarize_comparison if args.reduce else None
    client = cluster = None
    if mode == "1 process":
        executor: Any = "inline"
    elif mode == "2 processes":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        executor = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver"))
    else:
        import dask
        from distributed import Client, LocalCluster

        # each connection keeps its last low-level-log-length (1,000) messages, task arguments included, in
        # the driver (distributed.batched.BatchedSend): with ~0.5 MB of sessions per task that is the
        # driver's memory growing to ~500 MB; a short log keeps it flat
        dask.config.set({"distributed.admin.low-level-log-length": 10})
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                               host="127.0.0.1")
        client = Client(cluster)
        executor = client.get_executor(pure=False)
    if mode != "1 process":  # start the workers and import mxclaw_nb there: time the work, not the start-up
        for future in [executor.submit(peak_rss_mb) for _ in range(8)]:
            future.result()
    started, cpu = time.perf_counter(), time.process_time()
    df = compare(synthesise(pairs, args.sessions), policies, progress=False, executor=executor,
                 chunk_size=args.chunk_size, reduce=reduce)
    seconds, driver_cpu = time.perf_counter() - started, time.process_time() - cpu
    if client is not None:
        client.close()
        cluster.close()
    elif mode == "2 processes":
        executor.shutdown()
    t = df.attrs["timing"]
    return {"mode": mode, "seconds": seconds, "sessions": t["sessions"], "calls": t["calls"], "rows": len(df),
            "driver_peak_mb": peak_rss_mb(), "worker_peak_mb": t["worker_peak_rss_mb"],
            "worker_cpu": t["worker_cpu_seconds"], "driver_cpu": driver_cpu,
            "hash": int(pd.util.hash_pandas_object(df.astype({"policy": str}), index=True).sum() % 2**61)}


def many_sessions(args: argparse.Namespace) -> int:
    """--sessions N: every mode in a fresh subprocess (round robin over --repeat rounds), medians side by side."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    loads = [os.getloadavg()[0]]
    for _ in range(args.repeat):
        for mode in MODES:
            cmd = [sys.executable, __file__, "--sessions", str(args.sessions), "--mode", mode, "--transcripts",
                   str(args.transcripts), "--windows", args.windows, "--chunk-size", str(args.chunk_size)]
            started = time.perf_counter()
            out = subprocess.run(cmd + (["--reduce"] if args.reduce else []), capture_output=True, text=True)
            if out.returncode:
                print(out.stderr, file=sys.stderr)
                return out.returncode
            result = json.loads(out.stdout.strip().splitlines()[-1])
            result["wall"] = time.perf_counter() - started
            runs[mode].append(result)
            loads.append(os.getloadavg()[0])
    n_pol = len(args.windows.split(","))
    print(f"{args.sessions} sessions (synthesised from {args.transcripts}) x {n_pol} policies, chunks of "
          f"{args.chunk_size}, {'reduce=summarize_comparison' if args.reduce else 'every call row kept'}; "
          f"median of {args.repeat} round(s); {os.cpu_count()} cores, 1-min load average "
          f"{min(loads):.1f}-{max(loads):.1f} during the runs")

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode])

    base = med(MODES[0], "seconds")
    first = runs[MODES[0]][0]
    table = pd.DataFrame({
        "mode": list(MODES),
        "replay s": [round(med(m, "seconds"), 1) for m in MODES],
        "speed-up": [f"{base / med(m, 'seconds'):.2f}x" for m in MODES],
        "with start-up s": [round(med(m, "wall"), 1) for m in MODES],
        "worker CPU s": [round(med(m, "worker_cpu"), 1) for m in MODES],
        "driver CPU s": [round(med(m, "driver_cpu"), 1) for m in MODES],
        "rows": [runs[m][0]["rows"] for m in MODES],
        "driver peak MB": [round(med(m, "driver_peak_mb")) for m in MODES],
        "worker peak MB": [round(med(m, "worker_peak_mb")) for m in MODES],
        "same table": [all(r["hash"] == first["hash"] for r in runs[m]) for m in MODES],
    })
    print(table.to_string(index=False))
    print("replay s: compare() once the pool/cluster is up; with start-up: the whole subprocess; CPU s: "
          "time.process_time (workers: summed over chunks; driver: the process calling compare, which is the "
          "worker in '1 process'); peak MB: ru_maxrss (driver: its whole life; workers: the highest any "
          "worker reported after a chunk)")
    return 0 if all(table["same table"]) else 1


STRATEGY_SPECS = ("article", "masking:keep_last=3", "clearing:keep_last=3", "model-summary")


def strategies(pairs: list, rounds: int) -> int:
    """SPEC C12: replay cost per session x strategy, measured side by side (interleaved rounds), as a ratio to
    `article` (the target: within 2x)."""
    base = {"window": 8_000, "ratio": 0.8, "keep_recent": 2_000}
    for facts in (False, True):
        times: dict[str, list[float]] = {s: [] for s in STRATEGY_SPECS}
        for _ in range(rounds):
            for spec in STRATEGY_SPECS:
                df = compare(pairs, [{**base, "strategy": spec}], progress=False, executor="inline", facts=facts)
                times[spec].append(df.attrs["timing"]["ms_per_session_policy"])
        ref = statistics.median(times["article"])
        print(f"replay cost per session x strategy ({'with' if facts else 'without'} fact columns), {len(pairs)} "
              f"conversations, 8k/0.8/2k, median of {rounds} rounds:")
        for spec, ts in times.items():
            med = statistics.median(ts)
            print(f"  {spec:<24} {med:7.2f} ms   {med / ref:5.2f}x article")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transcripts", type=Path, default=DEFAULT)
    ap.add_argument("--windows", default="8,16,32", help="windows in thousands of tokens (tail = window / 4)")
    ap.add_argument("--import-store", action="store_true", help="also time importing into a fresh DuckDB store")
    ap.add_argument("--sessions", type=int, help="synthesise this many sessions; compare 1, 2 processes and Dask")
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode (run by --sessions)
    ap.add_argument("--chunk-size", type=int, default=25, help="sessions per task with --sessions")
    ap.add_argument("--repeat", type=int, default=1, help="rounds with --sessions (medians are printed)")
    ap.add_argument("--reduce", action="store_true", help="with --sessions: keep summarize_comparison rows only")
    ap.add_argument("--strategies", action="store_true",
                    help="only: replay cost per session x strategy beside `article` (SPEC C12), medians of rounds")
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(run_mode(args, args.mode)))
        return 0
    if not args.transcripts.is_dir():
        print(f"transcripts not found at {args.transcripts}", file=sys.stderr)
        return 2
    if args.sessions:
        return many_sessions(args)
    pairs = read_pairs(args.transcripts)
    if args.strategies:
        return strategies(pairs, max(args.repeat, 5))
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
