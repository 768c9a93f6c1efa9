"""Benchmark of the context engine (SPEC C1-C9): build_request_view vs LangChain trim_messages vs exact o200k_base.

Why: the loop rebuilds the request view before every model call, so the engine must be cheap when a
turn appends one message to a long session (target: <= 5 ms at 10k messages with a TokenCache kept
across calls), and a cold build must not be slower than the simplest alternative people use —
LangChain's `trim_messages` with `count_tokens_approximately` — on the same transcript. Exact counting
with tiktoken `o200k_base` (offline data from bpe-openai) is shown beside them for scale: it is what an
exact counter costs. One run prints everything: median times over several repetitions, peak memory
(tracemalloc), for synthetic transcripts of 1k, 10k and 100k messages, on the common path (window
large enough that nothing is compacted) and on a compaction path (128k window, 8k tail).

Usage: .venv/bin/python bench/context_bench.py [--sizes 1000 10000 100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view, estimate_messages  # noqa: E402
from mxclaw_nb.demo.examples import synthetic_transcript  # noqa: E402

REPS = {1_000: 21, 10_000: 11, 100_000: 3}
COMPACT_WINDOW, KEEP_RECENT = 128_000, 8_000


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(CPU ms of this process, wall ms) of one call, garbage collected before and GC off while timing."""
    gc.collect()
    gc.disable()
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        return (time.process_time() - c0) * 1_000, (time.perf_counter() - t0) * 1_000
    finally:
        gc.enable()


def median_ms(fn: Callable[[], Any], reps: int) -> float:
    """Median CPU time of `fn` in ms (CPU time of this process: robust to other load on a shared machine)."""
    return statistics.median(_timed(fn)[0] for _ in range(reps))


def paired_ms(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, dict[str, float]]:
    """Interleaved runs of several functions (a, b, a, b, ...), so load changes hit them alike."""
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            c, w = _timed(fn)
            cpu[name].append(c)
            wall[name].append(w)
    return {k: {"cpu_ms": statistics.median(cpu[k]), "wall_ms": statistics.median(wall[k])} for k in fns}


def peak_mib(fn: Callable[[], Any]) -> float:
    """Peak traced memory of one call of `fn`, MiB."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def incremental_ms(msgs: list[dict], policy: ContextPolicy, reps: int, append_only: bool = False
                   ) -> tuple[float, float]:
    """Median time of a rebuild after appending one message, with one TokenCache kept across calls
    (`append_only`: the session cache the Agent keeps, see TokenCache)."""
    grown, cache = list(msgs), TokenCache(append_only=append_only)
    build_request_view(grown, policy, cache=cache)
    times = []
    for k in range(max(reps, 15)):
        grown.append({"role": "user", "content": f"follow-up {k}: and the next module?"})
        times.append(_timed(lambda: build_request_view(grown, policy, cache=cache))[0])
    grown.append({"role": "user", "content": "one more"})
    peak = peak_mib(lambda: build_request_view(grown, policy, cache=cache))
    return statistics.median(times), peak


def exact_encoding() -> tuple[Any, str]:
    """tiktoken o200k_base from offline data: mxclaw_nb.tokenizers if present, else built here."""
    try:
        from mxclaw_nb.tokenizers import exact_encoding as project_encoding
    except ImportError:
        project_encoding = None
    if project_encoding is not None:
        enc = project_encoding("o200k_base")
        if enc is not None:
            return enc, "mxclaw_nb.tokenizers"
    import base64
    import gzip
    from importlib import resources
    from unittest import mock

    import tiktoken
    import tiktoken_ext.openai_public as public

    data = gzip.decompress(resources.files("bpe_openai.data").joinpath("o200k_base.tiktoken.gz").read_bytes())
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in data.splitlines() if line)}
    with mock.patch.object(public, "load_tiktoken_bpe", lambda *a, **k: ranks):
        return tiktoken.Encoding(**public.o200k_base()), "bench loader (bpe-openai data)"


def langchain_figures(msgs: list[dict], policies: dict[str, ContextPolicy], reps: int) -> dict[str, Any]:
    """Per path: trim_messages (count_tokens_approximately) to that path's threshold, interleaved with the
    engine's cold build under the same policy, on the same transcript (converted once for LangChain)."""
    from langchain_core.messages import convert_to_messages, trim_messages
    from langchain_core.messages.utils import count_tokens_approximately

    lc = convert_to_messages(msgs)

    def trimmer(threshold: int) -> Callable[[], list[Any]]:
        return lambda: trim_messages(lc, max_tokens=threshold, token_counter=count_tokens_approximately,
                                     strategy="last", include_system=True, start_on="human", allow_partial=False)

    fns: dict[str, Callable[[], Any]] = {"convert": lambda: convert_to_messages(msgs)}
    for name, policy in policies.items():
        fns[f"trim_{name}"] = trimmer(policy.threshold)
        fns[f"engine_{name}"] = lambda p=policy: build_request_view(msgs, p)
    timings = paired_ms(fns, reps)
    out: dict[str, Any] = {"convert_ms": timings["convert"]["cpu_ms"], "timings": timings}
    for name, policy in policies.items():
        trim = trimmer(policy.threshold)
        out[name] = {"trim_ms": timings[f"trim_{name}"]["cpu_ms"], "kept": len(trim()), "trim_peak_mib": peak_mib(trim)}
    return out


