"""SPEC N3, S1, S2, T3, C10: the one request record and provenance stored as what happened.

A record keeps the stage, the tail start, run-length ranges of actions over transcript seqs and the
engine-made messages; the rows are rebuilt from the stored transcript. These tests pin what a reader can
rely on: a session that keeps compacting old tool outputs stores a record whose size does not grow with
its history, the stored form decodes to exactly the live lineage, files written by earlier versions
(view provenance formats 2 and 3, lineage format 1) still read to the same rows, and the T3 figures carry
the same labels from the loop, a replay and `requests_from_views`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.context import ContextPolicy, build_request_view, lineage_messages, lineage_rows
from mxclaw_nb.context.actions import TEXTS
from mxclaw_nb.context.counters import CalibratedCounter
from mxclaw_nb.context.lineage import KEPT, Lineage, State
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example
from mxclaw_nb.records import RequestRecord, record_of_view
from mxclaw_nb.store.provenance import (
    PLACEHOLDERS,
    _ranges,
    decode_lineage,
    decode_provenance,
    encode_lineage,
    encode_provenance,
    provenance_rows,
)
from mxclaw_nb.store.records import record_from_row, records_frame
from mxclaw_nb.store.writer import Store
from mxclaw_nb.widgets import CompactionInspector, TokenTimeline, requests_from_views
from mxclaw_nb.widgets.data import from_request, from_view

from .context.test_lineage import check_call, run_turn


def _tool_history(blocks: int, size: int = 600) -> list[dict]:
    history: list[dict] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "read them all"}]
    for k in range(blocks):
        call = {"id": f"r{k}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
        history += [{"role": "assistant", "content": f"reading {k}", "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"r{k}", "content": f"line {k}\n" * (size // 7)}]
        if k % 5 == 4:  # a failure and a short output: kept among the placeholders (C5 never compacts them)
            history += [{"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"f{k}"}]},
                        {"role": "tool", "tool_call_id": f"f{k}", "content": "Tool failed: " + "x" * 300,
                         "is_error": True},
                        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": f"s{k}"}]},
                        {"role": "tool", "tool_call_id": f"s{k}", "content": "ok"}]
    return [*history, {"role": "user", "content": "and now?"}]


def _micro_call(blocks: int) -> tuple[object, Lineage, list[dict]]:
    transcript = _tool_history(blocks)
    policy = ContextPolicy(blocks * 100 + 1_500, 0.8, 400)  # micro is enough: the placeholders fit
    (view, lineage, stored), = run_turn(transcript, [], policy)
    assert view.stage == "micro"
    return view, lineage, stored


def test_n3_stored_bytes_per_call_do_not_grow_with_the_history_when_c5_is_stable():
    """N3: C5 placeholders over the old part are one `placeholders` run, so a record's size is the same at 40 and
    at 640 old tool outputs; it decodes (with the transcript) to exactly the live lineage and its rows."""
    sizes = {}
    for blocks in (40, 160, 640):
        view, lineage, stored = _micro_call(blocks)
        form = json.loads(json.dumps(encode_lineage(lineage)))
        assert [r[2] for r in form["runs"]].count(PLACEHOLDERS) == 1
        sizes[blocks] = len(json.dumps(form))
        decoded = decode_lineage(form, stored)
        assert decoded.states == lineage.states and decoded.sent == lineage.sent
        check_call(view, decoded, stored)
        assert lineage_rows(decoded, stored) == lineage_rows(lineage, stored)
    assert max(sizes.values()) - min(sizes.values()) <= 8, sizes  # only the digits of the seqs grow
    plain = encode_lineage(lineage, transcript=[])  # no transcript to confirm the rule: one run per action
    assert len(json.dumps(plain)) > 20 * sizes[640]
    with pytest.raises(ValueError, match="transcript"):
        decode_lineage(form)  # a placeholders run is read against the stored transcript


def test_n3_placeholders_run_only_where_the_transcript_confirms_it():
    """A kept tool result that C5 would compact breaks the run (it was kept for another reason): plain runs."""
    result = {"role": "tool", "tool_call_id": "a", "content": "y" * 400}
    transcript = [{"role": "user", "content": "u"}, result, {"role": "assistant", "content": "a"}, dict(result),
                  dict(result), dict(result)]
    states = [KEPT, State("placeholder", 1), KEPT, KEPT, State("placeholder", 1), State("placeholder", 2)]
    lineage = Lineage(2, "micro", None, states, (), (), list(range(6)))
    form = encode_lineage(lineage, transcript)
    assert PLACEHOLDERS not in [r[2] for r in form["runs"]]
    assert decode_lineage(json.loads(json.dumps(form)), transcript).states == states
    # the same with the confirming transcript (seq 3 a short output): seqs 1..4 are one run of call 1's
    transcript[3] = {"role": "tool", "tool_call_id": "a", "content": "ok"}
    form = encode_lineage(lineage, transcript)
    assert form["runs"] == [[0, 1, "kept"], [1, 5, PLACEHOLDERS, 1], [5, 6, "placeholder", 2]]
    assert decode_lineage(form, transcript).states == states


def test_n3_lineage_format_1_of_earlier_files_still_reads():
    """Records written before format 2 (plain runs, a `carried` text) decode to the same lineage."""
    view, lineage, stored = _micro_call(20)
    old = {**encode_lineage(lineage, transcript=[]), "format": 1, "carried": lineage.describe()}
    decoded = decode_lineage(json.loads(json.dumps(old)))
    assert decoded.states == lineage.states and decoded.describe() == lineage.describe()
    check_call(view, decoded, stored)
    with pytest.raises(ValueError, match="cannot be read"):
        decode_lineage({"format": 7, "runs": []})


def test_c13_a_stored_record_decodes_to_the_texts_of_its_own_version():
    """C13 + N3: placeholders name the stored message (`recall #seq`); a record written by today's code says its
    text version and decodes to exactly what was sent; a record without one (written before placeholders named
    their seq) decodes to the version 1 text that was sent then, not to today's."""
    view, lineage, stored = _micro_call(20)
    form = json.loads(json.dumps(encode_lineage(lineage)))
    assert form["texts"] == TEXTS == 2
    decoded = decode_lineage(form, stored)
    sent = lineage_messages(decoded, stored)
    assert sent == view.messages
    named = [(m["content"], o) for m, o in zip(sent, decoded.sent, strict=True)
             if m["role"] == "tool" and m["content"].startswith("[old tool output compacted")]
    assert len(named) >= 15
    for text, seq in named:
        assert text == f"[old tool output compacted: {len(stored[seq]['content'])} characters; recall #{seq}]"
    old = {k: v for k, v in form.items() if k != "texts"}
    v1 = lineage_messages(decode_lineage(old, stored), stored)
    assert [m["content"] for m in v1] == [re.sub(r"; recall #\d+\]$", "]", m["content"] or "") if m["role"] == "tool"
                                          else m["content"] for m in sent]
    with pytest.raises(ValueError, match="text version 9 is newer"):
        decode_lineage({**form, "texts": 9}, stored)


