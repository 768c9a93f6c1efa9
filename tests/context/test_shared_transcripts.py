"""The 223 shared real transcripts (SWE-agent, tau-bench) through the pipeline at several window sizes.

Every DESIGN invariant is checked by `oracle.build_and_check` for each conversation and policy, and
the two known real-world quirks are pinned: 17 SWE-agent histories end on a dangling `submit` call
(repair synthesises its result), and 49 tau-bench conversations reuse a tool-call id in a later turn
(pairing is per assistant block, so nothing is dropped).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mxclaw_nb.context import ContextPolicy, build_request_view, fallback_window, repair_tool_call_transcript

from .oracle import build_and_check, check_pairing, check_sent_shape

TRANSCRIPTS = Path(__file__).resolve().parents[3] / "shared" / "transcripts"
FILES = ("swe-agent.jsonl", "tau-bench.jsonl")
# (window, keep_recent): thresholds 1.6k..25.6k against conversations of ~1k..14.5k estimated tokens
POLICIES = [(2_000, 500), (4_000, 1_000), (4_000, 4_000), (8_000, 2_000), (16_000, 8_000), (32_000, 8_000)]

pytestmark = pytest.mark.skipif(not all((TRANSCRIPTS / f).is_file() for f in FILES),
                                reason=f"shared transcripts not found at {TRANSCRIPTS} (they live beside the repo)")


def load(name: str) -> list[dict]:
    with (TRANSCRIPTS / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="module")
def conversations() -> dict[str, list[dict]]:
    return {name: load(name) for name in FILES}


def test_all_223_conversations_are_present(conversations: dict[str, list[dict]]) -> None:
    """The shared set: 23 SWE-agent + 200 tau-bench conversations."""
    assert [len(conversations[f]) for f in FILES] == [23, 200]


@pytest.mark.parametrize(("window", "keep"), POLICIES)
def test_every_invariant_holds_on_every_real_conversation(conversations: dict[str, list[dict]],
                                                          window: int, keep: int) -> None:
    """C0-C8 + DESIGN invariants on all 223 real conversations at this window."""
    policy = ContextPolicy(window, 0.8, keep)
    stages: Counter[str] = Counter()
    for name in FILES:
        for conv in conversations[name]:
            stages[build_and_check(conv["messages"], policy).stage] += 1
    assert sum(stages.values()) == 223
    if window <= 4_000:
        assert stages["summary"] > 0 and stages["unchanged"] < 223, stages  # small windows really compact


def test_compactor_failure_on_real_conversations_falls_back_validly(conversations: dict[str, list[dict]]) -> None:
    """C8 on real data: a raising summariser yields a valid fallback window for every compacted conversation."""
    def boom(old: list[dict]) -> str:
        raise RuntimeError("compactor down")

    policy = ContextPolicy(2_000, 0.8, 500)
    fallbacks = 0
    for name in FILES:
        for conv in conversations[name]:
            view = build_and_check(conv["messages"], policy, summarize=boom)
            fallbacks += view.stage == "fallback"
            window = fallback_window(conv["messages"])
            check_sent_shape(window)
            check_pairing(window)
    assert fallbacks > 100


def test_swe_agent_17_dangling_submit_calls_get_synthetic_results(conversations: dict[str, list[dict]]) -> None:
    """Quirk: 17 text-action histories end with a `bash` `submit ...` call that has no result; repair closes each."""
    dangling = []
    for conv in conversations["swe-agent.jsonl"]:
        msgs = conv["messages"]
        view = build_request_view(msgs, ContextPolicy(1_000_000, 0.8, 8_000))
        synthetic = [r for r in view.provenance.before if r.synthetic]
        if synthetic:
            dangling.append(conv["id"])
            assert len(synthetic) == 1 and synthetic[0].tool_name == "bash" and synthetic[0].failure
            assert msgs[-1]["role"] == "assistant" and conv["meta"]["synthetic_tool_calls"] is True
            assert json.loads(msgs[-1]["tool_calls"][0]["function"]["arguments"])["command"].startswith("submit")
            last = view.messages[-1]
            assert last["role"] == "tool" and last["tool_call_id"] == msgs[-1]["tool_calls"][0]["id"]
            assert "interrupted" in last["content"] and view.repaired
            assert view.messages[:-1] == [{k: v for k, v in m.items() if k != "reasoning"} for m in msgs]
    assert len(dangling) == 17


def test_tau_bench_49_reused_ids_are_paired_per_block(conversations: dict[str, list[dict]]) -> None:
    """Quirk: 49 conversations reuse a tool-call id in a later turn; each block keeps its own result."""
    reusing = 0
    for conv in conversations["tau-bench.jsonl"]:
        msgs = conv["messages"]
        ids = Counter(c["id"] for m in msgs for c in m.get("tool_calls") or [])
        if not any(n > 1 for n in ids.values()):
            continue
        reusing += 1
        repaired = repair_tool_call_transcript(msgs)
        assert len(repaired) == len(msgs) and all(a is b for a, b in zip(repaired, msgs, strict=True)), \
            "a well-formed conversation with reused ids must come back unchanged (nothing dropped)"
        view = build_request_view(msgs, ContextPolicy(1_000_000, 0.8, 8_000))
        assert not view.repaired and [r.action for r in view.provenance.before] == ["kept"] * len(msgs)
    assert reusing == 49
