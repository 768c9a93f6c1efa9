"""Wire normalisation: how the adapter reads each server quirk back into one answer shape (SPEC L2, L7, T3).

Why: the shipped test server plays the wire quirks of the OpenAI-compatible servers users meet
(`mxclaw_nb/demo/quirks.py`, `QUIRKS`: a standard answer turned into what vLLM, llama.cpp, Ollama, OpenRouter, ...
send). This module is its mirror: `NORMALISERS` has one entry per quirk, under the same name, saying how the
adapter undoes it. Where the undoing is a value transform, it is the entry's `fix`, run at its `point` of the
answer's assembly (`provider/answer.py`), in this table's order, after the standard (OpenAI) reading of that
value. The other entries name the code that handles them (tool-call assembly, the end of a stream, the client's
retry without `stream_options`, the text-call reader) or say why nothing is needed.

Adding a quirk costs three files: its transform in `demo/quirks.py`, its entry here (with a `fix` when it is a
value transform), and its wire check (`ON_THE_WIRE`) in `tests/test_server_quirks.py`, whose adapter test then
serves it, streamed and plain, through the real client. `test_every_server_quirk_has_a_normaliser` keeps the two
tables equal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["FIXES", "NORMALISERS", "POINTS", "Normaliser", "count", "field", "normalise", "read_arguments",
           "read_reasoning", "read_report", "read_text"]

Fix = Callable[[Any, Any], Any]  # (the value at its point, the chunk or part it was read from) -> the value

# Where a `fix` runs, and what its value is:
#   report     one usage report's counts, {prompt_tokens, completion_tokens, total_tokens, cached_tokens,
#              cache_write_tokens} (each a count or None) or None; from each chunk or plain body
#   usage      the answer's usage after a report was merged in (a `Usage` or None); from each chunk or body
#   text       a choice's `content` as sent; the standard reading then keeps a string, else ""
#   reasoning  a choice's reasoning text ("" when none); from each delta or message
#   arguments  one tool-call delta's `arguments` as sent; the standard reading then keeps a string, None -> ""
#   message    the assembled assistant message (a dict); from the whole answer
# Points whose quirks are handled in code rather than by a value fix (no `fix`):
#   calls      tool-call assembly (`answer.Answer._add_call`: index, id and name rules)
#   ids        unique tool-call ids (`answer.Answer.message`)
#   finish     `client.OpenAIProvider._finish` and `_streamed` (a stream ending with [DONE] is whole)
#   stream     the openai client's SSE reader (comments, an error object in a 200 stream)
#   request    `client.OpenAIProvider._streamed_once` (a refused `stream_options` is dropped, once, with a note)
#   text calls `provider/textcalls.py` (calls written as text, read back when they validate)
#   shape      `provider/shape.py` (a history reshaped as the server takes it; the stored transcript unchanged)
#   after      `mxclaw_nb/truncation.py`, run by the loop after the call (a report that cannot be the whole prompt)
#   none       nothing to do: the standard reading already gives the one shape
POINTS = ("report", "usage", "text", "reasoning", "arguments", "message")
HANDLED_IN_CODE = ("calls", "ids", "finish", "stream", "request", "text calls", "shape", "after", "none")


@dataclass(frozen=True)
class Normaliser:
    """How the adapter handles one server quirk: where (`point`), what it does (`how`), and the value fix."""

    point: str
    how: str
    fix: Fix | None = None

    def __post_init__(self) -> None:
        if (self.point in POINTS) != (self.fix is not None) or self.point not in (*POINTS, *HANDLED_IN_CODE):
            raise ValueError(f"a normaliser at point {self.point!r} needs a fix exactly when the point is one of "
                             f"{POINTS}")


def count(value: Any) -> int | None:
    """A token count as reported: a whole number >= 0, else None (null, missing, a string, a bool)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def field(obj: Any, key: str) -> Any:
    """`obj.key`, or None. The client's objects are pydantic models that keep the fields OpenAI does not declare
    (`reasoning_content`, `timings`, `x_groq`, ...) as extras: those are read from the extras directly, as a missed
    attribute costs a raised and caught AttributeError on every chunk."""
    extra = getattr(obj, "__pydantic_extra__", None)
    if isinstance(extra, dict) and key not in getattr(type(obj), "model_fields", ()):
        return extra.get(key)
    return getattr(obj, key, None)


# -- the fixes -------------------------------------------------------------------------------------------------------

