"""The README's main job: `python -m mxclaw_nb demo` runs offline turns and prints the context per call (issue 4)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_command_prints_estimate_stage_and_tokens_per_call(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "sk-not-used", "MXCLAW_CONTEXT_WINDOW": "12000"}
    out = subprocess.run([sys.executable, "-m", "mxclaw_nb", "demo", "--turns", "1", "--db",
                          str(tmp_path / "demo.duckdb")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "demo model (offline)" in text  # the demo is used even with a key configured, and labelled
    calls = re.findall(r"call 1\.(\d+): +([\d,]+) -> +([\d,]+) (est\.|calibrated) tokens · threshold 9,600 / "
                       r"window 12,000 · stage (unchanged|micro|summary|fallback)", text)
    assert len(calls) >= 5, text
    assert calls[0][3] == "est."  # C1 estimate until the provider has reported usage (T3)
    assert "[demo model]" in text and "model calls stored" in text
    assert (tmp_path / "demo.duckdb").exists()


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "mxclaw_nb", "dance"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "invalid choice" in out.stderr
