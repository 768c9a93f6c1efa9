"""One event path (SPEC C10, L4, S1): every published event is declared in mxclaw_nb/events.py, stored events
reach the store before any subscriber sees them, live-only ones never do."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from mxclaw_nb import Agent, events
from mxclaw_nb.store.writer import Store

PACKAGE = Path(__file__).resolve().parents[1] / "mxclaw_nb"
NAME = re.compile(r"^[a-z_]+\.[a-z_.]+$")


def _published_names() -> set[str]:
    """Event names passed as the kind of an emit/_emit/record call anywhere in the package."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func not in ("emit", "_emit", "record", "_tool_event"):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and NAME.match(arg.value):
                    found.add(arg.value)
                    break
    return found


def test_c10_every_published_event_is_declared() -> None:
    published = _published_names()
    assert {"turn.started", "tool.finished", "approval.decided", "model.delta"} <= published  # the scan works
    assert published <= events.ALL, f"undeclared events: {sorted(published - events.ALL)}"
    assert not events.STORED & events.LIVE_ONLY


def test_l4_record_stores_then_shows_and_refuses_undeclared_names(tmp_path: Path) -> None:
    store = Store(tmp_path / "e.duckdb")
    sid = store.create_session(workspace=str(tmp_path))
    seen: list[tuple[str, int]] = []

    def show(kind: str, payload: dict[str, Any]) -> None:  # what a subscriber sees is already stored
        seen.append((kind, len(store.events(sid))))

    events.record(store, show, sid, "tool.skipped", {"name": "x"}, turn=1, iteration=2)
    events.record(store, show, sid, "model.delta", {"text": "hi"}, turn=1)
    assert seen == [("tool.skipped", 1), ("model.delta", 1)]
    stored = store.events(sid)
    assert list(stored["type"]) == ["tool.skipped"] and int(stored["iteration"].iloc[0]) == 2
    with pytest.raises(ValueError, match="undeclared event 'tool.exploded'"):
        events.record(store, show, sid, "tool.exploded", {}, turn=1)
    assert len(store.events(sid)) == 1
    store.close()


def test_l4_a_demo_turn_stores_loop_and_tool_events_on_one_path(tmp_path: Path) -> None:
    agent = Agent(workspace=None, db=str(tmp_path / "t.duckdb"), approval="deny", env={}, home=tmp_path)
    shown: list[str] = []
    agent.subscribe(lambda kind, payload: shown.append(kind))
    agent.run("fix the failing tests")
    stored = set(agent.store.events(agent.session_id)["type"])
    assert stored <= events.STORED
    assert {"turn.started", "tool.finished", "approval.decided", "turn.finished"} <= stored  # loop and tool events
    assert {k for k in shown if k in events.STORED} == stored  # every stored event was also shown
    assert "model.delta" in shown and "model.delta" not in stored
    agent.close()


def test_c10_every_declared_event_has_its_typed_form() -> None:
    """The live turn model reads typed events: each declared name parses to its frozen dataclass; numbers from
    JSON are ints; unknown keys are dropped; an undeclared name raises as `record` does."""
    assert set(events.TYPES) == events.ALL
    started = events.parse("turn.started", {"turn": 2.0, "session_id": "s", "sandbox_warning": "w", "extra": 1})
    assert started == events.TurnStarted(turn=2, session_id="s", sandbox_warning="w")
    with pytest.raises(AttributeError):
        started.turn = 3  # type: ignore[misc]  # frozen
    finished = events.parse("tool.finished", {"call_id": "c", "chars": "12", "is_error": 1, "content": None})
    assert finished.chars == 12 and finished.is_error is True and finished.content == ""  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="undeclared event 'tool.exploded'"):
        events.parse("tool.exploded", {})
