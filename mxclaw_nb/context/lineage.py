"""SPEC N3: provenance relative to the stored transcript, across the C7 iterations of one turn.

Why: inside a turn each call's view is built from the previous view plus new messages (C7), so the
view's own provenance describes *its input*: a summary pinned at call 1 is an input system message at
call 2 and a placeholder made at call 1 is a `kept` tool result at call 2. A user asks what happened to
the *stored* messages. `compose_lineage` folds each call's decision into what the earlier calls of the
turn did (the loop carries the previous lineage), giving every stored seq up to the call exactly one
action and the call that made it, and every sent message its origin (a stored seq or an engine-made
message). What it records is small (one action per seq, in long runs, plus the engine-made messages), so
the store keeps it as run-length ranges (`mxclaw_nb.store.provenance`, the only reader and writer of that
form); `lineage_rows` and `lineage_messages` rebuild the before/after rows and the exact sent list from the
stored transcript and the lineage. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple, cast

from mxclaw_nb.context.actions import TEXTS, sent_form
from mxclaw_nb.context.repair import plan_counted
from mxclaw_nb.context.tokens import estimate_sent
from mxclaw_nb.context.view import PREVIEW_CHARS, RequestView
from mxclaw_nb.messages import (
    FALLBACK_PREFIX,
    SUMMARY_PREFIX,
    Message,
    content_text,
    is_failure,
    sanitize,
    tool_call_list,
    tool_call_name,
)
from mxclaw_nb.text_policy import display

SEQ_ACTIONS = ("kept", "placeholder", "summarized", "dropped")  # what can happen to a stored message


class State(NamedTuple):
    """What happened to one stored (or engine-made) message: action, the call that did it, the summary covering it."""

    action: str
    call: int | None = None  # None for `kept`: nothing was done to it
    ref: int | None = None  # key of the engine-made summary that covers a `summarized` message


KEPT = State("kept")


class Made(NamedTuple):
    """An engine-made message of the turn: a summary, a fallback note or a synthetic repair result."""

    key: int
    call: int
    kind: str  # "summary" | "fallback" | "synthetic"
    message: Message  # as sent
    after: int | None  # the stored seq it follows in transcript order (a synthetic result: its assistant's block)


@dataclass(frozen=True)
class Lineage:
    """Transcript-relative provenance of one model call (SPEC N3).

    `states[s]` is the action of stored seq `s` (0 <= s < upto); `made` lists the turn's engine-made
    messages with `made_state`; `sent[m]` is the origin of sent message m: a seq (>= 0) or `-1 - key` for
    engine-made message `key`. `stage` is the call's own C10 stage.
    """

    call: int
    stage: str
    tail_start: int | None  # stored seq of the first safe-tail message
    states: list[State]
    made: tuple[Made, ...]
    made_state: tuple[State, ...]
    sent: list[int]
    transcript: Sequence[Message] | None = field(default=None, compare=False, repr=False)  # live views only
    texts: int = TEXTS  # the version of the engine-made texts (context.actions): how `lineage_messages` rebuilds
    # True: the seqs are stored seqs of a live turn (the loop's calls, or a caller that composes onto a previous
    # call): a request record keeps this lineage (N3). False: they index the caller's own messages (a dry run's
    # or a replay's input), which no store holds: a record keeps the view's own rows (C10, `view.provenance`)
    live: bool = field(default=True, compare=False, repr=False)

    @property
    def upto(self) -> int:
        """Number of stored seqs the call covers (seqs 0 .. upto-1)."""
        return len(self.states)

    def carried(self) -> list[tuple[str, int, int]]:
        """(kind, call, count) of what this call sends that earlier calls of the turn made."""
        out: dict[tuple[str, int], int] = {}
        for o in self.sent:
            if o >= 0:
                st = self.states[o]
                if st.action == "placeholder" and st.call is not None and st.call < self.call:
                    out[("placeholder", st.call)] = out.get(("placeholder", st.call), 0) + 1
            else:
                m = self.made[-1 - o]
                if m.call < self.call:
                    out[(m.kind, m.call)] = out.get((m.kind, m.call), 0) + 1
        return [(kind, call, n) for (kind, call), n in sorted(out.items(), key=lambda kv: (kv[0][1], kv[0][0]))]

    def describe(self) -> str:
        """`unchanged · carries the summary of call 1 and 2 placeholders`: the stage and what the call carries."""
        return describe_carried(self.stage, self.carried())

    def summaries(self) -> list[tuple[int, str]]:
        """(call, text) of every summary or fallback note this call sends, oldest first."""
        return [(m.call, content_text(m.message.get("content"))) for o in self.sent if o < 0
                for m in (self.made[-1 - o],) if m.kind in ("summary", "fallback")]


def describe_carried(stage: str, carried: Sequence[tuple[str, int, int]]) -> str:
    """`<stage> · carries <what>`, e.g. `unchanged · carries the summary of call 1 and 2 placeholders`."""
    parts: list[str] = []
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for kind, call, n in carried:
        by_kind.setdefault(kind, []).append((call, n))
    for kind, noun in (("summary", "summary"), ("fallback", "fallback note")):
        calls = [c for c, _ in by_kind.get(kind, [])]
        if calls:
            plural = "summaries" if kind == "summary" else "fallback notes"
            parts.append(f"the {noun} of call {calls[0]}" if len(calls) == 1
                         else f"the {plural} of calls {_join([str(c) for c in calls])}")
    for kind, noun in (("placeholder", "placeholder"), ("synthetic", "synthetic result")):
        n = sum(k for _, k in by_kind.get(kind, []))
        if n:
            parts.append(f"{n} {noun}{'s' if n != 1 else ''}")
    return stage if not parts else f"{stage} · carries {_join(parts)}"


def _join(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def compose_lineage(view: RequestView, seqs: Sequence[int | None], previous: Lineage | None = None, *,
                    call: int | None = None, transcript: Sequence[Message] | None = None, live: bool = True
                    ) -> Lineage:
    """SPEC N3: the lineage of `view`, given what the earlier calls of the turn did (`previous`).

    `seqs[p]` is the stored seq of input position p, or None for a message `previous` sent that the engine
    made (its origin is taken from `previous.sent`). The first call of a turn needs a seq for every input.
    """
    t = view.trace
    if t is None:
        raise ValueError("a lineage needs a view built by build_request_view (it has no trace)")
    call = call if call is not None else 1 if previous is None else previous.call + 1
    if previous is None:
        if not isinstance(seqs, range) and None in seqs:
            raise ValueError("the first call of a turn needs a stored seq for every input position")
        # a range stays one (the usual first call: input position p is stored seq p): no int per message
        # no None: checked above
        origins: Sequence[int] = seqs if isinstance(seqs, range) else list(cast("Sequence[int]", seqs))
        states: list[State] = []
        made: list[Made] = []
        made_state: list[State] = []
    else:
        n = len(previous.sent)
        origins = list(previous.sent) + [int(s) if s is not None else _missing(p) for p, s in
                                         enumerate(seqs[n:], n)]
        states, made, made_state = list(previous.states), list(previous.made), list(previous.made_state)
    if len(origins) != len(t.inputs):
        raise ValueError(f"{len(seqs)} seqs for {len(t.inputs)} input messages")
    top = (origins[-1] if origins else -1) + 1 if isinstance(origins, range) and origins.step == 1 else \
        max(origins, default=-1) + 1
    if isinstance(t.sent_sources, range) and not view.repaired:  # the common path: every input sent as it came
        _pad(states, top)
        sent = list(origins)
    else:
        sent = _decide(view, call, origins, states, made, made_state, top)
    tail = origins[view.tail_start] if view.tail_start is not None else None
    return Lineage(call, view.stage, tail if tail is None or tail >= 0 else None, states, tuple(made),
                   tuple(made_state), sent, transcript, live=live)


class NextCall(NamedTuple):
    """C7 + N3: what the next model call of a turn is built from (`build_request_view(inputs, ..., seqs=seqs,
    previous=previous, transcript=transcript)`)."""

    inputs: list[Message]  # this view (originals where kept) plus the messages appended since
    seqs: Sequence[int | None]  # the stored seq of each input position (None: an engine-made message)
    previous: Lineage | None  # what the calls of the turn so far did
    transcript: Sequence[Message] | None  # the stored messages by seq (None: not known here; no live rows)


def first_call(inputs: list[Message], seqs: Sequence[int | None], transcript: Sequence[Message] | None
               ) -> NextCall:
    """The first call of a turn: the stored transcript plus the prompt, each at its stored seq."""
    return NextCall(inputs, seqs, None, transcript)


def next_call(view: RequestView, appended: Sequence[Message], new_seqs: Sequence[int],
              seqs: Sequence[int | None] | None = None) -> NextCall:
    """C7 + N3: the next call after `view`: its input (this view plus `appended`, stored at `new_seqs`), the seq of
    each input position and the lineage to compose onto. The lineage's stored transcript grows in place (a
    lineage reads only its first `upto` messages) when the new seqs follow it; otherwise it is not carried.
    `seqs`: the seqs `view` was built with (`NextCall.seqs`): when it sent its whole input in place (the
    everything-fits path), the next seqs are one range without looking at each message."""
    inputs = view.next_input(appended)
    lineage = view.lineage if isinstance(view.lineage, Lineage) else None
    if lineage is None:  # no lineage to follow: the next call starts one (its inputs must all be stored)
        return NextCall(inputs, [None] * (len(inputs) - len(new_seqs)) + list(new_seqs), None, None)
    stored = lineage.transcript
    grow = getattr(stored, "extend", None)  # a list, or the loop's Spliced over a lazy stored transcript (C7)
    if stored is not None and grow is not None \
            and list(new_seqs) == list(range(len(stored), len(stored) + len(appended))):
        grow(appended)
    else:
        stored = None
    sent = lineage.sent
    n = len(sent)
    t = view.trace
    if (isinstance(seqs, range) and seqs.start == 0 and seqs.step == 1 and t is not None
            and isinstance(t.sent_sources, range) and isinstance(t.step_sources, range)
            and t.step_sources == range(len(seqs))
            and list(new_seqs) == list(range(seqs.stop, seqs.stop + len(new_seqs)))):
        return NextCall(inputs, range(seqs.stop + len(new_seqs)), lineage, stored)  # sent in place: O(1)
    if n and sent[0] == 0 and sent[-1] == n - 1 and list(new_seqs) == list(range(n, n + len(new_seqs))) \
            and sent == list(range(n)):  # everything sent as stored (the everything-fits path): one range
        following: Sequence[int | None] = range(n + len(new_seqs))
    else:
        following = [o if o >= 0 else None for o in sent] + list(new_seqs)
    return NextCall(inputs, following, lineage, stored)


def _missing(position: int) -> int:
    raise ValueError(f"input position {position} is new in this call but has no stored seq")


def _pad(states: list[State], top: int) -> None:
    """`states` extended to `top` entries with KEPT (no temporary list of them)."""
    if top > len(states):
        states.extend(repeat(KEPT, top - len(states)))


def _fill(states: list[State], start: int, stop: int, st: State) -> None:
    """`states[start:stop] = st` each, extending `states` (KEPT before `start`) as far as it needs: a run past its
    end is appended, not first padded and then overwritten (a first call's summary covers most of a long session:
    one list made, not three)."""
    have = len(states)
    if stop <= have:
        states[start:stop] = repeat(st, stop - start)
        return
    if start < have:
        del states[start:]
    _pad(states, start)
    states.extend(repeat(st, stop - start))


def _decide(view: RequestView, call: int, origins: Sequence[int], states: list[State], made: list[Made],
            made_state: list[State], top: int) -> list[int]:
    """Fold this call's actions into `states`/`made_state` (in place, extended to `top` entries); return the sent
    origins."""
    t = view.trace
    assert t is not None
    engine_now: dict[int, int] = {}  # sent position -> key of a message this call made (summary, fallback note)
    summary_key: int | None = None
    for m, k in enumerate(t.sent_sources):
        if k is None:
            key = len(made)
            kind = "summary" if view.stage == "summary" else "fallback"
            made.append(Made(key, call, kind, view.messages[m], None))
            made_state.append(State("summary", call))
            engine_now[m] = key
            summary_key = key if kind == "summary" else summary_key
    grown: list[int] = []  # origins of the steps, one by one (the slow path)
    step_origin: Sequence[int] = grown
    last_seq: int | None = None
    if isinstance(t.step_sources, range) and t.runs is not None:  # no synthetic step: whole runs at once
        step_origin = origins[t.step_sources.start:t.step_sources.stop]
        for a, b, act in t.runs:
            st = State(act, call, summary_key if act == "summarized" else None)
            seg = step_origin[a:b]
            if seg and seg[0] >= 0 and (isinstance(seg, range) and seg.step == 1
                                        or list(seg) == list(range(seg[0], seg[0] + len(seg)))):
                _fill(states, seg[0], seg[0] + len(seg), st)
                continue
            _pad(states, top)
            for o in seg:
                if o >= 0:
                    states[o] = st
                else:
                    made_state[-1 - o] = st
    _pad(states, top)
    fast = isinstance(t.step_sources, range) and t.runs is not None
    for k, (pos, act) in enumerate(zip(t.step_sources, t.actions, strict=True)) if not fast else ():
        if pos is None:  # a synthetic result this call's repair made
            key = len(made)
            made.append(Made(key, call, "synthetic", sanitize(t.step_messages[k]), last_seq))
            made_state.append(State("synthetic", call))
            o = -1 - key
        else:
            o = origins[pos]
            if o >= 0:
                last_seq = o
        grown.append(o)
        if act in ("kept", "synthetic"):
            continue
        st = State(act, call, summary_key if act == "summarized" else None)
        if o >= 0:
            states[o] = st
        else:
            made_state[-1 - o] = st
    for pos in t.dropped:
        o = origins[pos]
        if o >= 0:
            states[o] = State("dropped", call)
        else:
            made_state[-1 - o] = State("dropped", call)
    if engine_now:
        sent = [-1 - engine_now[m] if k is None else step_origin[k] for m, k in enumerate(t.sent_sources)]
    else:
        sent = list(map(step_origin.__getitem__, t.sent_sources))  # type: ignore[arg-type]
    # A message covered by a summary that is no longer sent (the fallback window dropped it) is dropped now.
    sent_made = {-1 - o for o in sent if o < 0}
    gone = {m.key for m in made if m.kind == "summary" and m.key not in sent_made}
    for key in gone:
        if made_state[key].action == "summary":
            made_state[key] = State("dropped", call)
    if gone:
        for s, st in enumerate(states):
            if st.ref in gone:
                states[s] = State("dropped", call)
        for key, st in enumerate(made_state):
            if st.ref in gone:
                made_state[key] = State("dropped", call)
    return sent


# -- rebuilding rows and messages from the stored transcript ----------------------------------------------


def _preview(text: str) -> str:
    text = display(" ".join(text[: PREVIEW_CHARS * 4].split()))  # shown: SPEC L7
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


@dataclass(frozen=True)
class _Rebuilt:
    steps: list[tuple[int | None, Message, Message, int]]  # (seq or None, message as stored, sent form, C1 tokens)
    dropped: dict[int, str]


def _rebuild(transcript: Sequence[Message], upto: int) -> _Rebuilt:
    if len(transcript) < upto:
        raise ValueError(f"the lineage covers {upto} stored messages, the transcript has {len(transcript)}")
    planned = plan_counted(list(transcript[:upto]))
    steps = list(zip(planned.sources, planned.messages, planned.sent, planned.tokens, strict=True))
    return _Rebuilt(steps, dict(planned.dropped))


def _sent_form(lineage: Lineage, origin: int, forms: dict[int, tuple[Message, Message]]) -> Message:
    if origin < 0:
        return dict(lineage.made[-1 - origin].message)
    stored, sent = forms[origin]
    return sent_form(lineage.states[origin].action, stored, sent, origin, lineage.texts)


def lineage_messages(lineage: Lineage, transcript: Sequence[Message]) -> list[Message]:
    """The exact messages the call sent, rebuilt from the stored transcript and the lineage."""
    rebuilt = _rebuild(transcript, lineage.upto)
    forms = {seq: (msg, sent) for seq, msg, sent, _ in rebuilt.steps if seq is not None}
    return [_sent_form(lineage, o, forms) for o in lineage.sent]


def lineage_rows(lineage: Lineage, transcript: Sequence[Message]) -> dict[str, list[dict[str, Any]]]:
    """Before rows (the stored transcript up to the call, one action per message) and after rows (sent).

    Same fields as `provenance_rows` (position is the stored seq; None for an engine-made message) plus
    `call`, the call of the turn that did it. Tokens are C1 estimates of the stored and sent forms (a view's
    own rows, `own_rows`, are in the counter that decided its stage).
    """
    rebuilt = _rebuild(transcript, lineage.upto)
    forms = {seq: (msg, sent) for seq, msg, sent, _ in rebuilt.steps if seq is not None}
    return _rows(lineage, transcript, rebuilt, [_sent_form(lineage, o, forms) for o in lineage.sent], None)


def _rows(lineage: Lineage, transcript: Sequence[Message], rebuilt: _Rebuilt, sent_msgs: Sequence[Message],
          counted: tuple[Sequence[int], Sequence[int]] | None) -> dict[str, list[dict[str, Any]]]:
    """The rows of `lineage_rows`; `counted`: (tokens per repaired step, per sent message) instead of C1."""
    step_tokens, sent_tokens = counted if counted is not None else (None, None)
    if sent_tokens is None:  # C1 of each sent message, once: its before row's `tokens_after` and its after row
        sent_tokens = [estimate_sent(m) for m in sent_msgs]
    sent_at = {o: m for m, o in enumerate(lineage.sent)}
    synthetic = {(m.after, str(m.message.get("tool_call_id"))): m.key for m in lineage.made if m.kind == "synthetic"}
    names: dict[str, str | None] = {}
    before: list[dict[str, Any]] = []
    last_seq: int | None = None
    used: set[int] = set()

    def row(seq: int | None, msg: Message, tokens: int, st: State, origin: int | None, reason: str | None
            ) -> dict[str, Any]:
        role = display(str(msg.get("role")))
        if role == "assistant":
            names.update({str(c.get("id")): tool_call_name(c) for c in tool_call_list(msg) if isinstance(c, dict)})
        text = content_text(msg.get("content"))
        m = sent_at.get(origin) if origin is not None else None
        after = 0 if m is None else sent_tokens[m]
        return {"position": seq, "role": role, "tool_name": names.get(str(msg.get("tool_call_id")))
                if role == "tool" else None, "tokens_before": tokens, "tokens_after": after, "action": st.action,
                "sent_position": m, "failure": role == "tool" and is_failure(msg), "synthetic": seq is None,
                "chars": len(text), "preview": _preview(text), "reason": reason, "call": st.call}

    dropped = sorted(rebuilt.dropped.items())
    di = 0
    for k, (seq, msg, _sent, tokens) in enumerate(rebuilt.steps):
        tokens = tokens if step_tokens is None else step_tokens[k]
        while seq is not None and di < len(dropped) and dropped[di][0] < seq:
            before.append(_dropped_row(lineage, transcript, *dropped[di], row))
            di += 1
        if seq is None:
            key = synthetic.get((last_seq, str(msg.get("tool_call_id"))))
            if key is None:
                st = State("synthetic")
                before.append(row(None, msg, tokens, st, None, None))
                continue
            used.add(key)
            before.append(row(None, lineage.made[key].message, tokens, lineage.made_state[key], -1 - key, None))
            continue
        last_seq = seq
        before.append(row(seq, msg, tokens, lineage.states[seq], seq, None))
    while di < len(dropped):
        before.append(_dropped_row(lineage, transcript, *dropped[di], row))
        di += 1
    for m in lineage.made:  # synthetic results a later call made (the transcript's repair did not)
        if m.kind == "synthetic" and m.key not in used:
            at = next((i + 1 for i, r in enumerate(before) if r["position"] == m.after), len(before))
            before.insert(at, row(None, m.message, estimate_sent(m.message), lineage.made_state[m.key],
                                  -1 - m.key, None))
    after: list[dict[str, Any]] = []
    for position, (o, msg) in enumerate(zip(lineage.sent, sent_msgs, strict=True)):
        text = content_text(msg.get("content"))
        role = display(str(msg.get("role")))
        if o >= 0:
            action, src, by = lineage.states[o].action, o, lineage.states[o].call
        else:
            engine_made = lineage.made[-1 - o]
            action, src, by = ("synthetic" if engine_made.kind == "synthetic" else "summary"), None, engine_made.call
        after.append({"position": position, "source": src, "role": role,
                      "tool_name": names.get(str(msg.get("tool_call_id"))) if role == "tool" else None,
                      "tokens": sent_tokens[position], "action": action,
                      "chars": len(text), "preview": _preview(text),
                      "call": by})
    return {"before": before, "after": after}


def own_rows(view: RequestView) -> dict[str, list[dict[str, Any]]]:
    """SPEC C10: the view's own before/after rows, relative to its input (positions are input positions), in
    the counter that decided its stage: `lineage_rows` of the lineage that takes the input positions as seqs,
    with the trace's counted tokens. A sent summary the input carried (an earlier view's) is a `summary` row."""
    t = view.trace
    if t is None:
        return {"before": [], "after": []}
    own = view.own_lineage
    assert isinstance(own, Lineage)
    # the repaired steps are the trace's (no second plan): (input position, message, -, tokens)
    rebuilt = _Rebuilt(list(zip(t.step_sources, t.step_messages, t.step_messages, t.tokens, strict=True)),
                       dict(t.dropped))
    rows = _rows(own, t.inputs, rebuilt, view.messages, (t.tokens, t.sent_tokens))
    after = rows["after"]
    names = iter(_step_tools(t.step_messages))
    for rec in rows["before"]:  # a step's tool is named by the step's own call (a reused id too); dropped: none
        rec["tool_name"] = None if rec["reason"] is not None else next(names)
        if rec["sent_position"] is not None:
            after[rec["sent_position"]]["tool_name"] = rec["tool_name"]
    for rec, msg in zip(after, view.messages, strict=True):
        if rec["action"] == "kept" and _is_summary(msg):
            rec["action"] = "summary"
    return rows


def _step_tools(steps: Sequence[Message]) -> list[str | None]:
    """The tool each repaired step answers: a tool result's call among the latest assistant message's calls."""
    calls: dict[str, str | None] = {}
    out: list[str | None] = []
    for msg in steps:
        role = msg.get("role")
        if role == "assistant":
            calls = {str(c.get("id")): tool_call_name(c) for c in tool_call_list(msg) if isinstance(c, dict)}
        out.append(calls.get(str(msg.get("tool_call_id"))) if role == "tool" else None)
    return out


def _is_summary(message: Message) -> bool:
    if message.get("role") != "system":
        return False
    return content_text(message.get("content")).startswith((SUMMARY_PREFIX, FALLBACK_PREFIX))


def _dropped_row(lineage: Lineage, transcript: Sequence[Message], seq: int, reason: str,
                 row: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    msg = transcript[seq]
    ok = isinstance(msg, dict)
    st = lineage.states[seq] if seq < lineage.upto else State("dropped")
    return row(seq, msg if ok else {"role": "?", "content": str(msg)}, 0, st, None, reason)
