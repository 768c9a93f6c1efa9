"""A real local model drives the agent until its context compacts (SPEC L2, L7, T1-T3, C5, C6, N2).

Needs a running OpenAI-compatible server with a tool-calling model (scripts/setup_realmodel.sh serve: Qwen2.5-Coder
1.5B Q4_K_M through llama.cpp's llama-server --jinja, offline) at MXCLAW_TEST_MODEL_URL. A small window (2,800
tokens, threshold 2,240; the tool definitions alone are ~900) and a 600-token safe tail make compaction happen
within three turns on 2 shared CPU cores (where one call takes minutes): two tool-reading turns (micro when the
second file comes in), then a long pasted message micro alone cannot fit (summary), then turns after it. It stops
once a micro and a summary compaction happened and a later turn was answered without a new one, then writes:

- `bench/realmodel_session.json`: per call (turn, call, stage, counter, C1 estimate incl. the tool definitions,
  the tool-definitions layer, calibrated count, reported prompt_tokens, reported/estimate), the compactions, the
  counts (calls, tool calls, text-parsed calls) and the first-call estimate against reported;
- the DuckDB file (`--db`, default /tmp/mxclaw-realmodel.duckdb) for the timeline/inspector screenshots
  (tests/browser/test_realmodel_screens.py reads it).

    MXCLAW_TEST_MODEL_URL=http://127.0.0.1:8091/v1 .venv/bin/python bench/realmodel_session.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mxclaw_nb import Agent  # noqa: E402
from mxclaw_nb.loop import TurnFailed  # noqa: E402

FILES = {
    "notes_a.txt": "Shipping notes, part A.\n" + "".join(
        f"Crate {i}: {['apples', 'pears', 'plums', 'figs'][i % 4]}, weight {10 + i} kg, dock {i % 3}.\n"
        for i in range(30)),
    "notes_b.txt": "Shipping notes, part B.\n" + "".join(
        f"Pallet {i}: {['bolts', 'nuts', 'screws'][i % 3]}, count {100 + 7 * i}, aisle {i % 5}.\n" for i in range(30)),
    "notes_c.txt": "Shipping notes, part C.\n" + "".join(
        f"Box {i}: {['paper', 'ink', 'tape', 'glue'][i % 4]}, price {3 + i} EUR, shelf {i % 4}.\n" for i in range(30)),
    "todo.txt": "1. count the crates\n2. check the pallets\n3. price the boxes\n",
}
PASTE_LINES = int(os.environ.get("MXCLAW_BENCH_PASTE_LINES", "120"))
PASTED = "".join(f"Box {i}: {['paper', 'ink', 'tape', 'glue'][i % 4]}, price {3 + i} EUR, shelf {i % 4}.\n"
                 for i in range(PASTE_LINES))
# Short prompts: tool calls in turns 1-2 (micro compaction when the second file comes in), then a long pasted
# message that micro alone cannot make fit (summary), then turns after it to show the model goes on.
PROMPTS = [
    "Read notes_a.txt with read_file and tell me how many crates it lists.",
    "Read notes_b.txt with read_file. Which aisle holds pallet 7?",
    f"Here is a price list:\n{PASTED}\nWhich box costs 8 EUR? Answer in a few words.",
    "Read todo.txt with read_file and say which task is first.",
    "One word: are we done?",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("MXCLAW_TEST_MODEL_URL"))
    ap.add_argument("--db", default=str(Path(tempfile.gettempdir()) / "mxclaw-realmodel.duckdb"))
    ap.add_argument("--window", type=int, default=2800)
    ap.add_argument("--keep", type=int, default=600, help="keep_recent_tokens (C3)")
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".json")))
    args = ap.parse_args()
    if not args.url:
        print("set MXCLAW_TEST_MODEL_URL (see scripts/setup_realmodel.sh)", file=sys.stderr)
        return 2
    ws = Path(tempfile.mkdtemp(prefix="mxclaw-realmodel-ws-"))
    for name, text in FILES.items():
        (ws / name).write_text(text, encoding="utf-8")
    Path(args.db).unlink(missing_ok=True)
    agent = Agent(workspace=ws, db=args.db, base_url=args.url, api_key="local", model="",
                  context_window_tokens=args.window, keep_recent_tokens=args.keep, approval="deny",
                  max_iterations=4, max_tokens=96, call_deadline=600)
    turns: list[dict[str, Any]] = []
    started = time.perf_counter()
    stages_seen: set[str] = set()
    for prompt in PROMPTS:
        t0 = time.perf_counter()
        try:
            result = agent.run(prompt)
            turns.append({"prompt": prompt, "status": result.status, "iterations": result.iterations,
                          "answer": result.text[:300], "stages": [c["stage"] for c in result.compactions],
                          "seconds": round(time.perf_counter() - t0, 1)})
            stages_seen |= {c["stage"] for c in result.compactions}
        except TurnFailed as exc:
            turns.append({"prompt": prompt, "status": "failed", "kind": exc.kind, "error": str(exc)[:400],
                          "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(turns[-1], ensure_ascii=False), flush=True)
        if {"micro", "summary"} <= stages_seen and turns[-1]["status"] == "ok" and not turns[-1].get("stages"):
            break
    report = summarize(agent, turns, time.perf_counter() - started, args)
    Path(args.out).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report["counts"], indent=1))
    print("first call:", json.dumps(report["first_call"]))
    return 0


def summarize(agent: Agent, turns: list[dict[str, Any]], seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    sid = agent.session_id
    req = agent.store.requests(sid)
    ev = agent.store.events(sid)
    calls = []
    for _, r in req.iterrows():
        extra = r["extra"] if isinstance(r["extra"], dict) else json.loads(r["extra"] or "{}")
        est, rep = _int(r["estimate_tokens"]), _int(r["prompt_tokens_reported"])
        calls.append({"turn": _int(r["turn"]), "call": _int(r["iteration"]), "stage": r["stage"],
                      "counter": r["counter"], "estimate_tokens": est,
                      "tool_definitions_tokens": extra.get("tool_definitions_tokens"),
                      "calibrated_tokens": _int(r["calibrated_tokens"]), "after_tokens": _int(r["after_tokens"]),
                      "before_tokens": _int(r["before_tokens"]), "threshold": _int(r["threshold"]),
                      "prompt_tokens_reported": rep, "max_tokens": extra.get("max_tokens"),
                      "reported_over_estimate": round(rep / est, 3) if rep and est else None,
                      "reported_over_calibrated": round(rep / _int(r["calibrated_tokens"]), 3)
                      if rep and _int(r["calibrated_tokens"]) else None,
                      "latency_s": round(float(r["latency_ms"]) / 1000, 1) if r["latency_ms"] == r["latency_ms"]
                      and r["latency_ms"] is not None else None, "error": r["error"] if isinstance(r["error"], str)
                      else None})
    transcript = agent.transcript()
    tool_calls = sum(len(m.get("tool_calls") or []) for m in transcript if m.get("role") == "assistant")
    def payloads(kind: str) -> list[dict[str, Any]]:
        return [json.loads(p) if isinstance(p, str) else p for p in ev[ev["type"] == kind]["payload"]]

    notes = payloads("provider.note")
    text_parsed = sum(int(n.get("calls") or 0) for n in notes if n.get("text_calls"))
    compactions = payloads("context.compacted")
    skipped = payloads("context.nothing_to_gain")
    first = calls[0] if calls else {}
    return {
        "model": agent.provider.model, "server": "llama.cpp llama-server (llama-cpp-python 0.3.16 vendor) --jinja",
        "window": args.window, "keep_recent_tokens": args.keep, "threshold": agent.policy.threshold,
        "seconds": round(seconds, 1), "session_id": sid, "db": args.db,
        "counts": {"turns": len(turns), "calls": len(calls), "tool_calls": tool_calls,
                   "text_parsed_calls": text_parsed,
                   "compactions": {s: sum(1 for c in compactions if c.get("stage") == s)
                                   for s in ("micro", "summary", "fallback", "prompt_too_long_retry")},
                   "nothing_to_gain": len(skipped),
                   "failed_turns": sum(1 for t in turns if t["status"] == "failed")},
        "first_call": {"estimate_tokens": first.get("estimate_tokens"),
                       "tool_definitions_tokens": first.get("tool_definitions_tokens"),
                       "prompt_tokens_reported": first.get("prompt_tokens_reported"),
                       "estimate_error": round(first["estimate_tokens"] / first["prompt_tokens_reported"] - 1, 4)
                       if first.get("prompt_tokens_reported") and first.get("estimate_tokens") else None},
        "turns": turns, "calls": calls,
        "compactions": [{k: c.get(k) for k in ("stage", "before_tokens", "after_tokens", "tokens_are")}
                        for c in compactions],
    }


def _int(v: Any) -> int | None:
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError):
        return None


if __name__ == "__main__":
    raise SystemExit(main())
