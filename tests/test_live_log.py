"""The live turn log where a user meets it (SPEC N1, N2, C10; UX.md "A turn in a notebook (live)").

A real kernel (nbclient) runs `%%agent` against the scripted server over HTTP, with and without widgets;
we read what the saved notebook keeps (the final state of the live output). The log must read in event
order (narration of a call, its tool lines, the compaction notice, the next narration), tool lines open
on [show] to their arguments and output, the answer stands apart from the narration, code and
tracebacks are monospace, and no sentence is cut at a period. The widget's cost rules (inspector built
lazily, replaced widgets closed, a finished turn keeps no widget or request view alive) are checked on
the view itself, fed the loop's events, and in the kernel (no widget left open after the turns).
"""

from __future__ import annotations

import gc
import json
import re
import weakref
from pathlib import Path

import nbformat

from mxclaw_nb.context import ContextPolicy, build_request_view
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.notebook.livelog import LiveLog
from mxclaw_nb.widgets import LiveTurnView
from mxclaw_nb.widgets.livetext import rich_text_html
from tests.test_kernel import kernel_env, run_notebook

POLICY = ContextPolicy(**WORKED_EXAMPLE_POLICY)
NARRATION_1 = "First I list the folder, then the policy under .mx-claw/. 2) comes next."
NARRATION_2 = ("The run failed:\nTraceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n"
               "    main()\nValueError: bad shelf\nReading the file.")
ANSWER = "Done. The fix is one line:\n\n    total = sum(items)\n\nand `total_value` passes now."


def _script(srv: TestServer) -> None:
    srv.enqueue_tool_calls([("list_dir", {"path": "."})], text=NARRATION_1)
    srv.enqueue_tool_calls([("read_file", {"path": "notes.txt"})], text=NARRATION_2)
    srv.enqueue_text(ANSWER)


def _turn(tmp_path: Path, widgets: bool) -> nbformat.NotebookNode:
    (tmp_path / "notes.txt").write_text("shelf A: 3 items\n" * 40, encoding="utf-8")
    with TestServer() as srv:
        _script(srv)
        env = kernel_env(tmp_path / "live.duckdb", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="k",
                         MXCLAW_MODEL="test-model")
        nb, _ = run_notebook([f"%load_ext mxclaw_nb\n%config AgentMagics.widgets = {widgets}",
                              "%%agent\ncheck the shelf", "import ipywidgets\nprint(len(ipywidgets.Widget.widgets))"],
                             tmp_path, env)
    assert not any(o.output_type == "error" for c in nb.cells for o in c.outputs)
    return nb


def _in_order(text: str, *needles: str) -> None:
    at = [text.find(n) for n in needles]
    assert all(i >= 0 for i in at), [n for n, i in zip(needles, at, strict=True) if i < 0]
    assert at == sorted(at), f"out of order: {needles}"


def _check_saved_log(nb: nbformat.NotebookNode) -> tuple[str, str]:
    live = [o for o in nb.cells[1].outputs if o.output_type == "display_data"]
    assert len(live) == 1  # one output, updated in place
    data = live[0].data
    assert "application/vnd.jupyter.widget-view+json" not in data  # final state: static, survives a reopen
    plain, html = data["text/plain"], data["text/html"]
    _in_order(plain, "First I list the folder", "→ list_dir .", "The run failed", "→ read_file notes.txt", "Done.")
    _in_order(html, "call 1 · model", "→ list_dir .", "call 2 · model", "→ read_file notes.txt", "mx-answer",
              "Done. The fix")
    assert "under .mx-claw/. 2) comes next." in plain and "under .mx-claw/. 2) comes next." in html
    assert html.count("mx-answer") == 1 and "First I list" not in html.split("mx-answer", 1)[1]
    tool = re.search(r'<details class="mx-tool".*?→ read_file notes.txt.*?</details>', html, re.S)
    assert tool is not None and "[show]" in tool.group(0) and "arguments" in tool.group(0)
    assert "&quot;path&quot;: &quot;notes.txt&quot;" in tool.group(0) and "shelf A: 3 items" in tool.group(0)
    assert re.search(r'<pre class="mx-code"[^>]*>Traceback \(most recent call last\):.*ValueError: bad shelf</pre>',
                     html, re.S)
    assert re.search(r'<pre class="mx-code"[^>]*>    total = sum\(items\)</pre>', html)
    assert "<code>total_value</code>" in html
    return plain, html


def test_live_log_without_widgets_reads_in_event_order(tmp_path: Path) -> None:
    """The text/HTML log (widgets off): event order, [show] with arguments and output, the answer apart."""
    nb = _turn(tmp_path, widgets=False)
    plain, _ = _check_saved_log(nb)
    assert "(done · 3 model calls)" in plain


