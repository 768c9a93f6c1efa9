"""Replay, compare, fact survival, estimator honesty and plots (SPEC S4, C0-C8, C7, T1/T2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.analysis import (
    as_policy,
    compare,
    content_kind,
    estimate_honesty,
    extract_facts,
    fact_survival,
    honesty_table,
    import_openai_jsonl,
    replay,
    reported_honesty,
    summarize_comparison,
    summarize_policies,
)
from mxclaw_nb.analysis.facts import Fact, number_tokens, path_tokens
from mxclaw_nb.analysis.plots import plot_comparison, plot_estimate_error, stage_colors
from mxclaw_nb.analysis.replay import as_requests
from mxclaw_nb.context import STAGES, ContextPolicy, build_request_view
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, synthetic_transcript, worked_example
from mxclaw_nb.store.writer import Store
from mxclaw_nb.tokenizers import exact_counter
from mxclaw_nb.widgets.compare import comparison_widget, timeline
from tests.conftest import SHARED_TRANSCRIPTS

TIGHT = {"window": 40_000, "ratio": 0.8, "keep_recent": 8_000}  # the worked example reaches C6 under this
WINDOWS = [{"window": w, "ratio": 0.8, "keep_recent": k} for w, k in ((8_000, 2_000), (16_000, 4_000),
                                                                       (32_000, 8_000))]


def _call(cid: str, name: str, args: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _shared() -> Path:
    if not SHARED_TRANSCRIPTS.is_dir():
        pytest.skip(f"shared transcripts not found at {SHARED_TRANSCRIPTS}")
    return SHARED_TRANSCRIPTS


# --- replay -------------------------------------------------------------------------------------------------


def test_replay_has_one_row_per_model_call_and_accounts_for_every_message() -> None:
    """One row per assistant message (the loop calls the model before each); actions add up (C0, N2)."""
    msgs = worked_example()
    df = replay(msgs, TIGHT)
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    assert list(df["n_messages"]) == assistants and list(df["call"]) == list(range(1, len(assistants) + 1))
    assert (df[["kept", "placeholder", "summarized", "dropped"]].sum(axis=1) == df["n_messages"]).all()
    assert set(df["stage"]) <= set(STAGES) and {"micro", "summary"} <= set(df["stage"])
    assert (df["after_tokens"] <= df["before_tokens"]).all()
    assert (df["saved_tokens"] == df["full_tokens"] - df["after_tokens"]).all()
    assert (df["threshold"] == 32_000).all() and (df["counter"] == "estimate").all()
    summary_rows = df[df["stage"] == "summary"]
    assert (summary_rows["summary_chars"] > 0).all() and (summary_rows["summarized"] > 0).all()


def test_replay_rebuilds_at_user_messages_and_chains_views_within_a_turn() -> None:
    """C7: rebuilt from the full transcript at each user message; inside a turn the previous view's
    next_input (summary pinned) plus the new messages is the input, exactly as the loop does it."""
    msgs = worked_example()
    pol = as_policy(TIGHT)[1]
    df = replay(msgs, pol)
    users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    prev = 0
    for row in df.itertuples():
        assert row.rebuilt == (row.call == 1 or any(prev < u < row.n_messages for u in users))
        prev = row.n_messages
    # Redo the chain by hand for turn 4 and pin the figures.
    turn4 = df[df["turn"] == 4]
    start = int(turn4["n_messages"].iloc[0])
    view = build_request_view(msgs[:start], pol)
    expected = [view.after_tokens]
    for prev, i in zip(turn4["n_messages"][:-1], turn4["n_messages"][1:], strict=True):
        view = build_request_view(view.next_input(msgs[prev:i]), pol)
        expected.append(view.after_tokens)
    assert list(turn4["after_tokens"]) == expected
    # After a summary inside the turn, later calls carry it pinned: fewer inputs than transcript messages,
    # and the messages it replaced stay counted as summarized.
    first_summary = turn4[turn4["stage"] == "summary"].index[0]
    later = turn4.loc[first_summary + 1:]
    assert (later["n_input"] < later["n_messages"]).all()
    assert (later["summarized"] >= turn4.loc[first_summary, "summarized"]).all()
    assert not later["rebuilt"].any()


def test_replay_counts_repair_results_and_drops() -> None:
    """C4 in replay: a dangling call gets a synthetic result; an orphan result is dropped, not compacted."""
    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [_call("a", "bash", '{"command": "ls"}')]},
            {"role": "tool", "tool_call_id": "zzz", "content": "orphan 12345"},
            {"role": "assistant", "content": "done"}]
    df = replay(msgs, {"window": 64_000})
    last = df.iloc[-1]
    assert last["n_messages"] == 3 and last["synthetic"] == 1 and last["dropped"] == 1 and last["kept"] == 2
    assert pd.isna(last["fact_survival"])  # a repair drop is not a compaction


def test_replay_from_store_session_matches_replay_of_messages(tmp_path: Path) -> None:
    """A stored (imported) session replays exactly like its messages."""
    data = Path(__file__).parent / "data" / "openai_mixed.jsonl"
    with Store(tmp_path / "r.duckdb") as store:
        sid = import_openai_jsonl(store, data, progress=False).sessions[0]
        from_store = replay(sid, {"window": 1_000, "keep_recent": 50}, store=store)
        messages = store.load_transcript(sid)
    direct = replay(messages, {"window": 1_000, "keep_recent": 50})
    pd.testing.assert_frame_equal(from_store.drop(columns="session_id"), direct.drop(columns="session_id"))
    assert set(from_store["session_id"]) == {sid}


def test_replay_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="store="):
        replay("some-session-id", {"window": 8_000})
    with pytest.raises(ValueError, match="unknown policy key 'windw'"):
        replay(worked_example(), {"windw": 8_000})
    with pytest.raises(ValueError, match="context_window_tokens"):
        replay(worked_example(), {"window": -1})


@pytest.mark.skipif(exact_counter("o200k_base") is None, reason="tiktoken/bpe-openai not installed")
def test_replay_exact_counts_each_view_in_o200k() -> None:
    """exact=True adds o200k counts of the sent view; the compacted view is smaller than the transcript."""
    df = replay(worked_example(), WORKED_EXAMPLE_POLICY, exact=True)
    counter = exact_counter("o200k_base")
    msgs = worked_example()
    first = df.iloc[0]
    assert first["exact_full_tokens"] == sum(counter.count(m) for m in msgs[: first["n_messages"]])
    compacted = df[df["compacted"]]
    assert (compacted["exact_after_tokens"] < compacted["exact_full_tokens"]).all()
    assert df["exact_over_window"].dtype == bool


# --- facts --------------------------------------------------------------------------------------------------


def test_extract_facts_kinds() -> None:
    """Paths, error lines, numbers (>= 3 digits, decimals, units) and shell commands are facts."""
    call = _call("c", "bash", '{"command": "pytest -q tests/test_fts.py\\necho done"}')
    facts = extract_facts({"role": "assistant", "content": "$ make build\nTook 2.5 s; 12 files; id 48213.",
                           "tool_calls": [call]})
    assert Fact("command", "pytest -q tests/test_fts.py") in facts and Fact("command", "make build") in facts
    assert Fact("path", "tests/test_fts.py") in facts
    assert {Fact("number", "2.5"), Fact("number", "48213")} <= facts and Fact("number", "12") not in facts
    tool = {"role": "tool", "tool_call_id": "c", "content": "ok\nE   sqlite3.OperationalError: no such module: fts5"}
    assert Fact("error", "E sqlite3.OperationalError: no such module: fts5") in extract_facts(tool)
    argv = _call("d", "shell", '{"command": ["bash", "-lc", "ls -la src"]}')
    assert Fact("command", "ls -la src") in extract_facts({"role": "assistant", "content": "", "tool_calls": [argv]})
    assert path_tokens("and/or n/a http://x.org/a/b src/pkg/mod.py ./run.sh") == {"src/pkg/mod.py", "./run.sh"}
    assert number_tokens("v1.2.3 99% 1,250 units", facts_only=True) == {"99", "1,250"}


def test_fact_survival_matches_whole_tokens_and_summary_text() -> None:
    """A number is visible only as a whole token; an error line survives when the summary keeps it (C6)."""
    old = [{"role": "tool", "tool_call_id": "x", "is_error": True, "content": "Permission denied: /etc/shadow (51234)"}]
    seen = fact_survival(old, [{"role": "system", "content": "seen 512345 and /etc/shadow"}])
    assert seen.by_kind["number"] == (1, 0) and seen.by_kind["path"] == (1, 1)
    summary = "[compressed conversation context]\nFailures to avoid:\n- Permission denied: /etc/shadow (51234)"
    result = fact_survival(old, [{"role": "system", "content": summary}])
    assert result.share == 1.0 and result.total == 3


_TEXT = st.text(alphabet=st.sampled_from(list("ab./_-0123456789, \t\n\u00a0\u3000xyz.py%ms:")), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=4), _TEXT)
def test_fact_visibility_needs_no_path_token_set(texts: list[str], compacted: str) -> None:
    """S4: a path fact is a whitespace-free token of one message, so "a path token of the view" is implied by "in
    the view's normalised text": the view keeps the text and the number tokens only, with the same survival."""
    import re

    from mxclaw_nb.analysis.facts import combine_views, is_visible, message_view, normalize

    view = combine_views(message_view({"role": "tool", "content": t}) for t in texts)
    paths = set().union(*(path_tokens(t) for t in texts))
    for fact in extract_facts({"role": "tool", "content": compacted}):
        before = (fact.text in paths or fact.text in view.text) if fact.kind == "path" else is_visible(fact, view)
        assert is_visible(fact, view) == before
    for t in [*texts, compacted]:
        assert normalize(t) == re.sub(r"\s+", " ", t).strip()


