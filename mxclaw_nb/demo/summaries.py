"""The demo model's answer to a summary request (SPEC C11): a deterministic, anchored-iterative summary.

Why: a `model-summary` replay or a live session on the offline demo needs a model that writes summaries, and the
writing must be deterministic so notebooks and tests can check it. The request is the engine's (`summary_prompt`:
the earlier summary to extend, the messages, the C6 scaffold, ending with `ASK`); the answer merges the earlier
summary with the scaffold section by section (the earlier summary's items first, then new ones; never rewritten
from scratch), keeps every path and the start of every failure and of the latest goal (the gates' C6 facts) and
clips the other items, so it is usually shorter than the C6 text, and shorter than the messages it replaces
unless they were few (then the engine's gate rejects it and C6 stands in, as for a real model).
"""

from __future__ import annotations

from mxclaw_nb.context.model_summary import ASK
from mxclaw_nb.messages import SUMMARY_PREFIX

EARLIER = "Extend this earlier summary with the newer messages (merge, do not start over):\n"
SCAFFOLD = "Scaffold (the deterministic summary of the same messages):\n"
HEAD = "Summary written by the demo model"
# per section: how many items are kept (the latest; None: all) and how long each may be (None: whole)
KEEP: dict[str, tuple[int | None, int | None]] = {
    "Goals:": (3, 90), "Files and tools touched:": (None, None), "Failures to avoid:": (None, 60),
    "Last useful assistant state:": (1, 160), "Kernel state:": (None, 80),
}


def is_summary_request(question: str) -> bool:
    """True for the engine's summary request (its last user message ends with `ASK`)."""
    return question.rstrip().endswith(ASK)


def _sections(text: str) -> dict[str, list[str]]:
    """`Header:` -> its `- item` lines (in order), from a C6 text or an earlier summary."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith("- "):
            current = out.setdefault(line, [])
        elif line.startswith("- ") and current is not None and line != "- None recorded":
            current.append(line[2:])
    return out


def _clip(item: str, chars: int | None) -> str:
    return item if chars is None or len(item) <= chars else item[: chars - 1].rstrip() + "…"


def write_summary(question: str) -> str:
    """The summary for the engine's request text `question` (see the module doc)."""
    body = question[: question.rindex(ASK)] if ASK in question else question
    scaffold = body[body.index(SCAFFOLD) + len(SCAFFOLD):] if SCAFFOLD in body else ""
    earlier = ""
    if EARLIER in body:
        rest = body[body.index(EARLIER) + len(EARLIER):]
        earlier = rest[: rest.index("\n\nMessages #")] if "\n\nMessages #" in rest else rest
    old, new = _sections(earlier), _sections(scaffold)
    lines = [SUMMARY_PREFIX, HEAD + (" (merged into the earlier summary)." if earlier else ".")]
    for header in [*KEEP, *(h for h in [*old, *new] if h not in KEEP)]:
        count, chars = KEEP.get(header, (None, 100))
        items: dict[str, None] = {}
        for item in [*old.get(header, []), *new.get(header, [])]:
            items.setdefault(_clip(item, chars), None)
        kept = list(items)
        if header == "Last useful assistant state:" and new.get(header):  # the newest state replaces the earlier
            kept = [_clip(new[header][-1], chars)]
        if header == "Goals:" and new.get(header):  # the latest goal last (so it is kept whatever the count)
            latest = _clip(new[header][-1], chars)
            kept = [g for g in kept if g != latest] + [latest]
        if count is not None:
            kept = kept[-count:]
        if kept:
            lines += [header, *(f"- {item}" for item in kept)]
    return "\n".join(lines)
