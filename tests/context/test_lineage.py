"""SPEC N3: provenance of every call of a multi-iteration turn, relative to the stored transcript.

A turn is simulated exactly as the loop runs it (C7: each call's input is the previous view plus the new
messages, `seqs` maps input positions to stored seqs) over random, partly broken stored transcripts, with
windows small enough that microcompaction, the summary or the fallback window happen at call 1 and are
carried by calls 2..N. For every call: each stored seq up to the call has exactly one action; a
`summarized` seq is not sent and is covered by a summary that is sent; a `placeholder` seq is sent as its
placeholder; a `kept` seq is sent verbatim; the sent list is reproduced exactly from the transcript and the
(JSON round-tripped) record.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mxclaw_nb.context import (
    ContextPolicy,
    Lineage,
    TokenCache,
    build_fallback_view,
    build_request_view,
    build_structured_summary,
    compose_lineage,
    lineage_messages,
    lineage_rows,
    placeholder_for,
)
from mxclaw_nb.context.lineage import SEQ_ACTIONS, first_call, next_call
from mxclaw_nb.context.tokens import estimate_sent
from mxclaw_nb.messages import content_text, sanitize
from mxclaw_nb.store.provenance import decode_lineage, encode_lineage

from .test_properties import call_block, short_text, step, tool_output

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.data_too_large])


def _raising(_messages: list) -> str:
    raise RuntimeError("compactor down")


@st.composite
def model_block(draw: st.DrawFn, call: int) -> list[dict]:
    """What the loop appends after a model call: the assistant message and one result per tool call."""
    if draw(st.integers(0, 5)) == 0:  # a model that repeats ids or answers oddly: repair must cope
        return draw(call_block())
    n = draw(st.integers(1, 3))
    calls = [{"id": f"c{call}_{k}", "type": "function",
              "function": {"name": draw(st.sampled_from(["read_file", "bash", "edit_file"])),
                           "arguments": json.dumps({"path": f"f{k}.py"})}} for k in range(n)]
    out: list[dict] = [{"role": "assistant", "content": draw(st.one_of(st.none(), short_text)), "tool_calls": calls}]
    for c in calls:
        result = {"role": "tool", "tool_call_id": c["id"], "content": draw(tool_output)}
        if draw(st.integers(0, 4)) == 0:
            result["is_error"] = True
        out.append(result)
    return out


@st.composite
def turns(draw: st.DrawFn) -> tuple[list, list[list[dict]], ContextPolicy, object, int | None]:
    steps = st.one_of(step, model_block(0), model_block(0))  # well-formed old blocks: micro has work to do
    history = [m for s in draw(st.lists(steps, max_size=12)) for m in s]
    transcript = [*history, {"role": "user", "content": draw(short_text) or "go"}]
    blocks = [draw(model_block(k)) for k in range(1, draw(st.integers(1, 7)) + 1)]
    policy = ContextPolicy(draw(st.sampled_from([300, 500, 800, 1_500, 3_000, 8_000])), 0.8,
                           draw(st.sampled_from([0, 150, 500, 1_500])))
    summarize = draw(st.sampled_from([build_structured_summary, build_structured_summary, _raising]))
    retry_at = draw(st.one_of(st.none(), st.integers(1, len(blocks) + 1)))
    return transcript, blocks, policy, summarize, retry_at


def run_turn(transcript: list, blocks: list[list[dict]], policy: ContextPolicy, summarize: object = None,
             retry_at: int | None = None) -> list[tuple[object, Lineage, list]]:
    """The loop's C7 iteration, without a model: (view, lineage, stored transcript so far) per call."""
    summarize = summarize or build_structured_summary
    stored, cache = list(transcript), TokenCache()
    nxt = first_call(list(transcript), list(range(len(transcript))), stored)  # the engine composes each lineage
    out = []
    for call in range(1, len(blocks) + 2):
        view = build_request_view(nxt.inputs, policy, summarize, cache=cache, seqs=nxt.seqs,  # type: ignore[arg-type]
                                  previous=nxt.previous, transcript=nxt.transcript, call=call)
        if call == retry_at:  # C9: the call resent with the fallback window, same input
            view = build_fallback_view(nxt.inputs, policy, "provider said: prompt too long", seqs=nxt.seqs,
                                       previous=nxt.previous, transcript=nxt.transcript, call=call)
        assert isinstance(view.lineage, Lineage)
        out.append((view, view.lineage, list(stored)))
        if call > len(blocks):
            break
        block = blocks[call - 1]
        nxt = next_call(view, block, list(range(len(stored), len(stored) + len(block))))  # stored grows in place
    return out


