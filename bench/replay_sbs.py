"""Whole replay of the policy lab's 500-call session, this checkout against another revision, side by side (S4, C7).

Why: the lab's timeline needs the whole session replayed under the new policy; this measures that replay (facts
off, and without the per-message state columns where the revision has `states=False`: the lab's path) per
strategy for two versions of the code in interleaved rounds on the same machine load, and prints the medians
and the speed-up. The other revision is unpacked with `git archive` into a temporary directory (nothing is
checked out). Times are the process's CPU time (best of 3 per round): unlike wall time they barely grow with
other processes' load on a shared machine.

    .venv/bin/python bench/replay_sbs.py --rev 862c81a [--calls 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("article", "masking", "clearing", "model-summary")
CODE = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])
from tests.test_lab import long_session
from mxclaw_nb.analysis.replay import replay_messages
from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.strategies import strategy_from
import inspect
msgs = long_session(int(sys.argv[2]))
# the lab's path: without the per-message state columns where the revision has that option (S4)
lab = {"states": False} if "states" in inspect.signature(replay_messages).parameters else {}
out = {}
for name in sys.argv[3].split(","):
    policy = ContextPolicy(32_000, 0.8, 4_000, strategy=strategy_from(name))
    times = []
    for _ in range(3):
        start = time.process_time()
        replay_messages(msgs, policy, facts=False, views=[], **lab)
        times.append((time.process_time() - start) * 1000)
    out[name] = min(times)
print(json.dumps(out))
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", required=True, help="the revision to compare with (e.g. the merge base)")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = {args.rev[:10]: tmp, "this": str(ROOT)}
        got: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
        for _ in range(args.rounds):
            for label, tree in trees.items():  # interleaved: the same load on both
                run = subprocess.run([sys.executable, "-c", CODE, tree, str(args.calls), ",".join(STRATEGIES)],
                                     capture_output=True, text=True, cwd=tree, check=True)
                for name, ms in json.loads(run.stdout.strip().splitlines()[-1]).items():
                    got[label].setdefault(name, []).append(ms)
    before, after = got[args.rev[:10]], got["this"]
    print(f"whole replay of the lab's {args.calls}-call session (32k/0.8/4k, facts off), ms: median of "
          f"{args.rounds} interleaved rounds (best of 3 each)")
    print(f"  {'strategy':<14} {args.rev[:10]:>10} {'this':>8} {'speed-up':>9}")
    for name in STRATEGIES:
        b, a = statistics.median(before[name]), statistics.median(after[name])
        print(f"  {name:<14} {b:10.1f} {a:8.1f} {b / a:8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
