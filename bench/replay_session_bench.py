"""`%agent replay` on one long session (SPEC S4, C10): the 500-call figure for the closing note.

Why: replaying a session under other policy values must stay interactive however long the session got
(target: under 0.5 s for 500 model calls), so fact survival (which facts of the compacted messages are
still visible in each view) must cost what each call's new messages cost, not a rescan per view. This
script drives the real loop (Agent + DuckDB store, the scripted in-process provider of
`session_cost_bench.py`, window 16k: every turn's first call summarises) for `--calls` model calls, then
times `analysis.replay` over the session's first 500 calls, as `%agent replay` calls it, with and
without the fact columns (the difference is what fact survival costs). Medians of `--runs`, CPU time of
this process (robust to other load on a shared machine) and wall time.

    .venv/bin/python bench/replay_session_bench.py [--calls 500] [--runs 5] [--path BASELINE_CHECKOUT]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if "--path" in sys.argv:  # a baseline checkout: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, sys.argv[sys.argv.index("--path") + 1])
else:
    sys.path.insert(0, str(HERE.parent))
sys.path.insert(1, str(HERE))

from session_cost_bench import build_session  # noqa: E402

from mxclaw_nb.store.writer import Store  # noqa: E402

WINDOW, RATIO, TAIL = 16_000, 0.8, 4_000


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Medians of (CPU time of this process, wall time) in ms: CPU time is robust to other load on a shared
    machine, wall time is what a user waits."""
    cpu, wall = [], []
    for _ in range(runs):
        c, t = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return statistics.median(cpu) * 1e3, statistics.median(wall) * 1e3


def main() -> None:
    """Build the session, then time the replay of its first 500 calls."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--path", help="run against another checkout (e.g. the baseline) instead of this one")
    args = ap.parse_args()
    import mxclaw_nb
    from mxclaw_nb.analysis.replay import replay
    from mxclaw_nb.context import ContextPolicy

    with tempfile.TemporaryDirectory(prefix="mxclaw-replay-") as tmp:
        t = time.perf_counter()
        db, sid, _ = build_session(Path(tmp), args.calls, window=WINDOW)
        built = time.perf_counter() - t
        with Store(db) as store:
            messages = store.load_transcript(sid)
    cut = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    messages = messages[: cut[500] if len(cut) > 500 else len(messages)]
    calls = sum(1 for m in messages if m["role"] == "assistant")
    policy = ContextPolicy(WINDOW, RATIO, TAIL)
    replay((sid, messages), policy)  # imports and first-use costs outside the timing
    full = median_ms(lambda: replay((sid, messages), policy), args.runs)
    bare = median_ms(lambda: replay((sid, messages), policy, facts=False), args.runs)
    rows = replay((sid, messages), policy)
    print(f"code: {Path(mxclaw_nb.__file__).parents[1]}")
    print(f"session: {calls} model calls, {len(messages):,} messages (built in {built:.1f} s); replay rows: "
          f"{len(rows)}; stages: {dict(rows['stage'].value_counts())}")
    print(f"{'':<38} {'CPU ms':>8} {'wall ms':>8}  (medians of {args.runs})")
    print(f"{f'%agent replay ({calls} calls)':<38} {full[0]:8.1f} {full[1]:8.1f}  target < 500 ms: "
          f"{'MET' if full[0] < 500 else 'MISSED'} (CPU), {'MET' if full[1] < 500 else 'MISSED'} (wall)")
    print(f"{'  without fact columns':<38} {bare[0]:8.1f} {bare[1]:8.1f}")
    print(f"{'  fact survival':<38} {full[0] - bare[0]:8.1f} {full[1] - bare[1]:8.1f}")


if __name__ == "__main__":
    main()
