"""The policy lab (SPEC S4, C12, N2): controls redraw the right parts, replay is cached, bad input is refused.

Real parts: real transcripts (the shipped datasets and a generated long session), the real replay and widgets,
a real IPython shell with the extension and a DuckDB store for `%agent lab`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from mxclaw_nb.analysis.replay import replay_messages
from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.strategies import strategy_from
from mxclaw_nb.widgets.lab import PolicyLab


def long_session(calls: int = 120, per_turn: int = 20) -> list[dict[str, Any]]:
    """A coding session of `calls` model calls: turns of file reads whose outputs fill the window."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    n = 0
    while n < calls:
        msgs.append({"role": "user", "content": f"task {n // per_turn}: fix the bug in module {n}"})
        for k in range(per_turn):
            if n >= calls:
                break
            n += 1
            if k == per_turn - 1 or n == calls:
                msgs.append({"role": "assistant", "content": f"done with step {n}"})
                continue
            cid = f"c{n}"
            msgs.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": cid, "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{n}.py"})}}]})
            msgs.append({"role": "tool", "tool_call_id": cid, "content": f"line {n} of the file\n" * (40 + n % 60)})
    return msgs


@pytest.fixture(scope="module")
def lab() -> PolicyLab:
    return PolicyLab({"long": long_session()}, datasets=False, window=16_000, keep_recent=2_000)


def test_s4_lab_shows_the_replayed_views_of_the_chosen_call(lab: PolicyLab) -> None:
    policy = ContextPolicy(16_000, 0.8, 2_000, strategy=strategy_from("article"))
    views: list[Any] = []
    rows = replay_messages(long_session(), policy, facts=False, views=views)
    assert len(lab.current.rows) == len(rows) == 120 and lab.call.max == 120
    first = next(r["call"] for r in rows if r["compacted"])
    assert lab.call.value == first  # opens on the first compaction
    lab.call.value = 50
    assert lab.data is not None and lab.data.record.after_tokens == views[49].after_tokens
    assert lab.data.record.stage == views[49].stage
    assert f"{views[49].after_tokens:,}" in lab.gauge.value
    assert 'data-call="50"' in lab.cursor.value


def test_s4_call_slider_redraws_only_the_call_and_replay_is_cached(lab: PolicyLab) -> None:
    timeline, calls, svg = lab.redraws["timeline"], lab.redraws["call"], lab.timeline.value
    gauge = lab.gauge.value
    lab.call.value = 110
    assert lab.redraws == {"timeline": timeline, "call": calls + 1}  # timeline untouched, the call redrawn
    assert lab.timeline.value == svg and lab.gauge.value != gauge
    before = lab.current
    lab.window.value = 24_000  # the policy changed: the call redrawn at once from its turn's replay
    assert lab.redraws["call"] == calls + 2 and lab.data is not None
    lab.wait()  # and the timeline once the whole replay, run in the background, is done
    assert lab.redraws["timeline"] == timeline + 1 and lab.current is not before
    assert lab.data.record.after_tokens == lab.current.views[109].after_tokens
    assert lab.current.rows[0]["window"] == 24_000 and "window 24,000" in lab.status.value
    lab.window.value = 16_000  # back: the cached replay, not a new one
    assert lab.current is before


@pytest.mark.parametrize("strategy", ["article", "masking", "clearing", "model-summary"])
def test_s4_a_turn_replayed_alone_gives_the_whole_replays_views(strategy: str) -> None:
    """C2: the engine rebuilds at each turn's first call, so the lab's live redraw (the chosen call's turn replayed
    alone) shows the view the whole replay has, for every call."""
    lab = PolicyLab({"long": long_session(160, per_turn=13)}, datasets=False, window=8_000, keep_recent=1_000,
                    strategy=strategy, background=False)
    policy = ContextPolicy(6_000, 0.7, 1_500, strategy=strategy_from(strategy))
    whole: list[Any] = []
    replay_messages(long_session(160, per_turn=13), policy, facts=False, views=whole)
    assert (lab.transcript.value, policy) not in lab._cache
    for call in range(1, len(whole) + 1):
        view, _, iteration = lab.view_at(call, policy)
        assert (view.messages, view.stage, view.after_tokens) == (whole[call - 1].messages, whole[call - 1].stage,
                                                                   whole[call - 1].after_tokens), call
        assert iteration == (call - 1) % 13 + 1
    assert (lab.transcript.value, policy) not in lab._cache  # no whole replay was made
    with pytest.raises(ValueError, match="must open a turn"):
        replay_messages(long_session(40, per_turn=13), policy, facts=False, first_call=3)


