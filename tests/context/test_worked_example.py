"""The article's worked example (SPEC C0-C6, C10): 64k window, ratio 0.8, 8k tail, ~72k transcript.

The article: system 10k, recent tail ~7k, replaceable old tool output ~20k, earlier process ~35k. The
threshold is 51,200; placeholders alone leave 51,920 (> 51,200), so the structured summary is reached.
The whole resulting view is pinned: stage, token figures, the exact summary, every sent message and
every provenance row.
"""

from __future__ import annotations

import json
import math

from mxclaw_nb.context import ContextPolicy, build_request_view
from mxclaw_nb.demo.examples import WORKED_EXAMPLE_POLICY, worked_example

from .oracle import build_and_check

STATE = ("Status: the fallback path compiles; remaining work is verification. "
         + "Checked the FTS index build, the migration order and the Node 22 bindings. " * 6)[:499] + "…"
SUMMARY = "\n".join([
    "[compressed conversation context]",
    "Older transcript messages were summarized.",
    "Goals:",
    "- Goal 1: make the SQLite FTS tests pass in CI (step 1).",
    "- Goal 2: make the SQLite FTS tests pass in CI (step 2).",
    "- Goal 3: make the SQLite FTS tests pass in CI (step 3).",
    "- Goal 4: make the SQLite FTS tests pass in CI (step 4).",
    "Files and tools touched:",
    "- packages/storage/src/sqlite.ts",
    "Failures to avoid:",
    "- Tool failed: exit code 1 E sqlite3.OperationalError: no such module: fts5",
    "- Forbidden: `rm -rf /` is on the forbidden-command list",
    "Last useful assistant state:",
    "- " + STATE,
    "Recall: #2-#30 are in the transcript (the recall tool reads them).",  # C13: the stored range it covers
])


def c1_ascii(message: dict) -> int:
    """C1 for ASCII-only messages, written out: ceil(chars/4) + ceil(len(compact JSON of calls)/4)."""
    calls = message.get("tool_calls")
    call_json = len(json.dumps(calls, separators=(",", ":"))) if calls else 0
    return math.ceil(len(message.get("content") or "") / 4) + math.ceil(call_json / 4)


def test_worked_example_transcript_matches_the_article_breakdown() -> None:
    """The example's parts add up to the article's figures (all numbers are C1 estimates)."""
    msgs = worked_example()
    tokens = [c1_ascii(m) for m in msgs]
    assert len(msgs) == 35 and sum(tokens) == 71_872                    # "~72,000"
    assert tokens[0] + tokens[1] == 10_000                              # system messages
    assert sum(tokens[31:]) == 6_961                                    # recent safe tail "~7,000"
    assert sum(tokens[k] for k in (4, 8, 12, 16)) == 20_000             # replaceable old tool output
    assert sum(tokens[2:31]) - 20_000 == 34_911                         # earlier process "~35,000"
    assert WORKED_EXAMPLE_POLICY == {"context_window_tokens": 64_000, "threshold_ratio": 0.8,
                                     "keep_recent_tokens": 8_000}


def test_worked_example_reaches_the_summary_stage_and_the_whole_view_is_pinned() -> None:
    """C2 -> C3 -> C5 (not enough) -> C6: the pinned view."""
    msgs = worked_example()
    policy = ContextPolicy(**WORKED_EXAMPLE_POLICY)
    view = build_and_check(msgs, policy)
    micro = build_and_check(msgs, ContextPolicy(65_000, 0.8, 8_000))  # what the four placeholders leave (C5)
    placeholders = [m["content"] for m in micro.messages if m["content"].startswith("[old tool output")]
    assert [p[-4:] for p in placeholders] == [" #4]", " #8]", "#12]", "#16]"]  # C13: 56-57 chars, 14-15 tokens
    assert view.before_tokens - 4 * 5_000 + sum(math.ceil(len(p) / 4) for p in placeholders) == 51_930 > \
        policy.threshold
    assert (view.stage, view.before_tokens, view.after_tokens, view.threshold, view.window) == \
        ("summary", 71_872, 17_241, 51_200, 64_000)
    assert (view.tail_start, view.over_threshold, view.repaired, view.error, view.counter) == \
        (31, False, False, None, "estimate")
    assert view.summary == SUMMARY and len(SUMMARY) == 1_120
    assert view.after_tokens == 5_000 + 5_000 + math.ceil(1_120 / 4) + 963 + 32 + 4_000 + 1_966
    sent = [(m["role"], str(m["content"])[:24], len(m["content"]), m.get("tool_call_id"),
             [c["id"] for c in m.get("tool_calls", [])]) for m in view.messages]
    assert sent == [
        ("system", "[system prompt] mxclaw_n", 19_999, None, []),
        ("system", "[project instructions] A", 19_999, None, []),
        ("system", "[compressed conversation", 1_120, None, []),
        ("user", "Now run the full verific", 3_850, None, []),
        ("assistant", "Running verification.", 21, None, ["bash-3"]),
        ("tool", "r" * 24, 16_000, "bash-3", []),
        ("assistant", "Verification passed on N", 7_862, None, []),
    ]
    assert view.messages[2]["content"] == SUMMARY
    assert view.messages[3:] == [{k: v for k, v in m.items()} for m in msgs[31:]]
    before = [(r.position, r.action, r.tokens_before, r.tokens_after) for r in view.provenance.before]
    assert before == [(0, "kept", 5_000, 5_000), (1, "kept", 5_000, 5_000)] + [
        (k, "summarized", c1_ascii(msgs[k]), 0) for k in range(2, 31)] + [
        (31, "kept", 963, 963), (32, "kept", 32, 32), (33, "kept", 4_000, 4_000), (34, "kept", 1_966, 1_966)]
    after = [(r.position, r.source, r.action, r.tokens) for r in view.provenance.after]
    assert after == [(0, 0, "kept", 5_000), (1, 1, "kept", 5_000), (2, None, "summary", 280),
                     (3, 31, "kept", 963), (4, 32, "kept", 32), (5, 33, "kept", 4_000), (6, 34, "kept", 1_966)]
    failures = [r.position for r in view.provenance.before if r.failure]
    assert failures == [19, 29]
    assert view.event() == {"stage": "summary", "before_tokens": 71_872, "after_tokens": 17_241,
                            "tokens_are": "estimates", "threshold": 51_200, "summary": SUMMARY}


def test_worked_example_with_a_bigger_window_stops_at_microcompaction() -> None:
    """The article's other branch: if placeholders suffice (threshold >= 51,930), no summary is made."""
    view = build_and_check(worked_example(), ContextPolicy(65_000, 0.8, 8_000))  # threshold 52,000
    assert view.stage == "micro" and view.after_tokens == 51_930 and len(view.messages) == 35
    assert view.summary == ("[microcompaction] replaced 4 old tool output(s) (80,000 characters) with "
                            "placeholders; 71,872 -> 51,930 est. tokens")


def test_worked_example_compactor_failure_falls_back() -> None:
    """C8 on the example: 2 systems + note + last 6 conversation messages (starting on a call, not a result)."""
    def boom(old: list[dict]) -> str:
        raise ValueError("no")

    view = build_request_view(worked_example(), ContextPolicy(**WORKED_EXAMPLE_POLICY), summarize=boom)
    assert view.stage == "fallback" and view.error == "ValueError: no"
    # last six conversation messages start at 29, a tool result: the window moves back to its call (28)
    assert view.sources == [0, 1, None, 28, 29, 30, 31, 32, 33, 34]
    assert view.messages[2]["content"].startswith("[fallback context window]")
    assert view.after_tokens == sum(c1_ascii(m) for m in view.messages)
