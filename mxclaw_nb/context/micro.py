"""SPEC C5/K2: microcompaction, replacing old successful tool outputs with a (typed) length placeholder.

Tried before any summary because it loses the least: no message disappears, the call/result pairs
and the roles stay exactly as they were, only the bulk of old build logs and file dumps goes. Failure
evidence (flagged errors and texts with `Tool failed`, `Invalid`, `Permission denied`, `Forbidden`)
is never replaced, since it is what stops the model from repeating a mistake.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mxclaw_nb.messages import Message, content_text, is_failure

PLACEHOLDER = "[old tool output compacted: {n} characters]"
TYPED_PLACEHOLDER = "[old tool output compacted: {n} characters; {facts}]"
RECALL = "; recall #{seq}"  # C13: the stored message the placeholder replaces (texts version 2, context.actions)
# A placeholder fed back by C7 (next_input) is already compacted: replacing it again would lose N.
_PLACEHOLDER_RE = re.compile(r"\[old tool output compacted: [\d,]+ characters(; [^\n]*)?\]")
_TYPED_RE = re.compile(r"\[old tool output compacted: [\d,]+ characters; (?!recall #\d+\])[^\n]*\]")
FACTS_KEY = "facts"  # K2: structured facts a kernel tool recorded on its result (never live objects)
_MAX_COLUMNS = 3
_MAX_NAMES = 4
_FACT_CHARS = 80


def _clip(text: str, limit: int = _FACT_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _shape(shape: Any) -> str:
    if isinstance(shape, (list, tuple)) and shape:
        return "x".join(f"{int(d):,}" if isinstance(d, int) else str(d) for d in shape)
    return ""


def type_facts(facts: Mapping[str, Any]) -> str:
    """SPEC K2: the `<type facts>` part of a typed placeholder, from recorded facts only (pure, deterministic)."""
    parts: list[str] = []
    kind = str(facts.get("kind") or "")
    vtype = _clip(facts.get("type") or "", 40)
    if kind == "plot":
        parts.append("plot: " + _clip(facts.get("caption") or vtype or "figure"))
    elif vtype:
        head = f"{vtype} {_shape(facts.get('shape'))}".strip()
        columns = [str(c) for c in facts.get("columns") or []]
        if columns:
            shown = ", ".join(_clip(c, 24) for c in columns[:_MAX_COLUMNS])
            head += f" ({shown}{', ...' if len(columns) > _MAX_COLUMNS else ''})"
        elif facts.get("dtype"):
            head += f" {_clip(facts['dtype'], 20)}"
        parts.append(head)
    if facts.get("exc_type"):
        frame = f" at {_clip(facts['frame'], 60)}" if facts.get("frame") else ""
        parts.append(f"{_clip(facts['exc_type'], 40)}: {_clip(facts.get('exc_message') or '', 80)}{frame}")
    names = sorted({str(n) for n in facts.get("variables") or []})
    if names:
        shown = ", ".join(names[:_MAX_NAMES]) + (", ..." if len(names) > _MAX_NAMES else "")
        parts.append(f"still in the kernel as {shown}")
    elif facts.get("count") is not None and kind:
        parts.append(f"{int(facts['count']):,} {kind}")
    return "; ".join(p for p in parts if p)


def is_typed_placeholder(text: Any) -> bool:
    """True when `text` is a K2 typed placeholder (a C5 placeholder with type facts after the count)."""
    return isinstance(text, str) and _TYPED_RE.fullmatch(text) is not None


def stays(message: Message) -> bool:
    """True when a message never gets a C5 placeholder, whatever seq it would name: not a tool result, a failure,
    or a placeholder already (`placeholder_for` returns None for it)."""
    return (message.get("role") != "tool" or is_failure(message)
            or _PLACEHOLDER_RE.fullmatch(content_text(message.get("content"))) is not None)


def placeholder_for(message: Message, recall: int | None = None, stays_checked: bool = False) -> str | None:
    """The placeholder text for a tool result, or None when it must stay (not a tool, failure, not shorter).

    `recall`: the stored seq it replaces, named at the end (C13, `; recall #41`); None gives the version 1 text.
    `stays_checked`: the caller already found `stays(message)` False (not asked again)."""
    if not stays_checked and stays(message):
        return None
    original = content_text(message.get("content"))
    facts = message.get(FACTS_KEY)
    typed = type_facts(facts) if isinstance(facts, Mapping) else ""
    tail = "" if recall is None else RECALL.format(seq=recall)
    if typed:
        text = TYPED_PLACEHOLDER.format(n=f"{len(original):,}", facts=typed + tail)
        if len(text) < len(original):
            return text
    text = PLACEHOLDER.format(n=len(original)) if not tail else TYPED_PLACEHOLDER.format(
        n=len(original), facts=tail[2:])
    return text if len(text) < len(original) else None


def micro_summary(replaced: int, chars: int, before: int, after: int, counter: str = "estimate",
                  label: str = "microcompaction") -> str:
    """The event summary for a microcompaction (starts with `[microcompaction]`, C10; a C12 strategy's own
    label, e.g. `[masking]`, for its placeholders)."""
    unit = "est. tokens" if counter == "estimate" else f"{counter} tokens"
    return (f"[{label}] replaced {replaced} old tool output(s) ({chars:,} characters) with "
            f"placeholders; {before:,} -> {after:,} {unit}")
