"""Token counts the local server reports as usage: exact o200k_base when installed, else the C1 estimate.

Why: token calibration (SPEC T2/T3) learns from provider-reported `prompt_tokens`, so the
offline demo and test server must report figures that behave like a real provider's. With the offline
o200k_base encoding (tiktoken + the rank files shipped by bpe-openai) the count follows OpenAI's
published chat recipe; without it the C1-style estimate serves. This is a small local re-statement of
C1 on purpose: the server is a stand-in for a foreign provider and must not share the context
engine's code it is used to test.
"""

from __future__ import annotations

import json
import math
import re
import threading
from typing import Any

__all__ = ["cached_prefix_tokens", "count_completion_tokens", "count_prompt_tokens", "estimate_message",
           "message_text", "o200k_encoding"]

_CJK = re.compile("[\u1100-\u11ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3200-\u33ff"
                  "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
                  "\U00020000-\U0003134f]")


def message_text(content: object) -> str:
    """Text of a message's content (string, or the text parts of a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def estimate_message(message: dict) -> int:
    """C1-style estimate of one message (a local helper; the context engine owns the real one)."""
    text = message_text(message.get("content"))
    cjk = len(_CJK.findall(text))
    tokens = cjk + math.ceil((len(text) - cjk) / 4)
    content = message.get("content")
    if isinstance(content, list):
        tokens += 2000 * sum(1 for p in content if isinstance(p, dict) and p.get("type") == "image_url")
    if message.get("tool_calls"):
        tokens += math.ceil(len(json.dumps(message["tool_calls"], separators=(",", ":"), ensure_ascii=False)) / 4)
    return tokens


_exact_lock = threading.Lock()
_exact_cache: list[Any] = []


def o200k_encoding() -> Any | None:
    """tiktoken o200k_base from offline data: mxclaw_nb.tokenizers if present, else a private fallback."""
    with _exact_lock:
        if not _exact_cache:
            _exact_cache.append(_load_o200k())
        return _exact_cache[0]


def _load_o200k() -> Any | None:
    try:
        from mxclaw_nb.tokenizers import exact_encoding

        return exact_encoding("o200k_base")
    except Exception:  # the shared adapter is optional: use our own loader
        pass
    try:  # private fallback: bpe-openai ships tiktoken's rank files and the matching pattern/specials
        import tiktoken
        from bpe_openai import registry

        return tiktoken.Encoding(**registry.o200k_base())
    except Exception:  # no tokenizer data: the estimate serves
        return None


TOOL_FRAME = 6  # per tool definition: the template's frame around it (name line, braces)
TOOLS_HEADER = 100  # per request with tools: the template's tool-use instructions (Qwen2.5's are ~110 tokens)


def count_prompt_tokens(messages: list[dict], counter: str = "auto", tools: list[dict] | None = None
                        ) -> tuple[int, str]:
    """Token count of request messages (and the tool definitions it carries) and the counter used.

    "o200k_base" follows OpenAI's published chat recipe: 4 framing tokens per message plus its content
    and tool-call JSON, plus 3 reply-priming tokens. "estimate" is the C1 sum (no framing).
    "auto" picks o200k_base when the offline encoding data is installed. Like a real server's chat template,
    `tools` count too (T1-T3): the compact JSON of the schemas, a frame per tool and a header.
    """
    enc = _encoding_for(counter)
    defs = json.dumps(tools, separators=(",", ":"), ensure_ascii=False) if tools else ""
    frames = TOOL_FRAME * len(tools) + TOOLS_HEADER if tools else 0
    if enc is None:
        return (sum(estimate_message(m) for m in messages if isinstance(m, dict))
                + (math.ceil(len(defs) / 4) + frames if defs else 0)), "estimate"
    return (3 + sum(4 + _exact_message(m, enc) for m in messages if isinstance(m, dict))
            + (len(enc.encode_ordinary(defs)) + frames if defs else 0)), "o200k_base"


def count_completion_tokens(message: dict, counter: str = "auto") -> int:
    """Tokens of a generated assistant message (text + tool-call JSON, no framing)."""
    enc = _encoding_for(counter)
    return estimate_message(message) if enc is None else _exact_message(message, enc)


def _encoding_for(counter: str) -> Any | None:
    if counter not in ("auto", "o200k_base", "estimate"):
        raise ValueError(f"unknown usage counter {counter!r}; use 'auto', 'o200k_base' or 'estimate'")
    enc = o200k_encoding() if counter != "estimate" else None
    if counter == "o200k_base" and enc is None:
        raise ValueError("usage counter 'o200k_base' needs tiktoken and bpe-openai installed")
    return enc


def _exact_message(m: dict, enc: Any) -> int:
    total = len(enc.encode_ordinary(message_text(m.get("content"))))
    if isinstance(m.get("content"), list):
        total += 2000 * sum(1 for p in m["content"] if isinstance(p, dict) and p.get("type") == "image_url")
    if m.get("tool_calls"):
        total += len(enc.encode_ordinary(json.dumps(m["tool_calls"], separators=(",", ":"), ensure_ascii=False)))
    return total


def cached_prefix_tokens(previous: list[dict] | None, messages: list[dict], counter: str = "auto",
                         minimum: int = 0, block: int = 1) -> int:
    """Prompt tokens a prefix cache serves (SPEC E1, as a server would report them): the tokens of the leading
    messages equal to the previous request's, counted as for usage (framing included), rounded down to
    `block` and 0 below `minimum` (OpenAI: 1,024 and 128; vLLM and llama.cpp: their block size)."""
    if not previous:
        return 0
    k = 0
    for a, b in zip(previous, messages, strict=False):
        if a != b:
            break
        k += 1
    enc = _encoding_for(counter)
    head = messages[:k]
    tokens = (sum(estimate_message(m) for m in head) if enc is None
              else sum(4 + _exact_message(m, enc) for m in head))
    tokens -= tokens % max(1, block)
    return tokens if tokens >= minimum else 0
