"""Message and file shapes that real OpenAI chat-format logs have (SPEC C4, L7, S2): a named corpus and
Hypothesis strategies built from it, for the end-to-end shape tests in ``tests/shapes/``.

Where the shapes come from (public code and issue threads, read through the search corpora, not copied):

- content parts: the OpenAI chat schema as mirrored by generated SDKs (``text``, ``image_url`` with
  ``detail``, ``input_audio`` ``{data, format}``, ``file`` ``{file_id|file_data, filename}``, assistant
  ``refusal`` parts); unknown part types appear in proxies that pass provider-specific parts through.
- ``content: null`` with ``tool_calls``, ``refusal: null``, ``audio: null``, ``function_call: null`` and
  ``annotations: []``: ``ChatCompletionMessage.model_dump()`` of the openai package, appended to history
  as is by many agents.
- legacy function calling: assistant ``function_call {name, arguments}`` and ``role: "function"`` results.
- ``role: "developer"`` (o1 and later), several system messages mid-conversation (injected reminders).
- tool-call arguments that are not JSON: truncated by ``max_tokens``, empty string, a JSON *object*
  instead of a string (LangChain-style dumps), non-object JSON (``[]``, ``"x"``); threads in vLLM,
  kimi-cli, codegraff, NeMo Gym, crush report histories poisoned by exactly these.
- reused tool-call ids across turns (tau-bench), empty ids, integer ids, dangling calls (SWE-agent
  ``submit``), orphan results, results before their call.
- reasoning as ``reasoning_content`` (DeepSeek, vLLM), ``reasoning`` (OpenRouter, this store),
  ``thinking`` (Anthropic-converted logs), ``reasoning_details`` lists.
- extra keys: ``timestamp``/``created_at`` numbers, ``metadata`` objects, ``id``, ``usage``, ``index``,
  ``finish_reason``.
- text: CJK, emoji (astral plane), RTL, zero-width joiners, NUL, ``\\r\\n``, lone surrogates (from JSON
  ``"\\udcff"``), 1 MB single messages.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

Message = dict[str, Any]

ODD_TEXT = [
    "", " ", "plain", "line\r\nwindows\r\n", "修复测试 漢字 ひらがな 한국어。", "emoji 🧪🚀👩‍💻 flags 🇯🇵",
    "RTL مرحبا بالعالم עברית", "zero\u200bwidth\u200d joiner\ufeff bom", "nul\x00byte", "tab\tand\\backslash\\x80",
    "lone \udcff surrogate", "high \ud800 alone", "C:\\Users\\x\\udc80 path", "Tool failed: boom",
    "Permission denied: /etc/shadow", "a" * 300,
]

text_st = st.one_of(st.sampled_from(ODD_TEXT), st.text(max_size=30),
                    st.text(alphabet=st.characters(codec="utf-8"), max_size=20),
                    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1,
                            max_size=3))

_PART_SHAPES: list[Any] = [
    {"type": "text", "text": "part text"},
    {"type": "text", "text": "修复 🧪"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "file", "file": {"file_id": "file-abc", "filename": "report.pdf"}},
    {"type": "refusal", "refusal": "I can't help with that."},
    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
    {"type": "custom_part_v9", "payload": {"x": [1, 2.5, None, True]}},
    {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
]
part_st = st.one_of(st.sampled_from(_PART_SHAPES), st.builds(lambda t: {"type": "text", "text": t}, text_st))
content_st = st.one_of(st.none(), text_st, st.just(""), st.lists(part_st, max_size=4))

_ARGS: list[Any] = ['{"path": "a.py"}', '{"command": "ls -la"}', "", "{", '{"path": "a.', "[]", '"just a string"',
                    "null", '{"path": "目录/文件.py", "text": "🧪"}', {"path": "obj.py"}, None, 42,
                    '{"a": "\\udcff"}']
args_st = st.one_of(st.sampled_from(_ARGS), text_st)
ids_st = st.sampled_from(["call_1", "call_2", "call_3", "", "toolu_01", "call_1", 7, None])
tool_names = st.sampled_from(["bash", "edit_file", "write_file", "read_file", "get_weather", ""])

# Keys real logs carry beside the sent ones (values as they appear there).
_EXTRA: dict[str, Any] = {
    "refusal": st.one_of(st.none(), st.just("I can't do that.")),
    "audio": st.none(),
    "annotations": st.just([]),
    "function_call": st.none(),
    "reasoning_content": text_st,
    "reasoning": st.one_of(text_st, st.none()),
    "thinking": text_st,
    "reasoning_details": st.just([{"type": "reasoning.summary", "summary": "s", "index": 0}]),
    "timestamp": st.one_of(st.integers(0, 2**40), st.floats(0, 2e9, allow_nan=False), st.just("2024-05-01T12:00:00Z")),
    "created_at": st.just("2024-05-01T12:00:00.123456+00:00"),
    "metadata": st.one_of(st.just({"step": 3, "ok": True, "tags": ["a", "b"]}), st.just({})),
    "id": st.sampled_from(["msg_01", "chatcmpl-abc"]),
    "usage": st.just({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}),
    "finish_reason": st.sampled_from(["stop", "tool_calls", "length"]),
    "index": st.integers(0, 3),
    "name": st.one_of(st.sampled_from(["alice", "example_user", "tool-name"]), st.integers(0, 9)),
    "weight": st.sampled_from([0, 1]),
}
extras_st = st.fixed_dictionaries({}, optional=_EXTRA)


def _with(base: Message, more: dict[str, Any]) -> Message:
    return {**base, **{k: v for k, v in more.items() if k not in base}}


def _call(cid: Any, name: str, args: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
    if cid is None:
        del call["id"]
    return call


call_st = st.one_of(
    st.builds(_call, ids_st, tool_names, args_st),
    st.builds(lambda n, a: {"index": 0, "id": "call_x", "type": "function", "function": {"name": n, "arguments": a}},
              tool_names, args_st),
)

system_st = st.builds(lambda r, t, e: _with({"role": r, "content": t}, e),
                      st.sampled_from(["system", "developer"]), content_st, st.just({}) | extras_st)
user_st = st.builds(lambda c, e: _with({"role": "user", "content": c}, e), content_st, extras_st)
assistant_st = st.builds(
    lambda c, calls, e: _with({"role": "assistant", "content": c, **({"tool_calls": calls} if calls else {})}, e),
    content_st, st.lists(call_st, max_size=3), extras_st)
tool_st = st.builds(lambda i, c, e: _with({"role": "tool", "tool_call_id": i, "content": c}, e),
                    ids_st, content_st, extras_st)
legacy_call_st = st.builds(lambda n, a: {"role": "assistant", "content": None,
                                         "function_call": {"name": n, "arguments": a}}, tool_names, args_st)
legacy_result_st = st.builds(lambda n, c: {"role": "function", "name": n, "content": c}, tool_names, text_st)


@st.composite
def call_block_st(draw: st.DrawFn) -> list[Message]:
    """An assistant call block with its results: in order, shuffled, partly missing, duplicated or early."""
    calls = draw(st.lists(call_st, min_size=1, max_size=3))
    head = _with({"role": "assistant", "content": draw(st.one_of(st.none(), st.just(""), text_st)),
                  "tool_calls": calls}, draw(extras_st))
    results = [{"role": "tool", "tool_call_id": c.get("id"), "content": draw(content_st)} for c in calls]
    results = draw(st.permutations(results))
    keep = draw(st.integers(0, len(results)))
    results = results[:keep] + draw(st.lists(st.sampled_from(results or [{"role": "tool", "tool_call_id": "zz",
                                                                           "content": "orphan"}]), max_size=1))
    if results and draw(st.booleans()):  # a result recorded before its call (log written out of order)
        return [results[0], head, *results[1:]]
    return [head, *results]


message_st = st.one_of(system_st, user_st, assistant_st, tool_st, legacy_call_st, legacy_result_st)


@st.composite
def transcript_st(draw: st.DrawFn, max_blocks: int = 10) -> list[Message]:
    """A conversation of real-world shapes: system/developer head, users, call blocks, stray messages."""
    out: list[Message] = draw(st.lists(system_st, max_size=2))
    for item in draw(st.lists(st.one_of(st.builds(lambda m: [m], message_st), call_block_st()),
                              min_size=1, max_size=max_blocks)):
        out.extend(item)
    if draw(st.booleans()):
        out.insert(0, {"role": "user", "content": "start"})
    return out


def huge_message(role: str = "tool", mb: float = 1.0) -> Message:
    """One message of about `mb` MB of mixed text (a cat of a big log)."""
    line = "2024-05-01 12:00:00 INFO worker 修复 🧪 status=ok path=/srv/app/module.py\n"
    return {"role": role, "tool_call_id": "call_big", "content": line * int(mb * 1_000_000 // len(line.encode()))}


def jsonl_line(conv_id: str, messages: list[Message]) -> str:
    """One JSONL line as the shared transcripts are written (lone surrogates as JSON escapes)."""
    return json.dumps({"id": conv_id, "source": "shapes", "meta": {"n": len(messages)}, "messages": messages})
