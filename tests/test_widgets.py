"""Headless tests of the widgets' state (SPEC N2, C10, T3): numbers, DataFrame rows, titles, colours, fallbacks.

The widgets are built without a kernel or frontend; their values, DataFrames and static HTML/text
renderings are checked against the RequestView the engine built (never against hand-copied numbers),
on the article's worked example, a real tau-bench transcript and a real DuckDB store.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from mxclaw_nb.context import ACTIONS, LAYERS, STAGES, ContextPolicy, build_request_view, estimate_messages
from mxclaw_nb.context.counters import FunctionCounter
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, synthetic_transcript, worked_example
from mxclaw_nb.store.writer import Store
from mxclaw_nb.widgets import (
    ACTION_COLORS,
    LAYER_COLORS,
    STAGE_COLORS,
    CompactionInspector,
    ContextGauge,
    LiveTurnView,
    SessionBrowser,
    TokenTimeline,
    requests_from_views,
)
from mxclaw_nb.widgets.gauge import room
from mxclaw_nb.widgets.style import fmt_int, preview_text

TRANSCRIPTS = Path(__file__).resolve().parents[1].parent / "shared" / "transcripts"
POLICY = ContextPolicy(**WORKED_EXAMPLE_POLICY)


@pytest.fixture(scope="module")
def view():
    return build_request_view(worked_example(), POLICY)


@pytest.fixture(scope="module")
def tau_views():
    path = TRANSCRIPTS / "tau-bench.jsonl"
    if not path.exists():
        pytest.skip(f"real transcripts not found at {path}")
    views = []
    with path.open(encoding="utf-8") as fh:
        for _, line in zip(range(4), fh, strict=False):
            msgs = json.loads(line)["messages"]
            policy = ContextPolicy(context_window_tokens=max(estimate_messages(msgs) // 2, 1), keep_recent_tokens=500)
            views.append(build_request_view(msgs, policy))
    return views


def visible(html: str) -> str:
    """The text a reader sees in an HTML output: tags and <style> dropped, whitespace collapsed."""
    html = re.sub(r"<style>.*?</style>", "", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).replace("&gt;", ">").replace("&amp;", "&").split())


def _record(view, turn, iteration, reported=None):
    return {"turn": turn, "iteration": iteration, "counter": view.counter,
            "estimate_tokens": estimate_messages(view.messages), "before_tokens": view.before_tokens,
            "after_tokens": view.after_tokens, "threshold": view.threshold, "window_tokens": view.window,
            "stage": view.stage, "summary": view.summary, "provenance": view.provenance.to_records(),
            "prompt_tokens_reported": reported, "retry": False}


def test_n2_chip_text_readable_on_its_colour():
    """Chip text is dark on light colours (the `dropped` badge) and white on dark ones, in either theme."""
    from mxclaw_nb.widgets.style import chip

    assert "color:#212121" in chip("dropped", ACTION_COLORS["dropped"])
    assert "color:#fff" in chip("synthetic", ACTION_COLORS["synthetic"])


def test_n2_one_colour_per_action_layer_stage():
    """Every engine action, layer and stage has exactly one colour, distinct within its kind (UX.md)."""
    assert set(ACTION_COLORS) == set(ACTIONS)
    assert set(LAYER_COLORS) == set(LAYERS)
    assert set(STAGES) | {"prompt_too_long_retry"} == set(STAGE_COLORS)
    for table in (ACTION_COLORS, LAYER_COLORS, STAGE_COLORS):
        assert len(set(table.values())) == len(table)


def test_n2_gauge_worked_example_numbers_layers_and_labels(view):
    """The gauge shows sent/before tokens per layer against threshold and window, with stage and labels."""
    gauge = ContextGauge(view, reported_prompt_tokens=view.after_tokens + 777)
    sent, before = gauge.layers("after"), gauge.layers("before")
    assert sum(sent.values()) == view.after_tokens and sum(before.values()) == view.before_tokens
    assert sent["summaries"] > 0 and before["summaries"] == 0  # the summary exists only in the sent view
    assert before["tool results"] > sent["tool results"]
    assert sent["system prompt"] == before["system prompt"] > 0  # C6: system messages survive
    html = gauge.to_html()
    shown = visible(html)
    r = room(gauge.data)
    for text in ("every figure in tokens (est.)", f"{fmt_int(view.after_tokens)} sent",
                 f"threshold {fmt_int(view.threshold)}", f"{r['percent']:.0f}% of the {fmt_int(view.window)} window",
                 view.stage, f"{fmt_int(view.window - view.after_tokens)} free",
                 f"{fmt_int(view.threshold - view.after_tokens)} until compaction",
                 f"{fmt_int(view.after_tokens + 777)} tokens (reported by the provider)",
                 "layer, tokens (est.) sent (request view) before compaction",  # the legend's visible header
                 f"system prompt {fmt_int(sent['system prompt'])} {fmt_int(before['system prompt'])}"):
        assert text in shown, text
    assert "mx-unit-note" not in html  # one unit: rows and totals are both est.
    for layer, n in sent.items():
        if n:
            assert f'data-layer="{layer}"' in html and LAYER_COLORS[layer] in html
    text = gauge.to_text()
    assert text.startswith("[ctx ") and "▓" in text and f"· {view.stage}]" in text
    assert f"before {fmt_int(view.before_tokens)} est." in text
    bundle = gauge._repr_mimebundle_()
    assert bundle["text/html"] == html and bundle["text/plain"] == text
    assert "application/vnd.jupyter.widget-view+json" not in bundle  # static: survives a reopen without a kernel
    assert "application/vnd.jupyter.widget-view+json" in ContextGauge(view, live=True)._repr_mimebundle_()


def test_t3_gauge_labels_counter_calibrated_and_reported(view):
    """Figures from another counter are labelled by it; est., calibrated and reported are never mixed (T3)."""
    counted = build_request_view(worked_example(), ContextPolicy(**WORKED_EXAMPLE_POLICY, counter=FunctionCounter(
        "chars", text_count=len)))
    gauge = ContextGauge(counted, calibrated_tokens=12_345, reported_prompt_tokens=23_456)
    html = gauge.to_html()
    assert "tokens (chars)" in html and f"{fmt_int(counted.after_tokens)} sent" in visible(html)
    assert f"{fmt_int(estimate_messages(counted.messages))} tokens (est.)" in html
    assert "12,345 tokens (calibrated)" in html and "23,456 tokens (reported by the provider)" in html
    gauge.update(None)
    assert "no model call yet" in gauge.to_html() and gauge.layers() == dict.fromkeys(LAYERS, 0)


def test_n2_inspector_worked_example_tables_summary_and_filters(view):
    """Before/after DataFrames mirror the provenance; header, summary, tab titles and filters work."""
    insp = CompactionInspector(view)
    prov = view.provenance
    assert len(insp.before_df) == len(prov.before) and len(insp.after_df) == len(view.messages)
    assert list(insp.before_df.columns[:7]) == ["position", "role", "tool", "tokens_before", "tokens_after", "action",
                                                "failure"]
    assert Counter(insp.before_df["action"]) == Counter(r.action for r in prov.before)
    assert insp.before_df["tokens_before"].sum() == view.before_tokens
    assert insp.after_df["tokens"].sum() == view.after_tokens
    assert insp.after_df.loc[insp.after_df["action"] == "summary", "role"].tolist() == ["system"]
    reads = insp.before_df[insp.before_df["tool"] == "read_file"]
    assert len(reads) == 4 and reads["preview"].str.contains(r"\(20,000 chars\)").all()
    assert insp.before_df["failure"].sum() == sum(r.failure for r in prov.before) > 0
    assert insp.tabs.titles[0] == f"Before ({len(prov.before)} msgs)"
    assert insp.tabs.titles[1] == f"After (sent, {len(view.messages)} msgs)"
    head = insp.header_html()
    assert view.stage in head and f"tail starts at #{view.tail_start}" in head
    assert (f"before {fmt_int(view.before_tokens)} → after {fmt_int(view.after_tokens)} tokens (est.)"
            in visible(head))
    html = insp.to_html()
    assert "Goals:" in html and "packages/storage/src/sqlite.ts" in html and "✖ failed" in html
    for action in set(insp.before_df["action"]) | set(insp.after_df["action"]):
        assert re.search(rf'background:{ACTION_COLORS[action]};[^>]*>{action}<', html)
    styled = insp.styled("before").to_html()
    assert f"background-color: {ACTION_COLORS['summarized']}" in styled
    insp.action_filter.value = "kept"
    assert set(insp.filtered("before")["action"]) == {"kept"}
    before_tab = insp.tabs.children[0]  # what the Before tab shows
    assert before_tab.value.count('class="mx-row"') == len(insp.filtered("before"))
    insp.role_filter.value = "tool"
    assert set(insp.filtered("before")["role"]) == {"tool"} and set(insp.filtered("after")["role"]) == {"tool"}
    insp.open_position.value = 4
    assert "#4: " + "t" * 100 in insp.children[-1].children[1].value  # the message opened under "open #"
    assert insp.to_text().startswith(f"Stage: {view.stage}")


def test_n2_inspector_micro_dropped_synthetic_and_cjk():
    """Placeholders, repair's dropped/synthetic rows and CJK previews show in the tables."""
    msgs = [{"role": "system", "content": "[system prompt] 你是编码助手。"},
            {"role": "user", "content": "修复测试 " + "很" * 50},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"x\"}"}}]},
            {"role": "tool", "tool_call_id": "a", "content": "数据" * 3000},
            {"role": "tool", "tool_call_id": "orphan", "content": "stray"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "b", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
            {"role": "user", "content": "继续"}]
    v = build_request_view(msgs, ContextPolicy(context_window_tokens=5000, keep_recent_tokens=200))
    insp = CompactionInspector(v)
    actions = Counter(insp.before_df["action"])
    assert v.stage == "micro" and actions["placeholder"] == 1
    assert actions["dropped"] == 1 and actions["synthetic"] == 1
    synthetic = insp.before_df[insp.before_df["action"] == "synthetic"]
    assert synthetic["position"].isna().all() and synthetic["tool"].tolist() == ["bash"]
    assert "修复测试" in insp.to_html() and "[microcompaction]" in insp.summary_html()
    assert "action" in insp.action_filter.description
    assert set(insp.action_filter.options) >= {"(all)", "placeholder", "dropped", "synthetic"}


