"""Tool calls written as text: read them back into `tool_calls` (SPEC L2, L7, S2).

Why: many local setups answer a tool-calling request with the call in the *text* instead of `tool_calls`:
Qwen2.5-Coder writes a fenced ```json block whatever its prompt says, and llama.cpp of late 2026 no longer parses
that; Ollama models without a tool template, LM Studio, older vLLM parsers and the Hermes, Mistral and Llama 3
formats do the same. Stored as the final answer, such a call ends the turn after one step. This reader
recognises, in an answer that carries no `tool_calls`:

- ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen; one or more tags);
- ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` and ``[TOOL_CALLS]name[ARGS]{...}`` (Mistral);
- ``{"name": ..., "parameters": {...}}`` (Llama 3 JSON, optionally after ``<|python_tag|>``);
- a fenced (```json ... ```) or bare JSON object (or a list of them) with ``name`` and ``arguments``.

A candidate becomes a call only when it names a tool the request offered AND its arguments validate against
that tool's JSON schema (``jsonschema``); anything else (a JSON object naming no offered tool, invalid
arguments, prose that mentions a tool) stays text, so a model that *shows* an example is not run. A bare
object must be the whole answer; fenced blocks and tags may sit in prose, but then every block must be a
valid call (a half-valid answer stays text). The caller keeps the original text as the message content (S2)
and adds the calls; each use is reported as a `provider.note` (the adapter's account of what it did).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = ["FORMATS", "TextCalls", "read_text_calls", "text_calls_note"]

#: the formats recognised, by the name a note and the test server's quirks use
FORMATS = ("hermes", "mistral", "llama3", "fenced", "bare")

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?:json|tool_call|tool_code)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL | re.IGNORECASE)
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\A\s*([A-Za-z0-9_.-]+)\s*\[ARGS\]\s*(.*)\Z", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class TextCalls:
    """What the reader found: the calls (OpenAI shape, string arguments) and the format they were written in."""

    calls: list[dict[str, Any]]
    format: str


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _objects(value: Any) -> list[Any] | None:
    """A call object or a list of them as a list; None for anything else."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value
    return None


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    cls = validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _offered(tools: Sequence[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Offered tool name -> its parameters schema (`{}` when it declares none)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def _valid_call(obj: Any, offered: dict[str, dict[str, Any]], *, keys: tuple[str, ...]) -> tuple[str, Any] | None:
    """(name, arguments) when `obj` names an offered tool and its arguments (under one of `keys`) validate."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:  # {"function": {"name":..., "arguments":...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or name not in offered:
        return None
    present = [k for k in keys if k in obj]
    if len(present) != 1 or set(obj) - {"name", present[0], "id", "type"}:
        return None  # exactly a name and its arguments: anything else is data, not a call
    args = obj[present[0]]
    if isinstance(args, str):  # arguments as a JSON string (the wire format's own shape)
        args = _json(args)
    if not isinstance(args, dict):
        return None
    try:
        if not _validator(json.dumps(offered[name], sort_keys=True)).is_valid(args):
            return None
    except Exception:  # a tool schema jsonschema cannot read: nothing can be checked, so nothing is read
        return None
    return name, args


def _calls_from(objects: list[Any], offered: dict[str, dict[str, Any]], keys: tuple[str, ...]
                ) -> list[tuple[str, Any]] | None:
    found = [_valid_call(o, offered, keys=keys) for o in objects]
    return None if not found or any(f is None for f in found) else [f for f in found if f is not None]


def _blocks(bodies: list[str], offered: dict[str, dict[str, Any]]) -> list[tuple[str, Any]] | None:
    """The calls of several text blocks (tags, fences), each a call object or a list of them; all must be calls."""
    objects: list[Any] = []
    for body in bodies:
        found = _objects(_json(body.strip()))
        if found is None:
            return None
        objects += found
    return _calls_from(objects, offered, ("arguments", "parameters"))


def _hermes(text: str, offered: dict[str, dict[str, Any]]) -> list[tuple[str, Any]] | None:
    return _blocks(_TAG.findall(text), offered) if "<tool_call>" in text else None


def _mistral(text: str, offered: dict[str, dict[str, Any]]) -> list[tuple[str, Any]] | None:
    at = text.find(_MISTRAL)
    if at < 0:
        return None
    objects: list[Any] = []
    for part in text[at + len(_MISTRAL):].split(_MISTRAL):
        named = _MISTRAL_ARGS.match(part)  # v11+ tokenizer: [TOOL_CALLS]name[ARGS]{...}
        if named:
            objects.append({"name": named.group(1), "arguments": _json(named.group(2).strip())})
            continue
        found = _objects(_json(part.strip()))
        if found is None:
            return None
        objects += found
    return _calls_from(objects, offered, ("arguments", "parameters"))


def _fenced(text: str, offered: dict[str, dict[str, Any]]) -> list[tuple[str, Any]] | None:
    blocks = _FENCE.findall(text)
    return _blocks(blocks, offered) if blocks else None


def _bare(text: str, offered: dict[str, dict[str, Any]]) -> tuple[str, list[tuple[str, Any]]] | None:
    body = text.strip()
    llama = body.startswith(_PYTHON_TAG)
    if llama:
        body = body[len(_PYTHON_TAG):].strip()
    if not body.startswith(("{", "[")):
        return None
    value = _json(body)
    if value is None and ";" in body:  # Llama 3.1 writes several calls separated by ';'
        parts = [_json(p) for p in body.split(";") if p.strip()]
        value = parts if all(isinstance(p, dict) for p in parts) else None
    objects = _objects(value)
    if objects is None:
        return None
    uses_parameters = all(isinstance(o, dict) and "parameters" in o for o in objects)
    calls = _calls_from(objects, offered, ("arguments", "parameters"))
    if calls is None:
        return None
    return ("llama3" if llama or uses_parameters else "bare"), calls


def read_text_calls(text: str | None, tools: Sequence[dict[str, Any]] | None, *, id_prefix: str = "call_text"
                    ) -> TextCalls | None:
    """The tool calls written in `text` (see the module docstring), or None when there are none to read."""
    if not text or not tools:
        return None
    offered = _offered(tools)
    if not offered:
        return None
    found: tuple[str, list[tuple[str, Any]]] | None = None
    for fmt, read in (("hermes", _hermes), ("mistral", _mistral), ("fenced", _fenced)):
        calls = read(text, offered)
        if calls:
            found = fmt, calls
            break
    if found is None:
        found = _bare(text, offered)
    if found is None:
        return None
    fmt, calls = found
    return TextCalls([{"id": f"{id_prefix}_{n}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                      for n, (name, args) in enumerate(calls)], fmt)


_FORMAT_WORDS = {"hermes": "<tool_call> tags (Hermes/Qwen format)", "mistral": "[TOOL_CALLS] (Mistral format)",
                 "llama3": "Llama 3 JSON ({\"name\", \"parameters\"})", "fenced": "a fenced JSON block",
                 "bare": "a bare JSON object"}


def text_calls_note(found: TextCalls, model: str) -> str:
    """The provider.note of one use (L2): what was read, from which format, and how to turn it off."""
    names = ", ".join(c["function"]["name"] for c in found.calls)
    n = len(found.calls)
    return (f"Model {model} wrote {n} tool call{'' if n == 1 else 's'} ({names}) as text, in "
            f"{_FORMAT_WORDS[found.format]}, not in `tool_calls`; mxclaw_nb read {'it' if n == 1 else 'them'} "
            "as tool calls because each names an offered tool and its arguments match that tool's schema. The "
            "answer's text is stored as written. Serve the model with a tool-call template (llama.cpp --jinja) "
            "to avoid this, or turn it off with text_calls=off.")


def apply_text_calls(completion: Any, tools: Sequence[dict[str, Any]] | None, *, shown: bool = True) -> bool:
    """Give `completion` (a provider Completion) the calls its text carries, if any; True when it did.

    The message keeps its text as written (S2) and gains `tool_calls`; the finish reason becomes
    `tool_calls`; a note (a dict: `note`, `format`, `calls`, `shown`) is added for the loop to store as a
    `provider.note` event. `shown=False` marks a repeat the live log does not print again (stored all the same).
    """
    message = completion.message
    if message.get("tool_calls"):
        return False
    found = read_text_calls(message.get("content"), tools, id_prefix=f"call_text_{id(completion) % 10**6}")
    if found is None:
        return False
    message["tool_calls"] = found.calls
    completion.finish_reason = "tool_calls"
    completion.notes.append({"note": text_calls_note(found, completion.model), "format": found.format,
                             "calls": len(found.calls), "text_calls": True, "shown": shown})
    return True
