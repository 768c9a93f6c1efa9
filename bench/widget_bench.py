"""What the live view costs a real kernel: memory growth and output traffic per demo turn (SPEC N2, C10).

Why: the live turn view runs inside the user's kernel on every model call; if it keeps widgets or request
views alive, a long notebook session grows without bound, and if it re-sends whole tables on every token,
the frontend drowns. This starts a real IPython kernel (jupyter_client, the project's environment), runs
N offline-demo turns with `%%agent` (widgets on, then off for comparison), and after each turn reads the
kernel's RSS from /proc and the bytes of every iopub message the turn produced (content + buffers, as
JSON). It prints medians per turn, so "before" and "after" runs of a change compare directly:

    .venv/bin/python bench/widget_bench.py --turns 50            # widgets on and off
    .venv/bin/python bench/widget_bench.py --turns 20 --only on  # quicker
    .venv/bin/python bench/widget_bench.py --turns 5 --only on --per-call  # + ms per model call in-process

Targets (issue: flat cost per model call): RSS growth < 1 MiB per turn with widgets on; output traffic
< 200 KB per turn. No timing assertions live in tests; this script is where the figures come from.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["fix the failing test", "look at the build logs", "explain the structure of the package",
           "review the code", "summarize what you did"]


def rss_mib(pid: int) -> float:
    """Resident set size of process `pid` in MiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def message_bytes(msg: dict[str, Any]) -> int:
    """Bytes an iopub message carries to the frontend: its content as JSON plus binary buffers."""
    content = len(json.dumps(msg.get("content"), default=str).encode())
    return content + sum(len(b) for b in msg.get("buffers") or [])


def run(client: Any, code: str, timeout: float = 300) -> tuple[int, int, str]:
    """Execute `code`; returns (iopub bytes, iopub messages, error text or stdout)."""
    msg_id = client.execute(code, allow_stdin=False)
    total = count = 0
    error = out = ""
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        except Empty:
            raise TimeoutError(f"no idle after {timeout} s: {code[:60]!r}") from None
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind not in ("status", "execute_input"):
            total += message_bytes(msg)
            count += 1
        if kind == "stream" and msg["content"].get("name") == "stdout":
            out += msg["content"]["text"]
        if kind == "error":
            error = "\n".join(msg["content"].get("traceback") or [])[-2000:]
        if kind == "status" and msg["content"]["execution_state"] == "idle":
            break
    client.get_shell_msg(timeout=timeout)
    return total, count, error or out