def check_call(view: object, lineage: Lineage, stored: list) -> None:
    """The N3 invariants of one call (for the live lineage and its stored, JSON round-tripped form)."""
    sent = view.messages  # type: ignore[attr-defined]
    assert lineage.upto == len(stored)  # every stored message up to the call ...
    assert all(state.action in SEQ_ACTIONS for state in lineage.states)  # ... has exactly one action
    assert lineage_messages(lineage, stored) == sent  # the sent list, exactly, from transcript + record
    at = {o: m for m, o in enumerate(lineage.sent)}
    assert len(at) == len(lineage.sent)  # no stored or engine-made message is sent twice
    for s, state in enumerate(lineage.states):
        if state.action == "kept":
            assert s in at and sent[at[s]]["role"] == stored[s]["role"]
            # a kept tool result is sent in its one sent form (SPEC 0: text, or a list of parts as stored)
            assert sent[at[s]]["content"] == sanitize(stored[s])["content"] or stored[s]["role"] != "tool"
            if state.call is not None:
                pytest.fail("kept messages name no call")
        elif state.action == "placeholder":
            assert s in at and sent[at[s]]["content"] == placeholder_for(stored[s], s)  # C13: names its seq
            assert state.call is not None and state.call <= lineage.call
        elif state.action == "summarized":
            assert s not in at
            made = lineage.made[state.ref]  # type: ignore[index]
            assert made.kind == "summary" and -1 - made.key in at and made.call <= lineage.call
            assert sent[at[-1 - made.key]]["content"] == content_text(made.message["content"])
        else:
            assert state.action == "dropped" and s not in at
    for o, m in at.items():
        if o < 0:
            made = lineage.made[-1 - o]
            assert made.kind in ("summary", "fallback", "synthetic") and made.message == sent[m]
    rows = lineage_rows(lineage, stored)
    seqs = [r["position"] for r in rows["before"] if r["position"] is not None]
    assert sorted(seqs) == list(range(len(stored)))  # one before row per stored message
    assert [r["action"] for r in rows["before"] if r["position"] is not None] == \
        [lineage.states[s].action for s in seqs]
    assert len(rows["after"]) == len(sent)
    assert Counter(r["source"] for r in rows["after"] if r["source"] is not None) == \
        Counter(o for o in lineage.sent if o >= 0)
    # C1 figures: each sent message's estimate on its after row and on the before row of what it was sent for
    assert [r["tokens"] for r in rows["after"]] == [estimate_sent(m) for m in sent]
    assert all(r["tokens_after"] == (0 if r["sent_position"] is None else estimate_sent(sent[r["sent_position"]]))
               for r in rows["before"])


@SETTINGS
@given(turns())
def test_n3_every_call_of_a_turn_resolves_to_stored_rows(turn):
    transcript, blocks, policy, summarize, retry_at = turn
    calls = run_turn(transcript, blocks, policy, summarize, retry_at)
    earlier: dict[int, str] = {}
    event(f"call 1: {calls[0][0].stage}")
    event("carried at a later call" if any(" · carries " in lin.describe() for _, lin, _ in calls[1:])
          else "nothing carried")
    for view, lineage, stored in calls:
        check_call(view, lineage, stored)
        stored_form = decode_lineage(json.loads(json.dumps(encode_lineage(lineage))), stored)  # N3: as stored
        check_call(view, stored_form, stored)
        assert stored_form.describe() == lineage.describe()
        assert lineage.describe().split(" · ")[0] == view.stage  # the stage keeps its C10 meaning
        for s, action in earlier.items():  # what an earlier call took out of the view stays out
            if action in ("summarized", "dropped"):
                assert lineage.states[s].action in ("summarized", "dropped")
        earlier = {s: st.action for s, st in enumerate(lineage.states)}


