"""Policy lab redraw on a 500-call session, per slider and strategy (SPEC S4, C12, C2): medians, side by side.

Why: the lab is live only if moving a slider redraws within 100 ms. A policy slider used to wait for a whole
replay of the session (the timeline's rows) before the gauge and the inspector changed; now the chosen call's
turn is replayed alone (C2: the engine rebuilds at each turn's first call, so its view is the whole replay's) and
the whole replay runs in a background thread for the timeline. This script moves each slider of each strategy to
values not replayed yet, on two labs over the same session: `live` (the default) and `whole` (background=False:
every change waits for the whole replay, the previous behaviour), and prints the median ms until the lab's redraw
returned, the median until the live lab's timeline was redrawn too, and the ratio.

    .venv/bin/python bench/lab_bench.py [--calls 500] [--moves 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb.widgets.lab import PolicyLab  # noqa: E402
from tests.test_lab import long_session  # noqa: E402

STRATEGIES = ("article", "masking", "clearing", "model-summary")


def _move(lab: PolicyLab, name: str, value: Any) -> tuple[float, float]:
    ctrl = lab.param_sliders.get(name) or getattr(lab, name)
    start = time.perf_counter()
    ctrl.value = value
    shown = time.perf_counter() - start
    lab.wait()
    return shown * 1000, (time.perf_counter() - start) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--moves", type=int, default=5)
    args = ap.parse_args(argv)
    msgs = long_session(args.calls)
    kw: dict[str, Any] = {"datasets": False, "window": 32_000, "keep_recent": 4_000}
    live, whole = PolicyLab({"s": msgs}, **kw), PolicyLab({"s": msgs}, background=False, **kw)
    for lab in (live, whole):
        lab.call.value = args.calls * 9 // 10  # a call late in the session, in the middle of a turn
    print(f"policy lab, {args.calls}-call session, call {live.call.value}: ms until the redraw returned "
          f"(median of {args.moves} moves to values not replayed yet)")
    print(f"  {'strategy':<14} {'slider':<16} {'live':>8} {'timeline':>9} {'whole':>8} {'whole/live':>10}")
    for strategy in STRATEGIES:
        for lab in (live, whole):
            lab.set(strategy=strategy)
        for name in ("window", "threshold_ratio", "keep_recent", *live.param_sliders):
            ctrl = live.param_sliders.get(name) or getattr(live, name)
            values = [ctrl.value - (k + 1) * ctrl.step for k in range(args.moves)]
            if values[-1] < ctrl.min:
                values = [ctrl.value + (k + 1) * ctrl.step for k in range(args.moves)]
            got: dict[str, list[tuple[float, float]]] = {"live": [], "whole": []}
            for value in values:  # interleaved: the same load on both
                got["live"].append(_move(live, name, value))
                got["whole"].append(_move(whole, name, value))
            shown = statistics.median(t[0] for t in got["live"])
            timeline = statistics.median(t[1] for t in got["live"])
            full = statistics.median(t[0] for t in got["whole"])
            print(f"  {strategy:<14} {name:<16} {shown:8.1f} {timeline:9.1f} {full:8.1f} {full / shown:9.1f}x")
            for lab in (live, whole):
                lab.set(**{name: values[0] if name != "threshold_ratio" else round(values[0], 2)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
