"""What can happen to a message, registered once, with how a stored record rebuilds what was sent (SPEC N3, C13).

Why one table: action names travel from the engine into stored lineages, provenance rows, colours and captions,
like the stage names (`stages.py`). And a stored lineage does not keep the text of a placeholder: it is rebuilt
from the stored message. So the text is *versioned*: every stored lineage says which `TEXTS` version made its
texts (records written before there was a version are version 1), and `sent_form` rebuilds a message with that
version's rule. Rewording a placeholder is then a new version here, and an old record still decodes to exactly
what was sent at the time, never to text that was never sent.

Versions of the `placeholder` text:
1. `[old tool output compacted: N characters]` (typed, K2: `...; <type facts>]`), the C5 text.
2. the same, naming the stored message it replaces (C13): `[old tool output compacted: N characters; recall #41]`
   (typed: `...; <type facts>; recall #41]`).

Adding an action: one `Action` row (name, meaning, colour, its rebuild rule if the sent text differs from the
stored message) and the pass that produces it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.messages import Message

TEXTS = 2  # the version of the engine-made texts this code writes (see the module doc)
TEXT_VERSIONS = (1, 2)

Rebuild = Callable[[Message, Message, int, int], Message]  # (stored, sent form, seq, version) -> sent message


def _placeholder(stored: Message, sent: Message, seq: int, version: int) -> Message:
    text = placeholder_for(stored, recall=seq if version >= 2 else None)
    if text is None:
        raise ValueError(f"stored message {seq} is marked placeholder but has no placeholder")
    return {**sent, "content": text}


@dataclass(frozen=True)
class Action:
    """One action: its stored name, what it means, its colour, and how the sent message is rebuilt (None: as is)."""

    name: str
    meaning: str
    colour: str
    rebuild: Rebuild | None = None


REGISTRY: tuple[Action, ...] = (
    Action("kept", "sent as stored (sanitised)", "#9e9e9e"),
    Action("placeholder", "an old successful tool output replaced by its length placeholder (C5, K2, C13)",
           "#ffb300", _placeholder),
    Action("summarized", "an old message covered by the summary (C6)", "#1e88e5"),
    Action("dropped", "not sent: repair (C4) or the fallback window (C8)", "#d6d6d6"),
    Action("synthetic", "a failure result the repair made for a dangling call (C4)", "#8e24aa"),
    Action("summary", "a message the engine made: the summary or the fallback note (C6, C8)", "#43a047"),
)
ACTION = {a.name: a for a in REGISTRY}
ACTION_NAMES = tuple(a.name for a in REGISTRY)


def sent_form(action: str, stored: Message, sent: Message, seq: int, version: int = TEXTS) -> Message:
    """The message sent for stored message `seq` (its sanitised form `sent`) under `action`, with the texts of
    `version` (the stored record's)."""
    if version not in TEXT_VERSIONS:
        raise ValueError(f"unknown text version {version!r} (this code reads {TEXT_VERSIONS})")
    rule = ACTION[action].rebuild if action in ACTION else None
    return dict(sent) if rule is None else rule(stored, sent, seq, version)