def test_c12_strategy_numbers_get_sliders_and_change_the_views(lab: PolicyLab) -> None:
    lab.set(strategy="masking", keep_last=2, call=100)
    assert set(lab.param_sliders) == {"keep_last"} and lab.policy().strategy == strategy_from("masking", keep_last=2)
    placeholders_2 = sum(1 for m in lab.current.views[99].messages if m.get("role") == "tool"
                         and str(m.get("content")).startswith("[old tool output compacted"))
    lab.set(keep_last=8)
    placeholders_8 = sum(1 for m in lab.current.views[99].messages if m.get("role") == "tool"
                         and str(m.get("content")).startswith("[old tool output compacted"))
    assert lab.call.value == 100 and placeholders_2 > placeholders_8
    lab.set(strategy="clearing")
    assert set(lab.param_sliders) == {"keep_last", "clear_at_least"}  # trigger_tokens is None: no slider
    assert "masking" not in lab.status.value and "clearing" in lab.status.value


def test_c12_side_by_side_compares_two_strategies_on_one_call(lab: PolicyLab) -> None:
    lab.set(strategy="masking", keep_last=1, compare="article", call=60)
    assert lab.other is not None and lab.data is not None
    article = lab.replayed(lab.policy("article")).views[59]
    assert lab.other.record.after_tokens == article.after_tokens
    line = lab.versus.value
    assert "masking" in line and "article" in line and f"{article.after_tokens:,}" in line
    assert "identical" in line and line.count("mx-gauge") >= 1
    lab.set(compare=None)
    assert lab.versus.value == "" and lab.other is None


def test_n2_saved_form_is_the_last_state(lab: PolicyLab) -> None:
    lab.set(strategy="article", compare="masking", call=77)
    html, text = lab.to_html(), lab.to_text()
    assert "<svg" in html and 'data-call="77"' in html and "call 77" in html and lab.gauge.value in html
    assert lab.versus.value in html and "policy lab" in text and "call 77" in text and "versus masking" in text
    bundle = lab._repr_mimebundle_()
    assert bundle["text/html"] == html


def test_s4_bad_input_is_refused_clearly(lab: PolicyLab) -> None:
    state = (lab.call.value, lab.policy())
    with pytest.raises(ValueError, match="unknown strategy 'nope'; known strategies: article"):
        lab.set(strategy="nope")
    with pytest.raises(ValueError, match="no control 'keep_lots'"):
        lab.set(keep_lots=3)
    with pytest.raises(ValueError, match="threshold_ratio must be a number in"):
        lab.set(threshold_ratio=1.5)
    with pytest.raises(ValueError, match="no transcript 'other'"):
        lab.set(transcript="other")
    with pytest.raises(ValueError, match=r"call must be in \[1, 120\]"):
        lab.set(call=500)
    assert (lab.call.value, lab.policy()) == state  # nothing changed
    with pytest.raises(ValueError, match="needs a transcript"):
        PolicyLab(datasets=False)


def test_s4_lab_offers_shipped_datasets_and_stored_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_CONTEXT_WINDOW"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path / "store.duckdb"))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.config.pop("AgentMagics", None)
    shell.run_line_magic("load_ext", "mxclaw_nb")
    try:
        with capture_output():
            shell.run_cell_magic("agent", "", "fix the failing tests")
            lab = shell.run_line_magic("agent", "lab --versus masking")
        assert isinstance(lab, PolicyLab)
        labels = list(lab.sources)
        assert labels[0].startswith("current session ") and any(k.startswith("swe-agent/") for k in labels)
        assert any(k.startswith("tau-bench/") for k in labels)
        assert len(lab.current.rows) >= 1 and lab.compare.value == "masking"
        lab.set(transcript=next(k for k in labels if k.startswith("tau-bench/")))
        assert len(lab.current.rows) > 5 and lab.data is not None
        with pytest.raises(UsageError, match="invalid choice: 'nope'"):
            shell.run_line_magic("agent", "lab --strategy nope")
    finally:
        shell.run_line_magic("unload_ext", "mxclaw_nb")
        shell.config.pop("AgentMagics", None)


