"""Small, deterministic transcripts for teaching, tests and benchmarks (pure data, no I/O).

`worked_example()` rebuilds the article's example: a 64k window at ratio 0.8 (threshold 51,200) and
an 8k safe tail, over a ~72k-token transcript made of 10k of system messages, ~20k of old successful
tool output that microcompaction can replace, ~35k of earlier process and a ~7k recent tail. The
numbers are chosen so that placeholders alone are not enough and the structured summary is reached,
as the article describes. `synthetic_transcript(n)` makes long agent-like sessions for benchmarks.
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]

WORKED_EXAMPLE_POLICY = {"context_window_tokens": 64_000, "threshold_ratio": 0.8, "keep_recent_tokens": 8_000}


def _call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _assistant(text: str, *calls: dict[str, Any]) -> Message:
    msg: Message = {"role": "assistant", "content": text}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


def worked_example() -> list[Message]:
    """The article's 64k / 0.8 / 8k example as a concrete 42-message transcript (~72k est. tokens)."""
    msgs: list[Message] = [
        {"role": "system", "content": "[system prompt] mxclaw_nb coding agent. " + "S" * 19_959},
        {"role": "system", "content": "[project instructions] AGENTS.md\n" + "P" * 19_966},
    ]
    notes = "N" * 15_000  # ~3,750 est. tokens of earlier reasoning per step
    for k in range(4):  # old steps: a goal, a read whose 20,000-char output is replaceable, a note
        msgs.append({"role": "user", "content": f"Goal {k + 1}: make the SQLite FTS tests pass in CI (step {k + 1})."})
        msgs.append(_assistant(f"Reading module {k + 1}.", _call(f"read-{k}", "read_file", path=f"src/mod{k}.py")))
        msgs.append({"role": "tool", "tool_call_id": f"read-{k}", "content": "t" * 20_000})
        msgs.append(_assistant(f"Step {k + 1} notes: " + notes))
    msgs.append(_assistant("Running the tests.", _call("bash-1", "bash", command="pytest -q tests/test_fts.py")))
    msgs.append({"role": "tool", "tool_call_id": "bash-1", "is_error": True,
                 "content": "Tool failed: exit code 1\nE   sqlite3.OperationalError: no such module: fts5"})
    msgs.append(_assistant("Editing the storage module.", _call(
        "edit-1", "edit_file", path="packages/storage/src/sqlite.ts", old_string="fts5", new_string="fts4")))
    msgs.append({"role": "tool", "tool_call_id": "edit-1", "content": "ok: 1 replacement"})
    for k in range(3):  # more earlier process: long assistant analysis with small tool results
        msgs.append(_assistant("Analysis: " + "A" * 17_000, _call(f"grep-{k}", "grep", pattern="fts", path="src")))
        msgs.append({"role": "tool", "tool_call_id": f"grep-{k}", "content": f"src/mod{k}.py:12: fts"})
    msgs.append(_assistant("The FTS compatibility index is implemented; verifying on Node 22.",
                           _call("bash-2", "bash", command="rm -rf /")))
    msgs.append({"role": "tool", "tool_call_id": "bash-2", "is_error": True,
                 "content": "Forbidden: `rm -rf /` is on the forbidden-command list"})
    status = "Checked the FTS index build, the migration order and the Node 22 bindings. " * 355
    msgs.append(_assistant("Status: the fallback path compiles; remaining work is verification. " + status))
    # recent tail, ~7k est. tokens
    msgs.append({"role": "user", "content": "Now run the full verification and fix what fails. " + "u" * 3_800})
    msgs.append(_assistant("Running verification.", _call("bash-3", "bash", command="npm test")))
    msgs.append({"role": "tool", "tool_call_id": "bash-3", "content": "r" * 16_000})
    msgs.append(_assistant("Verification passed on Node 22; the FTS fallback is in place. " + "w" * 7_800))
    return msgs


def synthetic_transcript(n_messages: int, *, seed: int = 0) -> list[Message]:
    """A long agent-like transcript of about `n_messages` messages (deterministic for a seed)."""
    msgs: list[Message] = [{"role": "system", "content": "[system prompt] benchmark agent. " + "s" * 2_000}]
    k = seed
    while len(msgs) < n_messages:
        k += 1
        msgs.append({"role": "user", "content": f"Task {k}: inspect module {k % 97} and report. 修复测试 {k}"})
        msgs.append(_assistant(f"Looking at module {k % 97}.", _call(f"c{k}", "read_file", path=f"src/m{k % 97}.py")))
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"def f{k}(x):\n    return x * {k}\n" * 40})
        msgs.append(_assistant(f"Module {k % 97} multiplies by {k}; nothing to change."))
    return msgs[:n_messages]