def test_n2_inspector_caps_rows_with_visible_count():
    """A 10,000-message view shows at most max_rows rows per table and says how many it shows (its speed:
    bench/widget_bench.py)."""
    v = build_request_view(synthetic_transcript(10_000), ContextPolicy(context_window_tokens=400_000))
    insp = CompactionInspector(v, max_rows=200)
    assert len(insp.before_df) == 10_000
    html = insp.to_html()
    before = html[html.index("Before (transcript"):html.index("After (sent")]
    assert "showing 200 of 10,000 messages" in before
    assert before.count('class="mx-row"') == 200
    with pytest.raises(ValueError, match="max_rows"):
        CompactionInspector(v, max_rows=0)
    with pytest.raises(TypeError, match="RequestView"):
        CompactionInspector("not a view")


def test_n2_real_transcript_tau_bench(tau_views):
    """On real tau-bench conversations the widgets show the engine's numbers and every message."""
    assert any(v.compacted for v in tau_views)
    for v in tau_views:
        insp, gauge = CompactionInspector(v), ContextGauge(v)
        assert len(insp.before_df) == len(v.provenance.before)
        assert insp.after_df["tokens"].sum() == v.after_tokens == sum(gauge.layers("after").values())
        assert sum(gauge.layers("before").values()) == v.before_tokens
        assert set(insp.before_df["role"]) <= {"system", "user", "assistant", "tool"}
        assert v.stage in insp.to_text() and fmt_int(v.after_tokens) in gauge.to_text()
        if v.summary:
            assert v.summary.splitlines()[0] in insp.summary_html()
    tools = pd.concat([CompactionInspector(v).before_df for v in tau_views])["tool"].dropna()
    assert len(tools) > 0  # tool names resolved from the real assistant calls