def test_n2_lab_inspector_html_is_the_inspectors_own(lab: PolicyLab) -> None:
    """The lab's widget-free inspector HTML is byte for byte the CompactionInspector's (up to its output id)."""
    import re

    from mxclaw_nb.widgets.inspector import CompactionInspector
    from mxclaw_nb.widgets.lab import InspectorHTML

    lab.set(strategy="masking", keep_last=2, call=90)
    assert lab.data is not None

    def uid(s: str) -> str:
        return re.sub(r"mx-i[0-9a-f]{10}", "UID", s)

    own = CompactionInspector(lab.data, max_rows=lab.max_rows).to_html()
    assert uid(InspectorHTML(lab.data, lab.max_rows).to_html()) == uid(own) == uid(lab.inspector.value)
    assert "placeholder" in own


def test_s4_a_newer_policy_cancels_the_background_replay_and_a_failure_is_said() -> None:
    """S4: moving on before the timeline's replay is done cancels it (only the last policy's timeline is drawn); a
    replay that fails says so where the timeline was and raises from wait()."""
    lab = PolicyLab({"long": long_session(300)}, datasets=False, window=16_000, keep_recent=2_000,
                    wait_ms=0)  # never wait for the whole replay: the background path
    drawn = lab.redraws["timeline"]
    with lab._lock:  # both moves before the first replay may draw (a loaded machine could finish it in between)
        lab.window.value = 20_000
        first = lab._job
        lab.window.value = 21_000
    assert first is not None and first.cancel.is_set() and lab._job is not first
    lab.wait()
    first.thread.join()
    assert first.error is None  # cancelled (or finished unseen), not failed
    assert lab.redraws["timeline"] == drawn + 1 and lab.current.rows[0]["window"] == 21_000  # only the last drawn
    assert "window 21,000" in lab.status.value and "replay " in lab.status.value

    # a whole replay that fails (a replay of every call, unlike the turn's): said in place of the timeline
    import mxclaw_nb.widgets.lab as lab_module

    def whole_fails(*args: Any, first_call: int = 1, **kw: Any) -> Any:
        if first_call == 1:
            raise RuntimeError("the store went away")
        return replay_messages(*args, first_call=first_call, **kw)

    lab.call.value = 250
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lab_module, "replay_messages", whole_fails)
        lab.window.value = 22_000
        assert lab.data is not None and "window 22,000" in lab.status.value  # the call was redrawn
        with pytest.raises(RuntimeError, match="the store went away"):
            lab.wait()
    assert "the replay for the timeline failed: RuntimeError: the store went away" in lab.timeline.value


@pytest.mark.parametrize("wait_ms", [10_000.0, 0.0])
def test_s4_a_quick_whole_replay_is_waited_for_and_drawn_with_the_call(wait_ms: float) -> None:
    """S4: when the transcript's last whole replay took at most `wait_ms`, a policy change waits for the new one
    and redraws timeline, gauge and inspector at once (no background replay, nothing dimmed); else the call first
    and the timeline from a background replay (dimmed meanwhile)."""
    lab = PolicyLab({"long": long_session(120)}, datasets=False, window=16_000, keep_recent=2_000, wait_ms=wait_ms)
    drawn, calls = lab.redraws["timeline"], lab.redraws["call"]
    lab.call.value = 100
    lab.window.value = 20_000
    waited = wait_ms > 0
    assert (lab._job is None) == waited and ("mx-lab-stale" in lab.plot._dom_classes) != waited
    assert lab.redraws["timeline"] == drawn + waited and lab.redraws["call"] == calls + 2
    assert f'data-timeline="{int(waited)}"' in lab.status.value and "window 20,000" in lab.status.value
    lab.wait()
    assert lab.redraws["timeline"] == drawn + 1 and 'data-timeline="1"' in lab.status.value
    assert lab.data is not None and lab.data.record.after_tokens == lab.current.views[99].after_tokens
    assert "window 20,000" in lab.timeline.value or lab.current.rows[0]["window"] == 20_000


