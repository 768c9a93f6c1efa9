"""SPEC C6: the deterministic structured summary, its exact format and limits, and the summary path."""

from __future__ import annotations

import json

from mxclaw_nb.context import ContextPolicy, build_request_view, build_structured_summary

from .oracle import build_and_check

EMPTY = """[compressed conversation context]
Older transcript messages were summarized.
Goals:
- None recorded
Files and tools touched:
- None recorded
Failures to avoid:
- None recorded
Last useful assistant state:
- None recorded"""


def user(text: object) -> dict:
    return {"role": "user", "content": text}


def asst(text: object, *calls: tuple[str, str, object]) -> dict:
    msg: dict = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = [{"id": cid, "type": "function", "function": {
            "name": name, "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}}
            for cid, name, args in calls]
    return msg


def tool(cid: str, text: object, **extra: object) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text, **extra}


def test_c6_empty_sections_say_none_recorded() -> None:
    """C6: every section is present; an empty one holds `- None recorded`."""
    assert build_structured_summary([]) == EMPTY
    assert build_structured_summary([{"role": "system", "content": "not summarized"}]) == EMPTY


def test_c6_article_example_exact_text() -> None:
    """C6: the article's example, byte for byte (CJK goal and state kept as written)."""
    old = [
        user("修复 CI 中的 SQLite FTS 测试"),
        asst("先看看存储层。", ("e1", "edit_file", {"path": "packages/storage/src/sqlite.ts", "old": "a", "new": "b"})),
        tool("e1", "ok"),
        asst(None, ("b1", "bash", {"command": "npm test"})),
        tool("b1", "Tool failed: no such module: fts5", is_error=True),
        asst("FTS 兼容索引已经实现，正在验证 Node 22。"),
    ]
    assert build_structured_summary(old) == """[compressed conversation context]
Older transcript messages were summarized.
Goals:
- 修复 CI 中的 SQLite FTS 测试
Files and tools touched:
- packages/storage/src/sqlite.ts
Failures to avoid:
- Tool failed: no such module: fts5
Last useful assistant state:
- FTS 兼容索引已经实现，正在验证 Node 22。"""


def section(text: str, title: str) -> list[str]:
    lines = text.split("\n")
    start = lines.index(title) + 1
    out = []
    for line in lines[start:]:
        if not line.startswith("- "):
            break
        out.append(line[2:])
    return out


def test_c6_goals_four_most_recent_oldest_first_each_at_most_240() -> None:
    """C6: up to 4 most recent user goals, oldest first, each <= 240 characters."""
    old = [user(f"goal {k}") for k in range(6)] + [user("长" * 300), user("x " * 200)]
    goals = section(build_structured_summary(old), "Goals:")
    assert goals[:2] == ["goal 4", "goal 5"]
    assert len(goals) == 4 and all(len(g) <= 240 for g in goals)
    assert goals[2].startswith("长" * 200)


def test_c6_goals_ignore_empty_and_image_only_user_messages() -> None:
    """C6: a user message without text (None, image only) is not a goal."""
    img = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    goals = section(build_structured_summary([user("real goal"), user(None), user(img)]), "Goals:")
    assert goals == ["real goal"]


def test_c6_paths_of_file_writing_calls_first_seen_order_deduplicated() -> None:
    """C6: path argument of each file-writing call, first-seen order, deduplicated; reads are not listed."""
    old = [
        asst(None, ("1", "write_file", {"path": "b.py", "content": "x"}), ("2", "read_file", {"path": "r.py"})),
        asst(None, ("3", "edit_file", {"path": "a.py"}), ("4", "edit_file", {"path": "b.py"})),
        asst(None, ("5", "edit_file", "{not json"), ("6", "edit_file", {"path": "目录/文件.py"})),
        asst(None, ("7", "edit_file", {"path": "a.py"})),
    ]
    assert section(build_structured_summary(old), "Files and tools touched:") == ["b.py", "a.py", "目录/文件.py"]


def test_c6_failures_four_most_recent_each_at_most_240() -> None:
    """C6: up to 4 most recent failures (flagged, denials, forbidden), each <= 240 characters."""
    old = [tool(f"t{k}", f"Tool failed: error {k}") for k in range(5)]
    old += [tool("ok", "all good"), tool("p", "Permission denied: " + "p" * 400),
            tool("f", "exit 1", is_error=True)]
    failures = section(build_structured_summary(old), "Failures to avoid:")
    assert len(failures) == 4 and all(len(f) <= 240 for f in failures)
    assert failures[0] == "Tool failed: error 3" and failures[1] == "Tool failed: error 4"
    assert failures[2].startswith("Permission denied: ppp") and failures[3] == "exit 1"
    assert "all good" not in build_structured_summary(old)


def test_c6_failure_marker_deep_in_a_long_output_survives_the_cut() -> None:
    """C6: the failure evidence line is what is kept, not 240 characters of unrelated log before it."""
    text = "\n".join(f"log line {k}" for k in range(200)) + "\nFORBIDDEN: rm -rf / is blocked"
    failures = section(build_structured_summary([tool("x", text)]), "Failures to avoid:")
    assert failures and "FORBIDDEN: rm -rf / is blocked" in failures[0]


def test_c6_last_useful_assistant_state_is_last_non_empty_text_at_most_500() -> None:
    """C6: the last non-empty assistant text, <= 500 characters; a call with no text does not count."""
    old = [asst("first state"), asst("state " * 200), asst(None, ("c", "bash", {})), asst("   ")]
    state = section(build_structured_summary(old), "Last useful assistant state:")
    assert len(state) == 1 and state[0].startswith("state state") and len(state[0]) <= 500


def test_c6_bad_input_does_not_crash_the_summary() -> None:
    """Bad input: None content, non-string parts, invalid JSON arguments, odd tool_calls shapes."""
    old = [user([1, None, {"type": "text", "text": 5}]), asst(None, ("x", "edit_file", "[1, 2]")),
           {"role": "assistant", "content": "odd", "tool_calls": 5},
           {"role": "assistant", "content": "odd2", "tool_calls": {"id": "d", "function": {
               "name": "edit_file", "arguments": '{"path": "dict.py"}'}}},
           tool("x", None), {"role": "tool"}, "not a dict"]
    text = build_structured_summary(old)
    assert text.startswith("[compressed conversation context]\n") and "Last useful assistant state:\n- odd2" in text
    assert "Files and tools touched:\n- dict.py\n" in text  # a lone call dict is a call, as sanitize sends it
    view = build_request_view(old, ContextPolicy(1_000, 0.8, 10))
    assert sorted(r.position for r in view.provenance.before if not r.synthetic) == list(range(len(old)))


def test_c6_summary_is_byte_identical_for_the_same_input() -> None:
    """C6: same input -> byte-identical text."""
    old = [user("目标"), asst("状态", ("e", "edit_file", {"path": "p.py"})), tool("e", "Invalid edit")]
    assert build_structured_summary(old).encode() == build_structured_summary(json.loads(json.dumps(old))).encode()


def big_session(n_systems: int = 4) -> list[dict]:
    systems = [{"role": "system", "content": f"[{name}] " + "s" * 2_000} for name in
               ("system prompt", "project instructions", "skill index", "memory snapshot")[:n_systems]]
    msgs = list(systems)
    for k in range(6):
        msgs += [user(f"goal {k}"), asst("thinking " * 400, ("r" + str(k), "read_file", {"path": f"f{k}"})),
                 tool("r" + str(k), "x" * 2_000)]
    msgs += [user("latest"), asst("done")]
    return msgs


def test_c6_summary_path_keeps_every_system_message_then_summary_then_tail() -> None:
    """C6: final view = original system messages + summary system message + safe tail."""
    msgs = big_session()
    view = build_and_check(msgs, ContextPolicy(8_000, 0.8, 100))
    assert view.stage == "summary"
    assert view.messages[:4] == [{"role": "system", "content": m["content"]} for m in msgs[:4]]
    assert view.messages[4] == {"role": "system", "content": view.summary}
    assert view.summary.startswith("[compressed conversation context]")
    assert view.messages[5:] == [user("latest"), asst("done")]
    assert view.event()["summary"] == view.summary and view.event()["stage"] == "summary"


def test_c6_summarize_is_pluggable_and_receives_exactly_the_old_messages() -> None:
    """C6: a user-supplied summariser gets the messages before the tail (no systems) and its text is sent."""
    msgs = big_session()
    seen: list[list[dict]] = []

    def mine(old: list[dict]) -> str:
        seen.append(old)
        return "my summary 我的摘要"

    view = build_and_check(msgs, ContextPolicy(8_000, 0.8, 100), summarize=mine)
    text = "my summary 我的摘要\nRecall: #4-#21 are in the transcript (the recall tool reads them)."  # C13: its range
    assert view.stage == "summary" and view.summary == text
    assert {"role": "system", "content": text} in view.messages
    assert seen[0] == msgs[4:-2]


def test_c6_summarized_messages_are_marked_in_provenance() -> None:
    """DESIGN provenance: old messages are `summarized`, the summary row is `summary`, tail rows `kept`."""
    view = build_request_view(big_session(), ContextPolicy(8_000, 0.8, 100))
    actions = [r.action for r in view.provenance.before]
    assert actions == ["kept"] * 4 + ["summarized"] * 18 + ["kept"] * 2
    assert [r.action for r in view.provenance.after] == ["kept"] * 4 + ["summary"] + ["kept"] * 2


def _session(k: int) -> list[dict]:
    """An agent session with file writes, failures (flagged and by marker) and notes, k blocks long."""
    msgs: list[dict] = []
    for j in range(k):
        msgs.append(user(f"goal {j}: fix module {j % 5}"))
        msgs.append(asst(f"editing {j}", (f"c{j}", "edit_file" if j % 3 else "bash", {"path": f"src/m{j % 7}.py"})))
        failed = j % 4 == 0
        msgs.append({"role": "tool", "tool_call_id": f"c{j}", "content": f"Tool failed: step {j}" if failed
                     else f"ok {j}", **({"is_error": True} if j % 9 == 0 else {})})
        msgs.append(asst(f"state after {j}"))
    return msgs


def test_c6_incremental_summary_state_gives_the_same_text_as_one_shot() -> None:
    """C6: the per-session summary state (scanning only what was added) writes exactly the one-shot text,
    for every length of a growing list of old messages, and starts again when the list did not just grow."""
    from mxclaw_nb.context.summary import StructuredSummaryState

    msgs = _session(40)
    state = StructuredSummaryState()
    for n in range(0, len(msgs) + 1, 3):
        assert state.summary(msgs[:n]) == build_structured_summary(msgs[:n])
    shorter = msgs[:50]
    assert state.summary(shorter) == build_structured_summary(shorter)
    edited = [*msgs[:20], {**msgs[20], "content": "Permission denied: replaced"}, *msgs[21:]]
    assert state.summary(edited) == build_structured_summary(edited)
    assert msgs[-2]["role"] == "tool"
    msgs[-2]["content"] = "Forbidden command, edited in place"  # same dict, new content object
    assert state.summary(msgs) == build_structured_summary(msgs)
    assert "Forbidden command, edited in place" in state.summary(msgs)


def test_c6_pipeline_summary_with_a_cache_matches_a_cold_build_as_the_session_grows() -> None:
    """C6/C7 with a kept TokenCache: the summary text of every rebuild equals the cold build's, including
    after an error flag is set in place on an old result (the state notices and rescans)."""
    from mxclaw_nb.context import TokenCache

    msgs = _session(60)
    policy = ContextPolicy(1_000, 0.8, 150)
    cache = TokenCache()
    grown: list[dict] = []
    for m in msgs:
        grown.append(m)
        warm = build_request_view(grown, policy, cache=cache)
        assert warm.summary == build_request_view(grown, policy).summary
    assert warm.stage == "summary" and cache.summary is not None
    last_old_ok = max(r.position for r in warm.provenance.before if r.action == "summarized" and r.role == "tool"
                      and not r.failure)
    grown[last_old_ok]["is_error"] = True  # the newest old successful result re-flagged as a failure, in place
    grown.append(user("next"))
    again = build_request_view(grown, policy, cache=cache)
    assert again.summary == build_request_view(grown, policy).summary
    assert f"ok {last_old_ok // 4}" in again.summary.split("Failures to avoid:")[1]