def test_c10_view_provenance_formats_round_trip_to_the_records_form():
    """C10 storage of a view's own rows (a dry run's, a replay's: records that carry no live lineage): format 3
    (columns) expands to exactly the records form; format 2 and the records form of earlier files read to the
    same rows."""
    view = build_request_view(worked_example(), ContextPolicy(**WORKED_EXAMPLE_POLICY))
    records = view.provenance.to_records()
    columns = json.loads(json.dumps(encode_provenance(view.provenance)))
    assert provenance_rows(columns) == json.loads(json.dumps(records))
    assert provenance_rows(records) == records
    assert decode_provenance(columns) == view.provenance
    assert len(json.dumps(columns)) < len(json.dumps(records)) * 0.7
    unchanged = build_request_view(worked_example(), ContextPolicy(1_000_000, 0.8, 8_000))
    compact = encode_provenance(unchanged.provenance)
    # every message sent as it was: after rows are indices of before rows, no after columns of their own
    assert all(isinstance(k, int) for k in compact["after_from_before"]) and compact["after"]["position"] == []
    assert provenance_rows(json.loads(json.dumps(compact))) == json.loads(json.dumps(unchanged.provenance.to_records()))
    b, a = view.provenance.before, view.provenance.after
    index = {r.sent_position: k for k, r in enumerate(b) if r.sent_position is not None}
    old = {"format": 2, "before_columns": list(b[0]._fields), "before": [list(r) for r in b],
           "after_columns": list(a[0]._fields),
           "after": [index[r.position] if r.action == "kept" and r.position in index else list(r) for r in a]}
    assert provenance_rows(json.loads(json.dumps(old))) == json.loads(json.dumps(records))
    for broken in ({"format": 3, "before": {}}, {"format": 3, **compact, "after_from_before": [99]}):
        with pytest.raises(ValueError, match="format 3"):
            provenance_rows(broken)
    with pytest.raises(ValueError):
        provenance_rows(["not", "a", "dict"])


