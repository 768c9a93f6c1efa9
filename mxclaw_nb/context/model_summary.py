"""SPEC C11: model-written summaries, planned and composed by the pure engine (the loop makes the call).

Why the split (pi's prepare/apply): the engine has no I/O, so it cannot ask a model. It decides *what* a summary
must cover (the stored seq range before the safe tail), gives the scaffold it must keep (the C6 sections) and the
previous summary to merge into (a later summary extends the earlier one over the newly old range, it is not
rewritten), and it composes the view from a summary the loop has recorded. Until one is recorded for that exact
coverage the C6 text stands in and the view carries a `SummaryPlan`; the loop asks the model, checks the gates
(`gate`) and records the result as an event (source, coverage, invalidation, merge: never a transcript message),
then rebuilds. A recorded summary is valid only for its coverage, model and prompt version, so re-entering a
session or replaying it reuses it and asks nothing (replay without records uses the C6 stand-in).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mxclaw_nb.context.pipeline import Summarizer, _Builder, microcompact
from mxclaw_nb.context.strategies import Strategy, register
from mxclaw_nb.context.summary import build_structured_summary, clip
from mxclaw_nb.context.tokens import estimate_text
from mxclaw_nb.context.view import RequestView
from mxclaw_nb.messages import SUMMARY_PREFIX, Message, content_text, tool_call_list, tool_call_name

PROMPT_VERSION = "c11-1"
SUMMARY_EVENT, REJECTED_EVENT = "context.summary", "context.summary_rejected"  # what the loop stores (C11)
ASK = "Write the summary now."  # the last line of the request (the shipped test server scripts answers by it)
MAX_MESSAGES, MESSAGE_CHARS = 80, 2_000  # the messages sent to the summariser are bounded


@dataclass(frozen=True)
class RecordedSummary:
    """A model-written summary as recorded (C11): its text and coverage (stored seqs start..stop, inclusive)."""

    start: int
    stop: int
    text: str
    source: str = ""  # model @ endpoint / prompt version: part of what makes it valid


@dataclass(frozen=True)
class SummaryPlan:
    """What the summary of one view must cover and keep (made by the engine, carried out by the loop)."""

    start: int
    stop: int
    scaffold: str  # the C6 text of the same messages: the sections it must keep
    previous: RecordedSummary | None  # merge into this one (same start, an earlier stop)
    messages: tuple[Message, ...]  # the messages to summarise (after `previous.stop` when merging), bounded
    replaced_tokens: int  # C1 estimate of the old messages the summary replaces (it must be shorter)
    free_form: bool = False


def summary_prompt(plan: SummaryPlan) -> list[Message]:
    """The request of the summary call: instructions, the previous summary, the messages, the scaffold."""
    lines = [f"#{m.get('seq', '?')} {m.get('role')}: {_text(m)}" for m in plan.messages]
    parts = ["You compress an agent's older conversation into a summary it will read instead of the messages.",
             "Keep every file path, every failure and the latest user goal listed in the scaffold; be shorter "
             "than the messages. Start with the line " + SUMMARY_PREFIX + "."]
    if plan.previous is not None:
        parts.append("Extend this earlier summary with the newer messages (merge, do not start over):\n"
                     + plan.previous.text)
    parts.append(f"Messages #{plan.start}-#{plan.stop}" + (" (those after the earlier summary)"
                                                          if plan.previous is not None else "") + ":\n"
                 + "\n".join(lines))
    parts.append("Scaffold (the deterministic summary of the same messages):\n" + plan.scaffold)
    return [{"role": "system", "content": "You write summaries of agent transcripts."},
            {"role": "user", "content": "\n\n".join(parts) + "\n\n" + ASK}]


def _text(m: Message) -> str:
    calls = " ".join(f"-> {tool_call_name(c)}" for c in tool_call_list(m) if isinstance(c, dict))
    return clip(content_text(m.get("content")) + (" " + calls if calls else ""), MESSAGE_CHARS)


def required_facts(scaffold: str) -> list[str]:
    """The C6 facts a model summary must keep: edited paths, recorded failures (their first 40 characters) and
    the latest goal (its first 40), read from the scaffold's sections."""
    facts: list[str] = []
    section = ""
    goals: list[str] = []
    for line in scaffold.splitlines():
        if line.endswith(":") and not line.startswith("- "):
            section = line
            continue
        if not line.startswith("- ") or line == "- None recorded":
            continue
        item = line[2:]
        if section == "Goals:":
            goals.append(item)
        elif section == "Files and tools touched:":
            facts.append(item)
        elif section == "Failures to avoid:":
            facts.append(item[:40])
    if goals:
        facts.append(goals[-1][:40])
    return facts


def gate(plan: SummaryPlan, text: str) -> str | None:
    """Why a model summary is rejected (C11), or None: not shorter than what it replaces, or a C6 fact missing
    (unless the plan is free-form). A failed or late call is the loop's own reason."""
    if not text.strip():
        return "the model returned an empty summary"
    if estimate_text(text) >= plan.replaced_tokens:
        return (f"not shorter than what it replaces ({estimate_text(text):,} >= {plan.replaced_tokens:,} est. "
                "tokens)")
    if not plan.free_form:
        flat = " ".join(text.split())
        missing = [f for f in required_facts(plan.scaffold) if " ".join(f.split()) not in flat]
        if missing:
            return f"drops a C6 fact: {missing[0]!r}"
    return None


