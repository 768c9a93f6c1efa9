"""A resumed session in OpenAI's legacy function-calling shape, live (SPEC C4, C1, N2, N3, S2, S4).

An imported chat export may hold `function_call` on assistant messages and role `function` results (OpenAI's shape
before `tools`). Replay, compare and the policy lab read them as the `tool_calls` / `tool` messages they stand for
(`messages.modernize_legacy_calls`); the live path must too: resumed, the session's next request sends the function
results after their calls, and `%agent view` shows them kept, not dropped. The stored transcript stays as imported
(S2). Real parts: the importer, a DuckDB file, `%agent` in a real IPython shell, the real `openai` client over HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

from mxclaw_nb.analysis import import_openai_jsonl
from mxclaw_nb.demo.server import TestServer
from tests.test_importers import _legacy_conversation
from tests.test_magics import agent, env, ip, magics, server  # noqa: F401 - fixtures

BIG = "def f():\n    return 1\n" * 400


def _import(shell: InteractiveShell, tmp_path: Path) -> str:
    path = tmp_path / "legacy.jsonl"
    path.write_text(json.dumps({"messages": _legacy_conversation()}) + "\n", encoding="utf-8")
    return import_openai_jsonl(magics(shell).store(), path, progress=False).sessions[0]


def test_a_resumed_legacy_session_sends_and_shows_its_function_results(ip: InteractiveShell,  # noqa: F811
                                                                         server: TestServer,  # noqa: F811
                                                                         tmp_path: Path) -> None:
    """C4, N3: the two function results go out as tool messages right after their calls (ids paired), count in the
    estimate, and the inspector of the call shows them `kept`; before, C4 dropped both ("unknown role") and the model
    answered about files it never saw."""
    sid = _import(ip, tmp_path)
    agent(ip, f"resume {sid}")
    server.enqueue_text("Both files define f().")
    agent(ip, "what do a.py and b.py define?")
    sent = server.requests[-1]["messages"]
    calls = [m for m in sent if m.get("tool_calls")]
    results = [m for m in sent if m["role"] == "tool"]
    assert len(calls) == 2 and len(results) == 2, [m["role"] for m in sent]
    for call, result in zip(calls, results, strict=True):
        assert sent[sent.index(call) + 1] is result and result["tool_call_id"] == call["tool_calls"][0]["id"]
        assert result["content"] == BIG
        assert json.loads(call["tool_calls"][0]["function"]["arguments"])["path"] in ("a.py", "b.py")
    assert not any(m["role"] == "function" or "function_call" in m for m in sent)
    before, _ = agent(ip, "view --before")
    legacy_rows = before[before["position"].isin([2, 3, 4, 5])]
    assert list(legacy_rows["action"]) == ["kept"] * 4, before[["position", "role", "action"]]
    assert list(legacy_rows["role"]) == ["assistant", "tool"] * 2  # as the engine read them
    after, _ = agent(ip, "view --after")
    assert list(after["role"]).count("tool") == 2
    stored = magics(ip).store().load_transcript(sid)
    assert stored[: len(_legacy_conversation())] == _legacy_conversation()  # S2: as imported
    record = magics(ip).store().requests(sid, last=1).iloc[-1]
    assert int(record["estimate_tokens"]) > 2 * len(BIG) // 4  # C1: both results count


def test_dry_run_and_compact_read_the_legacy_session_alike(ip: InteractiveShell, server: TestServer,  # noqa: F811
                                                           tmp_path: Path) -> None:
    """N1: the next request view (dry-run) and `%agent compact` see the function results as tool results too (the
    micro stage has two old results to compact)."""
    sid = _import(ip, tmp_path)
    agent(ip, f"resume {sid}")
    agent(ip, "config keep_recent_tokens=1000")
    view = magics(ip).get_agent().dry_run("next")
    assert [m["role"] for m in view.messages].count("tool") == 2
    compacted = magics(ip).get_agent().compact_now()
    assert compacted.stage in ("micro", "summary") and compacted.after_tokens < compacted.before_tokens