def counts_of(raw: Any) -> dict[str, int | None] | None:
    """One usage report's counts (a dict or an object, as the client parsed it), or None without one. E1: cached
    prompt tokens from OpenAI, vLLM and OpenRouter `prompt_tokens_details.cached_tokens`, Anthropic-style
    `cache_read_input_tokens` / `cache_creation_input_tokens`."""
    if raw is None:
        return None
    get: Callable[[str], Any] = raw.get if isinstance(raw, dict) else lambda key: getattr(raw, key, None)
    details = get("prompt_tokens_details")
    cached = count(details.get("cached_tokens") if isinstance(details, dict)
                   else getattr(details, "cached_tokens", None))
    return {"prompt_tokens": count(get("prompt_tokens")), "completion_tokens": count(get("completion_tokens")),
            "total_tokens": count(get("total_tokens")),
            "cached_tokens": cached if cached is not None else count(get("cache_read_input_tokens")),
            "cache_write_tokens": count(get("cache_creation_input_tokens"))}


def _usage_x_groq(report: dict[str, int | None] | None, chunk: Any) -> dict[str, int | None] | None:
    """No top-level usage, but `x_groq.usage` on the finish chunk (Groq): that report."""
    extra = field(chunk, "x_groq")
    return report if report is not None or not isinstance(extra, dict) else counts_of(extra.get("usage"))


def _prompt_from_total(report: dict[str, int | None] | None, _chunk: Any) -> dict[str, int | None] | None:
    """prompt_tokens null, total and completion given: the prompt is their difference."""
    if report is None:
        return None
    prompt, completion, total = report["prompt_tokens"], report["completion_tokens"], report["total_tokens"]
    if prompt is None and total is not None and completion is not None and total >= completion:
        report["prompt_tokens"] = total - completion
    return report


def _zeros_are_no_report(report: dict[str, int | None] | None, _chunk: Any) -> dict[str, int | None] | None:
    """A prompt of 0 tokens (or none) is no count, so calibration never anchors on it (T3)."""
    if report is not None and not report["prompt_tokens"]:
        report["prompt_tokens"] = None
        report["completion_tokens"] = report["completion_tokens"] or None
    return report


def _cache_from_timings(usage: Any, chunk: Any) -> Any:
    """llama.cpp's server reports its prompt cache as `timings.cache_n` beside usage (E1)."""
    timings = field(chunk, "timings")
    if isinstance(timings, dict) and usage is not None:
        cached = count(timings.get("cache_n"))
        if cached is not None:
            usage.cached_tokens = cached
    return usage


def _text_of_parts(content: Any, _part: Any) -> Any:
    """Content as a list of content parts (Mistral-style): their text, joined."""
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") if isinstance(p, dict) else str(getattr(p, "text", "") or "")
                       for p in content)
    return content


def _null_is_empty(content: Any, _part: Any) -> Any:
    return "" if content is None else content


def _reasoning_field(reasoning: str, part: Any) -> str:
    """`reasoning` (OpenRouter, vLLM >= 0.10) where `reasoning_content` (DeepSeek, vLLM) is not sent."""
    if reasoning:
        return reasoning
    value = field(part, "reasoning")
    return value if isinstance(value, str) else ""


