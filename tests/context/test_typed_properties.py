"""SPEC K2 with C3/C5: typed placeholders through the whole `build_request_view`, over random kernel-tool transcripts.

Transcripts are turns of `python` / `kernel_variables` / `notebook_cells` calls whose results carry the structured
facts the K1 tools record (value type, shape, columns, variables; exception type/message/frame; manifest and cell
counts; plot captions), some failed (flagged or with a failure marker), some large. For each view:
- deterministic: the same input gives the same sent messages (and a copy of the input too);
- C3: every message at or after the view's tail start is sent exactly as the input (its sent form);
- C5: no failure (flagged or marked) is ever replaced, typed or not;
- K2: a sent placeholder is exactly `placeholder_for` of its input, sits before the tail, and facts are never sent.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mxclaw_nb.context import ContextPolicy, build_request_view
from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.messages import is_failure, sanitize

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])
PREFIX = "[old tool output compacted: "
_names = st.sampled_from(["df_sales", "by_price", "spikes", "arr", "model_fit", "x", "描述"])
_cols = st.lists(st.sampled_from(["id", "ts", "price", "qty", "region", "价格"]), max_size=6, unique=True)

value_facts = st.fixed_dictionaries(
    {"kind": st.just("value"), "type": st.sampled_from(["DataFrame", "ndarray", "Series", "int", "str"])},
    optional={"shape": st.lists(st.integers(0, 10**6), min_size=1, max_size=3), "columns": _cols,
              "dtype": st.sampled_from(["float64", "int64", "object"]), "variables": st.lists(_names, max_size=4),
              "len": st.integers(0, 10**6), "memory": st.integers(0, 10**9)})
exc_facts = st.fixed_dictionaries({"kind": st.just("exception"), "exc_type": st.sampled_from(
    ["KeyError", "ValueError", "ZeroDivisionError", "PythonTimeout"]), "exc_message": st.text(max_size=60),
    "frame": st.sampled_from(["", "line 2: df['prce']", "line 1: 1/0"])})
count_facts = st.fixed_dictionaries({"kind": st.sampled_from(["manifest", "cells"]), "count": st.integers(0, 50)})
plot_facts = st.fixed_dictionaries({"kind": st.just("plot"), "type": st.just("Figure")},
                                   optional={"caption": st.text(max_size=40)})
facts = st.one_of(value_facts, exc_facts, count_facts, plot_facts)

body = st.one_of(
    st.builds(lambda n: "   id   price\n" + "".join(f"{i:5d} {i * 1.5:7.2f}\n" for i in range(n)),
              st.integers(0, 400)),  # a printed frame, often large enough to compact
    st.builds(lambda ch, n: ch * n, st.sampled_from(["x", "长", "line\n"]), st.integers(0, 5_000)),
    st.sampled_from(["(no output)", "value (int):\n5000", "df_sales: type=DataFrame, shape=[5000, 2]"]))
marker = st.sampled_from(["", "", "", "Tool failed: KeyError: 'prce'\n", "Permission denied: python code not "
                          "approved (policy)\n", "Invalid range: "])


@st.composite
def turn(draw: st.DrawFn, k: int) -> list[dict[str, Any]]:
    """One user turn: a goal, 1-3 kernel tool calls (one per assistant message) with their results, a closing note."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Turn {k}: look at df_sales " + draw(st.text(
        max_size=30))}]
    for j in range(draw(st.integers(1, 3))):
        cid = f"c{k}_{j}"
        name = draw(st.sampled_from(["python", "kernel_variables", "notebook_cells"]))
        args = {"python": {"code": "df_sales.describe()"}, "kernel_variables": {"filter": "df"},
                "notebook_cells": {"range": "1-3"}}[name]
        msgs.append({"role": "assistant", "content": draw(st.sampled_from(["", "Running it."])), "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        f = draw(facts)
        result: dict[str, Any] = {"role": "tool", "tool_call_id": cid, "content": draw(marker) + draw(body),
                                  "facts": f}
        if f["kind"] == "exception" or draw(st.integers(0, 9)) == 0:
            result["is_error"] = True
        msgs.append(result)
    msgs.append({"role": "assistant", "content": draw(st.sampled_from(["Done.", "df_sales has a spike. " * 20]))})
    return msgs


@st.composite
def transcript(draw: st.DrawFn) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "[system prompt] notebook agent."}]
    for k in range(draw(st.integers(1, 5))):
        msgs += draw(turn(k))
    return msgs


