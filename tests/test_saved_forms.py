"""What a saved notebook shows (SPEC N1, N2, S4): every `%agent` command run in a real kernel, saved, read back.

A notebook runs each command on the offline demo model in a real kernel (nbclient), with a small window so
the context is compacted, and is written to disk as .ipynb the way a user's save does. Read back, each
output must carry a static `text/html` and a `text/plain` (what GitHub, nbviewer, nbconvert, an untrusted
copy, a terminal and nbval read) with the same numbers and labels (est./calibrated/reported) as the store
the kernel wrote, and no output may depend on a widget model except the live session browser of the last
cell, which is followed by its static snapshot. The expected numbers are read from that DuckDB file after
the kernel stopped, not recomputed by the widgets under test.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
import pytest

from mxclaw_nb.widgets.style import counted, counter_label, fmt_int

REPO = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROMPTS = ("fix the failing tests", "look at the build log")
CELLS = {
    "load": "%load_ext mxclaw_nb",
    "config": "%agent config approval=allow context_window_tokens=6000 keep_recent_tokens=1500",
    "help": "%agent help",
    "gauge-next": "%agent gauge",
    "turn1": f"%%agent\n{PROMPTS[0]}",
    "turn2": f"%%agent\n{PROMPTS[1]}",
    "view": "%agent view",
    "view-before": "%agent view --before",
    "view-after": "%agent view --after",
    "gauge": "%agent gauge",
    "timeline": "%agent timeline",
    "compact": "%agent compact",
    "dry-run": "%agent dry-run review the code",
    "browse-mid": "%agent sessions --browse",
    "events": "%agent events --tail 3",
    "sql": "%agent sql SELECT count(*) AS calls FROM requests",
    "long-replay": "import sys\nimport mxclaw_nb.analysis.replay\n"
                   "sys.modules['mxclaw_nb.analysis.replay'].PROGRESS_DELAY = 0  # every replay shows its bar",
    "replay": "%agent replay --window 8000",
    "bar": "from IPython.display import display\nfrom mxclaw_nb.widgets.static import saved_progress\n"
           "for _ in saved_progress(display)(range(7), desc='steps'):\n    pass",
    "transcript": "%agent transcript",
    "sessions": "%agent sessions",
    "new": "%agent new",
    "turn3": "%agent --new check the logs",
    "browse-last": "%agent sessions --browse",
}


def build_notebook() -> nbformat.NotebookNode:
    """One code cell per command, each tagged with its key."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src, metadata={"tags": [key]}) for key, src in CELLS.items()]
    return nb


def execute_and_save(path: Path, db: Path, *, store_widget_state: bool = True) -> nbformat.NotebookNode:
    """Run the notebook in a real kernel on the demo model with the store at `db`; write it to `path`, read back."""
    import nbclient

    env = {"MXCLAW_DB": str(db), "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH"))
                                                                 if p)}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        nb = build_notebook()
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", store_widget_state=store_widget_state,
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


def outputs(nb: nbformat.NotebookNode, key: str) -> list[Any]:
    """The saved outputs of the cell tagged `key`."""
    cell = next(c for c in nb.cells if key in c.metadata.get("tags", []))
    return list(cell.outputs)


def rich(nb: nbformat.NotebookNode, key: str) -> list[dict[str, str]]:
    """The MIME bundles (display_data, execute_result) of a cell, in order."""
    return [dict(o["data"]) for o in outputs(nb, key) if o["output_type"] in ("display_data", "execute_result")]


def static(nb: nbformat.NotebookNode, key: str) -> dict[str, str]:
    """The one output of a cell that a reader sees: static HTML and text, no widget model behind it."""
    bundles = [b for b in rich(nb, key) if b.get("text/plain") or b.get("text/html")]
    assert len(bundles) == 1, (key, [list(b) for b in bundles])
    bundle = bundles[0]
    assert WIDGET_VIEW not in bundle and "text/html" in bundle and "text/plain" in bundle, (key, list(bundle))
    return bundle


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, dict[str, Any]]:
    """The executed, saved and re-read notebook, and what its store holds (read after the kernel stopped)."""
    from mxclaw_nb.store.writer import Store

    folder = tmp_path_factory.mktemp("saved")
    nb = execute_and_save(folder / "commands.ipynb", folder / "agent.duckdb")
    store = Store(str(folder / "agent.duckdb"), read_only=True)
    try:
        sessions = store.sessions()
        first = str(sessions.sort_values("created_at")["id"].iloc[0])
        facts = {"sessions": sessions, "first": first, "requests": store.requests(first),
                 "requests_of": {sid: store.requests(sid) for sid in sessions["id"]},
                 "events": len(store.events(first))}
    finally:
        store.close()
    return nb, facts


