"""SPEC K2 vs C5: tokens saved by typed vs plain placeholders, and fact survival, per transcript.

Usage: .venv/bin/python bench/typed_micro_bench.py
Rows: a data task run through the real ``python`` tool on a pandas namespace (10,000-row sales frame),
and the three shared transcripts with the largest tool outputs. Tail = last 4 messages (never compacted).
Fact survival = share of facts (paths, numbers, identifiers) of the compacted outputs still in the view.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mxclaw_nb.context.micro import PLACEHOLDER, placeholder_for
from mxclaw_nb.context.tokens import estimate_text
from mxclaw_nb.messages import content_text, is_failure
from mxclaw_nb.tools.base import ToolContext
from mxclaw_nb.tools.kernel_tools import kernel_variables, run_python

SHARED = Path(__file__).resolve().parents[2] / "shared" / "transcripts"
TAIL = 4
FACT_RE = re.compile(r"(?:/[\w.-]+)+|\b\d[\d,.]*\b|\b[A-Za-z_][A-Za-z0-9_]{3,}\b")


def _demo_messages() -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"id": range(10_000), "ts": pd.date_range("2026-01-01", periods=10_000, freq="h"),
                       "price": rng.normal(100, 5, 10_000).round(2)})
    df.loc[4242, "price"] = 999.0
    ns: dict[str, Any] = {"df_sales": df}
    ctx = ToolContext(workspace=Path(tempfile.gettempdir()), session_id="bench", approval="allow")
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "find the anomaly in df_sales and plot it"}]
    for i, (fn, args) in enumerate([(run_python, {"code": "sales = df_sales.copy()\nsales"}),
                                    (run_python, {"code": "z = (df_sales.price - df_sales.price.mean()).abs()\n"
                                                          "spikes = df_sales[z > 5 * df_sales.price.std()]\nspikes"}),
                                    (run_python, {"code": "described = df_sales.describe()\ndescribed"}),
                                    (kernel_variables, {})]):
        res = fn(args, ctx, lambda: ns)
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                     "function": {"name": fn.__name__, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": res.content,
                     "is_error": res.is_error, **({"facts": res.meta["facts"]} if "facts" in res.meta else {})})
    msgs.append({"role": "assistant", "content": "spike at id 4242 (price 999.0)"})
    return msgs


def _shared() -> list[tuple[str, list[dict[str, Any]]]]:
    rows = []
    for f in sorted(SHARED.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if all(r[0] != f"{f.stem}:{rec['id'][-30:]}" for r in rows):
                rows.append((f"{f.stem}:{rec['id'][-30:]}", rec["messages"]))
    size = lambda m: sum(len(content_text(x.get("content"))) for x in m if x.get("role") == "tool")  # noqa: E731
    return sorted(rows, key=lambda r: -size(r[1]))[:3]


def measure(messages: list[dict[str, Any]]) -> tuple[int, int, int, float, float]:
    head = messages[:-TAIL]
    before = plain = typed = 0
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
    n = max(1, len(facts))
    return before, before - plain, before - typed, len(kept_plain) / n, len(kept_typed) / n


def main() -> None:
    rows = [("demo data task (python tool)", _demo_messages())] + _shared()
    print(f"{'transcript':44} {'old tok':>8} {'saved plain':>11} {'saved typed':>11} {'facts plain':>11} "
          f"{'facts typed':>11}")
    for name, msgs in rows:
        b, sp, st, fp, ft = measure(msgs)
        print(f"{name[:44]:44} {b:8,} {sp:11,} {st:11,} {fp:11.1%} {ft:11.1%}")


if __name__ == "__main__":
    main()
