"""The README's main job: `python -m mxclaw_nb demo` runs offline turns and prints the context per call (SPEC L1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_command_prints_estimate_stage_and_tokens_per_call(tmp_path: Path) -> None:
    """Three offline turns: per call estimate, stage, before/after; micro, summary and an artifact all appear."""
    env = {**os.environ, "OPENAI_API_KEY": "sk-not-used"}
    env.pop("MXCLAW_CONTEXT_WINDOW", None)
    out = subprocess.run([sys.executable, "-m", "mxclaw_nb", "demo", "--db", str(tmp_path / "demo.duckdb")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "demo model (offline)" in text  # the demo is used even with a key configured, and labelled
    calls = re.findall(r"call (\d+)\.(\d+): +([\d,]+) -> +([\d,]+) (est\.|calibrated) tokens · threshold 12,800 / "
                       r"window 16,000 · stage (unchanged|micro|summary|fallback)", text)
    assert len(calls) >= 10 and {c[0] for c in calls} == {"1", "2", "3"}, text
    assert calls[0][4] == "est."  # C1 estimate until the provider has reported usage (T3)
    stages = {c[5] for c in calls}
    assert {"micro", "summary"} <= stages, stages
    assert "⟳ context compacted: summary" in text and "artifact artifact-" in text
    assert "[demo model]" in text and "model calls stored" in text


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "mxclaw_nb", "dance"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "invalid choice" in out.stderr
