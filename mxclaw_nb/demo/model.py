"""The offline demo model: a small scripted coding agent for the sample workspace, served over HTTP.

Why: users without an API key should still see the whole agent run (tool calls, a large output that
becomes an artifact, a failing test, an edit, compaction after a few turns) through the same openai
client code path as a real model. The model is *stateless*: each reply is decided from the request's
messages only (the user's goal, and which tool calls of the current turn already have results), so it
keeps working after microcompaction, a structured summary or the fallback window has trimmed the view:
the next step is always "the step after the most recent one still visible". Every text says
"[demo model]"; a turn never takes more than MAX_TOOL_CALLS calls; an unexpected tool failure ends the
turn with an answer that says what failed. The sample workspace ships in ``demo/workspace/``.
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from mxclaw_nb.demo import answers as answers
from mxclaw_nb.demo import plans as plans
from mxclaw_nb.demo import summaries as summaries
from mxclaw_nb.demo.usage import message_text
from mxclaw_nb.settings import DEMO_MODEL  # one owner: the settings table

__all__ = ["DEMO_MODEL", "DEMO_WORKSPACE", "MAX_TOOL_CALLS", "Reply", "ToolCall", "copy_demo_workspace",
           "next_reply"]


DEMO_WORKSPACE = Path(__file__).resolve().parent / "workspace"
MAX_TOOL_CALLS = 10
PREFIX = "[demo model]"


@dataclass
class ToolCall:
    """One tool call of a reply; `arguments` is the raw JSON string sent to the client."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def as_dict(self) -> dict:
        """OpenAI wire shape."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Reply:
    """One assistant reply as the server will send it."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: tuple[int, int] | None = None
    reasoning: str | None = None
    finish_reason: str = "stop"


@dataclass
class Done:
    """A tool call of the current turn that is visible in the request, with its result if any."""

    name: str
    args: dict
    result: str | None

    @property
    def failed(self) -> bool:
        """True when the result carries one of the SPEC's failure markers."""
        return bool(self.result) and plans.is_failure(self.result or "")

    @property
    def denied_by_user(self) -> bool:
        """True when the person asked to approve this shell command said no (the turn goes on without it)."""
        return self.name == "bash" and (self.result or "").startswith(plans.USER_DENIED)


def _turn(messages: list[dict]) -> tuple[str, list[Done], int]:
    """(goal, tool calls since the last user message, number of user messages) from a request."""
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    goal = message_text(messages[last_user].get("content")) if last_user is not None else ""
    if last_user is None:  # the user's message was summarized away: read the goal from the summary
        for m in messages:
            text = message_text(m.get("content"))
            if m.get("role") == "system" and text.startswith("[compressed conversation context]"):
                goals = re.search(r"Goals:\n((?:- .*\n?)+)", text)
                if goals:
                    goal = goals.group(1).strip().splitlines()[-1][2:]
    start = 0 if last_user is None else last_user + 1
    results = {m.get("tool_call_id"): message_text(m.get("content")) for m in messages[start:]
               if m.get("role") == "tool"}
    done: list[Done] = []
    for m in messages[start:]:
        for tc in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = tc.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            done.append(Done(fn.get("name") or "", args if isinstance(args, dict) else {}, results.get(tc.get("id"))))
    users = sum(1 for m in messages if m.get("role") == "user")
    return goal, done, users


def _position(plan: list[plans.Step], done: list[Done]) -> int:
    """Index of the next step: one past the last plan step matched by a visible call, in order."""
    pointer = 0
    for call in done:
        for i in range(pointer, len(plan)):
            if plan[i].matches(call.name, call.args):
                pointer = i + 1
                break
    return pointer


def first_sentence(text: str) -> str:
    """The text up to the first sentence end: a `.`, `!` or `?` followed by white space or the end.

    A period inside a word (`.mx-claw/`, `stock.py`, `4.50`) does not end a sentence."""
    match = re.search(r"[.!?](?=\s|$)", text)
    return text[: match.end()] if match else text


def next_reply(messages: list[dict], tools: list[dict] | None = None) -> Reply:
    """The demo model's reply to a Chat Completions request (decided from its messages, and from its `tools`
    only to know whether the kernel's `python` tool is offered: the data task, K1)."""
    kernel = "python" in plans.tool_names(tools)
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    question = message_text(last.get("content")) if last is not None else ""
    if not tools and summaries.is_summary_request(question):  # C11: the engine's summary request
        return Reply(text=summaries.write_summary(question))
    if not any(m.get("role") == "user" for m in messages) and not any(m.get("role") == "tool" for m in messages):
        return Reply(text=f"{PREFIX} Hello! " + plans.capabilities("", kernel))
    goal, done, _users = _turn(messages)
    chosen = plans.choose(goal, done, kernel)
    if chosen is None:  # no script fits this prompt: say so instead of running an unrelated one
        return Reply(text=f"{PREFIX} " + plans.capabilities(goal, kernel))
    name, plan = chosen
    ctx = plans.Ctx(goal=goal, done=done, messages=messages)
    failure = next((d for d in done if d.failed and not d.denied_by_user and not plans.expected_failure(d)), None)
    if failure is not None:
        return Reply(text=f"{PREFIX} " + answers.failure_answer(failure, ctx))
    if len(done) >= MAX_TOOL_CALLS:
        return Reply(text=f"{PREFIX} I have made {len(done)} tool calls in this turn, which is my limit. "
                          + answers.final_answer(name, ctx))
    for step in plan[_position(plan, done):]:
        call = step.build(ctx)
        if call is not None:
            args = json.dumps(call, ensure_ascii=False)
            intro = "" if done else f"Plan ({name}, {len(plan)} steps): " + " ".join(
                f"{i}) {first_sentence(s.say).lower()}" for i, s in enumerate(plan, 1)) + "\n"
            return Reply(text=f"{PREFIX} {intro}{step.said(ctx)}", tool_calls=[ToolCall(step.tool, args)],
                         finish_reason="tool_calls")
    return Reply(text=f"{PREFIX} " + answers.final_answer(name, ctx))


def _ignore(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n in ("__pycache__", "logs", ".DS_Store") or n.endswith(".pyc")]


def copy_demo_workspace(dest: str | Path) -> Path:
    """Copy the shipped sample workspace to `dest` (must not exist or be empty); returns the path."""
    target = Path(dest).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"cannot copy the demo workspace to {target}: it exists and is not an empty folder")
    shutil.copytree(DEMO_WORKSPACE, target, ignore=_ignore, dirs_exist_ok=True)
    for path in [target, *target.rglob("*")]:  # installed package files may be read-only
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target.resolve()

