"""SPEC R1: the recall tool reads this session's stored transcript (a real DuckDB store): one message, a range,
a search with context and a hit limit; bounded with the total length; another session's messages never."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mxclaw_nb.store.writer import Store
from mxclaw_nb.tools import ToolContext, default_registry


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "r.duckdb") as s:
        yield s


def _session(store: Store, secret: str) -> str:
    sid = store.create_session()
    store.append_message(sid, {"role": "user", "content": "convert the numbers"}, turn=1)
    store.append_message(sid, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "conv"})}}]},
        turn=1)
    store.append_message(sid, {"role": "tool", "tool_call_id": "c1", "content": f"rate: {secret}\n" + "x\n" * 15000},
                         turn=1)
    store.append_message(sid, {"role": "assistant", "content": "done"}, turn=1)
    return sid


def run(store: Store, sid: str, tmp_path: Path, **args):
    ctx = ToolContext(workspace=tmp_path, session_id=sid, artifacts=store)
    return default_registry().run("recall", json.dumps(args), ctx)


def test_r1_recall_by_seq_range_and_search_bounded_with_the_total(store: Store, tmp_path: Path) -> None:
    sid = _session(store, "0.4217 EUR/USD")
    one = run(store, sid, tmp_path, seq=2)
    assert not one.is_error and one.content.startswith("[recall #2: ")
    assert "#2 tool (call c1): rate: 0.4217 EUR/USD" in one.content
    assert one.content.startswith("[recall #2: 30,") and "[output cut: showing 20000 of 30" in one.content
    rng = run(store, sid, tmp_path, start=0, end=1)
    assert "#0 user: convert the numbers" in rng.content and '-> bash {"command": "conv"}' in rng.content
    assert rng.content.startswith("[recall #0-#1 of #0-#3")
    hit = run(store, sid, tmp_path, search="EUR/USD", context=0, max_hits=1)
    assert "#2: rate: 0.4217 EUR/USD" in hit.content and "1 matching lines" in hit.content
    regex = run(store, sid, tmp_path, search=r"rate: \d\.\d+", regex=True)
    assert "0.4217" in regex.content


def test_r1_another_sessions_messages_are_never_returned(store: Store, tmp_path: Path) -> None:
    mine = _session(store, "mine")
    theirs = store.create_session()
    for k in range(10):
        store.append_message(theirs, {"role": "user", "content": f"their secret {k}"}, turn=1)
    past = run(store, mine, tmp_path, seq=7)  # a seq only the other session has
    assert past.is_error and "#7 is not in this session's transcript (it has 4 messages" in past.content
    assert "their secret" not in past.content
    other = run(store, mine, tmp_path, seq=0, session_id=theirs)
    assert other.is_error and "only this session's transcript" in other.content
    assert "0 matching lines" in run(store, mine, tmp_path, search="their secret").content


def test_r1_bad_arguments_are_clear_failures(store: Store, tmp_path: Path) -> None:
    sid = _session(store, "s")
    assert run(store, sid, tmp_path).content.startswith("Invalid arguments for tool 'recall': give one of seq")
    assert "got seq and search" in run(store, sid, tmp_path, seq=1, search="a").content
    assert run(store, sid, tmp_path, seq=-1).content.startswith("Invalid")
    assert "end 0 is before start 2" in run(store, sid, tmp_path, start=2, end=0).content
    assert run(store, sid, tmp_path, search="(", regex=True).content.startswith("Invalid regex")