def test_s4_replays_sharing_the_transcripts_caches_give_the_views_of_fresh_ones() -> None:
    """The lab's replays on the kernel's thread share one SessionCaches per transcript across policies and
    strategies (as `compare` does): every view equals that of a replay with caches of its own."""
    import json

    msgs = long_session(200, per_turn=17)
    lab = PolicyLab({"long": msgs}, datasets=False, window=16_000, keep_recent=2_000, wait_ms=10_000)
    lab.call.value = 150
    for state in ({"strategy": "masking", "keep_last": 4}, {"window": 12_000}, {"strategy": "clearing"},
                  {"strategy": "model-summary", "keep_recent": 1_500}, {"strategy": "article", "threshold_ratio": 0.6}):
        lab.set(**state)
        fresh: list[Any] = []
        replay_messages(msgs, lab.policy(), facts=False, views=fresh)

        def dump(views: list[Any]) -> list[str]:
            return [json.dumps([v.messages, v.stage, v.summary, v.after_tokens, v.sources]) for v in views]

        assert dump(lab.current.views) == dump(fresh), state
        assert lab._caches  # the shared caches were used


def test_s4_a_whole_replay_keeps_the_view_on_screen_and_makes_others_from_their_turn() -> None:
    """S4: a slider move's whole replay keeps the chosen call's view only (the collector no longer walks 500 views
    per cached replay; those of its turn before it are kept while it runs, for its N3 lineage, and let go once that
    is composed); another call's view is made from a replay of its turn when read, equal to the whole replay's, and
    kept. A `-cache` variant (E4: views carry over turns) keeps every view."""
    msgs = long_session(120)
    lab = PolicyLab({"long": msgs}, datasets=False, window=16_000, keep_recent=2_000, wait_ms=1e9)
    lab.call.value = 100
    lab.set(strategy="masking", window=12_000)
    views = lab.current.views
    assert len(views) == 120 and sorted(views._kept) == [100]  # type: ignore[attr-defined]
    fresh: list[Any] = []
    replay_messages(msgs, lab.policy(), facts=False, views=fresh)
    assert views[40].messages == fresh[40].messages and views[-1].after_tokens == fresh[-1].after_tokens
    assert sorted(views._kept) == [41, 100, 120]  # type: ignore[attr-defined]
    assert [v.stage for v in views[38:42]] == [v.stage for v in fresh[38:42]]
    with pytest.raises(IndexError):
        views[120]
    lab.set(strategy="masking-cache")
    assert len(lab.current.views._kept) == 120  # type: ignore[attr-defined]


def test_e4_the_labs_timeline_rings_the_calls_a_cache_variant_kept_warm() -> None:
    """E4 in the lab: under `masking-cache` every call whose replay row says `deferred` (the warm prefix kept
    instead of masking more) gets a ring at what it sent, and nothing else does; plain `masking` has none."""
    session = long_session(60)
    lab = PolicyLab({"s": session}, datasets=False, window=8_000, keep_recent=1_000, wait_ms=1e9)
    lab.set(strategy="masking-cache")
    lab.wait()
    rows = lab.current.rows
    deferred = [r["call"] for r in rows if r["cache_decision"] == "deferred"]
    assert deferred  # the session crosses the threshold within turns
    html = lab.timeline.value
    assert 'class="mx-kept-warm"' in html
    assert html.count("<circle") == len(deferred) + 1  # one ring per deferred call, one in the legend
    assert all(f"<title>call {c}: kept the warm prefix" in html for c in deferred)
    lab.set(strategy="masking")
    lab.wait()
    assert "<circle" not in lab.timeline.value and "kept the warm prefix" not in lab.timeline.value


@pytest.fixture(scope="module")
def long_lab() -> PolicyLab:
    return PolicyLab({"long": long_session(500)}, datasets=False, window=31_000, threshold_ratio=0.5,
                     keep_recent=4_000, wait_ms=1e9)