def _arguments_object(raw: Any, _call: Any) -> Any:
    """Arguments as a JSON object (llama.cpp): serialised to the string the wire format specifies."""
    if raw is None or isinstance(raw, str):
        return raw
    try:
        return json.dumps(raw, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(raw)


THINK = re.compile(r"\A\s*<think>(.*?)</think>\s*", re.DOTALL)  # leading inline reasoning (no reasoning parser)


def _think_apart(message: dict[str, Any], _answer: Any) -> dict[str, Any]:
    """A leading <think>...</think> block in the answer is reasoning: kept apart, not the answer (the live view
    holds it back as it streams: `answer.Answer._visible`)."""
    think = THINK.match(message.get("content") or "")
    if think:
        reasoning = "\n\n".join(r for r in (message.get("reasoning") or "", think.group(1).strip()) if r)
        message["content"] = message["content"][think.end():] or None
        if reasoning:
            message["reasoning"] = reasoning
    return message


# -- the table: one entry per quirk of the test server (mxclaw_nb/demo/quirks.py), in the order fixes run ----------

NORMALISERS: dict[str, Normaliser] = {
    "usage_every_chunk": Normaliser("none", "the last report wins, field by field (`answer.Answer.add`)"),
    "usage_on_finish_chunk": Normaliser("none", "usage is read from whichever chunk carries it"),
    "usage_x_groq": Normaliser("report", "the report under x_groq is the usage", _usage_x_groq),
    "usage_prompt_null": Normaliser("report", "prompt = total - completion", _prompt_from_total),
    "usage_zeros": Normaliser("report", "a prompt of 0 tokens is no report (T3)", _zeros_are_no_report),
    "usage_total_only": Normaliser("none", "neither prompt nor completion counted: no report (T3)"),
    "cache_timings": Normaliser("usage", "cached prompt tokens from `timings.cache_n` (E1)", _cache_from_timings),
    "cache_unreported": Normaliser("none", "no cached-token figure: cached_tokens stays None (E1)"),
    "tool_whole": Normaliser("calls", "the whole call in one delta is taken as is"),
    "tool_same_index": Normaliser("calls", "at one index, a new id (or a name after complete JSON) is a new call"),
    "tool_args_object": Normaliser("arguments", "serialised to a JSON string", _arguments_object),
    "tool_id_every_chunk": Normaliser("calls", "an id repeated on every delta is kept once"),
    "tool_name_every_chunk": Normaliser("calls", "a name repeated on every delta is kept once"),
    "tool_id_empty": Normaliser("ids", "an empty or repeated id is made unique (C4 pairs results by id)"),
    "tool_no_index": Normaliser("calls", "a delta without index continues the last call"),
    "finish_stop_with_tools": Normaliser("none", "the tool calls run: what the answer carries decides"),
    "finish_eos": Normaliser("none", "kept as sent: what the answer carries decides"),
    "finish_null": Normaliser("finish", "a stream ending with [DONE] is whole (named stop or tool_calls)"),
    "finish_missing": Normaliser("finish", "as finish_null; without [DONE] a cut stream, asked once more (L7)"),
    "finish_error": Normaliser("finish", "a provider error of kind server"),
    "content_null": Normaliser("text", "no text", _null_is_empty),
    "no_role": Normaliser("none", "the message's role is always assistant"),
    "no_meta": Normaliser("none", "the requested model names the answer"),
    "reasoning_field": Normaliser("reasoning", "read as reasoning, kept apart from the answer", _reasoning_field),
    "reasoning_both": Normaliser("none", "reasoning_content is read first; the copy is not added again"),
    "think_tags": Normaliser("message", "a leading <think> block is reasoning, kept apart", _think_apart),
    "content_parts": Normaliser("text", "the parts' text, joined", _text_of_parts),
    "comments": Normaliser("stream", "SSE comment lines are skipped"),
    "error_midstream": Normaliser("stream", "a provider error of kind server"),
    "strict_params": Normaliser("request", "asked once more without stream_options, which stays off (a note)"),
    "openai_history_rules": Normaliser("shape", "images outside user messages go into a user message after their "
                                       "block, invalid names and function names as _, call ids over 40 characters "
                                       "hashed; said once per session, counted in every record"),
    "prompt_truncated": Normaliser("after", "a reported prompt far under the estimate of what was sent is a cut "
                                   "prompt: said once per session, not learned by the calibration (T3)"),
    "history_args_parsed": Normaliser("request", "every tool call is sent with a JSON object as arguments "
                                      '({"_raw_arguments": text} for one the model wrote that is not JSON)'),
    "text_calls_fenced": Normaliser("text calls", "fenced JSON calls that validate become tool calls"),
    "text_calls_bare": Normaliser("text calls", "a bare JSON call that validates becomes a tool call"),
    "text_calls_hermes": Normaliser("text calls", "<tool_call> tags that validate become tool calls"),
    "text_calls_mistral": Normaliser("text calls", "[TOOL_CALLS] that validate become tool calls"),
    "text_calls_llama3": Normaliser("text calls", "{name, parameters} that validate become tool calls"),
}

#: point -> its fixes, in the table's order
FIXES: dict[str, tuple[Fix, ...]] = {p: tuple(n.fix for n in NORMALISERS.values() if n.point == p and n.fix)
                                     for p in POINTS}


def normalise(point: str, value: Any, source: Any) -> Any:
    """`value` after every fix registered at `point`, in order."""
    for fix in FIXES[point]:
        value = fix(value, source)
    return value


# -- the standard readings, then the fixes ---------------------------------------------------------------------------

def read_report(chunk: Any) -> dict[str, int | None] | None:
    """T3: one usage report's counts, or None when there is no count (neither prompt nor completion)."""
    report: dict[str, int | None] | None = normalise("report", counts_of(getattr(chunk, "usage", None)), chunk)
    if report is None or (report["prompt_tokens"] is None and report["completion_tokens"] is None):
        return None
    return report


def read_text(part: Any) -> str:
    text = normalise("text", getattr(part, "content", None), part)
    return text if isinstance(text, str) else ""


def read_reasoning(part: Any) -> str:
    value = field(part, "reasoning_content")
    return normalise("reasoning", value if isinstance(value, str) else "", part)  # type: ignore[no-any-return]


def read_arguments(call: Any) -> tuple[Any, str]:
    """A tool-call delta's arguments: as sent, and as the wire format's string ("" when absent)."""
    raw = getattr(getattr(call, "function", None), "arguments", None)
    arguments = normalise("arguments", raw, call)
    return raw, arguments if isinstance(arguments, str) else ""
