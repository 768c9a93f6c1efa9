"""The replay's C7 fast path gives the plain path's rows and views, byte for byte (SPEC S4, C7, C5, C12).

The fast path: within a turn the next build's plan is seeded from the view's own (`incremental.continued_input`),
carried placeholders are skipped at C speed (`TokenCache.stays`) and a rebuild reuses the placeholders made
before (`TokenCache.placeholders`). The plain path plans every continued input from scratch and makes every
placeholder again (the code before the fast path). Both run the real engine on real shipped transcripts, the
policy lab's long session and random partly broken transcripts (Hypothesis), for each strategy.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mxclaw_nb import datasets
from mxclaw_nb.analysis.replay import SessionCaches, replay_messages
from mxclaw_nb.context import ContextPolicy
from mxclaw_nb.context.micro import FACTS_KEY
from mxclaw_nb.context.strategies import Clearing, Masking, strategy_from
from tests.context.test_properties import cases
from tests.test_lab import long_session

STRATEGIES = ["article", "masking", "clearing", "model-summary"]
replay_mod = importlib.import_module("mxclaw_nb.analysis.replay")  # the package exports a `replay` function


class _Forget(dict):  # type: ignore[type-arg]
    """A memo that never remembers (the plain path)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _dump(views: list[Any]) -> list[str]:
    return [json.dumps([v.messages, v.stage, v.summary, v.before_tokens, v.after_tokens, v.after_estimate,
                        v.sources, list(v.trace.actions), v.tail_start], ensure_ascii=False) for v in views]


def _both(messages: list[Any], policy: ContextPolicy, monkeypatch: pytest.MonkeyPatch,
          **kw: Any) -> tuple[tuple[list[dict[str, Any]], list[str]], tuple[list[dict[str, Any]], list[str]]]:
    fast_views: list[Any] = []
    fast = replay_messages(messages, policy, views=fast_views, **kw)
    plain_views: list[Any] = []
    caches = SessionCaches()
    token_cache = caches.token_cache(policy)
    token_cache.stays, token_cache.placeholders, token_cache.replanned = _Forget(), _Forget(), _Forget()
    with monkeypatch.context() as m:
        m.setattr(replay_mod, "continued_input", lambda view, appended, cache, counter=None:
                  view.next_input(appended))
        plain = replay_messages(messages, policy, views=plain_views, caches=caches, **kw)
    return (fast, _dump(fast_views)), (plain, _dump(plain_views))


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    # NaN != NaN: compare the rows' JSON
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.mark.parametrize("name", STRATEGIES)
def test_s4_fast_replay_of_the_lab_session_equals_the_plain_one(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    messages = long_session(200)
    for window, tail in ((32_000, 4_000), (8_000, 1_000)):
        policy = ContextPolicy(window, 0.8, tail, strategy=strategy_from(name))
        (fast, fv), (plain, pv) = _both(messages, policy, monkeypatch, facts=False)
        assert fv == pv and _same(fast, plain)
        assert any(r["stage"] == "micro" for r in fast)  # the fast path was taken (placeholders in a turn)


@pytest.mark.parametrize("name", STRATEGIES)
def test_s4_fast_replay_equals_the_plain_one_on_every_shipped_transcript(name: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    stages = set()
    for dataset in datasets.available():
        for conv in datasets.load(dataset):
            for window in (2_000, 8_000):
                policy = ContextPolicy(window, 0.8, window // 4, strategy=strategy_from(name))
                (fast, fv), (plain, pv) = _both(list(conv.messages), policy, monkeypatch)  # facts on
                assert fv == pv, (dataset, conv.id, window)
                assert _same(fast, plain), (dataset, conv.id, window)
                stages |= {r["stage"] for r in fast}
    assert "micro" in stages


@st.composite
def sessions(draw: st.DrawFn) -> list[Any]:
    """Well-formed multi-turn tool sessions (one or two calls per step, outputs of random sizes, some failed, some
    CJK, some with recorded facts), with random broken messages from `cases` mixed in sometimes."""
    msgs: list[Any] = [{"role": "system", "content": "agent"}]
    n = 0
    for turn in range(draw(st.integers(1, 4))):
        msgs.append({"role": "user", "content": f"task {turn}"})
        for _ in range(draw(st.integers(0, 8))):
            ids = [f"c{n + j}" for j in range(draw(st.integers(1, 2)))]
            n += len(ids)
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "read", "arguments": "{}"}} for i in ids]})
            for i in ids:
                size = draw(st.integers(1, 400))
                result: dict[str, Any] = {"role": "tool", "tool_call_id": i,
                                          "content": draw(st.sampled_from(["line\n", "行", "Error: x "])) * size}
                if draw(st.integers(0, 9)) == 0:
                    result[FACTS_KEY] = {"type": "DataFrame", "shape": [size, 2], "variables": ["df"]}
                msgs.append(result)
        msgs.append({"role": "assistant", "content": "done"})
    if draw(st.integers(0, 3)) == 0:
        junk, _ = draw(cases())
        at = draw(st.integers(1, len(msgs)))
        msgs[at:at] = junk
    return msgs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(messages=sessions(), window=st.integers(200, 6_000), ratio=st.sampled_from([0.5, 0.8, 1.0]),
       tail=st.integers(0, 1_500), strategy=st.sampled_from([strategy_from("article"), Masking(), Masking(keep_last=1),
                                                             Clearing(), Clearing(keep_last=0, clear_at_least=50),
                                                             strategy_from("model-summary")]))