OLD_RECORD = json.loads((Path(__file__).parent / "data" / "old_request_format3.json").read_text(encoding="utf-8"))


def test_c10_old_view_provenance_formats_read_to_the_rows_they_showed():
    """C10, S1: a view's own rows as files of earlier versions stored them (format 3 columns, format 2 rows, the
    records form; written by that version's code, `tests/data/old_request_format3.json`) read, read-only, to the
    rows that version showed."""
    rows = OLD_RECORD["rows"]
    columns = json.loads(OLD_RECORD["row"]["provenance"])
    assert columns["format"] == 3 and any(k is not None for k in columns["after_from_before"])
    assert provenance_rows(columns) == rows
    assert provenance_rows(OLD_RECORD["format2"]) == rows
    assert provenance_rows(rows) == rows
    assert decode_provenance(columns).to_records() == rows
    for broken in ({"format": 3, "before": {}}, {**columns, "after_from_before": [99]}):
        with pytest.raises(ValueError, match="format 3"):
            provenance_rows(broken)
    with pytest.raises(ValueError):
        provenance_rows(["not", "a", "dict"])


def test_s1_files_of_earlier_versions_read_to_the_same_rows(tmp_path):
    """A database written by earlier versions (provenance formats 3 and 2, lineage format 1) shows the rows that
    version showed; new records of the same call store no provenance table, only the lineage (N3)."""
    path = tmp_path / "old.duckdb"
    with Store(path) as store:
        sid = store.create_session(title="old")
        store.append_messages(sid, worked_example(), turn=1)
    old = OLD_RECORD["row"]
    con = duckdb.connect(str(path))
    for seq, provenance in enumerate((old["provenance"], json.dumps(OLD_RECORD["format2"]))):
        con.execute("INSERT INTO requests (session_id, seq, turn, iteration, created_at, counter, estimate_tokens, "
                    "before_tokens, after_tokens, threshold, window_tokens, stage, summary, provenance, extra) "
                    "VALUES (?, ?, ?, ?, now(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [sid, seq, old["turn"], seq + 1, old["counter"], old["estimate_tokens"], old["before_tokens"],
                     old["after_tokens"], old["threshold"], old["window_tokens"], old["stage"], old["summary"],
                     provenance, old["extra"]])
    con.close()
    view, lineage, stored = _micro_call(30)
    lin1 = {**encode_lineage(lineage, transcript=[]), "format": 1, "carried": lineage.describe()}
    with Store(path) as store:
        rows = store.requests(sid)
        for it in (1, 2):
            shown = CompactionInspector(rows.iloc[it - 1], transcript=store.load_transcript(sid))
            assert shown.data.before == OLD_RECORD["rows"]["before"]
            assert shown.data.after == OLD_RECORD["rows"]["after"]
            assert shown.data.tail_start == OLD_RECORD["tail_start"] and not shown.data.transcript_relative
            assert len(shown.before_df) == len(OLD_RECORD["rows"]["before"]) > 0
        sid2 = store.create_session(title="n3")
        store.append_messages(sid2, stored, turn=1)
        store.append_request(sid2, record_of_view(view, turn=1, iteration=1))
        new = store.requests(sid2, last=1).iloc[0]
        assert new["provenance"] is None and json.loads(new["extra"])["lineage"]["format"] == 2
        live_n3 = CompactionInspector(view)
        pd.testing.assert_frame_equal(CompactionInspector(new, transcript=stored).before_df, live_n3.before_df)
        v1 = pd.Series({**new.to_dict(), "extra": json.dumps({"lineage": lin1})})  # lineage format 1 (earlier)
        pd.testing.assert_frame_equal(CompactionInspector(v1, transcript=stored).before_df, live_n3.before_df)