def test_fact_survival_in_replay_keeps_summary_facts_and_loses_old_numbers() -> None:
    """Worked example under C6: the edited path and the forbidden-command failure stay visible."""
    df = replay(worked_example(), TIGHT)
    summarized = df[df["stage"] == "summary"].iloc[0]
    assert 0 < summarized["fact_survival"] < 1
    assert summarized["survival_error"] == 1.0
    assert summarized["facts_visible"] <= summarized["facts_total"]


# --- compare ------------------------------------------------------------------------------------------------


def test_compare_policies_as_objects_and_dicts() -> None:
    convs = {"long": synthetic_transcript(200), "example": worked_example()}
    pols = [ContextPolicy(context_window_tokens=16_000, keep_recent_tokens=4_000),
            {"name": "tight", "window": 8_000, "keep_recent": 2_000}]
    df = compare(convs, pols, progress=False)
    assert list(df["policy"].cat.categories) == ["16k/0.8/4k", "tight"]
    per = summarize_comparison(df)
    assert len(per) == 4 and set(per["session_id"]) == {"long", "example"}
    n_calls = {k: sum(1 for i, m in enumerate(v) if i and m["role"] == "assistant") for k, v in convs.items()}
    assert dict(per[per["policy"] == "tight"].set_index("session_id")["calls"]) == n_calls
    assert df.attrs["timing"]["sessions"] == 2 and df.attrs["timing"]["ms_per_session"] > 0
    with pytest.raises(ValueError, match="distinct labels"):
        compare(convs, [{"window": 8_000}, {"window": 8_000}], progress=False)