def test_s4_inspector_from_stored_request_matches_live(tmp_path, view):
    """A request read back from DuckDB gives the same tables and numbers as the live view."""
    store = Store(tmp_path / "w.duckdb")
    sid = store.create_session(title="worked")
    store.append_request(sid, _record(view, 2, 3, reported=view.after_tokens + 10))
    live, stored = CompactionInspector(view), CompactionInspector.from_request(store, sid, 2, 3)
    pd.testing.assert_frame_equal(live.before_df, stored.before_df)
    pd.testing.assert_frame_equal(live.after_df, stored.after_df)
    assert stored.data.tail_start == view.tail_start and stored.data.record.summary == view.summary
    assert stored.data.record.prompt_tokens_reported == view.after_tokens + 10
    assert "turn 2, call 3" in stored.header_html()
    gauge = ContextGauge.from_request(store.requests(sid).iloc[0])
    assert gauge.layers("after") == ContextGauge(view).layers("after")
    with pytest.raises(LookupError, match="turn 9"):
        CompactionInspector.from_request(store, sid, 9, 1)
    with pytest.raises(ValueError, match="not valid JSON"):
        CompactionInspector({"stage": "micro", "provenance": "{oops"})
    store.close()


def _replay():
    msgs = worked_example()
    ks = list(range(6, len(msgs) + 1, 6)) + [len(msgs)]
    views = [build_request_view(msgs[:k], POLICY) for k in ks]
    return views, [1 + i // 3 for i in range(len(views))]


def test_c10_timeline_lines_markers_and_turns():
    """Est. line per call, threshold/window lines, one marker per compaction coloured by stage, turn boundaries."""
    views, turns = _replay()
    df = requests_from_views(views, turns)
    df["prompt_tokens_reported"] = [v.after_tokens + 100 for v in views]
    tl = TokenTimeline(df, title="replay")
    ax = tl.figure.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert {"sent, tokens (est.)", "reported by the provider", "threshold", "window"} <= set(labels)
    est = next(line for line in ax.get_lines() if line.get_label() == "sent, tokens (est.)")
    assert list(est.get_ydata()) == [estimate_messages(v.messages) for v in views]
    compacted = [v for v in views if v.compacted]
    assert len(tl.compactions) == len(compacted) > 0
    scatter = next(c for c in ax.collections if len(c.get_offsets()) and c.get_gid() != "turn-boundaries"
                   and type(c).__name__ == "PathCollection")
    assert len(scatter.get_offsets()) == len(compacted)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {f"compaction: {v.stage} (before → sent)" for v in compacted} <= set(legend)
    # markers sit at the tokens before compaction (where the threshold was crossed), not on the sent line
    assert [y for _, y in scatter.get_offsets()] == [v.before_tokens for v in compacted]
    boundaries = [c for c in ax.collections if c.get_gid() == "turn-boundaries"]  # one collection (N2: fast)
    assert sum(len(c.get_segments()) for c in boundaries) == len(set(turns)) - 1
    assert tl.png.startswith(b"\x89PNG") and "currentColor" in tl.svg and "#010203" not in tl.svg
    # no <text> in the SVG: a sanitizer that drops <svg> (untrusted notebook) would leave its words loose (N2)
    assert "<text" not in tl.svg
    assert f"{len(views)} model calls" in tl.caption_html() and "<svg" in tl.to_html()
    assert "application/vnd.jupyter.widget-view+json" not in tl._repr_mimebundle_()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert tl.to_text().count("⟳") == len(compacted)
    with pytest.raises(ValueError, match="estimate_tokens"):
        TokenTimeline(pd.DataFrame({"turn": [1]}))
    with pytest.raises(ValueError, match="store= and session_id="):
        TokenTimeline()


def test_c10_timeline_frame_of_rows_in_any_order_is_the_frame_of_the_ordered_rows():
    """C10/S4: timeline_frame skips the steps that change nothing (sorting sorted rows, renumbering a 0..n-1 index,
    marking retries when there is none); rows in another order and under another index give the same frame, a
    C9 retry shows its own stage, and the caller's frame is left as it was."""
    from mxclaw_nb.widgets.timeline import timeline_frame

    views, turns = _replay()
    df = requests_from_views(views, turns)
    kept = df.copy(deep=True)
    want = timeline_frame(df)
    assert isinstance(want.index, pd.RangeIndex) and want["call"].tolist() == list(range(1, len(df) + 1))
    shuffled = df.sample(frac=1, random_state=3).set_axis([f"r{i}" for i in range(len(df))])
    pd.testing.assert_frame_equal(timeline_frame(shuffled), want)
    retried = df.copy()
    retried.loc[2, "retry"] = True
    stages = timeline_frame(retried)["stage"].tolist()
    assert stages[2] == "prompt_too_long_retry" and stages[:2] + stages[3:] == want["stage"].tolist()[:2] + \
        want["stage"].tolist()[3:]
    pd.testing.assert_frame_equal(df, kept)  # nothing added to the caller's frame


def test_n1_the_session_browser_shows_ids_that_resume(tmp_path):
    """N1: the browser's table, list and text show each id as `%agent sessions` does: 8 characters, more where two
    share them (imported ids start with `imp-`), so every shown id resumes its own session."""
    store = Store(tmp_path / "ids.duckdb")
    for sid in ("imp-1a2b3c4d000000000000000", "imp-1a2b9f9f000000000000000", "4f00aa11bb22cc33dd44ee55"):
        store.create_session(title=sid, session_id=sid)
    browser = SessionBrowser(store, current="4f00aa11bb22cc33dd44ee55")
    assert browser.shown_ids == {"imp-1a2b3c4d000000000000000": "imp-1a2b3", "imp-1a2b9f9f000000000000000":
                                 "imp-1a2b9", "4f00aa11bb22cc33dd44ee55": "4f00aa11"}
    html, text = visible(browser.sessions_html()), browser.to_text()
    labels = [label for label, _ in browser.session_picker.options]
    for shown in ("imp-1a2b3", "imp-1a2b9", "4f00aa11"):
        assert shown in html and f"  {shown}  " in text and any(label.startswith(shown) for label in labels)
    starts = {label.index("20") for label in labels}  # where the created column (a 20xx date) begins
    assert len(starts) == 1 and starts.pop() > len("imp-1a2b9*")  # one column, wide enough for the longest id


def test_n2_session_browser_over_real_store(tmp_path):
    """Sessions table with counts; selecting a session shows its timeline, gauge and inspector of a call."""
    store = Store(tmp_path / "b.duckdb")
    views, turns = _replay()
    sid = store.create_session(title="worked example", model="demo")
    store.append_messages(sid, worked_example(), turn=1)
    for i, (v, t) in enumerate(zip(views, turns, strict=True)):
        store.append_request(sid, _record(v, t, i + 1, reported=v.after_tokens + 5))
        if v.event():
            store.append_event(sid, "context.compacted", v.event(), turn=t, iteration=i + 1)
    empty = store.create_session(title="empty one")
    browser = SessionBrowser(store, current=sid)
    html = browser.sessions_html()
    assert "2 sessions" in html and "worked example" in html and sid[:8] in html
    assert re.search(rf"{sid[:8]} current", visible(html))  # the notebook's session is marked
    saved = sum(v.before_tokens - v.after_tokens for v in views)
    assert fmt_int(saved) in html
    # it opens on the current session, already picked, with its calls
    assert browser.session_picker.value == sid and len(browser.call_picker.options) == len(views)
    assert "current" in dict((v, k) for k, v in browser.session_picker.options)[sid]
    assert SessionBrowser(store).session_picker.value is not None  # no current: the newest session
    assert browser.timeline is not None and len(browser.timeline.data) == len(views)
    last_compacted = max(i for i, v in enumerate(views) if v.compacted)
    assert browser.inspector.data.record.stage == views[last_compacted].stage
    browser.select_call(turns[0], 1)
    assert browser.inspector.data.record.after_tokens == views[0].after_tokens
    assert browser.gauge.data.record.prompt_tokens_reported == views[0].after_tokens + 5
    assert "tokens saved (est.)" in browser.to_html() and sid[:8] in browser.to_text()
    browser.session_picker.value = empty  # a click on its row
    assert browser.session_id == empty and browser.timeline is None and browser.inspector is None
    with pytest.raises(LookupError):
        browser.select("nope")
    store.close()


def test_c10_live_turn_view_scripted_events(view):
    """A scripted turn: log lines, streamed text, gauge per iteration with reported tokens, inspector, fallback."""
    msgs = worked_example()
    first, second = build_request_view(msgs[:20], POLICY), view
    live = LiveTurnView()
    live.handle("turn.started", {"session_id": "3f2a9c", "turn": 2, "prompt": "fix", "model_label": "demo model"})
    live.handle("request.built", {"turn": 2, "iteration": 1, "view": first, "counter_tokens": None})
    assert live.gauge.data.record.after_tokens == first.after_tokens
    live.handle("model.completed", {"usage": {"prompt_tokens": 9_999, "completion_tokens": 5}, "latency_ms": 3})
    assert live.gauge.data.record.prompt_tokens_reported == 9_999 and "9,999 tokens (reported" in live.gauge.to_html()
    live.handle("tool.started", {"call_id": "c1", "name": "read_file", "arguments": '{"path": "src/io.py"}'})
    live.handle("tool.finished", {"call_id": "c1", "name": "read_file", "is_error": False, "content": "x",
                                  "chars": 18_440, "artifact_id": None})
    live.handle("tool.started", {"call_id": "c2", "name": "bash", "arguments": '{"command": "pytest -q"}'})
    live.handle("tool.finished", {"call_id": "c2", "name": "bash", "is_error": True, "content": "E" * 3112,
                                  "chars": 3112, "artifact_id": None, "exit_code": 1})
    live.handle("request.built", {"turn": 2, "iteration": 2, "view": second, "counter_tokens": 20_000})
    live.handle("context.compacted", {"stage": second.stage, "before_tokens": second.before_tokens,
                                      "after_tokens": second.after_tokens, "summary": second.summary, "turn": 2,
                                      "iteration": 2})
    for chunk in ("The test ", "now passes", ": 修好了"):
        live.handle("model.delta", {"text": chunk})
    live.handle("model.completed", {"usage": None, "latency_ms": 5})
    live.handle("turn.finished", {"text": "The test now passes: 修好了", "iterations": 2})
    assert live.log_lines() == [
        "→ read_file src/io.py  ok · 18,440 chars · x",
        f"→ bash pytest -q  failed (exit 1) · 3,112 chars · {preview_text('E' * 3112, 60)}",
        f"⟳ context compacted before call 2: {second.stage} · {fmt_int(second.before_tokens)} → "
        f"{fmt_int(second.after_tokens)} est. tokens",
    ]
    assert live.text == "The test now passes: 修好了" and "修好了" in live._text.value
    assert live.gauge.data.record.after_tokens == second.after_tokens
    assert live.gauge.data.record.calibrated_tokens == 20_000
    assert live.inspector is None  # built only when its section is opened
    assert live.open_inspector() is live.inspector and live.inspector.data.record.stage == second.stage
    assert [v for _, v in live.call_picker.options] == [1, 2]
    live.call_picker.value = 1
    assert live.inspector.data.record.after_tokens == first.after_tokens
    assert live.header_text() == "demo model · session 3f2a9c · turn 2 · done · 2 model calls"
    text, html = live.to_text(), live.to_html()
    assert "failed (exit 1)" in text and f"· {second.stage}]" in text and text.endswith("修好了")
    assert "Goals:" in html and "18,440 chars" in html and STAGE_COLORS[second.stage] in html
    live.handle("request.built", {"turn": 2, "iteration": 2, "view": second, "retry": True})
    assert live.call_picker.options[-1][0].endswith("prompt-too-long retry")
    assert "prompt-too-long retry" in live.inspector.header_html()
    failed = LiveTurnView()
    failed("turn.started", {"session_id": "s", "turn": 1})
    failed("turn.failed", {"error": "Provider at http://127.0.0.1:9/v1 refused the key (401)."})
    failed("some.future.event", {})
    assert "refused the key" in failed.to_html() and failed.status == "failed"
    assert "no model call yet" in failed.to_text()


def test_c10_live_view_on_a_real_turn_agrees_with_the_stored_records(test_server, tmp_path):
    """A real Agent turn (HTTP test server, DuckDB) drives LiveTurnView; the stored calls show the same tables."""
    from mxclaw_nb import Agent

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("x" * 6_000, encoding="utf-8")
    for _ in range(4):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("read it all")
    agent = Agent(workspace=ws, db=str(tmp_path / "live.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", approval="allow", context_window_tokens=4_000,
                  keep_recent_tokens=1_000, counter="estimate")
    live = LiveTurnView()
    live.model_label = agent.label
    stop = agent.subscribe(live.handle)
    try:
        result = agent.run("read big.txt four times")
    finally:
        stop()
    assert result.status == "ok" and result.compactions
    assert sum(line.startswith("→ read_file big.txt  ok · 6,000 chars") for line in live.log_lines()) == 4
    compaction_lines = [line for line in live.log_lines() if line.startswith("⟳ context compacted before call")]
    assert len(compaction_lines) == len(result.compactions)
    assert live.text == "read it all" and live.status == f"done · {result.iterations} model calls"
    assert sorted(live.calls) == list(range(1, result.iterations + 1))
    stored = agent.store.requests(agent.session_id)
    assert live.gauge.data.record.prompt_tokens_reported == stored.iloc[-1]["prompt_tokens_reported"]
    for it, data in live.calls.items():
        from_db = CompactionInspector.from_request(agent.store, agent.session_id, 1, it)
        pd.testing.assert_frame_equal(CompactionInspector(data).before_df, from_db.before_df)
        assert from_db.data.record.stage == data.record.stage
        assert from_db.data.record.after_tokens == data.record.after_tokens
    browser = SessionBrowser(agent.store)
    browser.select(agent.session_id)
    assert len(browser.timeline.compactions) == len(result.compactions)
    assert browser.inspector.data.record.stage == result.compactions[-1]["stage"]


def test_n2_exported_notebook_shows_the_numbers_without_widget_state(tmp_path, monkeypatch):
    """Executed with a real kernel and exported by nbconvert (no widget state saved), the outputs still show the
    stage, tokens, table rows and summary through the widgets' text/html fallback."""
    import nbclient
    import nbformat
    from nbconvert import HTMLExporter

    from tests.browser.widgets_notebook import build_notebook, expected

    repo = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p))
    want = expected()
    nb = build_notebook(str(tmp_path / "nb.duckdb"))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                            store_widget_state=False).execute()
    html, _ = HTMLExporter().from_notebook_node(nbformat.from_dict(nb))
    shown = visible(html)
    assert "Stage: " in shown and f"→ after {want['after_tokens']:,} tokens (est.)" in shown
    assert f"showing 12 of {want['before_rows']:,} messages" in shown and "Goals:" in shown
    assert "<svg" in html and f"{want['calls']} model calls" in shown
    assert "application/vnd.jupyter.widget-view+json" not in nbformat.writes(nb)  # nothing needs a live kernel
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    plain = "\n".join(o["data"].get("text/plain", "") for o in outputs if "data" in o)
    assert "[ctx " in plain and f"Stage: {want['stage']}" in plain


