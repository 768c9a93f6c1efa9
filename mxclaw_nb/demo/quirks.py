"""Wire quirks of real OpenAI-compatible servers, as modes of the shipped test server (SPEC L2, L7, T3).

Why: users point mxclaw_nb at vLLM, llama.cpp's llama-server, Ollama's /v1, LM Studio, DeepSeek,
OpenRouter, Together and more, and each bends the Chat Completions wire format a little: usage in a
trailing chunk with `choices: []`, on every chunk, with zeros or nulls, or not at all; tool-call deltas
without `index`, all at index 0, with the whole call in one delta or the name repeated on each; arguments
as a JSON object; `finish_reason` "stop" with tool calls, "eos" or none; reasoning under
`reasoning_content`, `reasoning` or inside `<think>` tags; SSE comment lines; an error object inside a
200 stream; strict servers that refuse unknown request fields. Each quirk here is one small, declarative
transform of what `TestServer` would send (`TestServer(quirks={...})` or `srv.quirks = {...}`), so the
provider adapter and whole turns are tested over real HTTP against the same bytes those servers send.

A quirk has `stream` (a function of the list of SSE items: chunk dicts, or bytes written verbatim) and/or
`plain` (a function of a non-streamed completion body), and/or `reject` (the message of a 400 for a
request the server refuses). Quirks apply in the order of `QUIRKS` (those that regroup tool calls before those
that strip fields from each delta); `seen_in` says where each comes from; `PROFILES` combines them per server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["PROFILES", "QUIRKS", "Quirk"]

Item = dict[str, Any] | bytes  # one SSE event: a JSON payload, or raw bytes (a comment line)


@dataclass(frozen=True)
class Quirk:
    """One server behaviour: transforms of the streamed items and/or the plain body, or a refusal."""

    seen_in: str
    stream: Callable[[list[Item]], list[Item]] | None = None
    plain: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # a refusal: the 400's message, or (message, code, param) as OpenAI names them
    reject: Callable[[dict[str, Any]], str | tuple[str, str, str] | None] | None = None


# -- helpers ------------------------------------------------------------------------------------------------------

def _chunks(items: list[Item]) -> Iterator[dict[str, Any]]:
    return (i for i in items if isinstance(i, dict))


def _choices(items: list[Item]) -> Iterator[dict[str, Any]]:
    return (c for chunk in _chunks(items) for c in chunk.get("choices") or [])


def _deltas(items: list[Item]) -> Iterator[dict[str, Any]]:
    return (c["delta"] for c in _choices(items) if isinstance(c.get("delta"), dict))


def _calls_of(items: list[Item]) -> Iterator[dict[str, Any]]:
    return (tc for d in _deltas(items) for tc in d.get("tool_calls") or [])


def _usage_chunk(items: list[Item]) -> dict[str, Any] | None:
    return next((c for c in _chunks(items) if "usage" in c and not c.get("choices")), None)


def _finish_choice(items: list[Item]) -> dict[str, Any] | None:
    return next((c for c in reversed(list(_choices(items))) if c.get("finish_reason")), None)


def _message(body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = body["choices"][0]["message"]
    return message


def _each_stream_usage(fix: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[list[Item]], list[Item]]:
    def apply(items: list[Item]) -> list[Item]:
        for chunk in _chunks(items):
            if isinstance(chunk.get("usage"), dict):
                chunk["usage"] = fix(chunk["usage"])
        return items
    return apply


def _plain_usage(fix: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(body: dict[str, Any]) -> dict[str, Any]:
        if isinstance(body.get("usage"), dict):
            body["usage"] = fix(body["usage"])
        return body
    return apply


def _usage_quirk(seen_in: str, fix: Callable[[dict[str, Any]], dict[str, Any]]) -> Quirk:
    return Quirk(seen_in, stream=_each_stream_usage(fix), plain=_plain_usage(fix))


def _set_finish(seen_in: str, value: str | None, *, only_with_tools: bool = False, drop: bool = False) -> Quirk:
    def stream(items: list[Item]) -> list[Item]:
        if only_with_tools and not any(True for _ in _calls_of(items)):
            return items
        for choice in _choices(items):
            if drop:
                choice.pop("finish_reason", None)
            elif choice.get("finish_reason"):
                choice["finish_reason"] = value
        return items

    def plain(body: dict[str, Any]) -> dict[str, Any]:
        choice = body["choices"][0]
        if only_with_tools and not choice["message"].get("tool_calls"):
            return body
        if drop:
            choice.pop("finish_reason", None)
        else:
            choice["finish_reason"] = value
        return body
    return Quirk(seen_in, stream=stream, plain=plain)


# -- usage ----------------------------------------------------------------------------------------------------------

def _usage_every_chunk(items: list[Item]) -> list[Item]:
    """Running usage on every chunk (vLLM `continuous_usage_stats`, and vLLM 0.5.4 always)."""
    final = _usage_chunk(items)
    if final is None:
        return items
    usage, n = final["usage"], 0
    for chunk in _chunks(items):
        if chunk is not final:
            n += 1
            done = min(n, usage["completion_tokens"])
            chunk["usage"] = {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": done,
                              "total_tokens": usage["prompt_tokens"] + done}
    return items


def _usage_on_finish_chunk(items: list[Item]) -> list[Item]:
    """No trailing `choices: []` chunk: usage rides on the chunk with the finish_reason (TGI, some proxies)."""
    final = _usage_chunk(items)
    choice_chunk = next((c for c in reversed(list(_chunks(items))) if any(
        ch.get("finish_reason") for ch in c.get("choices") or [])), None)
    if final is None or choice_chunk is None:
        return items
    choice_chunk["usage"] = final["usage"]
    return [i for i in items if i is not final]


def _usage_x_groq(items: list[Item]) -> list[Item]:
    """Usage only under `x_groq.usage` on the chunk with the finish_reason, none at the top level (Groq)."""
    items = _usage_on_finish_chunk(items)
    for chunk in _chunks(items):
        if "usage" in chunk:
            chunk["x_groq"] = {"id": "req_demo", "usage": chunk.pop("usage")}
    return items


# -- tool calls -----------------------------------------------------------------------------------------------------

def _tool_no_index(items: list[Item]) -> list[Item]:
    for tc in _calls_of(items):
        tc.pop("index", None)
    return items


def _tool_id_every_chunk(items: list[Item]) -> list[Item]:
    ids: dict[int, str] = {}
    for tc in _calls_of(items):
        if tc.get("id"):
            ids[tc["index"]] = tc["id"]
        tc["id"], tc["type"] = ids.get(tc["index"], ""), "function"
    return items


def _tool_name_every_chunk(items: list[Item]) -> list[Item]:
    names: dict[int, str] = {}
    for tc in _calls_of(items):
        fn = tc.setdefault("function", {})
        if fn.get("name"):
            names[tc["index"]] = fn["name"]
        fn["name"] = names.get(tc["index"], "")
    return items


def _merged_calls(items: list[Item]) -> tuple[list[dict[str, Any]], list[Item]]:
    """The whole calls of a stream, and the items with the tool-call deltas taken out (empty deltas dropped)."""
    calls: dict[int, dict[str, Any]] = {}
    for tc in _calls_of(items):
        slot = calls.setdefault(tc["index"], {"index": tc["index"], "id": "", "type": "function",
                                              "function": {"name": "", "arguments": ""}})
        slot["id"] = tc.get("id") or slot["id"]
        fn = tc.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""
    kept: list[Item] = []
    for item in items:
        if isinstance(item, dict):
            for choice in item.get("choices") or []:
                choice.get("delta", {}).pop("tool_calls", None)
            if item.get("choices") and not any(c.get("delta") or c.get("finish_reason") for c in item["choices"]):
                continue
        kept.append(item)
    return list(calls.values()), kept


def _insert_before_finish(items: list[Item], deltas: list[dict[str, Any]], template: dict[str, Any]) -> list[Item]:
    at = next((n for n, i in enumerate(items) if isinstance(i, dict) and any(
        c.get("finish_reason") for c in i.get("choices") or [])), len(items))
    new = [{**template, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    return items[:at] + new + items[at:]


def _template(items: list[Item]) -> dict[str, Any]:
    first = next(_chunks(items), {})
    return {k: v for k, v in first.items() if k not in ("choices", "usage")}


def _tool_whole(items: list[Item]) -> list[Item]:
    """Each call in one delta, arguments and all (Ollama, LM Studio)."""
    calls, kept = _merged_calls(items)
    if not calls:
        return items
    return _insert_before_finish(kept, [{"tool_calls": [c]} for c in calls], _template(items))


def _tool_same_index(items: list[Item]) -> list[Item]:
    """Several calls, each whole, all at index 0 (Ollama 0.20 with parallel calls)."""
    calls, kept = _merged_calls(items)
    if not calls:
        return items
    return _insert_before_finish(kept, [{"tool_calls": [{**c, "index": 0}]} for c in calls], _template(items))


def _args_object_stream(items: list[Item]) -> list[Item]:
    calls, kept = _merged_calls(items)
    if not calls:
        return items
    for c in calls:
        c["function"]["arguments"] = _as_object(c["function"]["arguments"])
    return _insert_before_finish(kept, [{"tool_calls": [c]} for c in calls], _template(items))


def _as_object(arguments: Any) -> Any:
    try:
        return json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return arguments


def _args_object_plain(body: dict[str, Any]) -> dict[str, Any]:
    for tc in _message(body).get("tool_calls") or []:
        tc["function"]["arguments"] = _as_object(tc["function"]["arguments"])
    return body


def _tool_id_empty_stream(items: list[Item]) -> list[Item]:
    for tc in _calls_of(items):
        if "id" in tc:
            tc["id"] = ""
    return items


def _tool_id_empty_plain(body: dict[str, Any]) -> dict[str, Any]:
    for tc in _message(body).get("tool_calls") or []:
        tc["id"] = ""
    return body


# -- content, reasoning, framing ------------------------------------------------------------------------------------

def _content_null(items: list[Item]) -> list[Item]:
    for d in _deltas(items):
        if not d.get("content"):
            d["content"] = None
    return items


def _no_role(items: list[Item]) -> list[Item]:
    for d in _deltas(items):
        d.pop("role", None)
    return items


def _no_meta_stream(items: list[Item]) -> list[Item]:
    for chunk in _chunks(items):
        for key in ("id", "object", "created", "model"):
            chunk.pop(key, None)
    return items


def _no_meta_plain(body: dict[str, Any]) -> dict[str, Any]:
    for key in ("id", "object", "created", "model"):
        body.pop(key, None)
    return body


def _rename_reasoning(seen_in: str, both: bool) -> Quirk:
    def stream(items: list[Item]) -> list[Item]:
        for d in _deltas(items):
            if "reasoning_content" in d:
                d["reasoning"] = d["reasoning_content"] if both else d.pop("reasoning_content")
        return items

    def plain(body: dict[str, Any]) -> dict[str, Any]:
        m = _message(body)
        if "reasoning_content" in m:
            m["reasoning"] = m["reasoning_content"] if both else m.pop("reasoning_content")
        return body
    return Quirk(seen_in, stream=stream, plain=plain)


def _think_tags_stream(items: list[Item]) -> list[Item]:
    """Reasoning inline in the content as <think>...</think>, streamed piece by piece like any text (Ollama,
    llama.cpp without a reasoning parser)."""
    out: list[Item] = []
    for item in items:
        delta = item["choices"][0]["delta"] if isinstance(item, dict) and item.get("choices") else {}
        if not isinstance(item, dict) or not delta.get("reasoning_content"):
            out.append(item)
            continue
        text = delta.pop("reasoning_content")
        pieces = ["<", "think", ">", *[text[i:i + 5] for i in range(0, len(text), 5)], "</", "think>", "\n\n"]
        out += [{**item, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    return out


def _think_tags_plain(body: dict[str, Any]) -> dict[str, Any]:
    m = _message(body)
    if m.get("reasoning_content"):
        m["content"] = f"<think>{m.pop('reasoning_content')}</think>\n\n{m.get('content') or ''}"
    return body


def _content_parts(body: dict[str, Any]) -> dict[str, Any]:
    m = _message(body)
    if isinstance(m.get("content"), str):
        m["content"] = [{"type": "text", "text": m["content"]}]
    return body


def _comments(items: list[Item]) -> list[Item]:
    """SSE comment lines before and between events (keep-alives; OpenRouter's processing notice)."""
    out: list[Item] = [b": OPENROUTER PROCESSING\n\n"]
    for item in items:
        out += [item, b": keep-alive\n\n"]
    return out


def _error_midstream(items: list[Item]) -> list[Item]:
    """Some text, then an error object inside the 200 stream, no finish_reason (OpenRouter, LiteLLM)."""
    cut = next((n for n, i in enumerate(items) if isinstance(i, dict) and any(
        (c.get("delta") or {}).get("content") for c in i.get("choices") or [])), 1) + 1
    return [*items[:cut], {"error": {"message": "Upstream provider returned error: overloaded", "code": 502}}]


def _reject_unknown(body: dict[str, Any]) -> str | None:
    """A strict server: any field it does not know is a 400 that does not name the field (pydantic style)."""
    known = {"model", "messages", "stream", "tools", "tool_choice", "temperature", "max_tokens", "top_p", "stop"}
    extra = sorted(set(body) - known)
    return "Extra inputs are not permitted" if extra else None


def _reject_bad_history_args(body: dict[str, Any]) -> str | None:
    """vLLM (`chat_utils._postprocess_messages`) and llama-server parse every historical tool call's arguments as
    JSON to render the chat template: one that is not JSON fails the whole request with the parser's message, on
    every later turn of the conversation (vLLM issue 43995; fixed in PR 48922)."""
    for message in body.get("messages") or []:
        calls = message.get("tool_calls") if isinstance(message, dict) and message.get("role") == "assistant" else None
        for call in calls or []:
            fn = call.get("function") if isinstance(call, dict) else None
            args = fn.get("arguments") if isinstance(fn, dict) else None
            if isinstance(args, str) and args:
                try:
                    json.loads(args)
                except ValueError as exc:
                    return str(exc)
    return None


# OpenAI's own validation of a history (its 400 invalid_request_error wording, as the API sends it). A history imported
# from Claude Code or Codex (S4) can hold each of these; the adapter reshapes what is sent (`provider/shape.py`).
_OPENAI_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_PATTERN_WORDS = "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."


def _openai_refusal(i: int, message: dict[str, Any]) -> tuple[str, str, str] | None:
    role, content, name = message.get("role"), message.get("content"), message.get("name")
    if role != "user" and isinstance(content, list) and any(
            isinstance(p, dict) and p.get("type") == "image_url" for p in content):
        return (f"Invalid 'messages[{i}]'. Image URLs are only allowed for messages with role 'user', but this message "
                f"with role '{role}' contains an image URL.", "invalid_value", f"messages[{i}]")
    if name is not None and not (isinstance(name, str) and _OPENAI_NAME.fullmatch(name)):
        return f"Invalid 'messages[{i}].name': {_PATTERN_WORDS}", "invalid_value", f"messages[{i}].name"
    for j, call in enumerate(message.get("tool_calls") or []):
        where = f"messages[{i}].tool_calls[{j}]"
        cid = call.get("id") if isinstance(call, dict) else None
        if isinstance(cid, str) and len(cid) > 40:
            return (f"Invalid '{where}.id': string too long. Expected a string with maximum length 40, but got a "
                    f"string with length {len(cid)} instead.", "string_above_max_length", f"{where}.id")
        fn = call.get("function") if isinstance(call, dict) else None
        fname = fn.get("name") if isinstance(fn, dict) else None
        if not (isinstance(fname, str) and _OPENAI_NAME.fullmatch(fname) and len(fname) <= 64):
            return f"Invalid '{where}.function.name': {_PATTERN_WORDS}", "invalid_value", f"{where}.function.name"
    return None


def _reject_openai_history(body: dict[str, Any]) -> tuple[str, str, str] | None:
    """OpenAI's Chat Completions API checks every message of the history: images only in `user` messages, a `name`
    (and each historical call's function name) of `^[a-zA-Z0-9_-]+$`, call ids of at most 40 characters. The first
    violation is a 400 naming the message (message, code, param)."""
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict) and (refusal := _openai_refusal(i, message)):
            return refusal
    return None


