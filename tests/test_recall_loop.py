"""SPEC C13 + R1 end to end over HTTP (the real openai client, the shipped test server, a real DuckDB file): after a
compaction the request names `recall #seq` in the placeholder, the model calls `recall` with that seq, the next
request carries the original text, and the answer built on it is stored; a seq of another session is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mxclaw_nb import Agent
from mxclaw_nb.demo.server import TestServer

RATE = "conversion rate from step 2: 0.4217 EUR per unit"


def _agent(server: TestServer, tmp_path: Path, db: str = "recall.duckdb") -> Agent:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "rates.txt").write_text(RATE + "\n" + "filler line of the report\n" * 300, encoding="utf-8")
    (ws / "big.txt").write_text("y" * 6_000, encoding="utf-8")
    return Agent(workspace=ws, db=str(tmp_path / db), base_url=server.base_url, api_key="k", model="test-model",
                 home=tmp_path / "home", approval="allow", context_window_tokens=4_000, keep_recent_tokens=1_000,
                 counter="estimate")


def test_c13_r1_the_model_recalls_a_compacted_output_and_answers_with_it(test_server, tmp_path):
    test_server.enqueue_tool_calls([("read_file", {"path": "rates.txt"})])
    for _ in range(3):
        test_server.enqueue_tool_calls([("read_file", {"path": "big.txt"})])
    test_server.enqueue_text("read them")
    agent = _agent(test_server, tmp_path)
    first = agent.run("read the rates, then big.txt three times")
    assert first.status == "ok" and first.compactions
    stored = agent.transcript()
    seq = next(s for s, m in enumerate(stored) if m["role"] == "tool" and RATE in str(m["content"]))
    sent = json.dumps(test_server.requests[-1]["messages"])
    assert f"characters; recall #{seq}]" in sent and RATE not in sent  # compacted, and it says where it is
    # the next turn: the model asks for that seq, and answers with what came back
    test_server.enqueue_tool_calls([("recall", {"seq": seq})])
    test_server.enqueue_text("The step-2 rate was 0.4217 EUR per unit.")
    n = len(test_server.requests)
    second = agent.run("what was the conversion rate from step 2?")
    assert second.status == "ok" and second.text == "The step-2 rate was 0.4217 EUR per unit."
    asked = test_server.requests[n]["messages"]
    assert any(f"recall #{seq}]" in str(m.get("content")) for m in asked)  # the placeholder the model read
    answered = test_server.requests[n + 1]["messages"]
    assert answered[-1]["role"] == "tool" and answered[-1]["content"].startswith(f"[recall #{seq}: ")
    assert RATE in answered[-1]["content"]  # the original is back in the view the answer was made from
    assert agent.transcript()[-2]["content"] == answered[-1]["content"]  # stored as an ordinary tool result


def test_r1_recall_of_another_sessions_seq_is_refused_in_a_turn(test_server, tmp_path):
    test_server.enqueue_text("hello")
    other = _agent(test_server, tmp_path)
    other.run("a long first session " * 50)
    mine = Agent(workspace=tmp_path / "ws", db=other.store, base_url=test_server.base_url, api_key="k",
                 model="test-model", home=tmp_path / "home", approval="allow")
    beyond = len(other.transcript()) + 5
    test_server.enqueue_tool_calls([("recall", {"seq": beyond}),
                                    ("recall", {"seq": 0, "session_id": other.session_id})])
    test_server.enqueue_text("could not")
    mine.run("recall their messages")
    results = [m["content"] for m in mine.transcript() if m["role"] == "tool"]
    assert re.match(rf"Tool failed: #{beyond} is not in this session's transcript", results[0])
    assert "only this session's transcript" in results[1]
    assert "a long first session" not in json.dumps(test_server.requests[-1]["messages"])


def test_r1_the_demo_model_recalls_a_compacted_output_after_a_compaction(tmp_path):
    """C13 + R1 on the offline demo: a small window compacts the fix task's outputs; asked to recall, the demo
    model reads the placeholder's seq, calls `recall`, and its answer quotes the stored original."""
    agent = Agent(db=str(tmp_path / "demo.duckdb"), approval="allow", env={}, home=tmp_path / "home",
                  context_window_tokens=6_400, keep_recent_tokens=1_500, counter="estimate")
    assert agent.is_demo
    assert agent.run("The unit tests of the inventory package fail. Find out why and fix them.").status == "ok"
    result = agent.run("Recall the first compacted tool output and show me how it begins.")
    stored = agent.transcript()
    calls = [c for m in stored if m["role"] == "assistant" for c in m.get("tool_calls") or []
             if c["function"]["name"] == "recall"]
    assert len(calls) == 1
    seq = json.loads(calls[0]["function"]["arguments"])["seq"]
    assert stored[seq]["role"] == "tool" and len(stored[seq]["content"]) > 60  # a real, compacted output
    first_line = next(ln for ln in stored[seq]["content"].splitlines() if ln.strip())
    assert f"I read stored message #{seq} back with `recall`" in result.text
    assert first_line.strip()[:40] in result.text  # the answer uses what was recalled
