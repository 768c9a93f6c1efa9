"""Shared fixtures: isolation from the user's environment, the test server, the shared transcripts.

Every test runs with its own DuckDB file (MXCLAW_DB) and without provider variables, so nothing a
developer has configured (a real key, a base URL) can leak into a test or receive its traffic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures_server import demo_server, demo_workspace, test_server  # noqa: F401 - re-exported fixtures

REPO = Path(__file__).resolve().parents[1]
SHARED_TRANSCRIPTS = REPO.parent / "shared" / "transcripts"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL", "MXCLAW_CONTEXT_WINDOW"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MXCLAW_DB", str(tmp_path_factory.mktemp("db") / "test.duckdb"))
    monkeypatch.setenv("MXCLAW_DEMO_TOKEN_DELAY", "0")  # the demo streams unpaced in tests (kernels inherit it)


@pytest.fixture(scope="session")
def shared_transcripts() -> list[dict]:
    """All conversations of ../shared/transcripts/*.jsonl (skips when the folder is absent)."""
    if not SHARED_TRANSCRIPTS.is_dir():
        pytest.skip(f"shared transcripts not found at {SHARED_TRANSCRIPTS}")
    out = []
    for path in sorted(SHARED_TRANSCRIPTS.glob("*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out
