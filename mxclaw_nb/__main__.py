"""Command line: `python -m mxclaw_nb demo` runs a few offline turns and prints the context at each call.

It is the README's main job: no key, no network, a fresh sample workspace, and per model call the
numbers the notebook widgets show (estimate, threshold, stage, before -> after tokens), so a user sees
the context engine work before opening Jupyter.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from mxclaw_nb.demo.plans import TASKS
from mxclaw_nb.tools.policy import terminal_safe

# Three of the demo's scripted tasks, in the order that fills the context (fix, build log, recap); the same
# example prompts the demo model lists when a prompt matches none of its scripts.
DEMO_PROMPTS = tuple(example for name, _, example in TASKS if name in ("fix", "logs", "summary"))


def _printer(kind: str, payload: dict[str, Any]) -> None:
    if kind == "request.built":
        v = payload["view"]
        retry = "  (prompt-too-long retry)" if payload.get("retry") else ""
        print(f"  call {payload['turn']}.{payload['iteration']}: {v.before_tokens:>6,} -> {v.after_tokens:>6,} "
              f"{'est.' if v.counter == 'estimate' else v.counter} tokens · threshold {v.threshold:,} / "
              f"window {v.window:,} · stage {v.stage}{retry}")
    elif kind == "context.compacted":
        first = (payload.get("summary") or "").splitlines()[0] if payload.get("summary") else ""
        unit = "est." if payload.get("tokens_are") == "estimates" else payload.get("tokens_are", "est.")
        print(f"  ⟳ context compacted: {payload['stage']} · {payload['before_tokens']:,} -> "
              f"{payload['after_tokens']:,} {unit} tokens · {terminal_safe(first[:90])}")
    elif kind == "tool.finished":
        status = "failed" if payload["is_error"] else "ok"
        stored = payload.get("artifact_id") and payload["name"] != "read_artifact"  # A1: a new artifact
        extra = f" · stored as {payload['artifact_id']}" if stored else ""
        print(f"    → {payload['name']:<13} {status} · {payload['chars']:,} chars{extra}")
    elif kind == "model.completed" and payload.get("usage"):
        print(f"    reported prompt tokens: {payload['usage']['prompt_tokens']:,}")


def demo(args: argparse.Namespace) -> int:
    """Run the offline demo agent for a few turns and print per-call context figures."""
    from mxclaw_nb.agent import Agent
    from mxclaw_nb.connect import demo_provider

    db = args.db or str(Path(tempfile.mkdtemp(prefix="mxclaw-demo-")) / "demo.duckdb")
    # Always the offline demo model, even when a key is configured; MXCLAW_CONTEXT_WINDOW still applies.
    agent = Agent(db=db, provider=demo_provider(), approval="allow", counter=args.counter)
    print(f"mxclaw_nb demo · {agent.label} · session {agent.session_id[:8]} · store {agent.store.path}")
    print(f"workspace (a fresh copy of the sample project): {agent.workspace}\n")
    agent.subscribe(_printer)
    for prompt in DEMO_PROMPTS[: args.turns]:
        print(f"> {prompt}")
        result = agent.run(prompt)
        print(f"\n{terminal_safe(result.text)}\n")  # a model's escape sequences never reach the terminal raw
    requests = agent.store.requests(agent.session_id)
    print(f"{len(requests)} model calls stored; stages: {requests['stage'].value_counts().to_dict()}")
    agent.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m mxclaw_nb` / `mxclaw-nb`."""
    parser = argparse.ArgumentParser(prog="mxclaw-nb", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the offline demo agent and print the context engine at work")
    p.add_argument("--turns", type=int, default=3, help="number of turns (1-3, default 3)")
    p.add_argument("--db", help="DuckDB file to use (default: a new temporary file)")
    p.add_argument("--counter", default="auto", help="token counter: auto, estimate, o200k_base, ...")
    args = parser.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
