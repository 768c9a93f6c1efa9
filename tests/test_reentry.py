"""SPEC C7, T3, N2: re-entry into a stored session continues the engine state saved with it (the C6 summary state),
checked against the stored rows, instead of rescanning the old part of the transcript; the first request of the
restarted process is byte-identical to what a process that never restarted sends, and a state that does not fit
(another engine version, other rows, malformed data) is rebuilt once from the rows, with a stored note."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb import Agent
from mxclaw_nb.context import ContextPolicy, TokenCache, build_request_view, build_structured_summary
from mxclaw_nb.context.incremental import PLAN_RESAVE_STEPS, PLAN_STATE_VERSION, plan_snapshot, summary_snapshot
from mxclaw_nb.context.repair import SentForms, plan_counted
from mxclaw_nb.context.rows import Spliced, with_appended
from mxclaw_nb.context.summary import SUMMARY_STATE_VERSION, StructuredSummaryState
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.records import record_of_view
from mxclaw_nb.reentry import REBUILT_EVENT
from mxclaw_nb.store.rows import CHUNK, StoredRows
from mxclaw_nb.store.writer import Store

SESSION = "reentry-session"


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _session(blocks: int) -> list[dict[str, Any]]:
    """A stored session with file writes, failures (flagged and by marker), kernel facts and notes."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for j in range(blocks):
        msgs.append({"role": "user", "content": f"goal {j}: fix module {j % 5} 修复 {j}"})
        msgs.append({"role": "assistant", "content": f"editing {j}",
                     "tool_calls": [_call(f"c{j}", "edit_file" if j % 3 else "bash", path=f"src/m{j % 7}.py")]})
        result: dict[str, Any] = {"role": "tool", "tool_call_id": f"c{j}",
                                  "content": f"Tool failed: step {j}" if j % 4 == 0 else f"ok {j} " + "x" * 300}
        if j % 9 == 0:
            result["is_error"] = True
        if j % 11 == 5:
            result["facts"] = {"variables": [f"df{j}"], "type": "DataFrame"}
        msgs.append(result)
        msgs.append({"role": "assistant", "content": f"state after {j}"})
    return msgs


def _seed(path: Path, blocks: int = 120) -> None:
    store = Store(str(path))
    store.create_session(session_id=SESSION, source="test")
    store.append_messages(SESSION, _session(blocks), turn=0)
    store.close()


