"""Time of `%load_ext mxclaw_nb` in a fresh IPython shell, and which heavy modules it pulled in (N1).

Why: a notebook user pays this on every kernel start; pandas, matplotlib and ipywidgets are imported
only when a command shows something. Each run is a fresh interpreter (the import cache is cold for
this process, warm on disk); prints the median and the modules present afterwards.

    .venv/bin/python bench/import_bench.py [--runs 7] [--path DIR]   (--path: another checkout, e.g. a baseline)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

CODE = r"""
import os, sys, time
if os.environ.get("MXCLAW_BENCH_PATH"):  # a baseline checkout: bypass the editable install's finder
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, os.environ["MXCLAW_BENCH_PATH"])
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter()
ip.run_line_magic("load_ext", "mxclaw_nb")
dt = time.perf_counter() - t
print(dt, ",".join(m for m in ("pandas", "matplotlib", "ipywidgets", "duckdb", "openai") if m in sys.modules))
"""


def main() -> None:
    """Print the median %load_ext time over fresh interpreters."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--path", default=None, help="prepend this folder to sys.path (compare a baseline checkout)")
    args = ap.parse_args()
    env = None
    if args.path:
        import os
        env = {**os.environ, "MXCLAW_BENCH_PATH": args.path}
    times, mods = [], ""
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            e = {**(env or __import__("os").environ), "MXCLAW_DB": f"{tmp}/x.duckdb"}
            out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=e, check=True)
            dt, mods = out.stdout.split()[0], (out.stdout.split() + [""])[1]
            times.append(float(dt))
    print(f"%load_ext mxclaw_nb: median {statistics.median(times) * 1e3:.0f} ms over {args.runs} fresh interpreters "
          f"(min {min(times) * 1e3:.0f}); imported: {mods or 'none of pandas/matplotlib/ipywidgets/duckdb/openai'}")


if __name__ == "__main__":
    main()
