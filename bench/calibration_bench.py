"""Calibrated counting on the everything-fits path (SPEC T2, C7): engine time per call against the +1 build.

Why: once the provider reports usage, the loop counts with the calibrated counter (T3), whose factor changes
with every usage report. Rescaling every cached count per build made the engine's share of a call O(n)
(about 25 ms at 100k messages, 15x the plain +1 build). Now the factor is applied where a count is read and
totals come from a histogram of the C1 counts (context/incremental.py), so a call costs about what the plain
+1 build costs.

One session of N synthetic messages (window twice its estimate: nothing is compacted), one append-only
TokenCache as the Agent keeps it. Side by side in one process:

- calibrated: per call, `build_request_view` with the calibrated counter, then a usage report for what was
  sent (reported = 1.27x the estimate, +37 per call, so the factor changes every time) and an assistant
  message + tool result appended (the loop's step);
- +1 build: the same session with the C1 counter, one message appended per call.

The first calibrated build is shown apart (it keys every step once, O(n); after it each build is O(new)).
Medians of CPU time (process_time: robust to other load) over the calls after it.

    .venv/bin/python bench/calibration_bench.py [--sizes 1000 100000] [--calls 15]
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view, estimate_messages  # noqa: E402
from mxclaw_nb.context.counters import CalibratedCounter  # noqa: E402
from mxclaw_nb.demo.examples import synthetic_transcript  # noqa: E402


def _cpu_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.disable()
    try:
        t0 = time.process_time()
        out = fn()
        return (time.process_time() - t0) * 1000, out
    finally:
        gc.enable()


def _step(i: int) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function", "function": {"name": "list_dir", "arguments": '{"path": "."}'}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"a.py\nb.py\nnotes-{i}.md\n" * 5}]


def run(n: int, calls: int) -> dict[str, float]:
    messages = synthetic_transcript(n)
    policy = ContextPolicy(-(-estimate_messages(messages) * 2 // 1_000) * 1_000, 0.8, 8_000)
    # calibrated: the first call counts C1 (no report yet), every later one with the counter learned so far
    cache, counter = TokenCache(append_only=True), CalibratedCounter()
    view = build_request_view(list(messages), policy, cache=cache)
    counter = counter.observe(view.messages, math.ceil(view.before_tokens * 1.27))
    calibrated: list[float] = []
    for i in range(calls):
        view_input = view.next_input(_step(i))
        spent, view = _cpu_ms(lambda vi=view_input, c=counter: build_request_view(
            vi, replace(policy, counter=c), cache=cache))
        assert view.stage == "unchanged" and view.counter == "calibrated"
        calibrated.append(spent)
        counter = counter.observe(view.messages, math.ceil(view.after_estimate * 1.27) + 37 * i)
    # +1 build: C1 counts, one message appended per call
    plain_cache = TokenCache(append_only=True)
    plain_view = build_request_view(list(messages), policy, cache=plain_cache)
    plain: list[float] = []
    for i in range(calls):
        plain_input = plain_view.next_input([{"role": "user", "content": f"one more, {i}"}])
        spent, plain_view = _cpu_ms(lambda pi=plain_input: build_request_view(pi, policy, cache=plain_cache))
        plain.append(spent)
    return {"first calibrated": calibrated[0], "calibrated": statistics.median(calibrated[1:]),
            "+1 build": statistics.median(plain[1:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000])
    ap.add_argument("--calls", type=int, default=15)
    args = ap.parse_args()
    print("everything fits, calibrated counter (factor changes every call); CPU ms, medians over calls 2..N\n")
    print(f"| {'messages':>9} | {'1st calibrated':>14} | {'calibrated/call':>15} | {'+1 build':>8} | "
          f"{'ratio':>6} | target (<= 3x) |")
    print(f"| {'-' * 8}: | {'-' * 13}: | {'-' * 14}: | {'-' * 7}: | {'-' * 5}: | -------------- |")
    for n in args.sizes:
        r = run(n, args.calls)
        ratio = r["calibrated"] / r["+1 build"]
        print(f"| {n:>9,} | {r['first calibrated']:>14.1f} | {r['calibrated']:>15.2f} | {r['+1 build']:>8.2f} | "
              f"{ratio:>5.2f}x | {'MET' if ratio <= 3 else 'MISSED':<14} |", flush=True)


if __name__ == "__main__":
    main()
