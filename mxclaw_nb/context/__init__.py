"""The pure context engine (SPEC C1-C10): messages in, request view + provenance out.

Standard library only — no I/O, clock, pandas or IPython — so it can be tested exhaustively, replayed
over thousands of stored sessions, and used from any notebook without the rest of the agent. The
loop, the store, the widgets and the analysis depend on it; it depends on nothing of theirs.
"""

from mxclaw_nb.context.errors import is_prompt_too_long
from mxclaw_nb.context.fallback import fallback_window
from mxclaw_nb.context.layers import LAYERS, layer_tokens, message_layer
from mxclaw_nb.context.lineage import Lineage, compose_lineage, lineage_messages, lineage_rows
from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.context.pipeline import ContextPolicy, build_fallback_view, build_request_view
from mxclaw_nb.context.prefix import PrefixState, SharedPrefix, shared_prefix
from mxclaw_nb.context.repair import repair_tool_call_transcript
from mxclaw_nb.context.rows import Spliced, copied, with_appended
from mxclaw_nb.context.stages import STAGES
from mxclaw_nb.context.summary import build_structured_summary
from mxclaw_nb.context.tail import safe_tail_start
from mxclaw_nb.context.tokens import TokenCache, estimate_messages, estimate_text, estimate_tokens
from mxclaw_nb.context.view import (
    ACTIONS,
    MessageRecord,
    Provenance,
    RequestView,
    SentRecord,
)

__all__ = [
    "ACTIONS", "LAYERS", "STAGES", "ContextPolicy", "Lineage", "MessageRecord", "PrefixState", "Provenance",
    "RequestView", "SentRecord", "SharedPrefix", "Spliced", "TokenCache", "build_fallback_view", "build_request_view",
    "build_structured_summary",
    "compose_lineage", "copied", "estimate_messages", "estimate_text", "estimate_tokens", "fallback_window",
    "is_prompt_too_long",
    "layer_tokens", "lineage_messages", "lineage_rows", "message_layer", "placeholder_for",
    "repair_tool_call_transcript", "safe_tail_start", "shared_prefix", "with_appended",
]

# C12: the strategies that live in their own modules register themselves on import. The package imports them
# here (not strategies.py, which they import: that was a cycle), so any use of the engine sees the whole registry.
from mxclaw_nb.context import cache_variants as _cache_variants  # noqa: E402,F401 - registers `<name>-cache` (E4)
from mxclaw_nb.context import model_summary as _model_summary  # noqa: E402,F401 - registers `model-summary` (C11)