def test_live_turn_view_separates_text_of_separate_model_calls(view):
    """Streamed text of call 1 and call 2 must not run together in the live log."""
    live = LiveTurnView()
    live.handle("request.built", {"turn": 1, "iteration": 1, "view": view})
    live.handle("model.delta", {"text": "Reading the file."})
    live.handle("request.built", {"turn": 1, "iteration": 2, "view": view})
    live.handle("model.delta", {"text": "[demo model] Fixed."})
    assert live.text == "Reading the file.\n\n[demo model] Fixed."


def test_n2_inspector_rows_open_the_whole_message(view):
    """Every row of the static HTML opens on a click to its whole message (UX.md), with role/action filters."""
    insp = CompactionInspector(view)
    html = insp.to_html()
    assert "application/vnd.jupyter.widget-view+json" not in insp._repr_mimebundle_()  # static: survives a reopen
    assert html.count('<details class="mx-row"') == len(insp.before_df) + len(insp.after_df)
    assert "click a row to open the whole message" in visible(html)
    long_read = int(insp.before_df.loc[insp.before_df["tool"] == "read_file", "position"].iloc[0])
    assert insp.full_text("before", {"position": long_read}).startswith("t" * 100)  # not the 200-char preview
    assert "chars in all" in insp.full_text("before", {"position": long_read})
    for role in set(insp.before_df["role"]):
        assert f'data-role="{role}"' in html and f"> {role}</label>" in html
    assert ":has(" in html and 'type="radio"' in html
    from dataclasses import replace

    carried = replace(insp.data, sent=None, summaries=((1, view.summary),)).with_record(summary=None)
    stored = CompactionInspector(carried)
    row = stored.after_df[stored.after_df["action"] == "summary"].iloc[0].to_dict()
    assert stored.full_text("after", row) == view.summary  # a carried summary opens in full
    assert "application/vnd.jupyter.widget-view+json" in CompactionInspector(view, live=True)._repr_mimebundle_()


