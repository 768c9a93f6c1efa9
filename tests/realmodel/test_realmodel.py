"""A real local model through the whole agent (SPEC L2, L7, T1-T3): opt-in, see conftest.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent
from mxclaw_nb.loop import TurnFailed

pytestmark = pytest.mark.timeout(1800)


def _agent(url: str, tmp_path: Path, **kw: Any) -> Agent:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("The secret word is marmalade.\n", encoding="utf-8")
    kw.setdefault("context_window_tokens", 8192)
    return Agent(workspace=ws, db=str(tmp_path / "real.duckdb"), base_url=url, api_key="local", model="",
                 approval="deny", max_iterations=4, max_tokens=256, home=tmp_path / "home", **kw)


def _ends_cleanly(agent: Agent, prompt: str) -> tuple[str, Any]:
    """L7: an answer, or TurnFailed with a stored turn.failed paragraph (a small model may fail; we may not hang)."""
    try:
        return "ok", agent.run(prompt)
    except TurnFailed as exc:
        events = agent.store.events(agent.session_id)
        assert (events["type"] == "turn.failed").sum() == 1 and "\n" not in str(exc)
        return "failed", exc


def test_t1_t3_first_call_estimate_is_within_10_percent_of_reported(model_url: str, tmp_path: Path) -> None:
    agent = _agent(model_url, tmp_path)
    _ends_cleanly(agent, "Say hello in three words.")
    first = agent.store.requests(agent.session_id).iloc[0]
    extra = first["extra"] if isinstance(first["extra"], dict) else json.loads(first["extra"])
    assert extra["tool_definitions_tokens"] > 500 and extra["max_tokens"] == 256
    reported, estimate = int(first["prompt_tokens_reported"]), int(first["estimate_tokens"])
    assert abs(estimate / reported - 1) <= 0.10, (estimate, reported)


def test_l2_a_tool_call_runs_and_the_model_answers(model_url: str, tmp_path: Path) -> None:
    agent = _agent(model_url, tmp_path)
    outcome, result = _ends_cleanly(agent, "Use the read_file tool to read notes.txt, then tell me the secret word.")
    stored = agent.transcript()
    calls = [c for m in stored if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls, "the model made no tool call (natively or as text)"
    results = [m for m in stored if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]  # C4: every call answered
    if outcome == "ok":
        assert result.iterations >= 2


def test_l2_plain_requests_work_too(model_url: str, tmp_path: Path) -> None:
    agent = _agent(model_url, tmp_path, stream=False)
    outcome, result = _ends_cleanly(agent, "Reply with the single word: ready")
    if outcome == "ok":
        assert result.text.strip()