def test_live_widget_turn_ends_static_and_closes_every_widget(tmp_path: Path) -> None:
    """The widget view: same log once the turn ends, as static HTML; no widget of the turn stays open."""
    nb = _turn(tmp_path, widgets=True)
    plain, html = _check_saved_log(nb)
    assert "turn 1 · done · 3 model calls" in plain and "model calls of this turn" in html
    stdout = "".join(o.text for o in nb.cells[2].outputs if o.output_type == "stream" and o.name == "stdout")
    assert stdout.strip() == "0"


def _events(view: object, first: object, second: object) -> None:
    feed = view.handle  # type: ignore[attr-defined]
    feed("turn.started", {"session_id": "3f2a9c", "turn": 2, "model_label": "demo model"})
    feed("request.built", {"turn": 2, "iteration": 1, "view": first})
    for piece in ("Listing ", "the folder", " first."):
        feed("model.delta", {"text": piece})
    feed("model.completed", {"usage": {"prompt_tokens": 900}})
    feed("tool.started", {"call_id": "c1", "name": "bash", "arguments": '{"command": "pytest -q"}'})
    feed("approval.decided", {"command": "pytest -q", "decision": "allow", "by": "user"})
    feed("tool.finished", {"call_id": "c1", "name": "bash", "is_error": True, "content": "E assert 1 == 2",
                           "chars": 15, "exit_code": 1})
    feed("request.built", {"turn": 2, "iteration": 2, "view": second})
    feed("context.compacted", {"stage": second.stage, "before_tokens": second.before_tokens,  # type: ignore
                               "after_tokens": second.after_tokens, "summary": "s", "iteration": 2})
    feed("model.delta", {"text": "All green now."})
    feed("model.completed", {"usage": None})
    feed("turn.finished", {"text": "All green now.", "iterations": 2})


def test_live_turn_view_order_spinner_lazy_inspector_and_release() -> None:
    """Event order in text and HTML, a spinner while waiting, the inspector only when opened, everything closed."""
    msgs = worked_example()
    first, second = build_request_view(msgs[:20], POLICY), build_request_view(msgs, POLICY)
    view = LiveTurnView()
    view.handle("turn.started", {"session_id": "s", "turn": 2})
    view.handle("request.built", {"turn": 2, "iteration": 1, "view": first})
    assert "waiting for the model (call 1)" in view._activity.value and "mx-spinner" in view._activity.value
    assert view.inspector is None and view.calls[1].before  # built only when opened
    view = LiveTurnView()
    _events(view, first, second)
    lines = view.to_text().splitlines()
    tool = "→ bash pytest -q  ✓ approved by user · failed (exit 1) · 15 chars · E assert 1 == 2"
    assert lines[2:] == ["Listing the folder first.", tool, lines[4], "All green now."]
    assert lines[4].startswith("⟳ context compacted")
    _in_order(view.to_html(), "call 1 · model", "→ bash pytest -q", "approved by user", "⟳ context compacted",
              "mx-answer", "All green now.")
    assert view._activity.value == ""  # no spinner once done
    opened = view.open_inspector(1)
    assert opened is not None and opened.data.record.iteration == 1 and opened.comm is not None
    replaced = view.open_inspector(2)
    assert replaced is not opened and opened.comm is None and opened.tabs.comm is None  # closed, children too
    shown = [view, view._log, view.gauge, view.gauge.layout, replaced, replaced.tabs, *view._log.children]
    html_before = view.to_html()
    ref = weakref.ref(second)
    view.publish_final()
    assert view.calls == {} and view.gauge.data is None and view.inspector is None
    assert all(w.comm is None for w in shown)  # every widget of the turn is closed
    assert view.to_html() == html_before and "text/html" in view._repr_mimebundle_()
    del second
    gc.collect()
    assert ref() is None  # the finished view keeps no RequestView alive


