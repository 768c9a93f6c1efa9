"""SPEC C4: repair the tool-call protocol before anything else looks at the transcript.

A provider rejects a request whose assistant tool calls are not each followed by exactly one result,
or that carries a result nobody asked for. Real transcripts break this all the time: a kernel
interrupted mid-tool leaves a dangling call, agents reuse ids in later turns, logs duplicate results.
Repair pairs results per assistant block (so a reused id in a later turn is its own pair), keeps the
first result per id, drops orphans, and synthesises an "interrupted" failure for each missing result
placed at the end of its block. It works on the view only, returns its input's dicts unchanged when
nothing is wrong, and reports what it did so the UI can show it (like pydantic-ai's
`_clean_message_history`: small passes whose order matters — repair must precede estimation, because
the estimate is of what will be sent).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any

from mxclaw_nb.context.rows import HeadTail
from mxclaw_nb.context.tokens import _string as _json_string
from mxclaw_nb.context.tokens import estimate_sent, estimate_text
from mxclaw_nb.messages import ROLES, SYSTEM_ROLES, Message, fallback_call_id, sanitize, tool_call_name
from mxclaw_nb.text_policy import is_valid

SYNTHETIC_TEXT = (
    "Tool failed: the {name} call ({call_id}) was interrupted and no result was recorded. "
    "Treat it as not done."
)


@dataclass(frozen=True)
class RepairStep:
    """One message of the repaired sequence: where it came from (None = synthetic) and the message."""

    source: int | None
    message: Message


@dataclass(frozen=True)
class RepairPlan:
    """Repaired sequence plus the input positions that were dropped, with the reason."""

    steps: list[RepairStep]
    dropped: dict[int, str]

    @property
    def changed(self) -> bool:
        """True when repair dropped or synthesised anything."""
        return bool(self.dropped) or any(s.source is None for s in self.steps)


def synthetic_result(call_id: str, name: str | None) -> Message:
    """The synthetic failure result that stands in for a call with no recorded result."""
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": SYNTHETIC_TEXT.format(name=name or "tool", call_id=call_id),
        "is_error": True,
        "synthetic": True,
    }


def _call_ids(calls: Any) -> list[tuple[str, Any]]:
    """(sent id, call) per tool call; the name is looked up only for a call that needs a synthetic result."""
    if not isinstance(calls, list):
        calls = [calls]
    out: list[tuple[str, Any]] = []
    for k, call in enumerate(calls):
        cid = call.get("id") if isinstance(call, dict) else None
        # Same fallback id as messages.sanitize, so the synthetic result pairs with the sent call.
        out.append((str(cid) if cid else fallback_call_id(call, k), call))
    return out


Step = tuple[int | None, Message]  # (input position or None when synthetic, message)
_KNOWN_ROLES = frozenset(ROLES) | SYSTEM_ROLES
_CALL_FRAME = len('{"id":,"type":"function","function":{"name":,"arguments":}}')


def plan_steps(messages: list[Any], start: int = 0) -> tuple[list[Step], dict[int, str]]:
    """The repaired sequence of `messages[start:]` as (source, message) tuples, plus dropped positions.

    `start` must be the position of a message with a known, non-tool role (or 0): the loop is then at the
    top level there, so a prefix already planned can be reused and only the rest re-planned.
    """
    plan = plan_counted(messages, start)
    return list(zip(plan.sources, plan.messages, strict=True)), plan.dropped


@dataclass(frozen=True)
class Planned:
    """The repaired sequence as parallel per-step lists, plus the dropped input positions.

    `sources` holds each step's input position (None for a synthetic result); when repair changed
    nothing it is a `range` and `messages` a slice of the input, so a clean transcript costs no object
    per step beyond its sent copy.
    """

    sources: Sequence[int | None]
    messages: list[Message]  # the step's message as given (a synthetic result for a None source)
    dropped: dict[int, str]
    sent: list[Message]  # sanitised: what is sent for the step
    tokens: Sequence[int]  # the C1 estimate of `sent` (plan_counted, a list); a counter's counts (plan_and_count)
    estimates: list[int] | None = None  # the C1 estimate of `sent` when `tokens` are a counter's (else None)
    layout: Any = None  # incremental.Layout of the steps (roles, systems, running totals), when a cache made it
    # C5/C7: (policy, step) when this plan continues a view whose strategy decided every step before `step` for
    # that policy (view.Trace.settled, carried by `incremental.continued_input`); the steps before it are the
    # view's own (placeholders put in, or steps that stay), so the strategy need not look at them again
    settled: tuple[Any, int] | None = None

    @property
    def steps(self) -> list[Step]:
        """(source, message) per step."""
        return list(zip(self.sources, self.messages, strict=True))


def plan_counted(messages: list[Any], start: int = 0) -> Planned:
    """`plan_steps` plus, per step, its sent form (`sanitize`) and its C1 estimate (`estimate_sent`).

    One pass, because this is most of a cold build: the usual shapes (string content; well-formed tool
    calls; a result whose id was issued) are sanitised and estimated inline, everything else goes through
    `sanitize` and `estimate_sent` themselves. A property test holds the inline paths to those two.
    Steps are not materialised in the loop: only what repair drops and the synthetic results it inserts
    (before which input position) are noted, and the step lists are derived from them at the end.
    """
    dropped: dict[int, str] = {}
    inserted: list[tuple[int, Message]] = []  # (input position it precedes, synthetic result)
    sent: list[Message] = []
    tokens: list[int] = []
    out: Message
    result: Any
    n = len(messages)
    i = start
    while i < n:
        msg = messages[i]
        role = msg.get("role") if isinstance(msg, dict) else None
        if role.__class__ is not str and not isinstance(role, str) or role not in _KNOWN_ROLES:
            dropped[i] = "unknown role" if isinstance(msg, dict) else "not a message"
            i += 1
            continue
        if role == "tool":
            dropped[i] = "orphan tool result (no matching call directly before)"
            i += 1
            continue
        i += 1
        content, name = msg.get("content"), msg.get("name")
        raw_calls = msg.get("tool_calls") if role == "assistant" else None
        if ((content.__class__ is str and (content.isascii() or is_valid(content))) or content is None) and (
                name is None or (name.__class__ is str and is_valid(name))):
            if not raw_calls:
                out = {"role": role, "content": "" if content is None else content}
                if name is not None:
                    out["name"] = name
                sent.append(out)
                tokens.append(0 if content is None else (len(content) + 3) >> 2 if content.isascii()
                              else estimate_text(content))
                continue
            out_calls = _plain_calls(raw_calls)
            if out_calls is not None:
                calls_sent, length = out_calls
                out = {"role": role, "content": content, "tool_calls": calls_sent}
                if name is not None:
                    out["name"] = name
                sent.append(out)
                tokens.append((0 if content is None else (len(content) + 3) >> 2 if content.isascii()
                               else estimate_text(content)) + ((length + 3) >> 2))
                if len(calls_sent) == 1:  # the usual block: one call, its result right after it, then no tool
                    cid = calls_sent[0]["id"]
                    result = messages[i] if i < n else None
                    tcid = result.get("tool_call_id") if result.__class__ is dict else None
                    if tcid.__class__ is str and tcid == cid and result.get("role") == "tool":
                        append_result(result, cid, sent, tokens)
                        i += 1
                        following = messages[i] if i < n else None
                        if not isinstance(following, dict) or following.get("role") != "tool":
                            continue
                        i -= 1  # more results follow: the general loop below re-pairs the block's results
                        sent.pop()
                        tokens.pop()
            else:
                _append_generic(msg, sent, tokens)
        else:
            _append_generic(msg, sent, tokens)
        if raw_calls:
            i = _pair_results(messages, i, raw_calls, sent, tokens, dropped, inserted)
    if not dropped and not inserted:
        return Planned(range(start, n), messages[start:], dropped, sent, tokens)
    return _with_steps(messages, start, dropped, inserted, sent, tokens)


def _pair_results(messages: list[Any], i: int, raw_calls: Any, sent: list[Message], tokens: list[int],
                  dropped: dict[int, str], inserted: list[tuple[int, Message]]) -> int:
    """The general C4 block: pair the results at `messages[i:]` with the calls of the assistant message just
    before them (first result per id kept, duplicates and orphans dropped, a synthetic failure appended for
    each call left without one). Returns the position after the block."""
    n = len(messages)
    calls = _call_ids(raw_calls)
    wanted = {cid for cid, _ in calls}
    seen: set[str] = set()
    while i < n:
        result = messages[i]
        if not isinstance(result, dict) or result.get("role") != "tool":
            break
        tcid = result.get("tool_call_id")
        tcid = None if tcid is None else str(tcid)
        if tcid in wanted and tcid not in seen:
            seen.add(tcid)
            append_result(result, tcid, sent, tokens)
        else:
            dropped[i] = "duplicate tool result" if tcid in seen else "orphan tool result (id not issued)"
        i += 1
    for cid, call in calls:
        if cid not in seen:
            seen.add(cid)
            synthetic = synthetic_result(cid, tool_call_name(call))
            inserted.append((i, synthetic))
            _append_generic(synthetic, sent, tokens)
    return i


def _with_steps(messages: list[Any], start: int, dropped: dict[int, str], inserted: list[tuple[int, Message]],
                sent: list[Message], tokens: list[int]) -> Planned:
    """The step lists of a repaired plan: input positions minus `dropped`, synthetic results where `inserted`."""
    sources: list[int | None] = []
    step_messages: list[Message] = []
    pending = iter(inserted)
    nxt = next(pending, None)
    for pos in range(start, len(messages) + 1):
        while nxt is not None and nxt[0] == pos:
            sources.append(None)
            step_messages.append(nxt[1])
            nxt = next(pending, None)
        if pos < len(messages) and pos not in dropped:
            sources.append(pos)
            step_messages.append(messages[pos])
    return Planned(sources, step_messages, dropped, sent, tokens)


def append_result(result: Message, call_id: str, sent: list[Message], tokens: list[int]) -> None:
    """Sent form and C1 estimate of a paired tool result (`call_id`: its id as a string)."""
    content, name = result.get("content"), result.get("name")
    if ((content.__class__ is str and (content.isascii() or is_valid(content))) or content is None) and (
            name is None or (name.__class__ is str and is_valid(name))) and is_valid(call_id):
        out = {"role": "tool", "content": "" if content is None else content, "tool_call_id": call_id}
        if name is not None:
            out["name"] = name
        sent.append(out)
        tokens.append(0 if content is None else (len(content) + 3) >> 2 if content.isascii()
                      else estimate_text(content))
    else:
        _append_generic(result, sent, tokens)


def _append_generic(message: Message, sent: list[Message], tokens: list[int]) -> None:
    out = sanitize(message)
    sent.append(out)
    tokens.append(estimate_sent(out))


def _plain_calls(raw_calls: Any) -> tuple[list[Message], int] | None:
    """Sent copies and compact-JSON length of a list of well-formed calls (string id, name, arguments),
    or None for any other shape (then `sanitize` decides)."""
    if raw_calls.__class__ is not list:
        return None
    out: list[Message] = []
    length = 1 + len(raw_calls)  # brackets and commas
    for call in raw_calls:
        fn = call.get("function") if call.__class__ is dict else None
        if fn.__class__ is not dict:
            return None
        cid, name, args = call.get("id"), fn.get("name"), fn.get("arguments")
        if cid.__class__ is not str or not cid or name.__class__ is not str or args.__class__ is not str:
            return None
        if not (args.isascii() and name.isascii() and cid.isascii()) and not is_valid(cid + name + args):
            return None  # SPEC L7: `sanitize` sends the escaped form
        out.append({"id": cid, "type": "function", "function": {"name": name, "arguments": args}})
        # JSON escaping is per character: one literal of the three strings has their escaped lengths + 2
        length += _CALL_FRAME + 4 + len(_json_string(cid + name + args))
    return out, length


def plan_repair(messages: list[Message]) -> RepairPlan:
    """Compute the repaired sequence without copying or mutating any message."""
    steps, dropped = plan_steps(messages)
    return RepairPlan([RepairStep(src, msg) for src, msg in steps], dropped)


def repair_tool_call_transcript(messages: list[Message]) -> list[Message]:
    """SPEC C4: a transcript where every tool call has exactly one result directly after its call."""
    return [step.message for step in plan_repair(list(messages)).steps]


def sent_form(message: Message) -> Message:
    """The sent form `plan_counted` gives `message` as a step of a plan that repaired nothing (C4): a tool result
    is sent with its own id (it was paired with the call of that id), anything else as planned on its own."""
    if message.get("role") == "tool":
        out: list[Message] = []
        append_result(message, str(message.get("tool_call_id")), out, [])
        return out[0]
    return plan_counted([message]).sent[0]


class SentForms(HeadTail):
    """The sent forms of a plan's steps (C7: a plan resumed from a saved one): for the first `base` steps of a plan
    that repaired nothing (step k is `messages[k]`) each is made where it is first read (`sent_form`, kept), so a
    fresh process pays only for the steps it sends; after them, a plain list. Supports what a session cache does
    to a plan's sent list: read, copy, cut back and extend (`del forms[k:]`, `forms += more`)."""

    __slots__ = ("_all", "_done", "_messages")

    def __init__(self, messages: Sequence[Message], base: int) -> None:
        super().__init__(base)
        self._messages = messages
        self._done: dict[int, Message] = {}  # the forms made so far (C7: no list of a long session's size up front)
        self._all: list[Message] | None = None  # every form, once made (the everything-fits path)

    def _item(self, k: int) -> Message:
        if self._all is not None:
            return self._all[k]
        done = self._done.get(k)
        if done is None:
            done = self._done[k] = sent_form(self._messages[k])
        return done

    def _cut(self, h: int) -> None:
        if self._all is not None:
            del self._all[h:]
        for k in [k for k in self._done if k >= h]:
            del self._done[k]
        self._h = h

    def __iter__(self) -> Iterator[Message]:
        """Every step (the everything-fits path sends them all): the rest made in one `plan_counted` pass over the
        messages, as fast as the plan they stand for was (a clean plan's sent forms are these, in order)."""
        h, done = self._h, self._done
        if self._all is None and h > 64 and len(done) < h - h // 2:
            plan = plan_counted(list(self._messages[:h]))
            if len(plan.sent) == h and isinstance(plan.sources, range):
                made = plan.sent
                for k, form in done.items():  # the forms read before stay the same objects
                    made[k] = form
                self._all, self._done = made, {}
        if self._all is None and len(done) == h:  # each made where read
            self._all, self._done = list(map(done.__getitem__, range(h))), {}
        if self._all is not None:  # every form made: read at C speed (a later call of the everything-fits path)
            return chain(islice(self._all, h), self._tail)
        return super().__iter__()

    def _items(self, start: int, stop: int) -> list[Message]:
        if self._all is not None:
            return self._all[start:stop]
        return super()._items(start, stop)