def _figures(row: Any) -> str:
    """`4,655 calibrated / 4,800 threshold / 6,000 window · unchanged`, from a stored request row."""
    return (f"{fmt_int(row['after_tokens'])} {counter_label(row['counter'])} / {fmt_int(row['threshold'])} threshold / "
            f"{fmt_int(row['window_tokens'])} window · {row['stage']}")


def test_n2_saved_turns_show_their_final_log_and_gauge(saved: Any) -> None:
    nb, facts = saved
    req = facts["requests"]
    for turn, key in ((1, "turn1"), (2, "turn2")):
        bundle = static(nb, key)
        calls = req[req["turn"] == turn]
        head = f"turn {turn} · done · {counted(len(calls), 'model call')}"
        assert head in bundle["text/plain"] and head in bundle["text/html"], bundle["text/plain"][:300]
        # the gauge of the turn's last call, in the unit the policy counted it in
        assert _figures(calls.iloc[-1]) in bundle["text/plain"]
        assert "\n→ " in bundle["text/plain"]  # the tool lines of the log
        # one "context compacted" line per compacted call of the turn, with its stage
        lines = [ln for ln in bundle["text/plain"].splitlines() if ln.startswith("⟳ context compacted before call ")]
        stages = calls.loc[calls["stage"].fillna("unchanged") != "unchanged", "stage"].tolist()
        assert [ln.split(": ", 1)[1].split(" ·")[0] for ln in lines] == stages, (lines, stages)


def test_n2_saved_view_gauge_timeline_compact_dry_run_are_static_with_the_stored_numbers(saved: Any) -> None:
    nb, facts = saved
    req = facts["requests"]
    last = req.iloc[-1]
    unit = counter_label(last["counter"])
    gauge = static(nb, "gauge")
    assert _figures(last) in gauge["text/plain"]
    assert f"every figure in <b>tokens ({unit})</b>" in gauge["text/html"]
    assert fmt_int(last["after_tokens"]) in gauge["text/html"]
    view = static(nb, "view")
    line = view["text/plain"].splitlines()[0]
    assert line.startswith(f"Stage: {last['stage']}") and f"after {fmt_int(last['after_tokens'])} {unit}" in line
    assert f"tokens ({unit})" in view["text/html"]
    compactions = int((req["stage"].fillna("unchanged") != "unchanged").sum())
    assert compactions >= 1  # the small window compacts: the saved views have something to show
    timeline = static(nb, "timeline")
    assert f"{counted(len(req), 'model call')}, {counted(compactions, 'compaction')}" in timeline["text/plain"]
    assert "<svg" in timeline["text/html"] and "data:image/svg+xml;base64," in timeline["text/html"]
    for rec in req.head(5).to_dict("records"):
        assert f"call {rec['seq'] - req['seq'].min() + 1}: {fmt_int(rec['estimate_tokens'])} est." in \
            timeline["text/plain"]
    # compact and dry-run: an inspector whose header and the caption printed above it agree
    for key in ("compact", "dry-run"):
        bundle = static(nb, key)
        caption = "".join(o.get("text", "") for o in outputs(nb, key) if o["output_type"] == "stream")
        stage = bundle["text/plain"].split()[1]
        assert stage in caption, (key, caption)
        assert bundle["text/plain"].startswith("Stage: ") and "Before (transcript)" in bundle["text/plain"]
    # the gauge of the next call before any call was made: a dry run, labelled est.
    assert "est. /" in static(nb, "gauge-next")["text/plain"]


def test_s4_saved_dataframe_commands_keep_their_tables(saved: Any) -> None:
    nb, facts = saved
    # the query ran before the third turn: the first session's calls were all there were
    assert f"<td>{len(facts['requests_of'][facts['first']])}</td>" in static(nb, "sql")["text/html"]
    for key in ("view-before", "view-after", "events", "replay", "transcript", "sessions"):
        bundle = static(nb, key)
        assert "<table" in bundle["text/html"], key
    assert facts["first"][:8] in static(nb, "sessions")["text/plain"]


