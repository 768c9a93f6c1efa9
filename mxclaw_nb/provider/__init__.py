"""The OpenAI-compatible provider (SPEC L2, C9).

One module per concern: `client` (the call: streaming, retries, the deadline), `answer` (one answer assembled
from chunks or a body), `quirks` (the wire normalisers, one per test-server quirk), `errors` (`ProviderError`
and its classification), `windows` (model context windows), `wire` (the request body's encoding) and
`limits` (L10 bounds). The client (and so the `openai` package) loads on first use of one of its names. Which
provider serves a session (configured endpoint or the offline demo) is chosen in `mxclaw_nb.connect`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mxclaw_nb.provider.answer import Completion, Usage
    from mxclaw_nb.provider.client import OpenAIProvider
    from mxclaw_nb.provider.errors import ProviderError, is_prompt_too_long
    from mxclaw_nb.provider.windows import DEFAULT_CONTEXT_WINDOW, KNOWN_CONTEXT_WINDOWS, context_window_for

#: the package's face: name -> the module that owns it
_HOME = {"OpenAIProvider": "client", "Completion": "answer", "Usage": "answer", "ProviderError": "errors",
         "is_prompt_too_long": "errors", "DEFAULT_CONTEXT_WINDOW": "windows", "KNOWN_CONTEXT_WINDOWS": "windows",
         "context_window_for": "windows"}
__all__ = ["DEFAULT_CONTEXT_WINDOW", "KNOWN_CONTEXT_WINDOWS", "Completion", "OpenAIProvider", "ProviderError", "Usage",
           "context_window_for", "is_prompt_too_long"]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(import_module(f"mxclaw_nb.provider.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
