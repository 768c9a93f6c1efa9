"""E2: what the shared-prefix computation costs per call, by stored history length (SPEC E2).

Why: the loop derives, for every model call, the prefix it shares with the previous call
(`mxclaw_nb.context.shared_prefix`). It must cost what the new messages cost, not what the history costs:
the target is a per-call time at 100,000 stored messages within 2x of the time at 1,000. Each size runs
the common path (the previous call's messages plus one new assistant message and one tool result, the way
C7 grows a view; the loop says so with `extends`) and the compaction path (one early message rewritten, so
the lists part near the start), medians of many calls, side by side in one run.

    .venv/bin/python bench/prefix_bench.py [--sizes 1000 100000] [--calls 201]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

from mxclaw_nb.context import shared_prefix


def _history(n: int) -> list[dict[str, str]]:
    return [{"role": "tool" if k % 2 else "assistant", "content": f"message {k} " + "x" * 40} for k in range(n)]


def per_call_us(n: int, calls: int, *, rewrite: bool = False) -> float:
    """Median microseconds of one `shared_prefix` call after a history of `n` messages (GC off, as timeit)."""
    gc.disable()
    try:
        return _per_call_us(n, calls, rewrite)
    finally:
        gc.enable()


def _per_call_us(n: int, calls: int, rewrite: bool) -> float:
    messages = _history(n)
    tokens = [12] * n
    sents, counts = [], []  # built first: the timed loop measures the prefix computation, not list building
    for k in range(calls):
        new = [{"role": "assistant", "content": f"call {k}"}, {"role": "tool", "content": f"result {k}"}]
        sent = [*messages, *new]  # the engine hands a new list each call (C7 next_input)
        if rewrite:
            sent[1] = {"role": "tool", "content": f"[old tool output compacted: 52 characters] {k}"}
        tokens = [*tokens, 3, 3]
        sents.append(sent)
        counts.append(tokens)
        messages = sent
    _, state = shared_prefix(None, sents[0][:n], counts[0][:n], total=12 * n)
    times = []
    for k, (sent, count) in enumerate(zip(sents, counts, strict=True)):
        started = time.perf_counter()
        shared, state = shared_prefix(state, sent, count, total=12 * n + 6 * (k + 1), extends=not rewrite)  # loop
        times.append((time.perf_counter() - started) * 1e6)
        assert rewrite or shared.messages == len(sent) - 2
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--calls", type=int, default=201)
    args = parser.parse_args()
    rows = {n: (per_call_us(n, args.calls), per_call_us(n, args.calls, rewrite=True)) for n in args.sizes}
    small, large = min(rows), max(rows)
    for n, (common, rewrite) in rows.items():
        print(f"{n:>8,} stored messages: {common:8.1f} us per call (common path), {rewrite:8.1f} us (prefix rewritten)")
    ratio = rows[large][0] / rows[small][0]
    print(f"common path {large:,} vs {small:,}: {ratio:.2f}x (target <= 2x) -> {'MET' if ratio <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
