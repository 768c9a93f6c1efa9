"""SPEC K2 vs C5: tokens saved by typed vs plain placeholders, and fact survival, per transcript.

Usage: .venv/bin/python bench/typed_micro_bench.py
Rows: the demo model's data-notebook task (three offline turns of the real agent with the ``python`` tool on
the shipped sales.csv: load, describe, find the anomaly, weekly sums, plot), and the three shared transcripts
with the largest compactable tool outputs (successful, before the tail). Tail = last 4 messages (never compacted).
Fact survival = share of facts (paths, numbers, identifiers) of the compacted outputs still in the view;
K1 = share of the facts the kernel tools recorded per output (variable names, type, shape, first columns) that
the output's own placeholder keeps (n/a for transcripts without kernel tools).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from mxclaw_nb import Agent
from mxclaw_nb.context.micro import PLACEHOLDER, placeholder_for
from mxclaw_nb.context.tokens import estimate_text
from mxclaw_nb.messages import content_text, is_failure

SHARED = Path(__file__).resolve().parents[2] / "shared" / "transcripts"
TAIL = 4
DEMO_PROMPTS = ("Load the sample sales CSV, find the anomaly and plot it.", "plot the sales anomaly again",
                "find the anomaly in the sales data")
FACT_RE = re.compile(r"(?:/[\w.-]+)+|\b\d[\d,.]*\b|\b[A-Za-z_][A-Za-z0-9_]{3,}\b")


def _demo_messages() -> list[dict[str, Any]]:
    """The demo model's data-notebook task (K1), run offline through the real agent loop on a kernel-like
    namespace: three turns on the shipped demo/workspace/data/sales.csv; the stored transcript (full outputs,
    recorded facts) is what the placeholders are measured on."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_CONTEXT_WINDOW"):
        os.environ.pop(name, None)
    tmp = Path(tempfile.mkdtemp(prefix="typed-bench-"))
    ns: dict[str, Any] = {}
    agent = Agent(db=str(tmp / "bench.duckdb"), home=tmp / "home", approval="allow", namespace=lambda: ns)
    for prompt in DEMO_PROMPTS:
        agent.run(prompt)
    return [m for m in agent.transcript() if isinstance(m, dict)]


def _shared() -> list[tuple[str, list[dict[str, Any]]]]:
    rows = []
    for f in sorted(SHARED.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if all(r[0] != f"{f.stem}:{rec['id'][-30:]}" for r in rows):
                rows.append((f"{f.stem}:{rec['id'][-30:]}", rec["messages"]))
    size = lambda m: sum(len(content_text(x.get("content"))) for x in m[:-TAIL]  # noqa: E731 - compactable only
                         if x.get("role") == "tool" and not is_failure(x))
    return sorted(rows, key=lambda r: -size(r[1]))[:3]


def _kernel_facts(rec: dict[str, Any]) -> list[str]:
    """The recorded K1 facts a reader needs to go on without the output: variable names, type, shape, columns."""
    shape = "x".join(f"{d:,}" for d in rec.get("shape") or [])
    return [str(x) for x in [*rec.get("variables", []), rec.get("type"), shape, *rec.get("columns", [])[:3]] if x]


def measure(messages: list[dict[str, Any]]) -> tuple[int, int, int, float, float, str, str]:
    head = messages[:-TAIL]
    before = plain = typed = 0
    kernel = kernel_plain = kernel_typed = 0
    facts: set[str] = set()
    kept_plain: set[str] = set()
    kept_typed: set[str] = set()
    for m in head:
        text = content_text(m.get("content"))
        if m.get("role") != "tool" or is_failure(m):
            continue
        t = placeholder_for(m)
        if t is None:
            continue
        p = PLACEHOLDER.format(n=len(text))
        before += estimate_text(text)
        plain += estimate_text(p)
        typed += estimate_text(t)
        f = set(FACT_RE.findall(text))
        rec = m.get("facts") or {}
        f |= {str(x) for x in [*rec.get("variables", []), *rec.get("columns", [])[:3]]}
        facts |= f
        kept_plain |= {x for x in f if x in p}
        kept_typed |= {x for x in f if x in t}
        recorded = _kernel_facts(rec)  # per output: does its own placeholder keep them?
        kernel += len(recorded)
        kernel_plain += sum(x in p for x in recorded)
        kernel_typed += sum(x in t for x in recorded)
    n = max(1, len(facts))
    kp = f"{kernel_plain / kernel:.1%}" if kernel else "n/a"
    kt = f"{kernel_typed / kernel:.1%}" if kernel else "n/a"
    return before, before - plain, before - typed, len(kept_plain) / n, len(kept_typed) / n, kp, kt


def main() -> None:
    rows = [("demo data task (sales.csv, 3 turns)", _demo_messages())] + _shared()
    print(f"{'transcript':44} {'old tok':>8} {'saved plain':>11} {'saved typed':>11} {'facts plain':>11} "
          f"{'facts typed':>11} {'K1 plain':>8} {'K1 typed':>8}")
    for name, msgs in rows:
        b, sp, st, fp, ft, kp, kt = measure(msgs)
        print(f"{name[:44]:44} {b:8,} {sp:11,} {st:11,} {fp:11.1%} {ft:11.1%} {kp:>8} {kt:>8}")


if __name__ == "__main__":
    main()