def test_n5_gauge_one_unit_per_view_rows_scaled_to_the_deciding_counter():
    """N5: with a calibrated counter every figure of the gauge (both bars, the layer rows) is in tokens
    (calibrated), named once in the caption; the est. figures are on demand ("other counts", tooltip). Before
    N5 the stored-transcript bar was in est. beside a calibrated sent bar, so after a microcompaction "sent"
    looked bigger than "stored" although it sent less."""
    from dataclasses import replace

    base = CompactionInspector(build_request_view(worked_example(), POLICY)).data
    assert base.record.stage in ("micro", "summary")
    data = replace(base, transcript_relative=True).with_record(
        counter="calibrated", after_tokens=round(base.record.after_tokens * 1.6),
        before_tokens=round(base.record.before_tokens * 1.6))
    insp, gauge = CompactionInspector(data), ContextGauge(data)
    head, html = visible(insp.header_html()), gauge.to_html()
    shown = visible(html)
    assert "tokens (calibrated)" in head and "rows: tokens (est.)" in head  # the inspector's rows keep est.
    assert "every figure in tokens (calibrated)" in shown and "layer, tokens (calibrated)" in shown
    stored_est = sum(int(n) for n in insp.before_df["tokens_before"])
    sent_est = sum(int(n) for n in insp.after_df["tokens"])
    factor = data.record.after_tokens / sent_est
    stored = round(stored_est * factor)
    assert f"stored transcript up to this call {fmt_int(stored)}" in shown
    assert f"{fmt_int(data.record.after_tokens)} sent" in shown
    assert data.record.after_tokens < stored  # compaction sent less than is stored, on one axis
    main = visible(html.split('class="mx-unit-note"')[0])  # caption, bars, layer table: no est. figure
    assert " est." not in main and "(est.)" not in main
    other = visible(html.split('class="mx-other-counts"')[1])  # the est. figures, on demand
    assert f"stored transcript {fmt_int(stored_est)} tokens (est.)" in other and "layer, tokens (est.)" in other
    assert f'title="{fmt_int(stored_est)} tokens (est.)"' in html  # and as the stored bar's tooltip
    system = int(insp.after_df.loc[insp.after_df["role"] == "system", "tokens"].iloc[0])
    assert gauge.layers("after")["system prompt"] == system  # the rows themselves are the inspector's
    plain = ContextGauge(base).to_html()  # the estimate decided: nothing to scale, nothing extra
    assert "every figure in <b>tokens (est.)</b>" in plain and "mx-layers-est" not in plain