def tiktoken_figures(msgs: list[dict], policy: ContextPolicy, reps: int) -> dict[str, Any]:
    """Exact o200k_base: counting every message, and a cold build with the exact counter in the policy."""
    from mxclaw_nb.context.counters import FunctionCounter

    enc, source = exact_encoding()
    encode = enc.encode_ordinary
    counter = FunctionCounter("o200k_base", lambda text: len(encode(text)))
    exact_policy = ContextPolicy(policy.context_window_tokens, policy.threshold_ratio, policy.keep_recent_tokens,
                                 counter=counter)
    total = [0]

    def count_all() -> None:
        total[0] = sum(counter.count(m) for m in msgs)

    reps = max(1, reps // 3)
    return {"source": source, "count_ms": median_ms(count_all, reps), "exact_tokens": total[0],
            "build_cold_ms": median_ms(lambda: build_request_view(msgs, exact_policy), reps)}


def shared_transcript() -> list[dict] | None:
    """All shared real conversations (../shared/transcripts) end to end, as one long transcript: real
    shapes (JSON tool arguments, system prompts mid-way, dangling calls, reused ids that repair must fix)."""
    from mxclaw_nb.analysis.accuracy import DEFAULT_TRANSCRIPTS, load_conversations

    if not DEFAULT_TRANSCRIPTS.is_dir():
        return None
    return [m for _, conversation in load_conversations(DEFAULT_TRANSCRIPTS) for m in conversation]


def run(size: int, with_tiktoken: bool, msgs: list[dict] | None = None, source: str = "synthetic"
        ) -> dict[str, Any]:
    msgs = synthetic_transcript(size) if msgs is None else msgs
    size = len(msgs)
    reps = REPS.get(size, 21 if size < 5_000 else 11)
    est = estimate_messages(msgs)
    common = ContextPolicy(-(-est * 2 // 1_000) * 1_000, 0.8, KEEP_RECENT)  # everything fits: nothing compacted
    # a real model's window, or half the transcript when that is smaller, so every size reaches compaction
    compact = ContextPolicy(min(COMPACT_WINDOW, est // 2_000 * 1_000), 0.8, KEEP_RECENT)
    row: dict[str, Any] = {"messages": size, "source": source, "estimate": est}
    lc = langchain_figures(msgs, {"common": common, "compaction": compact}, reps)
    row["langchain"] = lc
    for name, policy in (("common", common), ("compaction", compact)):
        view = build_request_view(msgs, policy)
        incr, incr_peak = incremental_ms(msgs, policy, reps)
        session, _ = incremental_ms(msgs, policy, reps, append_only=True)
        timing = lc["timings"][f"engine_{name}"]
        row[name] = {"window": policy.context_window_tokens, "stage": view.stage, "sent": len(view.messages),
                     "cold_ms": timing["cpu_ms"], "cold_wall_ms": timing["wall_ms"], "incremental_ms": incr,
                     "session_ms": session,
                     "cold_peak_mib": peak_mib(lambda p=policy: build_request_view(msgs, p)),
                     "incremental_peak_mib": incr_peak, **lc[name]}
    if with_tiktoken:
        row["tiktoken"] = tiktoken_figures(msgs, compact, reps)
    return row


def report(rows: list[dict[str, Any]]) -> None:
    """Print the table, the targets and what the columns mean."""
    print(f"{'source':<9} {'messages':>9} {'path':<11} {'window':>9} {'stage':<10} {'sent':>6} {'cold ms':>8} "
          f"{'+1 msg ms':>9} {'+1 sess ms':>10} "
          f"{'cold MiB':>8} {'+1 MiB':>6} | {'trim ms':>8} {'kept':>6} {'trim MiB':>8} | {'convert ms':>10} "
          f"{'o200k count ms':>14} {'o200k build ms':>14}")
    for row in rows:
        tk = row.get("tiktoken", {})
        for name in ("common", "compaction"):
            r = row[name]
            extra = (f" | {row['langchain']['convert_ms']:10.1f} {tk.get('count_ms', float('nan')):14.1f} "
                     f"{tk.get('build_cold_ms', float('nan')):14.1f}" if name == "compaction" else "")
            print(f"{row['source']:<9} {row['messages']:>9,} {name:<11} {r['window']:>9,} {r['stage']:<10} "
                  f"{r['sent']:>6,} "
                  f"{r['cold_ms']:8.1f} {r['incremental_ms']:9.2f} {r['session_ms']:10.3f} {r['cold_peak_mib']:8.1f} "
                  f"{r['incremental_peak_mib']:6.1f} | {r['trim_ms']:8.1f} {r['kept']:>6,} {r['trim_peak_mib']:8.1f}"
                  f"{extra}")
    by_size = {row["messages"]: row for row in rows if row["source"] == "synthetic"}
    if 10_000 in by_size:
        incr = by_size[10_000]["common"]["incremental_ms"]
        print(f"\ntarget: incremental rebuild at 10k messages <= 5 ms: {incr:.2f} ms -> "
              f"{'MET' if incr <= 5 else 'MISSED'}")
    for size in (10_000, 100_000):
        for name in ("common", "compaction"):
            if size in by_size:
                r = by_size[size][name]
                ratio = r["session_ms"] / r["cold_ms"]
                print(f"target: build_request_view after one new message, warm session cache, {size:,} {name} "
                      f"({r['stage']}): {r['session_ms']:.3f} ms vs cold {r['cold_ms']:.1f} ms = {ratio:.3f}x "
                      f"(<= 0.02x) -> {'MET' if ratio <= 0.02 else 'MISSED'}")
    for row in rows:
        for name in ("common", "compaction"):
            r = row[name]
            both = r["trim_ms"] + row["langchain"]["convert_ms"]
            print(f"target: cold build no slower than trim_messages, {row['messages']:,} {row['source']} messages, "
                  f"{name} "
                  f"({r['stage']}): {r['cold_ms']:.1f} ms vs {r['trim_ms']:.1f} ms "
                  f"(engine/trim {r['cold_ms'] / r['trim_ms']:.2f}x) -> "
                  f"{'MET' if r['cold_ms'] <= r['trim_ms'] else 'MISSED'}  (convert_to_messages + trim: {both:.1f} ms)")
    print("\nAll times are medians of CPU time of this process (time.process_time; wall clock in --json); "
          "engine and trim runs are interleaved. common = window 2x the transcript's estimate (the usual case: "
          f"nothing compacted); compaction = {COMPACT_WINDOW:,} window (or half the transcript's estimate when "
          f"smaller), ratio 0.8, {KEEP_RECENT:,} tail. '+1 msg' = rebuild after appending one message with a "
          "TokenCache kept across calls; '+1 sess' = the same with the Agent's append-only session cache "
          "(TokenCache(append_only=True): inputs checked as a grown prefix, contents trusted). "
          "trim = LangChain trim_messages(strategy='last', "
          "count_tokens_approximately, include_system, start_on='human') to the same threshold, on messages "
          "converted once beforehand (convert ms = convert_to_messages). o200k = exact tiktoken counts of every "
          "message / a cold build with the exact counter in the compaction policy.")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table (optionally also write JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--no-tiktoken", action="store_true", help="skip the exact o200k_base figures")
    parser.add_argument("--no-shared", action="store_true", help="skip the row of the shared real transcripts")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes:
        rows.append(run(size, not args.no_tiktoken))
        print(f"... {size:,} messages done", file=sys.stderr)
    shared = None if args.no_shared else shared_transcript()
    if shared:
        rows.append(run(0, not args.no_tiktoken, shared, "shared"))
        print(f"... shared transcripts ({len(shared):,} messages) done", file=sys.stderr)
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