def test_live_log_spinner_answer_block_and_monospace() -> None:
    """LiveLog (text/HTML form): spinner while the model has said nothing, narration vs answer, code in monospace."""
    log = LiveLog("demo model", "3f2a9c", mode="off")
    log.handle("turn.started", {"turn": 1})
    log.handle("request.built", {"iteration": 1, "view": build_request_view(worked_example()[:20], POLICY)})
    spinner = '<span class="mx-spinner">'
    assert spinner in log.to_html() and "waiting for the model (call 1)" in log.to_html()
    log.handle("model.delta", {"text": "Reading it."})
    assert spinner not in log.to_html() and "mx-narration" in log.to_html()
    log.handle("tool.started", {"call_id": "c", "name": "read_file", "arguments": '{"path": "a.py"}'})
    log.handle("tool.finished", {"call_id": "c", "name": "read_file", "content": "print(1)", "chars": 8})
    log.handle("request.built", {"iteration": 2, "view": build_request_view(worked_example()[:22], POLICY)})
    log.handle("model.delta", {"text": "Fixed:\n    x = 1\n"})
    log.handle("turn.finished", {"iterations": 2})
    html = log.to_html()
    _in_order(html, "Reading it.", "→ <b>read_file</b>" if "<b>" in html else "→ read_file a.py", "mx-answer", "x = 1")
    assert html.count("mx-narration") == 1 and '<pre class="mx-code"' in html
    assert log.to_text().splitlines()[-3:] == ["  Fixed:", "      x = 1", "  (done · 2 model calls)"]


def test_rich_text_keeps_sentences_and_marks_code() -> None:
    """Prose stays whole (periods inside words or paths are not cuts); code spans/blocks/tracebacks are monospace."""
    html = rich_text_html("Use .mx-claw/project.json. Then `pytest -q`.\n```\nfor i in x:\n\n    pass\n```\nok")
    assert "Use .mx-claw/project.json. Then <code>pytest -q</code>." in html
    assert re.search(r'<pre class="mx-code"[^>]*>for i in x:\n\n    pass</pre>', html) and html.endswith("ok</span>")


def test_c10_one_turn_model_both_logs_show_both_warnings_and_the_stored_record() -> None:
    """The text log and the widget log read one turn model: the sandbox warning and the provider's note reach
    both (they used to reach only the text log); the event that ends a call carries the stored record, which the
    widget keeps as it is (no copy rebuilt)."""
    from mxclaw_nb.records import record_of_view

    first = build_request_view(worked_example()[:20], POLICY)
    record = record_of_view(first, turn=1, iteration=1, prompt_tokens_reported=777)
    live, log = LiveTurnView(), LiveLog("demo", "3f2a9c", mode="off")
    for view in (live, log):
        view.handle("turn.started", {"session_id": "3f2a9c", "turn": 1, "sandbox_warning": "shell NOT sandboxed"})
        view.handle("request.built", {"turn": 1, "iteration": 1, "view": first})
        view.handle("provider.note", {"note": "asked again without stream_options", "turn": 1, "iteration": 1})
        view.handle("model.completed", {"usage": {"prompt_tokens": 777}, "record": record, "turn": 1,
                                        "iteration": 1})
        view.handle("turn.finished", {"text": "ok", "iterations": 1})
    notes = ["⚠ shell NOT sandboxed", "ⓘ asked again without stream_options"]
    assert [ln.text for ln in live.entries if ln.kind == "note"] == notes
    assert [ln.text for ln in log.entries if ln.kind == "note"] == notes
    assert all(n[2:] in live.to_html() and n in log.to_text() for n in notes)
    assert live.model.calls[1].record is record and live.calls[1].record.prompt_tokens_reported == 777


def test_a1_a2_an_artifact_is_named_once_per_tool_line() -> None:
    """A1/A2: the line of the tool that stored an artifact names it once ("stored as ..."), a read_artifact line
    once ("read from ..."; its result's header repeats the id, so the preview shows the first line read)."""
    aid = "artifact-0edad19fb454"
    log = LiveLog("demo", "3f2a9c", mode="off")
    log.handle("turn.started", {"session_id": "3f2a9c", "turn": 1})
    log.handle("tool.started", {"call_id": "c1", "name": "bash", "arguments": '{"command": "./build.sh"}'})
    log.handle("tool.finished", {"call_id": "c1", "name": "bash", "is_error": False, "artifact_id": aid,
                                 "content": f"step 1 ok\n[9,125 bytes omitted from context]\n[artifact {aid}] ...",
                                 "chars": 9125})
    log.handle("tool.started", {"call_id": "c2", "name": "read_artifact",
                                "arguments": json.dumps({"artifact_id": aid, "pattern": "ERROR"})})
    log.handle("tool.finished", {"call_id": "c2", "name": "read_artifact", "is_error": False, "artifact_id": aid,
                                 "content": f"[artifact {aid}: 9125 bytes, 1203 lines]\n>1201: ERROR barcode",
                                 "chars": 60})
    lines = [ln for ln in log.to_text().splitlines() if "→" in ln]
    assert len(lines) == 2 and [ln.count(aid) for ln in lines] == [1, 1], lines
    assert "stored as " + aid in lines[0] and "read from " + aid in lines[1] and "ERROR barcode" in lines[1]