def test_c10_timeline_markers_on_the_threshold_unit():
    """With a calibrated counter the main line and the markers are in the unit the threshold was checked on."""
    views, turns = _replay()
    df = requests_from_views(views, turns)
    df["counter"] = "calibrated"
    df["after_tokens"] = df["after_tokens"] * 2
    df["before_tokens"] = df["before_tokens"] * 2
    tl = TokenTimeline(df)
    ax = tl.figure.axes[0]
    main = next(line for line in ax.get_lines() if line.get_label() == "sent, tokens (calibrated)")
    assert list(main.get_ydata()) == list(df["after_tokens"])
    assert "tokens (calibrated)" in ax.get_ylabel()
    marks = ax.collections[-1].get_offsets()
    assert [y for _, y in marks] == list(df.loc[df["stage"] != "unchanged", "before_tokens"])
    assert all(float(t).is_integer() for t in ax.get_xticks())


def test_n2_comparison_view_static_svg_follows_theme():
    """The policy comparison displays as static HTML (survives a reopen); its ink is the page's text colour and
    its figures are transparent, so it reads on a light and a dark notebook alike."""
    from mxclaw_nb.analysis.compare import compare
    from mxclaw_nb.analysis.plots import plot_tokens_saved
    from mxclaw_nb.palette import PLOT_INK
    from mxclaw_nb.widgets.compare import comparison_widget

    policies = [WORKED_EXAMPLE_POLICY, {**WORKED_EXAMPLE_POLICY, "context_window_tokens": 40_000}]
    df = compare({"ex": worked_example()}, policies, progress=False)
    box = comparison_widget(df)
    bundle = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert "<svg" in bundle["text/html"] and "currentColor" in bundle["text/html"]
    assert PLOT_INK not in bundle["text/html"] and "policy comparison" in bundle["text/plain"]
    fig = plot_tokens_saved(df)
    assert fig.get_facecolor()[3] == 0 and fig.axes[0].get_facecolor()[3] == 0  # transparent


@pytest.mark.parametrize(("n", "noun", "want"), [(0, "call", "0 calls"), (1, "call", "1 call"), (2, "call", "2 calls"),
                                                 (1024, "session", "1,024 sessions"), (1, "summary", "1 summary")])
def test_n2_counts_are_worded_in_the_right_number(n: int, noun: str, want: str) -> None:
    from mxclaw_nb.widgets.style import counted

    assert counted(n, noun) == want
    assert counted(2, "summary", "summaries") == "2 summaries"


