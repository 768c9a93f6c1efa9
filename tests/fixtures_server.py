"""Pytest fixtures for the local OpenAI-compatible server (imported by tests/conftest.py).

Why a separate module: every layer that talks to a model (provider, loop, magics, notebooks) is
tested against the same real HTTP server with the real `openai` client; keeping the fixtures here
lets `conftest.py` import them in one line, and lets the provider tests use them before it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mxclaw_nb.demo.model import copy_demo_workspace
from mxclaw_nb.demo.server import TestServer


@pytest.fixture
def test_server() -> Iterator[TestServer]:
    """A scriptable server on 127.0.0.1, fresh per test (empty queue replies "ok")."""
    with TestServer() as srv:
        yield srv


@pytest.fixture
def demo_server() -> Iterator[TestServer]:
    """The offline demo model ("mxclaw-demo") on its own server, fresh per test."""
    with TestServer(demo=True) as srv:
        yield srv


@pytest.fixture
def demo_workspace(tmp_path: Path) -> Path:
    """A fresh, writable copy of the sample workspace the demo model plays on."""
    return copy_demo_workspace(tmp_path / "demo_ws")