# Ollama answers a prompt longer than its context (`num_ctx`, default 2,048 tokens before 0.6, 4,096 after; raised
# with OLLAMA_CONTEXT_LENGTH) without an error: it drops the start of the prompt and reports what it kept, so
# usage.prompt_tokens is at most num_ctx. The server applies this with its own `num_ctx` (`TestServer.num_ctx`).
def truncated_usage(usage: dict[str, Any], num_ctx: int) -> dict[str, Any]:
    """`usage` as Ollama reports it for a prompt cut to `num_ctx` tokens."""
    prompt = usage.get("prompt_tokens")
    if not isinstance(prompt, int) or prompt <= num_ctx:
        return usage
    return {**usage, "prompt_tokens": num_ctx, "total_tokens": num_ctx + (usage.get("completion_tokens") or 0)}


# -- tool calls written as text (SPEC L2: the models and servers that do not fill `tool_calls`) -----------------------

def _call_objects(calls: list[dict[str, Any]], key: str = "arguments") -> list[dict[str, Any]]:
    return [{"name": c["function"]["name"], key: _as_object(c["function"]["arguments"])} for c in calls]


def _as_text(fmt: str, calls: list[dict[str, Any]], before: str) -> str:
    """The calls written as text in one of the formats the provider's text-call reader knows."""
    dump = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    if fmt == "fenced":  # Qwen2.5-Coder through llama.cpp of late 2026, whatever its prompt says
        body = "\n".join(f"```json\n{dump(o)}\n```" for o in _call_objects(calls))
    elif fmt == "bare":
        objects = _call_objects(calls)
        body = dump(objects[0] if len(objects) == 1 else objects)
    elif fmt == "hermes":
        body = "\n".join(f"<tool_call>\n{dump(o)}\n</tool_call>" for o in _call_objects(calls))
    elif fmt == "mistral":
        body = "[TOOL_CALLS]" + dump(_call_objects(calls))
    else:  # llama3: {"name": ..., "parameters": ...}, several separated by ";"
        body = "; ".join(dump(o) for o in _call_objects(calls, "parameters"))
    return f"{before}\n{body}" if before and fmt == "fenced" else body