def _agent(db: Path, srv: TestServer, ws: Path) -> tuple[Agent, list[str]]:
    """An agent on the stored session (a 4k window: every turn's first call summarizes), and the JSON body of each
    model call it makes (the messages as sent)."""
    ws.mkdir(exist_ok=True)
    agent = Agent(workspace=ws, db=str(db), base_url=srv.base_url, api_key="k", model="m", approval="allow",
                  context_window_tokens=4_000, keep_recent_tokens=1_000, session_id=SESSION, home=ws / "home")
    sent: list[str] = []
    complete = agent.provider.complete

    def capture(messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        sent.append(json.dumps(messages, ensure_ascii=False, sort_keys=True))
        return complete(messages, *args, **kwargs)

    agent.provider.complete = capture  # type: ignore[method-assign]
    return agent, sent


def _turn(agent: Agent, srv: TestServer, prompt: str) -> None:
    srv.enqueue_tool_calls([("list_dir", {"path": "."})])
    srv.enqueue_text(f"done: {prompt}")
    agent.run(prompt)


def _whole_transcript_summary(agent: Agent) -> Any:
    """The C6 state of the session cache's whole-transcript prefix (what the first call of a turn built)."""
    return max(agent._cache.slots, key=lambda p: p.length).summary


def _same_ids(body: str) -> str:
    return re.sub(r"call_[0-9a-f]{8,}", "call_x", body)


def _rebuilt_events(db: Path) -> list[dict[str, Any]]:
    with Store(str(db)) as store:
        events = store.events(SESSION, type=REBUILT_EVENT)
    return [json.loads(p) for p in events.payload]


def _tamper(db: Path, sql: str) -> None:
    con = duckdb.connect(str(db))
    con.execute(sql)
    con.close()


def _never_restarted_and_restarted(tmp_path: Path, tamper: str | None = None, blocks: int = 120
                                   ) -> tuple[list[str], list[str], Agent, Path]:
    """Turns 1-2 in one process, turn 3 in the same process (A) and in a fresh one (B, on a copy after turn 2)."""
    seed = tmp_path / "seed.duckdb"
    _seed(seed, blocks)
    with TestServer(usage_counter="estimate") as srv:
        a, sent_a = _agent(seed, srv, tmp_path / "ws")
        _turn(a, srv, "first")
        _turn(a, srv, "second")
        copy_db = tmp_path / "restarted.duckdb"
        a.store.release()
        shutil.copy(seed, copy_db)
        sent_a.clear()
        _turn(a, srv, "third")
        a.close()
        if tamper:
            _tamper(copy_db, tamper)
        b, sent_b = _agent(copy_db, srv, tmp_path / "ws")
        _turn(b, srv, "third")
        b.close()
    return sent_a, sent_b, b, copy_db


def test_c7_a_restarted_process_sends_the_byte_identical_first_request_and_scans_only_what_is_new(tmp_path):
    sent_a, sent_b, b, db = _never_restarted_and_restarted(tmp_path)
    assert len(sent_a) == len(sent_b) == 2
    assert sent_b[0] == sent_a[0]  # (a) byte for byte
    assert _same_ids(sent_b[1]) == _same_ids(sent_a[1])  # the next call too (the server picks each call's id)
    first = json.loads(sent_b[0])
    assert any(m["content"].startswith("[compressed conversation context]") for m in first)  # the summary path
    state = _whole_transcript_summary(b)
    old = len(_session(120))  # the old part is most of the stored session
    # (c) the resumed C6 state scanned only the old messages stored after its snapshot (a turn's worth), not the
    # hundreds before it
    assert state is not None and 0 < state.scanned < 20 < old
    # the saved C4 plan and C1 counts seeded the first build: only the messages stored after them were planned
    assert b._cache.misses < 20 < old
    assert _rebuilt_events(db) == []  # nothing to say when it fitted


def test_c7_a_restarted_process_reads_only_the_stored_rows_its_first_request_needs(tmp_path):
    """N2: the transcript is read lazily (`StoredRows`): the fresh process's turn reads a few chunks of rows (the
    safe tail, what the summary reads from the end, the boundary rows checked), not the thousands stored."""
    sent_a, sent_b, b, _db = _never_restarted_and_restarted(tmp_path, blocks=1_500)
    assert sent_b[0] == sent_a[0] and len(sent_b) == 2
    rows = b._stored
    assert isinstance(rows, StoredRows) and len(rows) > 6_000
    assert rows.fetched <= 4 * CHUNK < len(rows) / 2


def test_c7_a_state_of_another_engine_version_is_rebuilt_once_with_a_stored_note(tmp_path):
    sent_a, sent_b, b, db = _never_restarted_and_restarted(
        tmp_path, tamper=f"UPDATE engine_state SET engine_version = {SUMMARY_STATE_VERSION + 41}")
    assert sent_b[0] == sent_a[0]  # (b) never a wrong view
    notes = _rebuilt_events(db)
    assert len(notes) == 1 and "engine version" in notes[0]["reason"]
    assert _whole_transcript_summary(b).scanned > 300  # rebuilt from the rows


@pytest.mark.parametrize(("tamper", "reason"), [
    pytest.param("UPDATE engine_state SET rows = rows - 1", "do not match", id="rows-do-not-match"),
    # the rows check passes (count and boundary untouched) but the state names other old messages
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('summary', "
                 "json_object('last', 'feedfacefeedfacefeedfacefeedface')))",
                 "does not match the stored messages", id="engine-catches-other-messages"),
    # the same for the saved plan: its counts, its rows, its version
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('plan', "
                 "json_object('c1', 'AAAA')))", "the saved plan is malformed", id="plan-malformed"),
    # a total or the roles changed (the counts' bytes as saved): the plan's CRC-32 seal no longer fits
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('plan', "
                 "json_object('total', 7)))", "the saved plan is malformed", id="plan-total-unsealed"),
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('plan', json_object('roles', "
                 "replace(json_extract_string(state, '$.plan.roles'), 'at', 'aa'))))", "the saved plan is malformed",
                 id="plan-roles-unsealed"),
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('plan', "
                 "json_object('last', 'feedfacefeedfacefeedfacefeedface')))",
                 "the saved plan does not match the stored messages", id="plan-of-other-messages"),
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('plan', "
                 f"json_object('version', {PLAN_STATE_VERSION + 1})))", "the saved plan is of version",
                 id="plan-of-another-version"),
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, json_object('package', '0.0.1'))",
                 "saved by mxclaw_nb 0.0.1", id="another-release"),
    pytest.param("UPDATE engine_state SET state = json_merge_patch(state, "
                 "'{\"summary\": {\"version\": 1, \"n\": \"many\"}}')", "malformed", id="malformed"),
])
def test_c7_a_stale_or_tampered_state_is_rebuilt_once_with_a_stored_note_never_trusted(tmp_path, tamper, reason):
    sent_a, sent_b, b, db = _never_restarted_and_restarted(tmp_path, tamper=tamper)
    assert sent_b[0] == sent_a[0]
    notes = _rebuilt_events(db)
    assert len(notes) == 1 and reason in notes[0]["reason"]
    if "plan" in reason:  # planned again from the rows, once
        assert b._cache.misses > len(_session(120))


