"""Analysis: import transcripts, replay and compare compaction policies, fact survival, estimator honesty.

Why: mxclaw_nb's context engine is a pure function of the transcript, so any stored or imported
session can be replayed under any policy without calling a model. This package answers "what would
a 32k window with a 4k tail have done to these 300 sessions?" as tidy pandas DataFrames: tokens
saved, stages reached, facts that stayed visible, and how honest the token estimate was. It reads
the store and files; it never writes anything except through the importers.
"""

from mxclaw_nb.analysis.agent_logs import import_claude_code, import_codex, parse_claude_code, parse_codex
from mxclaw_nb.analysis.compare import (
    compare,
    compare_harness,
    summarize_comparison,
    summarize_harness,
    summarize_policies,
)
from mxclaw_nb.analysis.facts import FACT_KINDS, Fact, extract_facts, fact_survival
from mxclaw_nb.analysis.honesty import content_kind, estimate_honesty, honesty_table, reported_honesty
from mxclaw_nb.analysis.importers import Conversation, ImportReport, import_openai_jsonl, read_openai_jsonl
from mxclaw_nb.analysis.policies import as_policy, policy_label
from mxclaw_nb.analysis.probes import Probe, derive_probes, evaluate_probes, score_answer, summarize_probes
from mxclaw_nb.analysis.replay import as_requests, replay
from mxclaw_nb.analysis.sources import conversations

__all__ = [
    "FACT_KINDS", "Conversation", "Fact", "ImportReport", "as_policy", "as_requests", "compare", "compare_harness",
    "content_kind",
    "conversations", "estimate_honesty", "extract_facts", "fact_survival", "honesty_table", "import_claude_code",
    "import_codex", "import_openai_jsonl", "parse_claude_code", "parse_codex", "policy_label", "read_openai_jsonl",
    "replay", "reported_honesty", "summarize_comparison", "summarize_harness", "summarize_policies",
    "Probe", "derive_probes", "evaluate_probes", "score_answer", "summarize_probes",
]
