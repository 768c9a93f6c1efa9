"""The adversarial drills' tally (SPEC L9, L10): cases tried, escapes, leaks and hangs, printed once per module."""

from __future__ import annotations

import contextlib

import pytest


def new_tally() -> dict[str, int]:
    """A fresh tally; the drill's tests add to it."""
    return {"cases": 0, "escapes": 0, "leaks": 0, "hangs": 0}


def print_tally(request: pytest.FixtureRequest, label: str, tally: dict[str, int]) -> None:
    """Print `label drill: N cases tried / 0 escapes / 0 leaks / 0 hangs` past pytest's output capture."""
    line = (f"{label} drill: {tally['cases']} cases tried / {tally['escapes']} escapes / {tally['leaks']} leaks / "
            f"{tally['hangs']} hangs")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
        print("\n" + line)