def test_s1_a_record_round_trips_through_the_store(tmp_path):
    """The loop's RequestRecord comes back from `requests()` as the same record (every field, its lineage)."""
    view, lineage, stored = _micro_call(12)
    record = record_of_view(view, turn=3, iteration=1, model="m", base_url="http://x/v1",
                            latency_ms=12.5, prompt_tokens_reported=1_234, completion_tokens_reported=56)
    with Store(tmp_path / "r.duckdb") as store:
        sid = store.create_session()
        store.append_messages(sid, stored, turn=1)
        store.append_request(sid, record)
        back = record_from_row(store.requests(sid).iloc[0], store.load_transcript(sid))
    assert back == RequestRecord(**{**record.__dict__, "session_id": sid, "seq": 0, "created_at": back.created_at})
    assert back.lineage is not None and back.lineage.states == lineage.states and back.provenance is None
    assert from_request(store_row(back), stored).before == from_view(view).before


def store_row(record: RequestRecord) -> pd.Series:
    return records_frame([record]).iloc[0]


def test_t3_every_source_of_a_request_row_labels_est_calibrated_and_reported_alike():
    """T3: `estimate_tokens` is the C1 estimate of what was sent, `calibrated_tokens` the calibrated count
    (only under the calibrated counter), from the loop's records, `requests_from_views` and a replay alike."""
    from mxclaw_nb.analysis.replay import as_requests, replay

    msgs = worked_example()
    calibrated = ContextPolicy(**{**WORKED_EXAMPLE_POLICY, "counter": CalibratedCounter(factor=1.5)})
    views = [build_request_view(msgs[:k], calibrated) for k in range(6, len(msgs) + 1, 6)]
    assert all(v.counter == "calibrated" and v.after_tokens > v.after_estimate for v in views)
    frame = requests_from_views(views)
    assert list(frame["estimate_tokens"]) == [v.after_estimate for v in views]
    assert list(frame["calibrated_tokens"]) == [v.after_tokens for v in views]
    replayed = as_requests(replay(msgs, calibrated, facts=False))
    assert (replayed["estimate_tokens"] < replayed["after_tokens"]).all()
    assert (replayed["calibrated_tokens"] == replayed["after_tokens"]).all()
    labels = [line.get_label() for line in TokenTimeline(replayed).figure.axes[0].get_lines()]
    assert "sent, tokens (calibrated)" in labels and "same request, C1 tokens (est.)" in labels
    plain = as_requests(replay(msgs, ContextPolicy(**WORKED_EXAMPLE_POLICY), facts=False))
    assert (plain["estimate_tokens"] == plain["after_tokens"]).all() and plain["calibrated_tokens"].isna().all()
    assert list(plain.columns) == list(frame.columns)  # one shape: the store's requests() columns


def test_n3_a_stored_record_is_decoded_only_with_what_it_needs():
    """Without the transcript a record still reads (figures, stage); its N3 rows need the transcript."""
    view, lineage, stored = _micro_call(12)
    row = store_row(record_of_view(view, turn=1, iteration=1))
    bare = record_from_row(row)
    assert bare.lineage is None and bare.stage == "micro" and bare.after_tokens == view.after_tokens
    assert not from_request(row).before and from_request(row, stored).transcript_relative


