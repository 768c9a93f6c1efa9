"""The benchmark script stays runnable (SPEC C1-C9): a tiny run prints every figure and both targets."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "context_bench.py"


def test_context_bench_runs_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/context_bench.py on a small transcript: table, targets and JSON with sane figures."""
    pytest.importorskip("langchain_core")
    spec = importlib.util.spec_from_file_location("context_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "figures.json"
    assert bench.main(["--sizes", "400", "--no-tiktoken", "--no-shared", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "trim_messages" in printed and "400 synthetic messages, common (unchanged)" in printed
    assert "400 synthetic messages, compaction (" in printed
    row = json.loads(out.read_text())[0]
    assert row["messages"] == 400 and row["common"]["stage"] == "unchanged"
    assert row["compaction"]["stage"] != "unchanged" and row["compaction"]["sent"] <= 400
    assert row["common"]["incremental_ms"] > 0 and row["compaction"]["trim_ms"] > 0
    assert row["common"]["kept"] == 400 and row["compaction"]["kept"] < 400


def test_context_bench_has_a_row_of_the_shared_real_transcripts() -> None:
    """The real transcripts row: every shared conversation end to end, as the engine and trim_messages see it."""
    spec = importlib.util.spec_from_file_location("context_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    shared = bench.shared_transcript()
    if shared is None:
        pytest.skip("../shared/transcripts is not beside this checkout")
    assert len(shared) > 5_000 and all(isinstance(m, dict) for m in shared)
