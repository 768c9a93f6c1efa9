"""Opt-in: tests against a real local model (SPEC L2, L7, T1-T3). Skipped unless MXCLAW_TEST_MODEL_URL is set.

Set one up offline with `scripts/setup_realmodel.sh serve` (Qwen2.5-Coder-1.5B through llama.cpp --jinja), then
`MXCLAW_TEST_MODEL_URL=http://127.0.0.1:8091/v1 .venv/bin/python -m pytest tests/realmodel`. Only a loopback URL is
accepted (tests never reach off the machine). Calls are slow on a laptop CPU: each test has a generous timeout.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import pytest

URL = os.environ.get("MXCLAW_TEST_MODEL_URL", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="opt-in real-model suite: set MXCLAW_TEST_MODEL_URL (scripts/setup_realmodel.sh)")
    for item in items:
        if here in Path(str(item.fspath)).parents and not URL:
            item.add_marker(skip)


@pytest.fixture
def model_url() -> str:
    if (urlparse(URL).hostname or "") not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip(f"MXCLAW_TEST_MODEL_URL must be a loopback URL (got {URL!r})")
    return URL
