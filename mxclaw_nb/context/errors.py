"""SPEC C9: recognise a provider's "prompt too long" error from its message text (the one classifier).

Providers word it differently (OpenAI: "maximum context length", Anthropic: "prompt is too long",
vLLM/llama.cpp: "too many tokens"), so the loop matches the SPEC's pattern on the error text and
nothing else; status codes vary too much between servers to be trusted.
"""

from __future__ import annotations

import re

# SPEC C9's pattern (`prompt too long|context length|too many tokens`), plus the same condition as other
# OpenAI-compatible servers spell it, each as that server sends it:
#   Anthropic-style "prompt is too long"; OpenAI's code `context_length_exceeded` and its "reduce the length of the
#   messages"; llama.cpp "exceeds the available context size", "Context size has been exceeded." and its error type
#   `exceed_context_size_error`; vLLM V1 "The decoder prompt (length N) is longer than the maximum model length of
#   M"; xAI "maximum prompt length is"; Gemini "exceeds the maximum number of tokens allowed"; Hugging Face TGI
#   "`inputs` tokens + `max_new_tokens` must be <= N"; Bedrock "Input is too long for requested model"; "the
#   configured context size is"; Anthropic's `model_context_window_exceeded`; a proxy's HTTP 413 page ("Request
#   Entity Too Large", "Payload Too Large": the request's bytes, which the C8 window shrinks as well).
PROMPT_TOO_LONG_RE = re.compile(
    r"prompt (?:is )?too long|context length|too many tokens|context_length_exceeded"
    r"|exceeds? the (?:available )?context (?:size|window)|context size has been exceeded|configured context size"
    r"|exceed_context_size|context_window_exceeded|maximum (?:model|prompt) length"
    r"|exceeds the maximum number of tokens|reduce the length of the messages|input is too long"
    r"|inputs`? tokens \+ `?max_new_tokens`? must be|request entity too large|payload too large", re.IGNORECASE)

def is_prompt_too_long(error_message: str | None) -> bool:
    """True when a provider error message means the request exceeded the model's context."""
    return bool(error_message) and bool(PROMPT_TOO_LONG_RE.search(error_message or ""))
