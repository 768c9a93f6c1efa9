"""The OpenAI-compatible provider (SPEC L2, C9).

The client (and so the `openai` package) loads on first use of one of its names. Which provider serves a
session (configured endpoint or the offline demo) is chosen in `mxclaw_nb.connect`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mxclaw_nb.provider.client import (
        KNOWN_CONTEXT_WINDOWS,
        OpenAIProvider,
        ProviderError,
        context_window_for,
    )

__all__ = ["KNOWN_CONTEXT_WINDOWS", "OpenAIProvider", "ProviderError", "context_window_for"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mxclaw_nb.provider import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
