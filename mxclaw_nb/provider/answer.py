"""One answer, assembled from whatever an OpenAI-compatible server sent (SPEC L2, L7, L10, T3).

Why: the loop stores one shape whatever the server: text, reasoning kept apart, whole tool calls with string
arguments and unique ids, usage only when it is a real count. `Answer` takes streamed chunks or a plain body the
same way; each value is read the standard (OpenAI) way and then through the fixes `provider/quirks.py` registers
for the server quirks that bend it. What it cannot see from one value (a tool call continued across deltas, a
<think> block shown live) is assembled here. It also counts what arrives against the L10 bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mxclaw_nb.messages import REFUSED_CALLS_KEY
from mxclaw_nb.provider.limits import AnswerMeter, Limits
from mxclaw_nb.provider.quirks import normalise, read_arguments, read_reasoning, read_report, read_text

__all__ = ["Answer", "Completion", "Usage"]


@dataclass
class Usage:
    """Provider-reported token usage (None where the server did not say)."""

    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None = None  # E1: prompt tokens the server read from its prompt cache
    cache_write_tokens: int | None = None  # E1: prompt tokens written to the cache (Anthropic-style servers)


@dataclass
class Completion:
    """One model call's result: the assistant message (OpenAI shape) plus usage and timing."""

    message: dict
    usage: Usage | None
    finish_reason: str | None
    latency_ms: float
    model: str
    notes: list[str] = field(default_factory=list)  # what the adapter did about this server (a provider.note event)



def _last(new: int | None, old: int | None) -> int | None:
    return new if new is not None else old


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    size: int = 0  # bytes of arguments received (L10)
    refused: bool = False  # over max_tool_args_bytes: not kept, not run

    def complete(self) -> bool:
        """The arguments so far are one whole JSON value (checked only when they end like one: O(1) mostly)."""
        return bool(self.arguments) and self.arguments[-1].rstrip().endswith(("}", "]")) and _is_json(
            "".join(self.arguments))


class Answer:
    """One assistant answer as it arrives: `add` a streamed chunk or a whole (non-streamed) response."""

    def __init__(self, model: str, start: float, limits: Limits | None = None) -> None:
        self.model, self.start = model, start
        self.meter = AnswerMeter(limits or Limits())  # L10: the answer's bytes and each call's arguments
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[_Call] = []
        self._at: dict[int, _Call] = {}  # a tool-call index -> the call it now continues
        self.usage: Usage | None = None
        self.finish: str | None = None
        self.choices = 0
        self.text_chars = 0
        self.notes: list[str] = []
        self._held: str | None = ""  # leading text held back from the live view while it is (or may be) <think>
        self._trim = False

    def add(self, resp: Any, *, whole: bool = False) -> str:
        """Take one chunk (or, `whole`, a plain response); returns the new answer text, to show live."""
        self.model = getattr(resp, "model", None) or self.model
        report = read_report(resp)
        if report is not None:  # the last report wins field by field (vLLM sends a running count on every chunk)
            old = self.usage or Usage(None, None)
            self.usage = Usage(report["prompt_tokens"] or old.prompt_tokens,
                               report["completion_tokens"] if report["completion_tokens"] is not None
                               else old.completion_tokens, _last(report["cached_tokens"], old.cached_tokens),
                               _last(report["cache_write_tokens"], old.cache_write_tokens))
        self.usage = normalise("usage", self.usage, resp)
        shown = ""
        for choice in getattr(resp, "choices", None) or ():
            if getattr(choice, "index", None) not in (None, 0):
                continue  # only the first choice is the answer
            self.choices += 1
            self.finish = getattr(choice, "finish_reason", None) or self.finish
            part = getattr(choice, "message" if whole else "delta", None)
            if part is None:
                continue
            reasoning = read_reasoning(part)
            self.meter.add(reasoning)
            self.reasoning.append(reasoning)
            text = read_text(part)
            self.meter.add(text)
            self.text.append(text)
            self.text_chars += len(text)
            shown += self._visible(text)
            for n, tc in enumerate(getattr(part, "tool_calls", None) or ()):
                self._add_call(tc, n if whole else getattr(tc, "index", None))
        return shown

    def _visible(self, text: str) -> str:
        """The part of `text` to show live: a leading <think> block (reasoning inline) is not the answer."""
        if self._held is None or not text:
            if self._trim:  # white space after </think> is not part of the answer either
                text = text.lstrip()
                self._trim = not text
            return text
        before = len(self._held)
        self._held += text
        head = self._held.lstrip()
        if not head or "<think>".startswith(head):
            return ""  # undecided: it may become a <think> block
        if not head.startswith("<think>"):
            shown, self._held = self._held, None
            return shown
        end = self._held.find("</think>", max(0, before - len("</think>")))
        if end < 0:
            return ""  # inside the block
        shown, self._held = self._held[end + len("</think>"):].lstrip(), None
        self._trim = not shown
        return shown

    def _add_call(self, tc: Any, index: int | None) -> None:
        """A tool-call delta to the call it continues, or a new call (SPEC L2). A delta without `index` continues
        the last call; a delta whose id differs from its call's, or that names a tool again after that call's
        arguments are complete JSON (all calls at index 0, whole calls without index), starts a new one."""
        call_id = getattr(tc, "id", None) or ""
        name = getattr(getattr(tc, "function", None), "name", None) or ""
        raw, arguments = read_arguments(tc)
        call = self._at.get(index) if index is not None else (self.calls[-1] if self.calls else None)
        if call is None or (call_id and call.id and call_id != call.id) or (
                name and call.name and call.complete()):
            call = _Call()
            self.calls.append(call)
            if index is not None:
                self._at[index] = call
        call.id = call.id or call_id
        if name and not call.name.endswith(name):  # llama.cpp repeated the whole name on every delta
            call.name += name
        self.meter.add(arguments)
        call.size += len(arguments.encode("utf-8", "surrogatepass")) if not arguments.isascii() else len(arguments)
        if call.refused or self.meter.over_call(call.size):  # L10: not kept, answered with a failure by the loop
            call.refused, call.arguments = True, []
            return
        if raw is not None and not isinstance(raw, str):  # an object is the whole arguments
            call.arguments = [arguments]
        elif arguments:
            call.arguments.append(arguments)

    def message(self) -> dict[str, Any]:
        """The assistant message (OpenAI shape, plus `reasoning` kept apart from the answer)."""
        text = "".join(self.text)
        reasoning = "".join(self.reasoning)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            seen: set[str] = set()
            calls = []
            refused: dict[str, str] = {}
            for n, call in enumerate(self.calls):
                call_id = call.id
                if not call_id or call_id in seen:  # empty or repeated ids would mix up the results (C4)
                    call_id = f"call_{n}_{int(self.start * 1e6) % 10**9}"
                seen.add(call_id)
                if call.refused:
                    refused[call_id] = self.meter.refusal(call.name, call.size)
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": call.name,
                                           "arguments": "{}" if call.refused else "".join(call.arguments)}})
            message["tool_calls"] = calls
            if refused:
                message[REFUSED_CALLS_KEY] = refused
        if reasoning:
            message["reasoning"] = reasoning
        return normalise("message", message, self)  # type: ignore[no-any-return]


