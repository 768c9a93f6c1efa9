"""The notebook the browser test opens: a real DuckDB store with one session, then gauge, timeline, inspector.

Why a separate module: the same cells are what a user would type to look at a stored session, so
they double as a readable example; the test writes them into JupyterLab's temporary root folder.
`expected()` recomputes, in the test process, the numbers the rendered DOM must show.
"""

from __future__ import annotations

from typing import Any

import nbformat

INSPECTOR_ROWS = 12
# Request i is built over the first CUTS[i] transcript messages; the first two calls are turn 1.
CUTS = (12, 20, 28, 36, 42)
TURN1_MESSAGES = 20

SETUP = f'''\
from mxclaw_nb.context import ContextPolicy, build_request_view, estimate_messages
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example
from mxclaw_nb.store.writer import Store
from mxclaw_nb.widgets import CompactionInspector, ContextGauge, TokenTimeline

store = Store({{db_path!r}})
msgs, policy = worked_example(), ContextPolicy(**WORKED_EXAMPLE_POLICY)
sid = store.create_session(title="worked example (article)", model="demo model (offline)")
store.append_messages(sid, msgs[:{TURN1_MESSAGES}], turn=1)
store.append_messages(sid, msgs[{TURN1_MESSAGES}:], turn=2)
for i, k in enumerate({CUTS!r}, start=1):
    view = build_request_view(msgs[:k], policy)
    turn = 1 if k <= {TURN1_MESSAGES} else 2
    store.append_request(sid, {{
        "turn": turn, "iteration": i, "counter": view.counter, "estimate_tokens": estimate_messages(view.messages),
        "before_tokens": view.before_tokens, "after_tokens": view.after_tokens, "threshold": view.threshold,
        "window_tokens": view.window, "stage": view.stage, "summary": view.summary,
        "prompt_tokens_reported": round(view.after_tokens * 1.18), "provenance": view.provenance.to_records()}})
    if view.event():
        store.append_event(sid, "context.compacted", view.event(), turn=turn, iteration=i)
last = store.requests(sid).iloc[-1]
print("stored", len(store.requests(sid)), "model calls in session", sid[:8])
'''
CELLS = [
    "# mxclaw_nb widgets on a stored session\n\nGauge, token timeline and compaction inspector of the last model "
    "call, read back from DuckDB.",
    SETUP,
    "ContextGauge.from_request(last)",
    "TokenTimeline(store=store, session_id=sid)",
    f"CompactionInspector.from_request(store, sid, int(last.turn), int(last.iteration), max_rows={INSPECTOR_ROWS})",
]


def build_notebook(db_path: str) -> nbformat.NotebookNode:
    """The notebook, with the store at `db_path`."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(CELLS[0])]
    nb.cells += [nbformat.v4.new_code_cell(src.replace("{db_path!r}", repr(db_path))) for src in CELLS[1:]]
    return nb


def expected() -> dict[str, Any]:
    """Stage, tokens, summary and row counts of the last call, computed here with the same engine."""
    from mxclaw_nb.context import ContextPolicy, build_request_view
    from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example

    view = build_request_view(worked_example()[: CUTS[-1]], ContextPolicy(**WORKED_EXAMPLE_POLICY))
    return {"stage": view.stage, "after_tokens": view.after_tokens, "before_tokens": view.before_tokens,
            "summary_first_line": (view.summary or "").splitlines()[0], "before_rows": len(view.provenance.before),
            "summary": view.summary or "", "calls": len(CUTS)}