def test_n2_theme_swatches_keep_a_plain_colour_for_sanitized_html() -> None:
    """A legend square drawn in a theme variable still shows when a sanitizer strips `var()` (untrusted copy)."""
    from mxclaw_nb.palette import WINDOW_CSS
    from mxclaw_nb.widgets.style import swatch

    themed = swatch(WINDOW_CSS)
    assert "background:#808080;" in themed and f"background:{WINDOW_CSS}" in themed
    assert themed.index("#808080") < themed.index("var(")  # the themed value wins where var() is kept
    assert "#808080" not in swatch("#e53935")


def test_n2_live_gauge_shows_the_current_call_before_a_tool_that_may_wait(view):
    """The gauge's pushes are throttled; a command that waits for Approve/Deny (N6) shows the current call."""
    import ipywidgets as widgets

    first = build_request_view(worked_example()[:20], POLICY)
    live = LiveTurnView()

    def shown() -> str:  # what the frontend has: the synced value of the gauge's HTML child
        return next(c for c in live.gauge.children if isinstance(c, widgets.HTML)).value

    live.handle("turn.started", {"session_id": "3f2a9c", "turn": 1, "prompt": "fix", "model_label": "demo model"})
    live.handle("request.built", {"turn": 1, "iteration": 1, "view": first, "counter_tokens": None})
    assert "call 1" in shown()
    live.handle("request.built", {"turn": 1, "iteration": 2, "view": view, "counter_tokens": None})
    live.handle("tool.started", {"call_id": "c1", "name": "read_file", "arguments": '{"path": "a.py"}'})
    assert "call 1" in shown()  # throttled: a quick tool does not cost a push
    live.handle("request.built", {"turn": 1, "iteration": 3, "view": view, "counter_tokens": None})
    live.handle("tool.started", {"call_id": "c2", "name": "bash", "arguments": '{"command": "pytest -q"}'})
    assert "call 1" in shown()  # a command that runs at once costs no push either (N2: not O(n) per call)
    live.handle("approval.pending", {"command": "pytest -q", "kind": "shell", "timeout": 300})
    assert "call 3" in shown()  # shown while the command waits for a person
    assert "waiting for your approval of a shell command: pytest -q" in live._activity.value


def _kernel_transcript() -> list[dict]:
    """A read_file result and python / kernel_variables / notebook_cells results (K1), old enough to compact."""
    def call(cid: str, name: str, args: dict) -> dict:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}

    df = {"kind": "value", "type": "DataFrame", "shape": [360, 5], "columns": ["date", "region", "units"],
          "variables": ["sales"]}
    return [{"role": "system", "content": "[system prompt] notebook agent"},
            {"role": "user", "content": "load the sales and read the notes"},
            call("r", "read_file", {"path": "notes.md"}), {"role": "tool", "tool_call_id": "r", "content": "n" * 8_000},
            call("p", "python", {"code": "print(sales.to_string())"}),
            {"role": "tool", "tool_call_id": "p", "content": "d" * 12_000, "facts": df},
            call("v", "kernel_variables", {}), {"role": "tool", "tool_call_id": "v", "content": "sales: ... " * 200,
                                                "facts": {"kind": "manifest", "count": 1}},
            call("c", "notebook_cells", {"range": "1-3"}), {"role": "tool", "tool_call_id": "c", "content": "In [1]"},
            {"role": "user", "content": "now plot it " + "u" * 400}, {"role": "assistant", "content": "Plotting."}]


def test_k1_gauge_shows_kernel_outputs_apart_from_tool_results() -> None:
    """The gauge's "kernel outputs" layer: python/kernel_variables/notebook_cells results, in its own colour, as
    sent (typed placeholders) and before compaction, beside the other tool results (UX.md vocabulary)."""
    msgs = _kernel_transcript()
    view = build_request_view(msgs, ContextPolicy(context_window_tokens=6_000, threshold_ratio=0.8,
                                                  keep_recent_tokens=150))
    assert view.stage == "micro"
    gauge = ContextGauge(view)
    html = gauge.to_html()
    shown = visible(html)
    rows = {r.position: r.tokens_before for r in view.provenance.before}
    kernel_before = rows[5] + rows[7] + rows[9]  # python, kernel_variables, notebook_cells
    sent = {r.source: r.tokens for r in view.provenance.after}
    kernel_sent = sent[5] + sent[7] + sent[9]
    assert kernel_sent < kernel_before  # the python printout is a typed placeholder now
    assert f"kernel outputs {fmt_int(kernel_sent)} {fmt_int(kernel_before)}" in shown  # the legend row
    assert f"tool results {fmt_int(sent[3])} {fmt_int(rows[3])}" in shown  # read_file stays a tool result
    assert f'data-layer="kernel outputs" title="kernel outputs: {fmt_int(kernel_sent)} tokens (est.)' in html
    assert LAYER_COLORS["kernel outputs"] in html and LAYER_COLORS["kernel outputs"] != LAYER_COLORS["tool results"]
    # the order of UX.md's layers, kernel outputs right after tool results
    assert shown.index("tool results") < shown.index("kernel outputs")
    # the same split for a stored request row (tool names from the stored records)
    stored = ContextGauge.from_request(requests_from_views([view]).iloc[0])
    assert f"kernel outputs {fmt_int(kernel_sent)} {fmt_int(kernel_before)}" in visible(stored.to_html())
    # a transcript without kernel tools shows no such layer
    plain = ContextGauge(build_request_view(worked_example(), POLICY)).to_html()
    assert 'data-layer="kernel outputs"' not in plain and "kernel outputs" not in visible(plain)


