"""Per-call overheads the loop pays besides the model: the provider client over loopback HTTP and one tool run.

Why here and not in tests: these are speed figures, and the machines are noisy (SPEC L1, L2, L3: the loop
must not add a floor of its own to every model call). The tests check behaviour; this prints medians of
several rounds, side by side, so a change is compared before/after in one run:

    .venv/bin/python bench/overhead_bench.py [--rounds 5] [--calls 40]

- provider: `OpenAIProvider.complete` against the shipped OpenAI-compatible test server, stream on and off
  (guards against e.g. Nagle stalls, which cost 40 ms per call); target well under 40 ms.
- tool: `read_file` of a small file through the registry (confinement, text policy, result); target < 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.provider.client import OpenAIProvider
from mxclaw_nb.tools import ToolContext, default_registry

USER = [{"role": "user", "content": "hello"}]


def provider_ms(srv: TestServer, stream: bool, calls: int) -> float:
    p = OpenAIProvider(base_url=srv.base_url, model="test-model", api_key="k", stream=stream)
    p.complete(USER, None)  # warm: connection, tokenizer
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        p.complete(USER, None)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def tool_ms(calls: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d)
        (ws / "notes.md").write_text("a small note\n" * 20, encoding="utf-8")
        reg = default_registry()
        ctx = ToolContext(workspace=ws, session_id="bench", on_event=lambda k, p: None)
        t0 = time.perf_counter()
        for _ in range(calls):
            reg.run("read_file", '{"path": "notes.md"}', ctx)
        return (time.perf_counter() - t0) / calls * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"provider, stream off": [], "provider, stream on": [], "tool read_file": []}
    with TestServer() as srv:
        srv.usage_counter = "estimate"
        for _ in range(args.rounds):
            rows["provider, stream off"].append(provider_ms(srv, False, args.calls))
            rows["provider, stream on"].append(provider_ms(srv, True, args.calls))
            rows["tool read_file"].append(tool_ms(args.calls * 5))
    targets = {"provider, stream off": 40.0, "provider, stream on": 40.0, "tool read_file": 20.0}
    print(f"{'per call':<22} {'median ms':>10} {'worst round':>12} {'target ms':>10} {'ratio':>6}")
    for name, values in rows.items():
        med = statistics.median(values)
        print(f"{name:<22} {med:>10.2f} {max(values):>12.2f} {targets[name]:>10.0f} {med / targets[name]:>6.2f}")


if __name__ == "__main__":
    main()
