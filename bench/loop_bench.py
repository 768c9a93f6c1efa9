"""Loop overhead per iteration, everything but the model call (issue 4).

A session of N stored messages (1k, 10k) gets one turn of K iterations against the local test server
(each reply is a cheap `list_dir` call, then an answer). We time the whole turn and subtract the time
spent inside `provider.complete` (HTTP + the server), so what remains is the loop's own work: loading
the transcript, building the request view (C0) each iteration, storing messages, request records and
events in DuckDB, and running the tool. Printed as medians over several runs, per iteration, and as
a share of a 1-second model call.

    .venv/bin/python bench/loop_bench.py [--runs 5] [--iterations 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mxclaw_nb import Agent
from mxclaw_nb.examples import synthetic_transcript
from mxclaw_nb.testserver import TestServer


def one_run(n_messages: int, iterations: int, root: Path, window: int = 128_000) -> tuple[float, float, float]:
    """(loop overhead per iteration ms, view build per iteration ms, turn total ms)."""
    ws = root / "ws"
    ws.mkdir(exist_ok=True)
    with TestServer(usage_counter="estimate") as srv:
        agent = Agent(workspace=ws, db=str(root / f"bench-{n_messages}-{time.monotonic_ns()}.duckdb"),
                      base_url=srv.base_url, api_key="k", model="bench-model", approval="allow",
                      context_window_tokens=window)
        agent.store.create_session(session_id=agent.session_id, source="bench")
        agent.store.append_messages(agent.session_id, synthetic_transcript(n_messages), turn=0)
        for _ in range(iterations - 1):
            srv.enqueue_tool_calls([("list_dir", {"path": "."})])
        srv.enqueue_text("done")
        provider_ms: list[float] = []
        complete = agent.provider.complete

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return complete(*args, **kwargs)
            finally:
                provider_ms.append((time.perf_counter() - t0) * 1000)

        agent.provider.complete = timed  # type: ignore[method-assign]
        build_ms: list[float] = []
        marks: dict[str, float] = {}
        agent.subscribe(lambda kind, p: marks.__setitem__("built", time.perf_counter()) if kind == "request.built"
                        else None)
        t0 = time.perf_counter()
        result = agent.run("go")
        total = (time.perf_counter() - t0) * 1000
        assert result.iterations == iterations, result
        agent.close()
    overhead = (total - sum(provider_ms)) / iterations
    for view in result.views:  # view build cost measured separately, same inputs, warm cache
        t1 = time.perf_counter()
        view.next_input([])
        build_ms.append((time.perf_counter() - t1) * 1000)
    return overhead, statistics.median(build_ms), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    print(f"{'session':>10} {'window':>10} {'view':>10} {'loop overhead/iter':>20} {'share of 1 s call':>18} "
          f"{'turn total':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        # 128k: the session compacts on the first call and the loop then works on the small view (C7);
        # 4M: everything fits, so every call sends (and stores the provenance of) the whole session
        for window, label in ((128_000, "compacted"), (4_000_000, "whole")):
            for n in (1_000, 10_000):
                runs = [one_run(n, args.iterations, Path(tmp), window) for _ in range(args.runs)]
                overhead = statistics.median(r[0] for r in runs)
                total = statistics.median(r[2] for r in runs)
                print(f"{n:>10,} {window:>10,} {label:>10} {overhead:>17.1f} ms {overhead / 1000:>17.2%} "
                      f"{total:>9.0f} ms")


if __name__ == "__main__":
    main()