def test_n6_the_live_gauge_folds_its_layer_table_so_the_log_stays_in_view():
    """N6/UX "a turn in a notebook": the live turn's gauge keeps the bars and figures but folds the per-layer
    table into a closed "layers" line (it pushed the log below the fold); the stand-alone gauge shows it open."""
    data = CompactionInspector(build_request_view(worked_example(), POLICY)).data
    live, alone = ContextGauge(data, live=True), ContextGauge(data)
    folded = re.search(r'<details class="mx-legend"[^>]*><summary[^>]*>layers</summary>(.*?)</details>',
                       live._html.value, re.S)
    assert folded is not None and "mx-layers" in folded.group(1) and " open" not in folded.group(0)
    assert '<div class="mx-legend"><table class="mx-layers"' in alone._html.value
    assert "<details class=\"mx-legend\"" not in alone._html.value
    for html in (live._html.value, alone._html.value):
        assert "request view (sent)" in html and "threshold" in html


@pytest.fixture(scope="module")
def every_kind_of_call(tau_views, tmp_path_factory) -> list:
    """CallData of live views (worked example, K1 kernel tools, real tau-bench calls, a replay's calls under each
    strategy) and of the calls of a real agent session read back from DuckDB with their stored transcript (N3:
    transcript-relative rows, with a `by call` column)."""
    from mxclaw_nb import Agent
    from mxclaw_nb.analysis.replay import replay_messages
    from mxclaw_nb.context.strategies import strategy_from
    from mxclaw_nb.demo.server import TestServer
    from mxclaw_nb.widgets.data import from_request, from_view
    from tests.test_lab import long_session

    kernel = ContextPolicy(context_window_tokens=6_000, keep_recent_tokens=150)
    views = [build_request_view(worked_example(), POLICY), *tau_views, build_request_view(_kernel_transcript(), kernel)]
    for name in ("article", "masking", "clearing"):
        replayed: list = []
        replay_messages(long_session(60), ContextPolicy(6_000, 0.8, 800, strategy=strategy_from(name)), facts=False,
                        views=replayed)
        views += [replayed[0], replayed[len(replayed) // 2], replayed[-1]]
    tmp = tmp_path_factory.mktemp("kinds")
    (tmp / "ws").mkdir()
    (tmp / "ws" / "big.txt").write_text("x 数据\n" * 1_500, encoding="utf-8")
    with TestServer() as server:
        for _ in range(4):
            server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
        server.enqueue_text("read it all")
        agent = Agent(workspace=tmp / "ws", db=str(tmp / "k.duckdb"), base_url=server.base_url, api_key="k",
                      model="test-model", home=tmp / "home", approval="allow", context_window_tokens=4_000,
                      keep_recent_tokens=1_000, counter="estimate")
        assert agent.run("read big.txt four times").status == "ok"
    stored = agent.store.requests(agent.session_id)
    transcript = agent.store.load_transcript(agent.session_id)
    out = [from_view(v) for v in views] + [from_request(stored.iloc[i], transcript) for i in range(len(stored))]
    agent.store.close()
    assert any(d.transcript_relative for d in out) and any(not d.transcript_relative for d in out)
    return out


def test_s4_the_static_inspector_reads_the_rows_it_shows_as_the_frames_hold_them(every_kind_of_call):
    """N2, S4: the inspector's static HTML (the policy lab redraws it at each call-slider move) reads the dozen rows it
    shows, the counts and the filter choices from the call's records instead of building the before/after frames of
    every row; what it reads is what the frames hold: the same columns, the same table HTML at every cap, the same
    role and action choices, and the static HTML holds the table of the public frames."""
    from mxclaw_nb.widgets.data import after_frame, before_frame, table_choices, table_columns, table_rows
    from mxclaw_nb.widgets.inspector import frame_html, rows_html
    from mxclaw_nb.widgets.style import unit_label

    for data in every_kind_of_call:
        frames = {"before": before_frame(data), "after": after_frame(data)}
        for which, df in frames.items():
            assert table_columns(data, which) == list(df.columns)
            for cap in (1, 12, len(df) + 1):
                assert rows_html(table_columns(data, which), table_rows(data, which, cap),
                                 total=len(df)) == frame_html(df, max_rows=cap)
        both = pd.concat([frames["before"][["role", "action"]], frames["after"][["role", "action"]]])
        assert table_choices(data) == {"role": sorted({str(v) for v in both["role"].dropna()}),
                                       "action": [a for a in ACTIONS if a in set(both["action"])]}
        insp = CompactionInspector(data, max_rows=12)
        html = insp.to_html()
        for which in frames:
            table = frame_html(getattr(insp, f"{which}_df"), max_rows=12, unit=unit_label(data.row_counter),
                               full_text=lambda rec, w=which, i=insp: i.full_text(w, rec))
            assert table in html
    with pytest.raises(ValueError, match="before' or 'after"):
        table_rows(data, "sent")


def test_s4_layer_split_finds_each_rows_layer_as_message_layer_does(every_kind_of_call):
    """S4: the gauge's split looks a non-system row's layer up once per role and tool; every row still lands in the
    layer `message_layer` gives its message (a system row by its text, a summary row in summaries, K1 kernel
    outputs by tool name)."""
    from mxclaw_nb.context import message_layer
    from mxclaw_nb.widgets.data import layer_split

    def layer(rec: dict) -> str:
        if rec.get("action") == "summary":
            return "summaries"
        tool = rec.get("tool_name")
        return message_layer({"role": rec.get("role"), "content": str(rec.get("preview") or "")},
                             None if tool is None else str(tool))

    seen: set[str] = set()
    for data in every_kind_of_call:
        for rows, key in ((data.after, "tokens"), (data.before, "tokens_before"), (data.before, "tokens_after")):
            want = dict.fromkeys(LAYERS, 0)
            for rec in rows:
                want[layer(rec)] += int(rec.get(key) or 0)
            assert layer_split(rows, key) == want
            seen |= {k for k, v in want.items() if v}
    assert {"system prompt", "user input", "tool results", "kernel outputs", "summaries"} <= seen