def _text_calls(fmt: str, seen_in: str) -> Quirk:
    def stream(items: list[Item]) -> list[Item]:
        calls, kept = _merged_calls(items)
        if not calls:
            return items
        before = "".join(str(d.get("content") or "") for d in _deltas(kept))
        text = _as_text(fmt, calls, before)
        new = text[len(before):] if text.startswith(before) else text
        pieces = [new[i:i + 7] for i in range(0, len(new), 7)]
        for choice in _choices(kept):
            if choice.get("finish_reason"):
                choice["finish_reason"] = "stop"
        return _insert_before_finish(kept, [{"content": p} for p in pieces], _template(items))

    def plain(body: dict[str, Any]) -> dict[str, Any]:
        m = _message(body)
        calls = m.pop("tool_calls", None) or []
        if calls:
            m["content"] = _as_text(fmt, calls, str(m.get("content") or ""))
            body["choices"][0]["finish_reason"] = "stop"
        return body
    return Quirk(seen_in, stream=stream, plain=plain)


def _cache_timings(usage_chunk: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp: the prompt cache is reported as `timings.cache_n` beside usage, not in it."""
    usage = usage_chunk.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens_details"), dict):
        cached = usage.pop("prompt_tokens_details").get("cached_tokens") or 0
        usage_chunk["timings"] = {"cache_n": cached, "prompt_n": (usage.get("prompt_tokens") or 0) - cached}
    return usage_chunk


def _cache_timings_stream(items: list[Item]) -> list[Item]:
    for chunk in _chunks(items):
        _cache_timings(chunk)
    return items


def _no_cache_figure(usage: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in usage.items() if k != "prompt_tokens_details"}


# -- the table --------------------------------------------------------------------------------------------------------

QUIRKS: dict[str, Quirk] = {
    "usage_every_chunk": Quirk("vLLM continuous_usage_stats; vLLM 0.5.4", stream=_usage_every_chunk),
    "usage_on_finish_chunk": Quirk("TGI, some proxies", stream=_usage_on_finish_chunk),
    "usage_zeros": _usage_quirk("llama.cpp builds, proxies that count nothing",
                                lambda u: {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
    "usage_prompt_null": _usage_quirk("proxies", lambda u: {**u, "prompt_tokens": None}),
    "usage_total_only": _usage_quirk("some gateways", lambda u: {"total_tokens": u["total_tokens"]}),
    "usage_x_groq": Quirk("Groq (`x_groq.usage` on the finish chunk)", stream=_usage_x_groq),
    "tool_whole": Quirk("Ollama, LM Studio", stream=_tool_whole),
    "tool_same_index": Quirk("Ollama 0.20 (parallel calls), Gemini proxies", stream=_tool_same_index),
    "tool_args_object": Quirk("llama.cpp (March 2026 builds)", stream=_args_object_stream, plain=_args_object_plain),
    "tool_id_every_chunk": Quirk("llama.cpp, LM Studio", stream=_tool_id_every_chunk),
    "tool_name_every_chunk": Quirk("llama.cpp before PR 13800", stream=_tool_name_every_chunk),
    "tool_id_empty": Quirk("small local servers", stream=_tool_id_empty_stream, plain=_tool_id_empty_plain),
    "tool_no_index": Quirk("Ollama < 0.4.7, sglang, Gemini's compatible API", stream=_tool_no_index),
    "finish_stop_with_tools": _set_finish("gpt-4o, Ollama, Gemini proxies", "stop", only_with_tools=True),
    "finish_eos": _set_finish("TGI", "eos"),
    "finish_null": _set_finish("proxies that end with [DONE] only", None),
    "finish_missing": _set_finish("minimal servers", None, drop=True),
    "finish_error": _set_finish("OpenRouter (the upstream model failed mid-answer)", "error"),
    "content_null": Quirk("vLLM, Ollama (content: null deltas)", stream=_content_null),
    "no_role": Quirk("llama.cpp, proxies", stream=_no_role),
    "no_meta": Quirk("minimal servers (no id/object/created/model)", stream=_no_meta_stream, plain=_no_meta_plain),
    "reasoning_field": _rename_reasoning("OpenRouter, vLLM >= 0.10 (`reasoning`)", False),
    "reasoning_both": _rename_reasoning("vLLM transition releases (both keys)", True),
    "think_tags": Quirk("Ollama deepseek-r1/qwen3, llama.cpp --reasoning-format none",
                        stream=_think_tags_stream, plain=_think_tags_plain),
    "content_parts": Quirk("Mistral-style content part lists", plain=_content_parts),
    "comments": Quirk("OpenRouter (`: OPENROUTER PROCESSING`), keep-alive proxies", stream=_comments),
    "error_midstream": Quirk("OpenRouter, LiteLLM (error object in a 200 stream)", stream=_error_midstream),
    "strict_params": Quirk("strict gateways (pydantic extra=forbid)", reject=_reject_unknown),
    "openai_history_rules": Quirk("OpenAI (images only in user messages, name patterns, call ids <= 40 characters)",
                                  reject=_reject_openai_history),
    "prompt_truncated": Quirk("Ollama (a prompt over num_ctx is cut without an error; usage says what was kept)"),
    "history_args_parsed": Quirk("vLLM 0.24-0.25, llama-server (historical tool-call arguments parsed as JSON)",
                                 reject=_reject_bad_history_args),
    "text_calls_fenced": _text_calls("fenced", "Qwen2.5-Coder via llama.cpp (Oct 2026), Ollama without a "
                                     "tool template"),
    "text_calls_bare": _text_calls("bare", "small models on servers without a tool-call parser"),
    "text_calls_hermes": _text_calls("hermes", "Hermes/Qwen <tool_call> tags (older vLLM parsers, LM Studio)"),
    "text_calls_mistral": _text_calls("mistral", "Mistral [TOOL_CALLS] on servers without its parser"),
    "text_calls_llama3": _text_calls("llama3", "Llama 3.x JSON tool calls ({name, parameters})"),
    "cache_timings": Quirk("llama.cpp (`timings.cache_n`)", stream=_cache_timings_stream, plain=_cache_timings),
    "cache_unreported": _usage_quirk("Ollama, gateways, minimal servers (no cached-token figure)", _no_cache_figure),
}

# Several quirks as one server shows them together (what the survey found; versions differ).
PROFILES: dict[str, frozenset[str]] = {
    "vllm": frozenset({"usage_every_chunk", "content_null", "reasoning_both", "history_args_parsed"}),
    "llama.cpp": frozenset({"tool_id_every_chunk", "tool_name_every_chunk", "no_role", "tool_args_object",
                            "cache_timings", "history_args_parsed"}),
    "ollama": frozenset({"tool_same_index", "finish_stop_with_tools", "think_tags", "content_null",
                         "cache_unreported", "prompt_truncated"}),
    "openai": frozenset({"openai_history_rules"}),
    "openrouter": frozenset({"comments", "reasoning_field", "usage_on_finish_chunk"}),
    "strict gateway": frozenset({"strict_params", "no_meta", "finish_missing", "usage_prompt_null",
                                 "cache_unreported"}),
    "bare": frozenset({"tool_no_index", "tool_id_empty", "finish_null", "no_role", "no_meta", "cache_unreported"}),
}