def test_compare_over_all_shared_transcripts_at_three_windows() -> None:
    """S4/C2: all 223 shared conversations, 8k/16k/32k windows; smaller windows compact more."""
    df = compare(_shared(), WINDOWS, progress=False)
    assert df["session_id"].nunique() == 223
    s = summarize_policies(df).set_index("policy")
    assert list(s.index) == ["8k/0.8/2k", "16k/0.8/4k", "32k/0.8/8k"]
    assert s.loc["8k/0.8/2k", "compactions"] > s.loc["16k/0.8/4k", "compactions"] >= s.loc["32k/0.8/8k", "compactions"]
    assert s.loc["8k/0.8/2k", "saved_share"] > 0
    assert 0 < s.loc["8k/0.8/2k", "fact_survival"] < 1
    valid = df["fact_survival"].dropna()
    assert ((valid >= 0) & (valid <= 1)).all()
    assert (df[["kept", "placeholder", "summarized", "dropped"]].sum(axis=1) == df["n_messages"]).all()
    assert df.attrs["timing"]["ms_per_session_policy"] < 200


# --- estimator honesty ----------------------------------------------------------------------------------------


def test_content_kind_classifier() -> None:
    assert content_kind({"role": "user", "content": "请修复这个测试，报告里的总数不对。"}) == "cjk"
    assert content_kind({"role": "tool", "content": '{"flights": [{"id": "HAT001", "price": 120}]}'}) == "json"
    code = "def total(items):\n    return sum(i.qty for i in items)\n\nprint(total([]))\n"
    assert content_kind({"role": "tool", "content": code}) == "code"
    assert content_kind({"role": "assistant", "content": "The report now sums every item, as expected."}) == "prose"
    assert content_kind({"role": "assistant", "content": None,
                         "tool_calls": [_call("a", "bash", '{"command": "ls"}')]}) == "json"
    assert content_kind({"role": "tool", "content": ""}) == "empty"


