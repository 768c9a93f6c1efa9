"""The harness's own compactions (Claude Code compact_boundary, Codex compacted) imported as stored events and
compared with replayed policies at the same points (SPEC S4, S2, C1, C10). Real DuckDB file, no mocks.

Fixtures (hand-made, in the real record shapes; see mxclaw_nb/analysis/agent_logs.py for the sources):
tests/fixtures/claude_code_compacted.jsonl (2 boundaries: auto, manual) and codex_compacted_rollout.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from mxclaw_nb.analysis import (
    compare,
    compare_harness,
    import_claude_code,
    import_codex,
    parse_claude_code,
    parse_codex,
    summarize_harness,
)
from mxclaw_nb.analysis.compare import HARNESS
from mxclaw_nb.store.writer import Store

FIXTURES = Path(__file__).parent / "fixtures"
CLAUDE = FIXTURES / "claude_code_compacted.jsonl"
CODEX = FIXTURES / "codex_compacted_rollout.jsonl"
POLICIES = [{"window": 1000, "ratio": 0.8, "keep_recent": 300, "name": "tight"},
            {"window": 1600, "ratio": 0.8, "keep_recent": 500, "name": "roomy"}]


@pytest.fixture()
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "harness.duckdb")
    yield s
    s.close()


def _payloads(store: Store, sid: str) -> list[dict]:
    events = store.events(sid, type="harness.compaction")
    return [json.loads(p) for p in events["payload"]]


def test_claude_code_compactions_are_stored_events_and_the_transcript_stays_complete(store: Store) -> None:
    """Both compact_boundary records become harness.compaction events with trigger, summary, the harness's
    reported preTokens and the seq where they happened; the summaries are not transcript messages (S2)."""
    report = import_claude_code(store, CLAUDE, progress=False)
    assert report.ok and len(report.sessions) == 1 and report.messages == 26
    sid = report.sessions[0]
    transcript = store.load_transcript(sid)
    assert transcript == parse_claude_code(CLAUDE)[0].messages and len(transcript) == 26
    assert not any("being continued from a previous conversation" in str(m.get("content")) for m in transcript)
    events = store.events(sid, type="harness.compaction")
    assert list(events["turn"]) == [1, 2]
    first, second = _payloads(store, sid)
    assert (first["harness"], first["trigger"], first["seq"], first["line"]) == ("claude-code", "auto", 9, 13)
    assert (second["trigger"], second["seq"], second["line"]) == ("manual", 20, 27)
    assert first["reported_tokens"] == {"pre_tokens": 24817} and second["reported_tokens"] == {"pre_tokens": 31204}
    assert "reported by the harness" in first["tokens_note"]
    assert first["summary"].startswith("This session is being continued") and first["summary_chars"] == 1202
    assert second["summary_chars"] == 885 and first["kept"] == [] and first["kept_seqs"] == []
    # seq is a transcript position: the boundary fell between the Read of tax.py and the Edit that followed
    assert transcript[8]["role"] == "tool" and "def apply_tax" in transcript[8]["content"]
    assert transcript[9]["content"].startswith("Rounding per line adds a cent")
    assert transcript[20] == {"role": "user", "content": "Yes, restore it from 9be1d07^ and rerun everything."}
    again = import_claude_code(store, CLAUDE, progress=False)  # same content: nothing new, no duplicate events
    assert again.sessions == [] and len(store.events(sid, type="harness.compaction")) == 2


# (point, policy) -> before, after, saved, stage, facts visible (of 18 at point 1, 38 at point 2), sent messages
EXPECTED = {
    (1, "harness"): (883, 301, 582, "harness", 6, 1),
    (1, "tight"): (883, 649, 234, "micro", 18, 9),  # C13: placeholders name their seq
    (1, "roomy"): (883, 883, 0, "unchanged", 18, 9),
    (2, "harness"): (992, 235, 1352, "harness", 7, 2),
    (2, "tight"): (1587, 418, 1169, "summary", 13, 5),  # C13: the summary names its range
    (2, "roomy"): (1587, 1168, 419, "micro", 37, 21),
}


def test_compare_harness_pins_the_claude_code_fixture(store: Store) -> None:
    """At each harness compaction, the harness row (its summary and what it kept, est. C1) sits beside the two
    replayed policies at the same model call, with one fact denominator per point."""
    sid = import_claude_code(store, CLAUDE, progress=False).sessions[0]
    df = compare_harness([sid], POLICIES, store=store)
    assert list(df["policy"].cat.categories) == [HARNESS, "tight", "roomy"]
    assert list(zip(df["point"], df["policy"], strict=True)) == list(EXPECTED)
    got = {(p, str(pol)): (b, a, s, st, int(v), n) for p, pol, b, a, s, st, v, n in zip(
        df["point"], df["policy"], df["before_tokens"], df["after_tokens"], df["saved_tokens"], df["stage"],
        df["facts_visible"], df["n_sent"], strict=True)}
    assert got == EXPECTED
    assert list(df["facts_total"]) == [18.0] * 3 + [38.0] * 3
    assert list(df["full_tokens"]) == [883] * 3 + [1587] * 3
    assert list(df["call"]) == [5] * 3 + [11] * 3 and list(df["seq"]) == [9] * 3 + [20] * 3
    assert list(df["trigger"]) == ["auto"] * 3 + ["manual"] * 3
    assert set(df["tokens_basis"]) == {"est. (C1)"} and "reported by the harness" in df.attrs["labels"][
        "reported_pre_tokens"]
    harness = df[df["policy"] == HARNESS]
    assert list(harness["reported_pre_tokens"]) == [24817, 31204]  # the harness's figure, never an estimate
    assert harness["reported_post_tokens"].isna().all()
    assert df.loc[df["policy"] != HARNESS, "reported_pre_tokens"].isna().all()
    assert list(harness["fact_survival"].round(4)) == [0.3333, 0.1842]
    assert list(harness["survival_error"]) == [0.0, 0.0] and list(harness["survival_path"].round(4)) == [0.6, 0.2857]
    assert list(harness["summary_chars"]) == [1202, 885]
    # the policy rows are the replay's own rows at that call (same views as compare)
    full = compare([sid], POLICIES, store=store, progress=False)
    for (point, label), (before, after, _, stage, _, sent) in EXPECTED.items():
        if label == HARNESS:
            continue
        row = full[(full["policy"] == label) & (full["call"] == (5 if point == 1 else 11))].iloc[0]
        assert (row["before_tokens"], row["after_tokens"], row["stage"], row["n_sent"]) == (before, after, stage, sent)
    # parsing the file gives the same table (no store needed), and a Store works as the source too
    parsed = compare_harness(parse_claude_code(CLAUDE)[0], POLICIES)
    pd.testing.assert_frame_equal(parsed.drop(columns="session_id"), df.drop(columns="session_id"))
    assert len(compare_harness(store, POLICIES)) == 6
    summary = summarize_harness(df).set_index("policy")
    assert list(summary.index) == [HARNESS, "tight", "roomy"] and set(summary["points"]) == {2}
    assert summary.loc[HARNESS, "fact_survival"] == pytest.approx(13 / 56)
    assert summary.loc["tight", "fact_survival"] == pytest.approx(31 / 56)
    assert summary.loc["roomy", "saved_share"] == pytest.approx(419 / 2470)  # 0 + 419 saved (C13 texts)


def test_codex_compacted_records_import_with_their_replacement_history(store: Store, tmp_path: Path) -> None:
    """Codex: the compacted message is the summary, replacement_history is what the harness kept, the last
    token_count before it is the harness's reported figure; without a replacement history the kept user
    messages are rebuilt as Codex does."""
    report = import_codex(store, CODEX, progress=False)
    sid = report.sessions[0]
    (event,) = _payloads(store, sid)
    assert (event["harness"], event["seq"], event["turn"], event["trigger"]) == ("codex", 6, 2, None)
    assert event["reported_tokens"] == {"pre_tokens": 10544, "context_window": 272000}
    assert event["summary"].startswith("Another language model started") and "fetch_rates.py" in event["summary"]
    assert event["kept_source"] == "replacement_history" and event["window_number"] == 2
    assert [m["content"][:21] for m in event["kept"]] == ["<environment_context>", "scripts/fetch_rates.p"]
    assert len(store.load_transcript(sid)) == 11
    df = compare_harness([sid], POLICIES[:1], store=store)
    harness = df[df["policy"] == HARNESS].iloc[0]
    assert (harness["before_tokens"], harness["after_tokens"], harness["n_sent"]) == (400, 249, 3)
    assert (harness["facts_total"], harness["facts_visible"]) == (11.0, 4.0)
    legacy = tmp_path / "rollout-legacy.jsonl"  # an older CLI: no replacement_history
    lines = [json.loads(x) for x in CODEX.read_text(encoding="utf-8").splitlines()]
    for rec in lines:
        if rec["type"] == "compacted":
            del rec["payload"]["replacement_history"]
    legacy.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    conv, errors = parse_codex(legacy)
    assert conv is not None and not errors
    (_, old), = conv.events
    assert old["kept_source"].startswith("rebuilt") and [m["content"][:21] for m in old["kept"]] == [
        "scripts/fetch_rates.p"]  # environment context is not a user message Codex keeps


def test_sidechain_and_abandoned_boundaries_are_not_this_sessions_compactions(tmp_path: Path) -> None:
    """A compact_boundary of a sub-agent thread (isSidechain) is another conversation's compaction."""
    lines = CLAUDE.read_text(encoding="utf-8").splitlines()
    side = {"type": "system", "subtype": "compact_boundary", "uuid": "side-b", "parentUuid": None,
            "isSidechain": True, "compactMetadata": {"trigger": "auto", "preTokens": 9000}}
    path = tmp_path / "with-sidechain.jsonl"
    path.write_text("\n".join([*lines[:20], json.dumps(side), *lines[20:]]) + "\n", encoding="utf-8")
    conv, errors = parse_claude_code(path)
    assert conv is not None and not errors
    assert [p["seq"] for _, p in conv.events] == [9, 20] and conv.messages == parse_claude_code(CLAUDE)[0].messages