policy = st.builds(lambda w, r, keep: ContextPolicy(context_window_tokens=w, threshold_ratio=r,
                                                    keep_recent_tokens=keep),
                   st.integers(500, 12_000), st.sampled_from([0.5, 0.8, 1.0]), st.integers(0, 1_500))


@FAST
@given(messages=transcript(), pol=policy)
def test_typed_placeholders_deterministic_never_on_failures_never_in_tail(
        messages: list[dict[str, Any]], pol: ContextPolicy) -> None:
    before = copy.deepcopy(messages)
    view = build_request_view(messages, pol)
    assert messages == before  # the input is never mutated
    again = build_request_view(copy.deepcopy(messages), pol)
    assert again.messages == view.messages and again.tail_start == view.tail_start  # deterministic
    tail = view.tail_start if view.tail_start is not None else 0
    for sent, src in zip(view.messages, view.sources, strict=True):
        assert "facts" not in sent  # K2: facts are stored, never sent
        if src is None:
            continue
        original = messages[src]
        if src >= tail or is_failure(original):  # C3: the safe tail; C5: failure evidence
            assert sent == sanitize(original), (src, tail, str(sent.get("content"))[:80])
        text = sent.get("content")
        if sent.get("role") == "tool" and isinstance(text, str) and text.startswith(PREFIX) \
                and text != original.get("content"):
            assert src < tail and not is_failure(original)
            assert text == placeholder_for(original, src)  # exactly the K2 (typed) or C5 placeholder (C13)
            event("typed placeholder" if "; " in text.split("]")[0] else "plain placeholder")
    event(f"stage {view.stage}")


def test_example_typed_placeholder_before_tail_and_failure_kept() -> None:
    """A concrete case of the property: one big value output, one big failure, then a tail."""
    big = "   id   price\n" + "".join(f"{i:5d} {i * 1.5:7.2f}\n" for i in range(600))
    df = {"kind": "value", "type": "DataFrame", "shape": [5000, 2], "columns": ["id", "price"],
          "variables": ["df_sales"]}
    exc = {"kind": "exception", "exc_type": "KeyError", "exc_message": "'prce'", "frame": "line 1: df['prce']"}

    def call(cid: str, code: str) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [{"id": cid, "type": "function", "function": {
            "name": "python", "arguments": json.dumps({"code": code})}}]}

    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "load"},
                call("a", "df_sales = load()"), {"role": "tool", "tool_call_id": "a", "content": big, "facts": df},
                call("b", "df['prce']"), {"role": "tool", "tool_call_id": "b", "is_error": True, "facts": exc,
                                          "content": "Tool failed: KeyError: 'prce'\n" + big},
                {"role": "user", "content": "now plot it"}, {"role": "assistant", "content": "Plotting."}]
    view = build_request_view(messages, ContextPolicy(context_window_tokens=6_000, threshold_ratio=0.5,
                                                      keep_recent_tokens=50))
    sent = [m["content"] for m in view.messages if m["role"] == "tool"]
    assert sent[0] == (f"[old tool output compacted: {len(big):,} characters; DataFrame 5,000x2 (id, price); "
                       "still in the kernel as df_sales; recall #3]")  # C13: names the stored message
    assert sent[1] == messages[5]["content"]  # C5
    assert view.messages[-2:] == [sanitize(m) for m in messages[-2:]]  # C3


def test_c7_next_input_keeps_a_placeholders_facts_for_the_kernel_state() -> None:
    """K3 across C7: a placeholder fed back keeps its result's facts (stored-only), so a later summary names it."""
    big = "x" * 20_000
    df = {"kind": "value", "type": "DataFrame", "shape": [360, 5], "columns": ["date", "region"],
          "variables": ["sales"]}
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {
        "name": "python", "arguments": "{}"}}]}
    # the first goal is long, so the later summary replaces more than it adds (C5/C6: no compaction without gain)
    first = [{"role": "user", "content": "load " * 500}, call, {"role": "tool", "tool_call_id": "a", "content": big,
                                                          "facts": df}, {"role": "assistant", "content": "ok"}]
    pol = ContextPolicy(context_window_tokens=6_000, threshold_ratio=0.8, keep_recent_tokens=100)
    view = build_request_view(first, pol)
    assert view.stage == "micro" and "facts" not in view.messages[2]
    fed = view.next_input([{"role": "user", "content": "more " * 4_000}])
    assert fed[2]["facts"] == df and fed[2]["content"].startswith(PREFIX)  # stored-only, rides along
    later = build_request_view(fed, pol)
    assert later.stage == "summary" and later.summary is not None
    assert "Kernel state:\n- sales: DataFrame 360x5 (date, region)" in later.summary