@pytest.mark.skipif(exact_counter("o200k_base") is None, reason="tiktoken/bpe-openai not installed")
def test_estimate_under_counts_json_and_code_on_shared_transcripts() -> None:
    """T1/T2: on real transcripts C1 is below exact o200k for most JSON and code messages."""
    df = estimate_honesty(_shared(), progress=False)
    by_kind = honesty_table(df, "kind").set_index("kind")
    assert by_kind.loc["json", "under_share"] > 0.8 and by_kind.loc["json", "median_ratio"] < 0.85
    assert by_kind.loc["code", "median_ratio"] < by_kind.loc["prose", "median_ratio"]
    by_role = honesty_table(df, ["role", "kind"])
    assert {"role", "kind", "under_share", "p5_ratio", "missing_share"} <= set(by_role.columns)
    assert (df["missing"] == (df["exact"] - df["estimate"]).clip(lower=0)).all()


def test_reported_honesty_reads_request_records(tmp_path: Path) -> None:
    """Where the store has provider usage, the estimate is shown beside it (T3)."""
    with Store(tmp_path / "req.duckdb") as store:
        sid = store.create_session()
        store.append_request(sid, {"turn": 1, "iteration": 1, "counter": "estimate", "estimate_tokens": 800,
                                   "prompt_tokens_reported": 1_000})
        store.append_request(sid, {"turn": 1, "iteration": 2, "counter": "calibrated", "estimate_tokens": 900,
                                   "calibrated_tokens": 1_150, "prompt_tokens_reported": 1_100})
        df = reported_honesty(store, sid)
    assert list(df["estimate_over_reported"].round(3)) == [0.8, round(900 / 1100, 3)]
    assert list(df["estimate_under"]) == [True, True]
    assert df["calibrated_over_reported"].iloc[1] == pytest.approx(1150 / 1100)


# --- plots --------------------------------------------------------------------------------------------------


def test_plots_draw_policies_in_the_widget_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    df = compare({"example": worked_example()}, [TIGHT, WORKED_EXAMPLE_POLICY], progress=False)
    fig = plot_comparison(df)
    axes = fig.get_axes()
    assert len(axes) == 3
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["40k/0.8/8k", "64k/0.8/8k"]
    from mxclaw_nb.widgets.style import STAGE_COLORS

    assert stage_colors()["summary"] == STAGE_COLORS["summary"]
    monkeypatch.setitem(sys.modules, "mxclaw_nb.widgets.style", None)  # widgets unavailable: fallback palette
    assert stage_colors()["micro"].startswith("#")
    honesty = pd.DataFrame({"kind": ["json", "json", "prose"], "ratio": [0.6, 0.7, 1.1]})
    assert len(plot_estimate_error(honesty).get_axes()) == 1


