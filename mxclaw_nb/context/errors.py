"""SPEC C9: recognise a provider's "prompt too long" error from its message text (the one classifier).

Providers word it differently (OpenAI: "maximum context length", Anthropic: "prompt is too long",
vLLM/llama.cpp: "too many tokens"), so the loop matches the SPEC's pattern on the error text and
nothing else; status codes vary too much between servers to be trusted.
"""

from __future__ import annotations

import re

# SPEC C9's pattern (`prompt too long|context length|too many tokens`), plus the same condition as other
# servers spell it (Anthropic-style "prompt is too long", OpenAI's code, llama.cpp's "exceeds the context size").
PROMPT_TOO_LONG_RE = re.compile(
    r"prompt (?:is )?too long|context length|too many tokens|context_length_exceeded"
    r"|exceeds? the (?:available )?context (?:size|window)", re.IGNORECASE)


def is_prompt_too_long(error_message: str | None) -> bool:
    """True when a provider error message means the request exceeded the model's context."""
    return bool(error_message) and bool(PROMPT_TOO_LONG_RE.search(error_message or ""))