@pytest.mark.parametrize("strategy", ["article", "masking"])
def test_n3_a_carried_call_names_what_it_carries_relative_to_the_stored_transcript(long_lab: PolicyLab,
                                                                                   strategy: str) -> None:
    """N3 + C7: call 102 is call 2 of turn 6, whose call 1 masked old tool outputs. Its before rows are the stored
    transcript (the original outputs, not placeholders), each placeholder it sends is a `placeholder` row made by
    call 1, and gauge, inspector, the comparison gauge and the saved form say what it carries."""
    lab = long_lab
    lab.set(strategy=strategy, compare="clearing", call=102)
    d = lab.data
    assert d is not None and d.transcript_relative and (d.record.turn, d.record.iteration) == (6, 2)
    before = {r["position"]: r for r in d.before}
    assert sorted(before) == list(range(204))  # the stored transcript up to the call, one row per message
    msgs = lab.messages()
    assert all(r["chars"] == len(msgs[p]["content"] or "") for p, r in before.items() if r["role"] == "tool")
    assert not any(r["preview"].startswith("[old tool output") for r in d.before)  # never a placeholder's text
    sent = [m for m in lab.view_at(102)[0].messages if str(m.get("content")).startswith("[old tool output")]
    by_call1 = [r for r in d.before if r["action"] == "placeholder" and r["call"] == 1]
    made_now = [r for r in d.before if r["action"] == "placeholder" and r["call"] == 2]
    assert by_call1 and len(by_call1) + len(made_now) == len(sent)
    assert (strategy == "article") == (not made_now)  # masking masks on at call 2 too
    assert d.carried == f"{d.record.stage} · carries {len(by_call1)} placeholders"
    after = [r for r in d.after if r["action"] == "placeholder"]
    assert len(after) == len(sent) and all(r["preview"].startswith("[old tool output") for r in after)
    carries = f" · carries {len(by_call1)} placeholders"
    assert carries in lab.gauge.value and "stored transcript up to this call" in lab.gauge.value
    head = lab.inspector.value
    assert carries in head and "Before (transcript, 204 msgs)" in head and "by call" in head
    assert lab.other is not None and lab.other.transcript_relative  # the comparison gauge too
    assert " · carries " in (lab.other.carried or "") and lab.other.carried.split(" · ", 1)[1] in lab.versus.value
    assert carries in lab.to_html()  # the saved form
    rows = lab.current.rows  # the first C6 summary made inside a turn (article: call 15 of turn 15, call 295)
    made = next(r for r, nxt in zip(rows, rows[1:], strict=False)
                if r["stage"] == "summary" and nxt["turn"] == r["turn"])
    lab.set(call=made["call"] + 1)  # the next call of the turn: the summary is pinned (C7)
    d = lab.data
    assert d is not None and d.record.iteration is not None and d.record.iteration > 1
    by = d.record.iteration - 1
    assert strategy != "article" or (by, made["call"]) == (15, 295)
    assert f"carries the summary of call {by}" in (d.carried or "") and d.summaries[0][0] == by
    summarized = [r for r in d.before if r["action"] == "summarized"]
    assert summarized and {r["call"] for r in summarized} == {by}
    assert f"summary made by call {by} of this turn, carried" in lab.inspector.value


def test_n3_lab_lineage_is_composed_for_the_call_on_screen_only() -> None:
    """S4: the whole replay composes no lineage; the call's is composed over its turn's views (kept by the whole
    replay until then) and continued, not recomposed, when the call slider moves on in the turn."""
    import mxclaw_nb.widgets.lab as lab_module

    composed: list[int] = []
    real = lab_module.replayed_lineage

    def counting(view: Any, n_messages: int, previous: Any = None, *, call: int = 1) -> Any:
        composed.append(call)
        return real(view, n_messages, previous, call=call)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lab_module, "replayed_lineage", counting)
        lab = PolicyLab({"long": long_session(120)}, datasets=False, window=16_000, keep_recent=2_000, wait_ms=1e9)
        lab.set(call=45)  # call 5 of turn 3
        assert composed == [1, 2, 3, 4, 5]
        composed.clear()
        lab.call.value = 47
        assert composed == [6, 7]  # continued from call 45's lineage
        composed.clear()
        lab.call.value = 43
        assert composed == [1, 2, 3]  # an earlier call: composed again from the turn's first
        composed.clear()
        mp.setattr(lab, "_turn_view", lambda *a, **k: pytest.fail("a turn replayed alone"))
        lab.set(window=18_000)  # a new policy: its whole replay kept call 43's turn up to it (no turn replayed)
        assert composed == [1, 2, 3] and sorted(lab.current.views._kept) == [43]  # type: ignore[attr-defined]