def test_s4_fast_replay_equals_the_plain_one_on_random_sessions(messages: list[Any], window: int, ratio: float,
                                                               tail: int, strategy: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    policy = ContextPolicy(window, ratio, tail, strategy=strategy)
    try:
        (fast, fv), (plain, pv) = _both(messages, policy, monkeypatch, facts=False)
    except ValueError:
        return
    assert fv == pv and _same(fast, plain)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(case=cases(), strategy=st.sampled_from([strategy_from("article"), Masking(), Masking(keep_last=0), Clearing(),
                                               Clearing(keep_last=0, clear_at_least=50),
                                               strategy_from("model-summary")]), facts=st.booleans())
def test_s4_fast_replay_equals_the_plain_one_on_random_transcripts(case: tuple[list[Any], ContextPolicy],
                                                                   strategy: Any, facts: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    messages, policy = case
    policy = replace(policy, strategy=strategy)
    # several turns: the transcript twice, the second time after a new user message (a rebuild, then a turn)
    messages = [*messages, {"role": "user", "content": "again"}, *messages]
    try:
        (fast, fv), (plain, pv) = _both(messages, policy, monkeypatch, facts=facts)
    except ValueError as exc:  # nothing to send: refused the same way by both paths
        with pytest.raises(ValueError, match=str(exc)[:30]):
            _both(messages, policy, monkeypatch, facts=facts)
        return
    assert fv == pv and _same(fast, plain)


STATE_COLUMNS = {"kept", "placeholder", "typed_placeholders", "summarized", "dropped", "synthetic", "shared_tokens",
                 "broken_tokens"}


@pytest.mark.parametrize("name", STRATEGIES)
def test_s4_a_replay_without_state_columns_has_the_same_views_and_other_columns(name: str) -> None:
    """S4 (the policy lab's whole replay): `states=False` leaves out the per-message state and E2 columns only."""
    for window, tail in ((32_000, 4_000), (12_000, 1_000)):
        policy = ContextPolicy(window, 0.8, tail, strategy=strategy_from(name))
        full_views: list[Any] = []
        light_views: list[Any] = []
        full = replay_messages(long_session(300), policy, facts=False, views=full_views)
        light = replay_messages(long_session(300), policy, facts=False, views=light_views, states=False)
        assert _dump(light_views) == _dump(full_views)
        assert [{k: v for k, v in r.items() if k not in STATE_COLUMNS} for r in full] == light
        assert all(r.keys() >= STATE_COLUMNS for r in full) and not any(STATE_COLUMNS & r.keys() for r in light)
    with pytest.raises(ValueError, match="states=False needs facts=False"):
        replay_messages(long_session(40), policy, states=False)


@pytest.mark.parametrize("name", STRATEGIES)
def test_s4_replay_rows_as_requests_is_the_frame_of_their_records(name: str) -> None:
    """The timeline's frame of replay rows (laid out once by the store's codec, then per row only the columns a
    row sets) equals `records_frame` of each row's RequestRecord, for every counter a replay reports."""
    import pandas as pd

    from mxclaw_nb.analysis.replay import rows_as_requests
    from mxclaw_nb.records import RequestRecord
    from mxclaw_nb.store.records import records_frame

    rows = replay_messages(long_session(120), ContextPolicy(12_000, 0.8, 1_000, strategy=strategy_from(name)),
                           facts=False, states=False)
    for counter in ("estimate", "calibrated", "o200k_base", None):
        given = [{**r, "counter": counter, "estimate_tokens": None if k % 7 == 0 else r["estimate_tokens"]}
                 for k, r in enumerate(rows)]
        records, last, it = [], None, 0
        for r in given:
            it = it + 1 if r["turn"] == last else 1
            last = r["turn"]
            c = str(r["counter"] or "estimate")
            est = r["estimate_tokens"]
            records.append(RequestRecord(
                turn=r["turn"], iteration=it, counter=c,
                estimate_tokens=est if est is not None else r["after_tokens"] if c == "estimate" else None,
                calibrated_tokens=r["after_tokens"] if c == "calibrated" else None, before_tokens=r["before_tokens"],
                after_tokens=r["after_tokens"], threshold=r["threshold"], window_tokens=r["window"],
                stage=r["stage"], session_id=r["session_id"], seq=r["call"] - 1))
        pd.testing.assert_frame_equal(rows_as_requests(given), records_frame(records))


def test_s4_a_replay_raises_the_collector_threshold_only_while_it_runs() -> None:
    """S4: the replay runs with fewer generation-0 passes (REPLAY_GC_THRESHOLD) and restores the thresholds it
    found, also when it fails; a collector switched off (threshold 0) stays off."""
    import gc

    seen: list[tuple[int, ...]] = []

    def summarize(messages: list[Any]) -> str:
        seen.append(gc.get_threshold())
        return "summary"

    before = gc.get_threshold()
    msgs = long_session(40)
    replay_messages(msgs, ContextPolicy(context_window_tokens=1_500, keep_recent_tokens=200, threshold_ratio=0.5),
                    summarize=summarize, facts=False, states=False)
    assert seen and all(t[0] == max(before[0], replay_mod.REPLAY_GC_THRESHOLD) for t in seen)
    assert gc.get_threshold() == before

    def failing(messages: list[Any]) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replay_messages(msgs, ContextPolicy(context_window_tokens=1_500, keep_recent_tokens=200,
                                            threshold_ratio=0.5), summarize=failing, facts=False, states=False)
    assert gc.get_threshold() == before
    try:
        gc.set_threshold(0)
        replay_messages(msgs, ContextPolicy(context_window_tokens=1_500, keep_recent_tokens=200, threshold_ratio=0.5),
                        summarize=summarize, facts=False, states=False)
        assert seen[-1][0] == 0
    finally:
        gc.set_threshold(*before)


def test_s4_nested_and_concurrent_blocks_share_one_raise() -> None:
    import gc
    import threading

    from mxclaw_nb.analysis.replay import REPLAY_GC_THRESHOLD, fewer_collections

    before = gc.get_threshold()
    inside, go = threading.Event(), threading.Event()

    def other() -> None:
        with fewer_collections():
            inside.set()
            go.wait(5)

    t = threading.Thread(target=other)
    with fewer_collections():
        t.start()
        assert inside.wait(5)
        with fewer_collections():
            assert gc.get_threshold()[0] == max(before[0], REPLAY_GC_THRESHOLD)
    assert gc.get_threshold()[0] == max(before[0], REPLAY_GC_THRESHOLD)  # the other block still runs
    go.set()
    t.join(5)
    assert gc.get_threshold() == before
