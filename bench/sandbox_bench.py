"""Sandbox start-up cost per shell command (SPEC L5, L8): the same command sandboxed and not, in one run.

Each mode runs `true` (and a small `ls`) through the bash tool's `run_command`, so the figure is what
a user pays per command: process start, namespace or Landlock set-up, the user namespace (as root: the
unprivileged id and the id-mapped workspace), the limits, the seccomp filter, the minimal environment, pipes.
Landlock is applied in the forked child (no interpreter per command).
Modes are interleaved round by round so machine noise hits them alike; medians are printed with the
extra cost over `off` and the ratio. Target: under 30 ms extra per command.

    .venv/bin/python bench/sandbox_bench.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mxclaw_nb.tools import ToolContext
from mxclaw_nb.tools.sandbox import resolve_sandbox
from mxclaw_nb.tools.shell import run_command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    modes = [m for m in ("off", "bwrap", "landlock") if m == "off" or resolve_sandbox(m).kind == m]
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "a.txt").write_text("x\n")
        contexts = {m: ToolContext(ws, "bench", approval="allow", sandbox=m) for m in modes}
        for command in ("true", "ls -la"):
            times: dict[str, list[float]] = {m: [] for m in modes}
            for m in modes:  # warm-up (the probe is cached per process)
                run_command(command, contexts[m])
            for _ in range(args.rounds):
                for m in modes:
                    start = time.perf_counter()
                    res = run_command(command, contexts[m])
                    times[m].append((time.perf_counter() - start) * 1000)
                    assert not res.is_error, res.content
            base = statistics.median(times["off"])
            print(f"\ncommand {command!r}, {args.rounds} rounds, median ms per command")
            print(f"{'mode':<10}{'median':>9}{'p90':>9}{'extra':>9}{'ratio':>8}  sandbox")
            for m in modes:
                med = statistics.median(times[m])
                p90 = statistics.quantiles(times[m], n=10)[-1]
                print(f"{m:<10}{med:>9.1f}{p90:>9.1f}{med - base:>+9.1f}{med / base:>8.2f}  "
                      f"{resolve_sandbox(m).detail}")


if __name__ == "__main__":
    main()
