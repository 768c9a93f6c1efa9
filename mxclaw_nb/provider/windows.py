"""Model context windows: how many tokens a model can read, for the context policy's budget (SPEC C2, L2).

Why: the engine compacts against a window it must know before the first call. `MXCLAW_CONTEXT_WINDOW` says it
for any model; otherwise a table of known models (matched on the longest prefix, so `qwen2.5-coder:7b` finds
`qwen2.5-coder`), else a stated default. The README's settings section names `KNOWN_CONTEXT_WINDOWS`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from mxclaw_nb.settings import DEMO_MODEL  # one owner: the settings table

__all__ = ["DEFAULT_CONTEXT_WINDOW", "KNOWN_CONTEXT_WINDOWS", "context_window_for"]

DEFAULT_CONTEXT_WINDOW = 32_000  # stated default for models not in the table
KNOWN_CONTEXT_WINDOWS: dict[str, int] = {
    DEMO_MODEL: 16_000,
    "gpt-4o": 128_000, "gpt-4o-mini": 128_000, "gpt-4-turbo": 128_000, "gpt-4": 8_192, "gpt-3.5-turbo": 16_385,
    "gpt-4.1": 1_047_576, "gpt-4.1-mini": 1_047_576, "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000, "gpt-5-mini": 400_000, "gpt-5-nano": 400_000,
    "o1": 200_000, "o3": 200_000, "o3-mini": 200_000, "o4-mini": 200_000,
    "llama3": 8_192, "llama3.1": 131_072, "llama3.2": 131_072, "llama3.3": 131_072,
    "qwen2.5": 32_768, "qwen2.5-coder": 32_768, "qwen3": 40_960, "mistral": 32_768, "mistral-nemo": 131_072,
    "deepseek-chat": 65_536, "deepseek-reasoner": 65_536, "gemma2": 8_192, "gemma3": 131_072, "phi3": 4_096,
}


def context_window_for(model: str, env: Mapping[str, str] = os.environ) -> int:
    """Context window in tokens: MXCLAW_CONTEXT_WINDOW, else the table (longest prefix), else the default."""
    raw = env.get("MXCLAW_CONTEXT_WINDOW")
    if raw:
        try:
            value = int(raw.replace("_", "").strip())
        except ValueError:
            value = 0
        if value <= 0:
            raise ValueError(f"MXCLAW_CONTEXT_WINDOW must be a positive whole number of tokens (got {raw!r})")
        return value
    name = (model or "").lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" -> "gpt-4o"
    best = ""
    for known in KNOWN_CONTEXT_WINDOWS:
        if name == known or (name.startswith(known) and name[len(known)] in "-:@." and len(known) > len(best)):
            if name == known:
                return KNOWN_CONTEXT_WINDOWS[known]
            best = known
    return KNOWN_CONTEXT_WINDOWS[best] if best else DEFAULT_CONTEXT_WINDOW