def test_n3_c10_a_dry_run_keeps_its_own_rows_a_live_call_its_lineage(tmp_path):
    """N3 + C10: a dry run's lineage indexes its own input (no store holds it; composed when read), so its record
    keeps the view's own rows (format 3, in the counter that decided the stage, read
    back without a transcript); a live call's (`call=`, the loop's) keeps only the lineage."""
    msgs = worked_example()
    counted = ContextPolicy(**{**WORKED_EXAMPLE_POLICY, "counter": CalibratedCounter(factor=1.5)})
    dry = build_request_view(msgs, counted)
    assert dry.lineage is None and isinstance(dry.own_lineage, Lineage) and not dry.own_lineage.live
    live = build_request_view(msgs, counted, seqs=range(len(msgs)), transcript=msgs, call=1)
    assert isinstance(live.lineage, Lineage) and live.lineage.live
    # the view's own rows are in the deciding counter (C10), not the C1 estimate of the lineage's rows
    assert sum(r.tokens for r in dry.provenance.after) == dry.after_tokens
    assert [r.tokens for r in dry.provenance.after] != [r["tokens"] for r in lineage_rows(live.lineage, msgs)["after"]]
    with Store(tmp_path / "d.duckdb") as store:
        sid = store.create_session()
        store.append_messages(sid, msgs, turn=1)
        store.append_request(sid, record_of_view(dry, turn=1, iteration=1))
        store.append_request(sid, record_of_view(live, turn=1, iteration=1))
        got = store.sql("SELECT coalesce(provenance->>'$.format', '-') AS f, (extra->'$.lineage') IS NOT NULL AS l "
                        "FROM requests ORDER BY seq")
        assert got.values.tolist() == [["3", False], ["-", True]]
        back = CompactionInspector(store.requests(sid).iloc[0], transcript=None)
        pd.testing.assert_frame_equal(back.before_df, CompactionInspector(dry).before_df)
        assert not back.data.transcript_relative


def test_c10_own_rows_name_each_step_by_its_own_call_and_no_tool_for_a_dropped_row():
    """C10 (rows as main showed them): a reused call id names the call of its own assistant message, and a result
    repair dropped (a duplicate) names no tool, in the before and the after rows."""
    def call(i: str, name: str) -> dict:
        return {"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}

    msgs = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [call("x", "read")]},
            {"role": "tool", "tool_call_id": "x", "content": "read ok"},
            {"role": "assistant", "content": None, "tool_calls": [call("x", "bash")]},
            {"role": "tool", "tool_call_id": "x", "content": "bash ok"},
            {"role": "tool", "tool_call_id": "x", "content": "bash ok (duplicate)"}]
    prov = build_request_view(msgs, ContextPolicy(100_000)).provenance
    assert [(r.position, r.tool_name, r.action) for r in prov.before if r.role == "tool"] == [
        (2, "read", "kept"), (4, "bash", "kept"), (5, None, "dropped")]
    assert [r.tool_name for r in prov.after if r.role == "tool"] == ["read", "bash"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 300), max_size=120), st.integers(0, 200), st.integers(0, 200))
def test_n3_property_sent_ranges_are_the_sent_origins_in_maximal_runs(origins, start, run):
    """`sent` of a stored lineage: runs of consecutive seqs (one run at C speed when every seq is sent in order, the
    everything-fits path) and engine-made origins alone; expanded, the origins themselves."""
    for xs in (origins, list(range(start, start + run)), range(start, start + run), [*range(start, start + run),
                                                                                      *origins]):
        encoded = _ranges(xs)
        assert [o for r in encoded for o in (range(r[0], r[1]) if len(r) == 2 else r)] == list(xs)
        assert all(len(r) == 1 and r[0] < 0 or len(r) == 2 and 0 <= r[0] < r[1] for r in encoded)
        assert not any(len(a) == len(b) == 2 and a[1] == b[0] for a, b in zip(encoded, encoded[1:], strict=False))


_STATES = [KEPT, State("kept"), State("placeholder", 2), State("summarized", 3, 0), State("summarized", 3, 1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(range(len(_STATES))), max_size=60))
def test_n3_state_runs_are_the_maximal_runs_of_equal_states(picks: list[int]) -> None:
    """N2/N3: `_state_runs` (grouped at C speed) gives the maximal runs of equal states (equal, not only the same
    object), in order, covering every position once."""
    from mxclaw_nb.store.provenance import _state_runs

    states = [_STATES[k] for k in picks]
    runs = _state_runs(states)
    assert [s for start, stop, st in runs for s in [st] * (stop - start)] == states
    assert all(stop > start for start, stop, _ in runs)
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in zip(runs, runs[1:], strict=False))
    assert (runs[0][0] if runs else 0) == 0 and (runs[-1][1] if runs else 0) == len(states)