def test_fact_survival_plot_says_why_a_slot_is_empty() -> None:
    """A kind never found gets no bars and no legend entry but is named; a zero-height bar is labelled."""
    from mxclaw_nb.analysis.plots import plot_fact_survival

    summary = pd.DataFrame({"policy": ["a", "b"], "sessions_compacted": [1, 1], "fact_survival": [0.5, 0.25],
                            "survival_path": [0.0, 0.5], "survival_error": [float("nan")] * 2,
                            "survival_number": [0.75, float("nan")], "survival_command": [float("nan")] * 2})
    ax = plot_fact_survival(summary).get_axes()[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["all", "path", "number"]
    assert "none found in compacted messages: error, command" in ax.get_title()
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("0") == 1 and labels.count("n/a") == 1


def test_replay_feeds_the_widgets_token_timeline() -> None:
    """N2 reuse: a replayed session renders in the widgets' TokenTimeline with its compactions marked."""
    df = compare({"ex": worked_example()}, [TIGHT, WORKED_EXAMPLE_POLICY], progress=False)
    with pytest.raises(ValueError, match="one session and one policy"):
        as_requests(df)
    widget = timeline(df, policy="40k/0.8/8k")
    one = df[df["policy"] == "40k/0.8/8k"]
    assert len(widget.data) == len(one) and int(widget.data["compacted"].sum()) == int(one["compacted"].sum())
    assert "replay of ex" in widget.to_text() and widget.png.startswith(b"\x89PNG")
    box = comparison_widget(df)
    assert "64k/0.8/8k" in box.children[2].value and bytes(box.children[1].value).startswith(b"\x89PNG")


# --- replay reproduces the loop -------------------------------------------------------------------------------


def test_replay_of_a_live_session_reproduces_every_stored_request(test_server, tmp_path: Path) -> None:
    """C7 end to end: a real agent session (real HTTP, real DuckDB) compacts mid-turn; replaying its stored
    transcript under the same policy gives the same stage and token figures for every model call."""
    from mxclaw_nb import Agent

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_text("x" * 6_000, encoding="utf-8")
    for _ in range(4):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("read it all")
    test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("and once more")
    agent = Agent(workspace=ws, db=str(tmp_path / "live.duckdb"), base_url=test_server.base_url, api_key="k",
                  model="test-model", home=tmp_path / "home", approval="allow", context_window_tokens=4_000,
                  keep_recent_tokens=1_000, counter="estimate")
    agent.run("read big.txt four times")
    agent.run("read it again")
    stored = agent.store.requests(agent.session_id).sort_values("seq")
    df = replay(agent.session_id, agent.policy, store=agent.store)
    assert len(df) == len(stored) == 7 and set(stored["stage"]) > {"unchanged"}
    assert list(df["stage"]) == list(stored["stage"])
    assert list(df["before_tokens"]) == list(stored["before_tokens"])
    assert list(df["after_tokens"]) == list(stored["after_tokens"])
    assert list(df["turn"]) == list(stored["turn"])


def test_replay_fallback_when_the_summariser_fails_and_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    """C8 in replay: a summariser that raises gives fallback rows with dropped messages; compare over
    20+ sessions shows a progress bar."""
    def broken(_messages: list[dict]) -> str:
        raise RuntimeError("boom")

    df = replay(worked_example(), TIGHT, summarize=broken)
    fallback = df[df["stage"] == "fallback"]
    assert len(fallback) and (fallback["dropped"] > 0).all() and fallback["fact_survival"].notna().all()
    compare([synthetic_transcript(12, seed=k) for k in range(20)], [{"window": 4_000}], progress=True)
    assert "replay" in capsys.readouterr().err


def test_compare_reads_sessions_from_a_store(tmp_path: Path) -> None:
    """S4: a whole store, a list of session ids or the sessions DataFrame are all valid inputs."""
    data = Path(__file__).parent / "data" / "openai_mixed.jsonl"
    with Store(tmp_path / "c.duckdb") as store:
        ids = import_openai_jsonl(store, data, progress=False).sessions
        whole = compare(store, [{"window": 1_000, "keep_recent": 50}], progress=False)
        by_ids = compare(ids[:2], [{"window": 1_000, "keep_recent": 50}], store=store, progress=False)
        by_frame = compare(store.sessions(), [{"window": 1_000, "keep_recent": 50}], store=store, progress=False)
    # the fourth session (line 9) is one user message: no model call to replay, so no row
    assert set(whole["session_id"]) == set(ids[:3]) == set(by_frame["session_id"]) and len(ids) == 4
    assert set(by_ids["session_id"]) == set(ids[:2])
    with pytest.raises(FileNotFoundError, match="no such transcript file"):
        compare(tmp_path / "missing.jsonl", [{"window": 1_000}], progress=False)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 120), seed=st.integers(0, 50), window=st.integers(2_000, 40_000),
       tail=st.integers(0, 8_000))
