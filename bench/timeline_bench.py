"""What `%agent timeline` costs: the token timeline drawn for a session of 10 and of 1,000 model calls (N2, C10).

Why: the timeline is drawn on request and again for every session picked in the browser; the issue's bar is
< 100 ms at 1,000 calls. This builds a `store.requests()`-shaped frame of a synthetic session (turns of 4
calls, a compaction every 37 calls, reported, cached and calibrated counts, threshold and window lines), then times
`TokenTimeline(frame)` plus its HTML (what `%agent timeline` displays) against the former renderer (the
same layers as a matplotlib figure saved as SVG, `svg_document(draw_timeline(...))`), side by side per size,
interleaved, and prints medians, the ratio to the smallest size and to matplotlib:

    .venv/bin/python bench/timeline_bench.py                    # 10 and 1,000 calls, 15 runs
    .venv/bin/python bench/timeline_bench.py --sizes 10 1000 3000 --runs 9

No timing assertions live in tests; this script is where the figures come from.
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd

from mxclaw_nb.widgets.timeline import TokenTimeline, draw_timeline, svg_document, timeline_frame


def session_frame(calls: int) -> pd.DataFrame:
    """A requests frame of `calls` model calls: the saw-tooth of a compacting session."""
    rows, tokens = [], 4_000
    stages = ("micro", "summary", "fallback")
    for i in range(calls):
        compact = i % 37 == 36
        before = tokens + 900
        tokens = 9_000 if compact else before
        rows.append({"seq": i + 1, "turn": 1 + i // 4, "iteration": 1 + i % 4, "estimate_tokens": tokens,
                     "after_tokens": tokens, "before_tokens": before if compact else tokens,
                     "calibrated_tokens": int(tokens * 1.07), "prompt_tokens_reported": int(tokens * 1.1),
                     "cached_tokens_reported": 0 if compact else int(tokens * 0.8),
                     "threshold": 32_000, "window_tokens": 40_000, "counter": "est",
                     "stage": stages[(i // 37) % 3] if compact else "unchanged"})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    frames = {n: session_frame(n) for n in args.sizes}
    for n in args.sizes:  # warm: imports, font and glyph caches
        TokenTimeline(frames[n]).to_html()
        svg_document(draw_timeline(timeline_frame(frames[n])))
    times: dict[int, list[float]] = {n: [] for n in args.sizes}
    mpl: dict[int, list[float]] = {n: [] for n in args.sizes}
    for _ in range(args.runs):
        for n in args.sizes:  # interleaved, so load on the machine hits every size alike
            t0 = time.perf_counter()
            TokenTimeline(frames[n], title="bench").to_html()
            t1 = time.perf_counter()
            svg_document(draw_timeline(timeline_frame(frames[n]), "bench"))
            times[n].append((t1 - t0) * 1000)
            mpl[n].append((time.perf_counter() - t1) * 1000)
    base = statistics.median(times[args.sizes[0]])
    print(f"{'calls':>7} {'timeline ms':>12} {'min ms':>7} {'x smallest':>11} {'matplotlib ms':>14} {'x svg':>6}")
    for n in args.sizes:
        med, old = statistics.median(times[n]), statistics.median(mpl[n])
        print(f"{n:>7,} {med:>12.1f} {min(times[n]):>7.1f} {med / base:>11.2f} {old:>14.1f} {old / med:>6.1f}")


if __name__ == "__main__":
    main()