# -- (d) the engine half, as a property: for random transcripts and random restart points ------------------------

_texts = st.text(alphabet=st.sampled_from("ab 修复\n\udcff"), max_size=12)
_message = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, _texts),
    st.builds(lambda t: {"role": "assistant", "content": t}, _texts),
    st.builds(lambda p, k: {"role": "assistant", "content": "", "tool_calls": [
        _call(f"w{k}", "write_file", path=p)]}, _texts, st.integers(0, 5)),
    st.builds(lambda t, e: {"role": "tool", "tool_call_id": "w1", "content": "Tool failed: " + t,
                            **({"is_error": True} if e else {})}, _texts, st.booleans()),
    st.builds(lambda v: {"role": "tool", "tool_call_id": "w2", "content": "ok", "facts": {"variables": [v]}},
              st.sampled_from(["x", "df", "y"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_message, min_size=1, max_size=40), st.data())
def test_c7_property_resumed_summary_state_equals_the_state_built_from_scratch(messages, data):
    """C6/C7: a state snapshotted at a random point, carried as JSON, resumed over the grown old part, writes the
    text of a state built from scratch (and of the one-shot summary) at every later length."""
    cut = data.draw(st.integers(1, len(messages)), label="restart point")
    before = StructuredSummaryState()
    before.summary(messages[:cut], trusted=True)
    saved = json.loads(json.dumps(before.snapshot(), ensure_ascii=True))
    later = data.draw(st.integers(cut, len(messages)), label="old messages after the restart")
    old = copy.deepcopy(messages[:later])  # read back from the store: equal values, other objects
    resumed, why = StructuredSummaryState.resumed(saved, old)
    assert resumed is not None, why
    assert resumed.summary(old, trusted=True) == build_structured_summary(old)
    assert resumed.scanned == later - cut
    grown = [*old, *copy.deepcopy(messages[later:])]
    assert resumed.summary(grown, trusted=True) == build_structured_summary(grown)


@settings(max_examples=60, deadline=None)
@given(st.lists(_message, min_size=2, max_size=30), st.data())
def test_c7_property_a_state_over_other_messages_is_refused(messages, data):
    cut = data.draw(st.integers(1, len(messages)))
    state = StructuredSummaryState()
    state.summary(messages[:cut], trusted=True)
    saved = state.snapshot()
    other = [*messages[:cut - 1], {"role": "user", "content": "something else entirely"}]
    assert StructuredSummaryState.resumed(saved, other)[0] is None
    assert StructuredSummaryState.resumed({**saved, "version": SUMMARY_STATE_VERSION + 1}, messages)[0] is None
    assert StructuredSummaryState.resumed(saved, messages[:cut - 1])[0] is None


def test_c7_pipeline_resume_gives_the_cold_view_and_notes_a_misfit():
    """The engine's entry point: a session cache handed a snapshot builds the cold build's view."""
    msgs = _session(80)
    policy = ContextPolicy(4_000, 0.8, 1_000)
    warm = TokenCache(append_only=True)
    build_request_view(msgs[:200], policy, cache=warm)
    saved = json.loads(json.dumps(summary_snapshot(warm)))
    fresh = TokenCache(append_only=True)
    fresh.resume_summary = saved
    grown = copy.deepcopy(msgs)
    view = build_request_view(grown, policy, cache=fresh)
    assert view.messages == build_request_view(msgs, policy).messages and view.stage == "summary"
    assert fresh.resume_note is None and fresh.summary.scanned < 130
    misfit = TokenCache(append_only=True)
    misfit.resume_summary = {**saved, "first": "0" * 32}
    assert build_request_view(grown, policy, cache=misfit).messages == view.messages
    assert misfit.resume_note is not None and misfit.summary.scanned > 200


# -- the saved C4 plan and C1 counts (C7, T3, N2): resumed == planned from scratch --------------------------------

_block = st.one_of(
    st.builds(lambda t: [{"role": "user", "content": t}], _texts),
    st.builds(lambda t: [{"role": "assistant", "content": t}], _texts),
    st.builds(lambda t: [{"role": "system", "content": "note " + t}], _texts),
    # calls with their results, some missing or duplicated (repaired plans: none is saved, or only before them)
    st.builds(lambda k, t, answered, dup: [
        {"role": "assistant", "content": t, "tool_calls": [_call(f"b{k}", "bash", cmd=t), _call(f"e{k}", "edit_file",
                                                                                              path=t)]},
        *([{"role": "tool", "tool_call_id": f"b{k}", "content": "ok " + t * 9}] if answered else []),
        {"role": "tool", "tool_call_id": f"e{k}", "content": "Tool failed: " + t, "is_error": True},
        *([{"role": "tool", "tool_call_id": f"e{k}", "content": "again"}] if dup else [])],
        st.integers(0, 3), _texts, st.booleans(), st.booleans()),
    st.builds(lambda k, t: [{"role": "assistant", "content": None, "tool_calls": [_call(f"r{k}", "read_file")]},
                            {"role": "tool", "tool_call_id": f"r{k}", "content": t * 40}], st.integers(0, 3), _texts),
)


def _record(view: Any) -> Any:
    return record_of_view(view, turn=1, iteration=1, model="m", base_url="u")


@settings(max_examples=120, deadline=None)
@given(st.lists(_block, min_size=1, max_size=25).map(lambda bs: [m for b in bs for m in b]), st.data())
def test_c7_property_resumed_plan_gives_the_view_and_record_built_from_scratch(messages, data):
    """A session cache seeded with a saved plan (JSON round trip) over equal copies of the messages, grown after the
    restart, builds the view and request record a cold build does, byte for byte, on the summary, micro and
    unchanged paths; and the lazily made sent forms are `plan_counted`'s."""
    cut = data.draw(st.integers(1, len(messages)), label="restart point")
    window = data.draw(st.sampled_from([300, 1_200, 100_000]), label="window")
    policy = ContextPolicy(window, 0.8, 100)
    warm = TokenCache(append_only=True)
    with contextlib.suppress(ValueError):  # nothing to send: no plan either
        build_request_view(messages[:cut], policy, cache=warm)
    saved = json.loads(json.dumps(plan_snapshot(warm, messages[:cut])))
    planned = plan_counted(messages[:cut])
    if saved is None:  # only a plan that repaired nothing before its resume point is saved
        whole = max(warm.slots, key=lambda p: p.length) if warm.slots else None
        k, resume = (whole.resume_step, whole.resume) if whole is not None else (0, 0)
        # nothing planned before the resume point, or repair dropped or added something there
        assert k == 0 or any(d < resume for d in planned.dropped) or list(planned.sources[:k]) != list(range(k))
        return
    n = saved["n"]
    assert list(SentForms(messages, n)) == plan_counted(messages[:n]).sent == planned.sent[:n]
    later = data.draw(st.integers(cut, len(messages)), label="stored after the restart")
    grown = copy.deepcopy(messages[:later])  # read back from the store: equal values, other objects
    fresh = TokenCache(append_only=True)
    fresh.resume_plan = saved
    lazy = data.draw(st.booleans(), label="the rows read lazily (a Spliced input over them)")
    given_input = with_appended(Spliced(grown, later - 1), grown[-1:]) if lazy else grown
    view = build_request_view(given_input, policy, cache=fresh)
    cold = build_request_view(messages[:later], policy)
    assert fresh.resume_note is None and fresh.misses == len(plan_counted(messages[:later]).sources) - n
    assert json.dumps(view.messages) == json.dumps(cold.messages)
    assert (view.stage, view.before_tokens, view.after_tokens) == (cold.stage, cold.before_tokens, cold.after_tokens)
    assert _record(view) == _record(cold)
    again = with_appended(given_input, [{"role": "user", "content": "more"}])  # grows from the seeded prefix
    assert json.dumps(build_request_view(again, policy, cache=fresh).messages) == json.dumps(
        build_request_view(copy.deepcopy(list(again)), policy).messages)


def test_c7_a_saved_plan_over_other_messages_is_refused_and_planned_again():
    msgs = _session(30)
    policy = ContextPolicy(4_000, 0.8, 1_000)
    warm = TokenCache(append_only=True)
    build_request_view(msgs, policy, cache=warm)
    saved = plan_snapshot(warm, msgs)
    assert saved is not None and saved["n"] == len(msgs) - 1  # up to the last top-level message
    assert plan_snapshot(warm, [*msgs[:-2], {"role": "user", "content": "other"}, msgs[-1]]) is None
    other = copy.deepcopy(msgs)
    other[saved["n"] - 1] = {"role": "assistant", "content": "something else"}
    fresh = TokenCache(append_only=True)
    fresh.resume_plan = saved
    assert build_request_view(other, policy, cache=fresh).messages == build_request_view(other, policy).messages
    assert fresh.resume_note == "the saved plan does not match the stored messages"
    assert fresh.misses == len(plan_counted(other).sources) > 100  # planned from scratch


def test_c7_sent_forms_made_where_read_or_all_at_once_are_the_plans():
    """`SentForms`: a few read first (the compacting path), then all at once (the everything-fits path sends every
    step: one plan_counted pass), the same dicts as the plan's and the same objects on every read."""
    msgs = _session(40)
    n = len(msgs) - 1
    want = plan_counted(msgs[:n]).sent
    forms = SentForms(msgs, n)
    early = [forms[k] for k in (n - 1, n - 2, 3)]
    assert early == [want[n - 1], want[n - 2], want[3]]
    assert list(forms) == want and forms[n - 1] is early[0] and forms[3] is early[2]
    del forms[n - 5:]
    forms += [{"role": "user", "content": "x"}]
    assert list(forms) == [*want[:n - 5], {"role": "user", "content": "x"}]


def test_c7_a_turns_save_reuses_a_recent_plan_and_makes_it_again_after_many_steps():
    """The plan is made again only every PLAN_RESAVE_STEPS steps (a save stays O(new) in between); a fresh process
    continuing the older plan plans the steps after it and builds the same view."""
    msgs = _session(300)
    policy = ContextPolicy(4_000, 0.8, 1_000)
    cache = TokenCache(append_only=True)
    build_request_view(msgs[:400], policy, cache=cache)
    first = plan_snapshot(cache, msgs[:400])
    build_request_view(msgs[:440], policy, cache=cache)
    assert plan_snapshot(cache, msgs[:440]) is first and first["n"] < 400
    build_request_view(msgs, policy, cache=cache)
    again = plan_snapshot(cache, msgs)
    assert again is not first and again["n"] == len(msgs) - 1 > first["n"] + PLAN_RESAVE_STEPS
    fresh = TokenCache(append_only=True)
    fresh.resume_plan = json.loads(json.dumps(first))
    assert build_request_view(copy.deepcopy(msgs), policy, cache=fresh).messages == build_request_view(
        msgs, policy).messages
    assert fresh.resume_note is None and fresh.misses == len(msgs) - first["n"]


def test_c7_a_long_lazily_read_input_without_a_saved_plan_is_planned_from_one_list_of_it():
    msgs = _session(1_300)
    policy = ContextPolicy(4_000, 0.8, 1_000)
    cache = TokenCache(append_only=True)
    lazy = with_appended(Spliced(msgs, len(msgs) - 1), msgs[-1:])
    view = build_request_view(lazy, policy, cache=cache)
    assert view.messages == build_request_view(msgs, policy).messages and cache.misses == len(msgs)
    more = with_appended(lazy, [{"role": "user", "content": "next"}])
    assert build_request_view(more, policy, cache=cache).messages == build_request_view(list(more), policy).messages
    assert cache.misses < len(msgs) + 10  # the next build grew from it
