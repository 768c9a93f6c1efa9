"""The fixed part of a request that is no message: the tool definitions (SPEC T1-T3, N2).

Why: every model call carries the schemas of the offered tools (7 tools and about 3,200 characters of JSON for
the agent, 10 in a kernel). A chat template renders them into the prompt, so the provider counts them in
`prompt_tokens`, but C1 counts messages only: the first call of every session was 41-47% low against a real
model, and the threshold check, `%agent dry-run` and the gauge were off by the same amount. Here they are
counted once per request as their own layer, "tool definitions", from the schema text the caller passes in
(data: the engine does no I/O). C1 for messages stays exactly as specified (T1).

The estimate: the C1 estimate of the compact schema JSON (CJK characters + a quarter token per other character),
plus a frame per tool and the template's tool-use instructions once per request: ``C1(text) + TOOL_FRAME_TOKENS *
tools + TOOLS_PREAMBLE_TOKENS``; with an exact counter (T2, e.g. o200k_base) its count of the text plus the same
frames. Measured against Qwen2.5-Coder-1.5B through llama.cpp `--jinja` (7 tools, 3,018 characters: 901 tokens
reported for the tools, 917 estimated; bench/realmodel_session.py). The calibrated counter learns the rest from
reported usage: the agent gives it the reported count minus this layer (T3).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mxclaw_nb.context.tokens import estimate_text  # C1 of a bare string

__all__ = ["TOOLS_PREAMBLE_TOKENS", "TOOL_FRAME_TOKENS", "tool_definitions_text", "tool_definitions_tokens"]

TOOL_FRAME_TOKENS = 6  # per tool: the template's frame around one definition
TOOLS_PREAMBLE_TOKENS = 120  # per request with tools: the template's tool-use instructions (Qwen's: ~110)


def tool_definitions_text(tools: Sequence[dict[str, Any]] | None) -> str:
    """The compact JSON of the tool schemas a request carries ("" for none): what the layer is counted from."""
    if not tools:
        return ""
    return json.dumps(list(tools), separators=(",", ":"), ensure_ascii=False, sort_keys=False)


def _tool_count(text: str) -> int:
    try:
        value = json.loads(text)
    except ValueError:
        return 1
    return len(value) if isinstance(value, list) else 1


def tool_definitions_tokens(text: str, counter: Any = None) -> int:
    """Tokens of the tool definitions `text` (compact JSON of the schemas; "" -> 0) under `counter`.

    A counter with an exact `text_count` (T2's FunctionCounter) counts the text; any other (C1, calibrated) uses
    the schema estimate above. Frames and the preamble are added either way.
    """
    if not text:
        return 0
    frames = TOOL_FRAME_TOKENS * _tool_count(text) + TOOLS_PREAMBLE_TOKENS
    text_count = getattr(counter, "text_count", None)
    if callable(text_count):
        return int(text_count(text)) + frames
    return estimate_text(text) + frames
