"""The stages a request view can reach, registered once (SPEC C0, C5, C6, C8, C9).

Why one table: the stage names travel from the engine into stored records, events, replays, plots, colours
and captions. Each of those reads this registry instead of its own list, so adding a stage is a row here,
the pass that produces it, and nothing else that lists stages. Order is the escalation order of C0:
nothing to do, then the cheapest compaction that gets under the threshold, then the costlier ones.
`colour` is plain data (a hex string) for the UI's palette; the engine never draws.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One stage: its stored name, what it means, its colour, and whether build_request_view produces it."""

    name: str
    description: str
    colour: str
    built: bool = True  # False: set by the loop (a C9 retry), not by the engine's passes


REGISTRY: tuple[Stage, ...] = (
    Stage("unchanged", "everything fits under the threshold: the view is the transcript, repaired (C4)", "#9e9e9e"),
    Stage("micro", "old successful tool outputs became placeholders (C5)", "#ffb300"),
    Stage("summary", "messages before the safe tail became one structured summary (C6)", "#43a047"),
    Stage("fallback", "the summary failed or did not fit: a window of the newest messages (C8)", "#f4511e"),
    Stage("prompt_too_long_retry", "the provider refused the prompt: the retry's view (C9)", "#b71c1c", built=False),
)
STAGE = {s.name: s for s in REGISTRY}
STAGES = tuple(s.name for s in REGISTRY if s.built)  # what build_request_view can return, in C0 order
ALL_STAGES = tuple(s.name for s in REGISTRY)
COMPACTING_STAGES = tuple(s for s in ALL_STAGES if s != "unchanged")