def compose(text: str) -> str:
    """The model's text as the summary message (starts with the summary prefix, like C6's)."""
    text = text.strip()
    return text if text.startswith(SUMMARY_PREFIX) else f"{SUMMARY_PREFIX}\n{text}"


@dataclass(frozen=True)
class ModelSummary(Strategy):
    """The article's ladder with a model-written summary where one is recorded for the same coverage (C11)."""

    name: str = "model-summary"
    ladder: tuple[str, ...] = ("threshold (C2)", "placeholders (C5)", "model summary (C11) or C6 stand-in",
                               "fallback (C8)")
    free_form: bool = False
    deadline: float = 60.0  # seconds the summary call may take (the loop checks it)
    summaries: tuple[RecordedSummary, ...] = ()

    def params(self) -> dict[str, Any]:
        return {"free_form": self.free_form, "deadline": self.deadline}  # the recorded summaries are data

    def with_summary(self, summary: RecordedSummary) -> ModelSummary:
        """This strategy with one more recorded summary (the loop, after the gates passed)."""
        from dataclasses import replace

        return replace(self, summaries=(*self.summaries, summary))

    def find(self, start: int, stop: int) -> RecordedSummary | None:
        """The recorded summary of exactly start..stop (the latest recorded, when several)."""
        return next((s for s in reversed(self.summaries) if (s.start, s.stop) == (start, stop)), None)

    def build(self, b: _Builder, summarize: Summarizer | None) -> RequestView:
        if b.before <= b.policy.threshold:
            return b.finish("unchanged", None, None)
        conv = b.split()
        micro = microcompact(conv, b.step_messages, b.sent, b.tokens, b.layout_now, b.policy, b.before, b.recall_of,
                             b.cache)  # the session cache: placeholders made once (as the article's C5 pass)
        if micro.after <= b.policy.threshold or not conv.old:
            return b.finish_micro(conv, micro)
        seqs = [s for s in map(b.recall_of, conv.old) if s is not None]
        if not seqs:
            return b.summarize(conv, summarize)
        start, stop = seqs[0], seqs[-1]
        recorded = self.find(start, stop)
        if recorded is not None:
            text = recorded.text
            return b.summarize(conv, lambda _old: text)
        view = b.summarize(conv, summarize)  # the C6 stand-in until the loop records a model summary
        if view.stage != "summary":
            return view
        previous = next((s for s in reversed(self.summaries) if s.start == start and s.stop < stop), None)
        old = [(s, b.step_messages[k]) for k, s in zip(conv.old, map(b.recall_of, conv.old), strict=True)]
        todo = [{**m, "seq": s} for s, m in old if s is not None and (previous is None or s > previous.stop)]
        scaffold = build_structured_summary([m for _, m in old])
        plan = SummaryPlan(start, stop, scaffold, previous, tuple(todo[-MAX_MESSAGES:]),
                           sum(b.tokens[k] for k in conv.old), self.free_form)
        from dataclasses import replace

        return replace(view, plan=plan)


def recorded(payloads: Sequence[dict[str, Any]]) -> tuple[RecordedSummary, ...]:
    """Recorded summaries from stored `context.summary` event payloads (oldest first)."""
    out = []
    for p in payloads:
        cov = p.get("coverage") or []
        if len(cov) == 2 and isinstance(p.get("text"), str):
            src = p.get("source") or {}
            out.append(RecordedSummary(int(cov[0]), int(cov[1]), p["text"],
                                       f"{src.get('model')}@{src.get('endpoint')}/{src.get('prompt_version')}"))
    return tuple(out)


MODEL_SUMMARY = register(ModelSummary(), "model-written summaries (C11): the article's ladder, its summary written "
                                         "by a model call, merged into the previous one, gated, recorded and reused")


def summary_note(kind: str, payload: dict[str, Any]) -> str:
    """One line for the live log (C11): `✎ model summary of #1-#7 (merged into #1-#4) · summary call 2,103 + 141
    tokens, 35 ms`, or `✎ model summary of #1-#7 rejected (summary call ...): <reason>; the C6 summary stands in`.
    The summary call is a model call like any other: its usage and latency are shown whatever its outcome."""
    cov = payload.get("coverage") or ["?", "?"]
    head = f"✎ model summary of #{cov[0]}-#{cov[-1]}"
    used = payload.get("usage") or {}
    call = ", ".join(([f"{int(used.get('prompt_tokens') or 0):,} + {int(used.get('completion_tokens') or 0):,} "
                       "tokens"] if used else [])
                     + ([f"{float(payload['latency_ms']):,.0f} ms"] if payload.get("latency_ms") is not None else []))
    if kind == REJECTED_EVENT:
        return f"{head} rejected{f' (summary call {call})' if call else ''}: {payload.get('reason')}; " \
               "the C6 summary stands in"
    merge = payload.get("merge") or {}
    ext = merge.get("extends") if isinstance(merge, dict) else None
    return head + (f" (merged into #{ext[0]}-#{ext[1]})" if ext else "") + (f" · summary call {call}" if call else "")