def bench(turns: int, widgets: bool, token_delay: float) -> dict[str, Any]:
    """N demo turns in a fresh kernel; per-turn RSS deltas and iopub bytes."""
    with tempfile.TemporaryDirectory(prefix="mxclaw-widget-bench-") as tmp:
        from mxclaw_nb.demo.model import copy_demo_workspace

        ws = copy_demo_workspace(Path(tmp) / "ws")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MXCLAW_"))}
        env.update(MXCLAW_DB=str(Path(tmp) / "bench.duckdb"), MXCLAW_DEMO_TOKEN_DELAY=str(token_delay),
                   PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
        km, client = start_new_kernel(kernel_name="python3", cwd=str(ws), env=env)
        try:
            pid = km.provisioner.process.pid
            setup = ("%load_ext mxclaw_nb\n%agent config approval=allow\n"
                     f"%config AgentMagics.widgets = {widgets}\nimport gc")
            _, _, err = run(client, setup)
            if "Traceback" in err or "Error" in err:
                raise RuntimeError(err)
            run(client, "%%agent\nfix the failing test")  # warm-up: imports, tokenizer, first DuckDB pages
            run(client, "gc.collect()")
            rss, traffic, messages = [rss_mib(pid)], [], []
            for i in range(turns):
                size, count, err = run(client, f"%%agent\n{PROMPTS[i % len(PROMPTS)]}")
                if "Traceback" in err:
                    raise RuntimeError(err)
                run(client, "gc.collect()")
                rss.append(rss_mib(pid))
                traffic.append(size)
                messages.append(count)
            _, _, n_widgets = run(client, "import ipywidgets\nprint(len(ipywidgets.Widget.widgets))")
        finally:
            client.stop_channels()
            km.shutdown_kernel(now=True)
    growth = [b - a for a, b in zip(rss, rss[1:], strict=False)]
    return {"widgets": widgets, "turns": turns, "rss_start_mib": rss[0], "rss_end_mib": rss[-1],
            "rss_growth_per_turn_mib": (rss[-1] - rss[0]) / turns, "rss_growth_median_mib": statistics.median(growth),
            "traffic_median_kb": statistics.median(traffic) / 1000, "traffic_max_kb": max(traffic) / 1000,
            "iopub_messages_median": statistics.median(messages), "open_widgets": n_widgets.strip()}


def per_call(sizes: tuple[int, ...] = (100, 10_000)) -> None:
    """In-process: what the live view spends per model call (request.built) and on opening the inspector."""
    from mxclaw_nb.context import ContextPolicy, build_request_view
    from mxclaw_nb.demo.examples import synthetic_transcript
    from mxclaw_nb.records import record_of_view
    from mxclaw_nb.widgets.live import LiveTurnView

    results = {}
    for n in sizes:
        view = build_request_view(synthetic_transcript(n), ContextPolicy(context_window_tokens=10**9))
        _ = view.provenance  # the loop builds it for the stored request record anyway
        live = LiveTurnView()
        live.handle("turn.started", {"session_id": "s", "turn": 1})
        times, pushes = [], []
        for it in range(1, 22):
            # what the loop publishes per call: the view, the streamed text, the end of the call with its stored
            # record (C10), one tool line. The gauge's rows are derived at most once a second (GAUGE_INTERVAL):
            # timed apart, as `gauge push`, by forcing one per call after the per-call figure is taken.
            record = record_of_view(view, turn=1, iteration=it, prompt_tokens_reported=1000 + it)
            t = time.perf_counter()
            live.handle("request.built", {"turn": 1, "iteration": it, "view": view})
            live.handle("model.delta", {"text": "reading"})
            live.handle("model.completed", {"usage": {"prompt_tokens": 1000 + it}, "record": record,
                                            "turn": 1, "iteration": it})
            live.handle("tool.started", {"call_id": f"c{it}", "name": "read_file", "arguments": '{"path": "a"}'})
            live.handle("tool.finished", {"call_id": f"c{it}", "name": "read_file", "content": "x", "chars": 1})
            if it > 1:  # the first call of a view pushes the gauge (its first showing)
                times.append((time.perf_counter() - t) * 1000)
            live._gauge_stale = True
            t = time.perf_counter()
            live._push_gauge(force=True)
            pushes.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        live.open_inspector()
        opened = (time.perf_counter() - t) * 1000
        live.publish_final()
        results[n] = statistics.median(times)
        print(f"{n:,} messages: live view per model call median {results[n]:.2f} ms (inspector closed; gauge "
              f"push, at most once a second, median {statistics.median(pushes):.1f} ms); opening the inspector "
              f"{opened:.0f} ms", flush=True)
    lo, hi = min(sizes), max(sizes)
    print(f"per-call ratio {hi:,} / {lo:,} messages: {results[hi] / results[lo]:.2f}x (target: within 2x, N2/C7)",
          flush=True)


def timeline_ms(calls: int = 1000, runs: int = 5) -> float:
    """Median ms to build a TokenTimeline (one SVG render, inline and as an image, + caption) of `calls` calls."""
    import pandas as pd

    from mxclaw_nb.widgets.timeline import TokenTimeline

    rows = []
    for i in range(calls):
        compacted = i % 37 == 36
        rows.append({"seq": i, "turn": i // 7 + 1, "iteration": i % 7 + 1, "estimate_tokens": 20_000 + 300 * (i % 37),
                     "after_tokens": 12_000 if compacted else 20_000 + 300 * (i % 37),
                     "before_tokens": 31_000 if compacted else None, "threshold": 30_000, "window_tokens": 40_000,
                     "stage": "summary" if compacted else "unchanged", "counter": "calibrated",
                     "calibrated_tokens": 20_500 + 300 * (i % 37)})
    df = pd.DataFrame(rows)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        TokenTimeline(df).close()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print one line per configuration (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--only", choices=["on", "off"], help="only widgets on / off")
    parser.add_argument("--token-delay", type=float, default=0.0,
                        help="seconds between the demo's streamed tokens (0: as fast as the loop takes them; "
                             "0.004: the interactive demo's pace)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--per-call", action="store_true", help="also time the view per model call in-process")
    parser.add_argument("--timeline", action="store_true", help="only time the timeline on 1,000 calls")
    args = parser.parse_args(argv)
    if args.timeline:
        print(f"timeline of 1,000 calls: median {timeline_ms():.0f} ms to build (SVG once + caption)", flush=True)
        return 0
    if args.per_call:
        per_call()
    configs = [True, False] if args.only is None else [args.only == "on"]
    results = []
    for widgets in configs:
        r = bench(args.turns, widgets, args.token_delay)
        results.append(r)
        print(f"widgets={'on ' if widgets else 'off'} turns={r['turns']} token_delay={args.token_delay}: "
              f"RSS {r['rss_start_mib']:.1f} -> "
              f"{r['rss_end_mib']:.1f} MiB, growth {r['rss_growth_per_turn_mib']:.2f} MiB/turn (median step "
              f"{r['rss_growth_median_mib']:.2f}); output traffic per turn median {r['traffic_median_kb']:.1f} KB "
              f"(max {r['traffic_max_kb']:.1f} KB, {r['iopub_messages_median']:.0f} iopub messages); "
              f"open widgets at the end: {r['open_widgets']}",
              flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
