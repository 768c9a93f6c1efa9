"""A server that cuts the prompt silently, as Ollama does past num_ctx (SPEC T3, L2, C10).

The test server's `prompt_truncated` quirk answers as Ollama does: a prompt over `num_ctx` tokens gets an answer and
`usage.prompt_tokens` of at most num_ctx (here 2,048, Ollama's default before 0.6), no error. Real parts: an `Agent`
on a DuckDB file, the real `openai` client over HTTP, counted usage (the server counts the request it got), the
live turn model (`TurnLog`) the notebook's log draws.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.demo.server import TestServer
from mxclaw_nb.widgets.turnlog import TurnLog
from tests.test_magics import env, ip, server  # noqa: F401 - fixtures

# ~32k characters of ordinary text: about 8k tokens by C1 and by o200k alike, four times Ollama's old default context
REPORT = "".join(f"Line {i}: the stock report for shelf {i % 17} counts {i * 7} units, checked on day {i % 31}.\n"
                 for i in range(420))
PROMPT = "Summarise the report below in one sentence, then list the three shelves with the most units.\n\n" + REPORT


def prose(n: int) -> str:
    return " ".join(f"and then point {k} of the follow-up question about the shelves" for k in range(n))


@pytest.fixture
def agent_and_server(tmp_path: Path) -> Any:
    ws = tmp_path / "ws"
    ws.mkdir()
    with TestServer(quirks={"prompt_truncated"}) as srv:
        agent = Agent(workspace=ws, db=str(tmp_path / "cut.duckdb"), base_url=srv.base_url, api_key="k",
                      model="test-model", approval="allow", home=tmp_path / "home", context_window_tokens=64_000)
        yield agent, srv


def warnings(agent: Agent) -> list[dict[str, Any]]:
    df = agent.store.events(agent.session_id, type="provider.note")
    payloads = [json.loads(p) if isinstance(p, str) else p for p in df["payload"]]
    return [p for p in payloads if p.get("prompt_cut")]


def records(agent: Agent) -> list[tuple[int, dict[str, Any]]]:
    df = agent.store.sql("SELECT prompt_tokens_reported, extra FROM requests WHERE session_id = ? ORDER BY seq",
                         [agent.session_id])
    return [(int(r), json.loads(e) if isinstance(e, str) else (e or {})) for r, e in zip(
        df["prompt_tokens_reported"], df["extra"], strict=True)]


def test_a_cut_prompt_is_said_once_and_not_learned(agent_and_server: Any) -> None:
    """T3, L2: a reported prompt of num_ctx tokens for a request of ~8k est. is a cut prompt: the user is told once
    per session (a warning line in the live log, a stored provider.note saying how to raise num_ctx or lower the
    window), each such call's record says so, and the calibration does not learn from it. Once the server keeps
    the whole prompt again (the user raised OLLAMA_CONTEXT_LENGTH), the calibration learns from that honest report
    alone: its factor is that of the whole prompt (about 1), not the ~100x a segment from a cut report to a whole
    one would price. Before: no word, and the counter learned a factor that made every later count far too high."""
    agent, srv = agent_and_server
    log = TurnLog()
    agent.subscribe(log.handle)
    srv.enqueue_text("Shelves 3, 7 and 11 hold the most.")
    srv.enqueue_text("Shelf 3 first.")
    assert agent.run(PROMPT).text == "Shelves 3, 7 and 11 hold the most."
    assert agent.run("which one first? " + prose(12)).text == "Shelf 3 first."
    told = warnings(agent)
    assert len(told) == 1, told  # once per session
    note = told[0]["note"]
    assert "2,048 prompt tokens" in note and "num_ctx" in note and "OLLAMA_CONTEXT_LENGTH" in note
    assert "context_window_tokens" in note and "probably" in note
    shown = [line for line in log.entries if line.kind == "note" and line.warning and "num_ctx" in line.text]
    assert len(shown) == 1 and shown[0].text.startswith("⚠")
    rows = records(agent)
    assert [r for r, _ in rows] == [2048, 2048]
    assert all(e["prompt_cut"]["reported"] == 2048 and e["prompt_cut"]["least"] > 4096 for _, e in rows)
    assert not agent.calibrated.calibrated  # T3: nothing learned from a cut prompt's report
    srv.quirks = frozenset()  # the server keeps the whole prompt now
    srv.enqueue_text("Shelf 7 next.")
    assert agent.run("and then? " + prose(12)).text == "Shelf 7 next."
    reported, extra = records(agent)[-1]
    assert reported > 6_000 and "prompt_cut" not in extra
    assert agent.calibrated.calibrated and agent.calibrated.factor < 1.6, agent.calibrated
    assert len(warnings(agent)) == 1


def test_an_honest_small_report_is_not_a_cut(agent_and_server: Any) -> None:
    """T3: a prompt under num_ctx is reported whole and learned from; no warning (the check costs one comparison)."""
    agent, srv = agent_and_server
    srv.enqueue_text("ok")
    agent.run("hello " + prose(20))
    assert warnings(agent) == [] and agent.calibrated.calibrated
    assert "prompt_cut" not in records(agent)[0][1]


def test_images_and_cjk_do_not_look_like_a_cut() -> None:
    """T3: C1 counts 2,000 per image and one per CJK character, more than a server may charge; the check's most
    generous count leaves those out, so a compact honest report of such a request is not called a cut."""
    from mxclaw_nb.context import ContextPolicy, build_request_view
    from mxclaw_nb.truncation import suspected_cut

    url = "data:image/png;base64,iVBORw0KGgo="
    shots = [{"role": "user", "content": [{"type": "text", "text": "看这些截图"}, *[
        {"type": "image_url", "image_url": {"url": url}}] * 6]}]
    view = build_request_view(shots, ContextPolicy(200_000))
    assert view.after_tokens > 12_000  # C1: 2,000 per image
    assert suspected_cut(view, 6 * 85 + 10) is None  # a server charging 85 per image is honest
    cjk = [{"role": "user", "content": "报告里的总数不对。" * 1500}]  # 13,500 CJK characters: 13,500 est.
    assert suspected_cut(build_request_view(cjk, ContextPolicy(200_000)), 7_000) is None  # ~0.5 token/char
    assert suspected_cut(build_request_view(cjk, ContextPolicy(200_000)), 2_048) is not None  # but not 0.15


def test_a_settings_change_in_the_notebook_does_not_say_it_again(ip: Any, server: TestServer) -> None:  # noqa: F811
    """N1, T3: `%agent config` rebuilds the Agent on the same session; the warning stays said once per session."""
    from IPython.utils.capture import capture_output

    from tests.test_magics import agent, magics

    server.quirks = {"prompt_truncated"}
    server.enqueue_text("Shelves 3, 7 and 11 hold the most.")
    server.enqueue_text("Shelf 3 first.")
    agent(ip, "config context_window_tokens=64000 approval=allow")
    with capture_output() as first:
        ip.run_cell_magic("agent", "", PROMPT)
    assert "num_ctx" in first.stdout + str(first.outputs)
    agent(ip, "config keep_recent_tokens=4000")  # a new Agent on the same session
    with capture_output():
        ip.run_cell_magic("agent", "", "which one first? " + prose(12))
    sid = magics(ip).get_agent().session_id
    assert len(warnings(magics(ip).get_agent())) == 1 and len(magics(ip).store().requests(sid)) == 2