def _small_blocks(n: int) -> list[list[dict]]:
    return [[{"role": "assistant", "content": f"step {k}", "tool_calls": [
        {"id": f"c{k}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": f"c{k}", "content": f"ok {k}"}] for k in range(1, n + 1)]


def test_n3_a_summary_pinned_at_call_1_is_carried_by_every_later_call():
    """C7 + N3: the summary made at call 1 is `summarized` for the messages it covers at calls 2..N."""
    history = [{"role": "system", "content": "sys"}]
    for k in range(30):
        history += [{"role": "user", "content": f"question {k} " + "words " * 40},
                    {"role": "assistant", "content": f"answer {k} " + "words " * 40}]
    transcript = [*history, {"role": "user", "content": "now do it"}]
    calls = run_turn(transcript, _small_blocks(4), ContextPolicy(2_000, 0.8, 600))
    assert [v.stage for v, _, _ in calls] == ["summary"] + ["unchanged"] * 4
    covered = {s for s, st in enumerate(calls[0][1].states) if st.action == "summarized"}
    assert len(covered) > 40
    for view, lineage, stored in calls[1:]:
        assert lineage.describe() == "unchanged · carries the summary of call 1"
        assert {s for s, st in enumerate(lineage.states) if st.action == "summarized"} == covered
        assert all(lineage.states[s] == calls[0][1].states[s] for s in covered)
        rows = lineage_rows(lineage, stored)
        assert len(rows["before"]) == len(stored) > len(view.provenance.before)  # the transcript, not the input
        assert [r["action"] for r in rows["after"]].count("summary") == 1
        assert lineage.summaries() == [(1, calls[0][0].summary)]
        check_call(view, lineage, stored)


def test_n3_placeholders_made_at_call_1_stay_placeholders():
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "read"}]
    for k in range(6):
        history += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"r{k}", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"r{k}", "content": "line\n" * 300}]
    transcript = [*history, {"role": "user", "content": "go on"}]
    calls = run_turn(transcript, _small_blocks(3), ContextPolicy(2_000, 0.8, 400))
    assert calls[0][0].stage == "micro" and all(v.stage == "unchanged" for v, _, _ in calls[1:])
    made = [s for s, st in enumerate(calls[0][1].states) if st.action == "placeholder"]
    assert made
    for view, lineage, stored in calls[1:]:
        assert lineage.describe() == f"unchanged · carries {len(made)} placeholders"
        # the view's own provenance (C10, relative to its input) calls them `kept` (its input already held the
        # placeholders); its lineage (N3) keeps them placeholders made by call 1
        assert all(r.action == "kept" for r in view.provenance.before)
        rows = lineage_rows(lineage, stored)
        assert [r["position"] for r in rows["before"] if r["action"] == "placeholder"] == made
        assert all(r["call"] == 1 for r in rows["before"] if r["action"] == "placeholder")
        check_call(view, lineage, stored)


def test_n3_describe_names_what_is_carried():
    from mxclaw_nb.context.lineage import describe_carried

    assert describe_carried("unchanged", [("summary", 1, 1), ("placeholder", 1, 2)]) == \
        "unchanged · carries the summary of call 1 and 2 placeholders"
    assert describe_carried("micro", []) == "micro"
    assert describe_carried("unchanged", [("summary", 1, 1), ("summary", 3, 1), ("placeholder", 2, 1)]) == \
        "unchanged · carries the summaries of calls 1 and 3 and 1 placeholder"


def test_n3_first_call_needs_stored_seqs_and_records_are_checked():
    view = build_request_view([{"role": "user", "content": "hi"}], ContextPolicy())
    with pytest.raises(ValueError, match="stored seq"):
        compose_lineage(view, [None])
    with pytest.raises(ValueError, match="cannot be read"):
        decode_lineage({"format": 1, "runs": [[3, 1, "kept"]]})