def _browser_lines(facts: dict[str, Any]) -> list[str]:
    return [f"{str(r['id'])[:8]}  turns {fmt_int(r['turns'])}  calls {fmt_int(r['model_calls'])}  compactions "
            f"{fmt_int(r['compactions'])}  saved {fmt_int(r['tokens_saved_est'])} est."
            for r in facts["sessions"].to_dict("records")]


def test_n2_saved_session_browser_mid_notebook_is_a_frozen_snapshot(saved: Any) -> None:
    """A browser followed by another cell: its widget output is emptied and its snapshot says it was frozen."""
    nb, facts = saved
    bundles = rich(nb, "browse-mid")
    assert [b for b in bundles if WIDGET_VIEW in b] == []
    snap = static(nb, "browse-mid")
    assert "frozen when the next cell ran" in snap["text/plain"] and "mx-snapshot" in snap["text/html"]
    # at that point the store held one session: the first, with both turns
    first = facts["sessions"].loc[facts["sessions"]["id"] == facts["first"]].iloc[0]
    assert snap["text/plain"].splitlines()[1] == "1 session"  # after the note
    assert next(line for line in _browser_lines(facts) if line.startswith(facts["first"][:8])) in snap["text/plain"]
    assert fmt_int(first["tokens_saved_est"]) in snap["text/html"] and "tokens saved (est.)" in snap["text/html"]
    req = facts["requests"]
    compacted = req[req["stage"].fillna("unchanged") != "unchanged"].iloc[-1]  # the browser opens the last one
    assert f"call: turn {compacted['turn']}, call {compacted['iteration']} · {compacted['stage']}" in snap["text/plain"]
    assert _figures(compacted).rsplit(" · ", 1)[0] in snap["text/plain"]


def test_n2_saved_session_browser_as_last_cell_carries_its_snapshot(saved: Any) -> None:
    """The last cell keeps its live widget (nothing froze it); the output after it is its static snapshot."""
    nb, facts = saved
    bundles = rich(nb, "browse-last")
    assert len(bundles) == 2, [list(b) for b in bundles]
    live, snap = bundles
    assert WIDGET_VIEW in live and "live widget" in live["text/plain"]
    assert WIDGET_VIEW not in snap and "as last shown; the live one needs its kernel" in snap["text/plain"]
    assert snap["text/plain"].splitlines()[1] == counted(len(facts["sessions"]), "session")
    for line in _browser_lines(facts):
        assert line in snap["text/plain"]
    # opened on the current session (the one `--new` started), its last call
    current = facts["sessions"].sort_values("created_at")["id"].iloc[-1]
    last = facts["requests_of"][current].iloc[-1]
    want = facts["requests_of"][current]
    comp = want[want["stage"].fillna("unchanged") != "unchanged"]
    shown = comp.iloc[-1] if len(comp) else last
    assert f"call: turn {shown['turn']}, call {shown['iteration']} · {shown['stage']}" in snap["text/plain"]
    assert f"session {str(current)[:8]} · prompt tokens per model call" in snap["text/html"]  # its timeline
    assert "<svg" in snap["text/html"] and "data:image/svg+xml;base64," in snap["text/html"]


def test_n1_no_saved_output_needs_a_widget_model_but_the_last_live_browser(saved: Any) -> None:
    nb, _ = saved
    for cell in nb.cells:
        key = cell.metadata["tags"][0]
        for out in cell.outputs:
            assert out["output_type"] != "error", (key, out)
            if WIDGET_VIEW in out.get("data", {}):
                assert key == "browse-last", key


def test_n2_saved_progress_bars_show_their_end_not_their_first_state(saved: Any) -> None:
    """A replay's bar (tqdm, leave=False) saves as nothing, a kept bar as its final text; never "0%" or a widget."""
    nb, facts = saved
    replay = rich(nb, "replay")
    assert any(b == {"text/plain": ""} for b in replay), replay  # the bar was shown, then emptied
    for bundle in replay:
        assert WIDGET_VIEW not in bundle and "%|" not in bundle.get("text/plain", "")
    caption = "".join(o.get("text", "") for o in outputs(nb, "replay") if o["output_type"] == "stream")
    assert f" · {counted(len(facts['requests_of'][facts['first']]), 'call')} · " in caption  # every call replayed
    assert "<table" in static(nb, "replay")["text/html"]
    (bar,) = rich(nb, "bar")
    assert bar["text/plain"].startswith("steps: 100%|") and "7/7" in bar["text/plain"] and WIDGET_VIEW not in bar