def test_replay_invariants_hold_for_any_policy(n: int, seed: int, window: int, tail: int) -> None:
    """Property: every transcript message is accounted for once per call; placeholders never grow a view
    (a C6 summary can, when little is summarised); under the threshold the view is the transcript (C2, C7)."""
    msgs = synthetic_transcript(n, seed=seed)
    df = replay(msgs, {"window": window, "keep_recent": tail})
    assert (df[["kept", "placeholder", "summarized", "dropped"]].sum(axis=1) == df["n_messages"]).all()
    not_summary = df[df["stage"].isin(["unchanged", "micro"])]
    assert (not_summary["after_tokens"] <= not_summary["before_tokens"]).all()
    fresh = df[df["rebuilt"] & (df["full_tokens"] <= df["threshold"])]
    assert (fresh["stage"] == "unchanged").all() and (fresh["kept"] == fresh["n_messages"]).all()
    survival = df["fact_survival"].dropna()
    assert ((survival >= 0) & (survival <= 1)).all()


def _kernel_session() -> list[dict]:
    """Two turns of python / kernel_variables / read_file results (facts as the K1 tools record them)."""
    df = {"kind": "value", "type": "DataFrame", "shape": [360, 5], "columns": ["date", "region", "units"],
          "variables": ["sales"]}
    msgs: list[dict] = [{"role": "system", "content": "[system prompt] notebook agent"}]
    for t in range(2):
        msgs.append({"role": "user", "content": f"turn {t}: load the sales"})
        msgs.append({"role": "assistant", "content": "", "tool_calls": [_call(f"p{t}", "python", "{}")]})
        msgs.append({"role": "tool", "tool_call_id": f"p{t}", "content": "row\n" * 3_000, "facts": df})
        msgs.append({"role": "assistant", "content": "", "tool_calls": [_call(f"v{t}", "kernel_variables", "{}")]})
        msgs.append({"role": "tool", "tool_call_id": f"v{t}", "content": "sales: DataFrame\n" * 150,
                     "facts": {"kind": "manifest", "count": 1}})
        msgs.append({"role": "assistant", "content": "", "tool_calls": [_call(f"r{t}", "read_file", "{}")]})
        msgs.append({"role": "tool", "tool_call_id": f"r{t}", "content": "text\n" * 1_500})
        msgs.append({"role": "assistant", "content": f"turn {t} done"})
    return msgs


def test_k2_replay_and_compare_count_typed_placeholders() -> None:
    """S4 + K2: `typed_placeholders` counts the typed placeholders each replayed call sends, part of `placeholder`."""
    msgs = _kernel_session()
    df = replay(msgs, {"window": 6_000, "ratio": 0.8, "keep_recent": 300})
    assert "typed_placeholders" in df and (df["typed_placeholders"] <= df["placeholder"]).all()
    assert df["typed_placeholders"].max() >= 2  # the python printout and the manifest of turn 1
    micro = df[df["stage"] == "micro"]
    assert len(micro) and (micro["typed_placeholders"] > 0).all()
    # read_file results get plain placeholders: more placeholders than typed ones in some call
    assert (df["placeholder"] > df["typed_placeholders"]).any()
    plain = replay(worked_example(), TIGHT)  # no kernel tools: never a typed placeholder
    assert (plain["typed_placeholders"] == 0).all() and plain["placeholder"].max() > 0
    both = compare({"kernel": msgs, "example": worked_example()}, [{"window": 6_000, "keep_recent": 300}],
                   progress=False)
    per = summarize_comparison(both).set_index("session_id")
    assert per.loc["kernel", "max_typed_placeholders"] == df["typed_placeholders"].max()
    assert per.loc["example", "max_typed_placeholders"] == 0
