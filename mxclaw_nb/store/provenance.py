"""How provenance is stored (SPEC N3, C10, S2): what happened, not a table of every message.

Why: the loop stores a record for every model call, and a call's rows (one per stored message) grow
with the session: stored as a table, a 1,000-call session kept a hundred megabytes of rows it could
rebuild. The engine is deterministic and the transcript append-only, so a record keeps only what
happened — the stage, where the safe tail started, run-length ranges of one action over transcript seqs,
the engine-made messages (summaries, fallback notes, synthetic results) and where each sent message
came from — and `context.lineage.lineage_rows` rebuilds the rows from it and the stored transcript.

The lineage (`extra.lineage`), format 2:

    {"format": 2, "call": c, "stage": s, "tail_start": seq | null, "upto": n,
     "runs": [[start, stop, action, by_call?, summary_key?], ...],
     "made": [[key, call, kind, after_seq, message, action, by_call, ref], ...],
     "sent": [[a, b] | [-1 - key], ...], "texts": 2}

`texts` is the version of the engine-made texts (`context.actions`): how a `placeholder` state is rebuilt
(version 2 names `recall #seq`, C13). A record without it is version 1 and decodes to the texts sent then.

A run covers seqs start..stop-1 with one action (`kept`, `placeholder`, `summarized`, `dropped`), or
`placeholders`: every tool result in the range that C5 compacts (`placeholder_for` gives a text: a
successful result longer than its placeholder) is a placeholder made by `by_call`, every other message
is kept. That is what microcompaction does to the part before the safe tail, so a session whose old
tool outputs are compacted call after call stores one run, not one per tool result; the writer uses it
only where the stored transcript confirms it, so it decodes to exactly the states the loop had. Format
1 (plain runs, a `carried` text) is still read. The engine data (`Lineage`) lives in `context/`; this
module is its only reader and writer, so the pure core holds no stored format.

`requests.provenance` holds a view's own rows (`RequestView.provenance`, built from its input-relative
lineage) where the record carries no lineage: a dry run's or a replay's view (its lineage indexes messages
no store holds), a view no lineage could be composed for, and files of earlier versions. Format 3 (one list
per field, an index for an after row that repeats its before row) is written; format 2 (rows as lists) and
the records form (row dicts) are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import Any

from mxclaw_nb.context.actions import TEXT_VERSIONS, TEXTS
from mxclaw_nb.context.lineage import KEPT, SEQ_ACTIONS, Lineage, Made, State
from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.context.view import AFTER_FIELDS, BEFORE_FIELDS, MessageRecord, Provenance, SentRecord, sent_from
from mxclaw_nb.messages import Message

LINEAGE_FORMAT = 2
READ_FORMATS = (1, 2)
PLACEHOLDERS = "placeholders"  # a run of C5's placeholders (see the module doc)

# -- the lineage (extra.lineage) --------------------------------------------------------------------------


def encode_lineage(lineage: Lineage, transcript: Sequence[Message] | None = None) -> dict[str, Any]:
    """The stored form of a lineage (format 2). With the stored `transcript` (default: the one a live lineage
    carries), C5's placeholders over a range are one `placeholders` run."""
    texts = lineage.texts
    runs = [[start, stop, st.action, *([st.call, st.ref] if st.ref is not None else [st.call] if st.call is not None
                                       else [])] for start, stop, st in _state_runs(lineage.states)]
    referenced = {st.ref for st in lineage.made_state if st.ref is not None}
    referenced |= {r[4] for r in runs if len(r) > 4}
    transcript = transcript if transcript is not None else lineage.transcript
    if transcript is not None and len(transcript) >= lineage.upto:
        runs = _fold_placeholders(runs, transcript, texts)
    sent_keys = {-1 - o for o in lineage.sent if o < 0}
    made = [[m.key, m.call, m.kind, m.after, m.message, *lineage.made_state[m.key]] for m in lineage.made
            if m.key in sent_keys or m.key in referenced or m.kind == "synthetic"]
    out = {"format": LINEAGE_FORMAT, "call": lineage.call, "stage": lineage.stage,
           "tail_start": lineage.tail_start, "upto": lineage.upto, "runs": runs, "made": made,
           "sent": _ranges(lineage.sent)}
    if texts != 1:  # a record without `texts` is version 1 (written before texts had versions)
        out["texts"] = texts
    return out


def _state_runs(states: Sequence[State]) -> list[tuple[int, int, State]]:
    """(start, stop, state) of each run of equal states. N2: grouped and counted at C speed (runs share one State
    object, so the comparison is mostly by identity): a Python step per run, not per stored message."""
    out: list[tuple[int, int, State]] = []
    start = 0
    for st, run in groupby(states):
        stop = start + len(list(run))
        out.append((start, stop, st))
        start = stop
    return out


def _compacts(message: Any, seq: int, texts: int) -> bool:
    """True for a message C5 would replace by a placeholder (a successful tool result longer than the placeholder
    of text version `texts`: version 2 names `recall #seq`, so it is a little longer)."""
    return (isinstance(message, dict) and message.get("role") == "tool"
            and placeholder_for(message, seq if texts >= 2 else None) is not None)


def _quiet(transcript: Sequence[Message], start: int, stop: int, texts: int) -> bool:
    """No message of start..stop-1 is one C5 would compact (so `kept` is what a `placeholders` run says)."""
    return not any(_compacts(transcript[s], s, texts) for s in range(start, stop))


def _fold_placeholders(runs: list[list[Any]], transcript: Sequence[Message], texts: int = TEXTS
                       ) -> list[list[Any]]:
    """Merge alternating `placeholder` (by one call) / `kept` runs into `placeholders` runs where the transcript
    confirms the rule: every placeholder is a message C5 compacts (the engine made it from it) and no kept
    message in between is one."""
    out: list[list[Any]] = []
    group: list[list[Any]] = []  # placeholder runs of one call and the quiet kept runs between them

    def close() -> None:
        trailing: list[list[Any]] = []
        while group and group[-1][2] == "kept":  # kept runs after the last placeholder stay plain
            trailing.insert(0, group.pop())
        if sum(1 for r in group if r[2] == "placeholder") > 1:
            out.append([group[0][0], group[-1][1], PLACEHOLDERS, group[0][3]])
        else:
            out.extend(group)
        out.extend(trailing)
        group.clear()

    for run in runs:
        action = run[2]
        if action == "placeholder" and len(run) == 4:
            if group and group[0][3] != run[3]:
                close()
            group.append(run)
        elif action == "kept" and group and (_quiet(transcript, run[0], run[1], texts) if run[1] - run[0] > 1
                                             else not _compacts(transcript[run[0]], run[0], texts)):
            group.append(run)
        else:
            if group:
                close()
            out.append(run)
    if group:
        close()
    return out


def decode_lineage(stored: Any, transcript: Sequence[Message] | None = None) -> Lineage:
    """The lineage of a stored record (format 1 or 2); raises ValueError when it is not one, or when it holds
    a `placeholders` run and no `transcript` (the stored messages it covers) is given."""
    try:
        if not isinstance(stored, dict) or stored.get("format") not in READ_FORMATS:
            raise ValueError(f"not a format {' or '.join(map(str, READ_FORMATS))} lineage")
        texts = int(stored.get("texts", 1))  # C13: the text version the record was written with
        if texts not in TEXT_VERSIONS:
            raise ValueError(f"text version {texts} is newer than this code ({TEXT_VERSIONS})")
        states: list[State] = []
        for run in stored["runs"]:
            start, stop, action, *rest = run
            if start != len(states) or stop < start or action not in (*SEQ_ACTIONS, PLACEHOLDERS):
                raise ValueError(f"bad run {run!r}")
            if action == PLACEHOLDERS:
                if transcript is None or len(transcript) < stop:
                    raise ValueError("a placeholders run needs the stored transcript it covers")
                made_here = State("placeholder", int(rest[0]))
                states.extend(made_here if _compacts(transcript[s], s, texts) else KEPT for s in range(start, stop))
                continue
            st = State(action, *rest) if rest else KEPT if action == "kept" else State(action)
            states.extend([st] * (stop - start))
        keys = max((int(m[0]) for m in stored["made"]), default=-1) + 1
        made: list[Made | None] = [None] * keys
        made_state: list[State] = [State("dropped")] * keys
        for key, call, kind, after, message, *st in stored["made"]:
            made[key] = Made(int(key), int(call), str(kind), dict(message), after)
            made_state[key] = State(*st)
        filled = tuple(m if m is not None else Made(k, 0, "dropped", {}, None) for k, m in enumerate(made))
        sent: list[int] = []
        for r in stored["sent"]:
            sent.extend(range(r[0], r[1]) if len(r) == 2 else [int(r[0])])
        return Lineage(int(stored["call"]), str(stored["stage"]), stored.get("tail_start"), states, filled,
                       tuple(made_state), sent, texts=texts)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"the stored lineage cannot be read ({type(exc).__name__}: {exc})") from None


def _ranges(origins: Sequence[int]) -> list[list[int]]:
    """[a, b] for a run of consecutive seqs a..b-1, [o] for an engine-made origin (o < 0)."""
    n = len(origins)
    if n > 64 and origins[0] >= 0 and origins[-1] - origins[0] == n - 1 and (
            origins == range(origins[0], origins[0] + n) if isinstance(origins, range)
            else list(origins) == list(range(origins[0], origins[0] + n))):
        return [[origins[0], origins[0] + n]]  # one run (the everything-fits path sends every seq): at C speed (N2)
    out: list[list[int]] = []
    for o in origins:
        if o >= 0 and out and len(out[-1]) == 2 and out[-1][1] == o:
            out[-1][1] = o + 1
        else:
            out.append([o, o + 1] if o >= 0 else [o])
    return out


# -- a view's own rows (requests.provenance) ------------------------------------------------------------------


def encode_provenance(provenance: Provenance) -> dict[str, Any]:
    """Format 3: one list per field.

    ``{"format": 3, "before": {field: [...]}, "after_from_before": [...], "after": {field: [...]}}``:
    `after_from_before[k]` is the before row that sent message k repeats exactly (a message sent as it was:
    same role, tool, tokens, action, length and preview), else null; `after` holds the columns of the other
    sent messages only, in order.
    """
    own = [k for k, d in enumerate(provenance.derived) if d is None]
    before = {f: list(col) for f, col in zip(BEFORE_FIELDS, provenance.before_columns, strict=True)}
    after = {f: [col[k] for k in own] for f, col in zip(AFTER_FIELDS, provenance.after_columns, strict=True)}
    return {"format": 3, "before": before, "after_from_before": list(provenance.derived), "after": after}


def _fields(row: Any, names: Sequence[str]) -> dict[str, Any]:
    """The named fields of a stored row (checked by the record's constructor)."""
    return {f: row.get(f) for f in names}


def decode_provenance(stored: Any) -> Provenance:
    """The Provenance of a stored `requests.provenance` (format 3, format 2 or the records form)."""
    rows = provenance_rows(stored)
    try:
        before = [MessageRecord(**_fields(r, BEFORE_FIELDS)) for r in rows["before"]]
        after = [SentRecord(**_fields(r, AFTER_FIELDS)) for r in rows["after"]]
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"the stored provenance's rows cannot be read ({exc})") from None
    return Provenance.from_rows(before, after)


def provenance_rows(stored: Any) -> dict[str, list[dict[str, Any]]]:
    """Row dicts (`before`, `after`) from a stored provenance: format 3 (columns), format 2 (rows as lists,
    an index for an after row that repeats its before row) or the records form (row dicts)."""
    if not isinstance(stored, dict):
        raise ValueError("a provenance must be a JSON object with 'before' and 'after'")
    if stored.get("format") == 3:
        return _rows_from_columns(stored)
    out: dict[str, list[dict[str, Any]]] = {}
    for side in ("before", "after"):
        rows = stored.get(side) or []
        columns = stored.get(f"{side}_columns")
        if not isinstance(rows, list):
            raise ValueError(f"the provenance's {side!r} must be a list")
        if not columns:
            out[side] = [dict(r) for r in rows]
            continue
        if side == "after" and any(isinstance(row, int) for row in rows):  # index k: the row of before row k
            before = [MessageRecord._make(row.get(f) for f in BEFORE_FIELDS) for row in out["before"]]
            rows = [list(sent_from(before[row])) if isinstance(row, int) else row for row in rows]
        out[side] = [dict(zip(columns, row, strict=False)) for row in rows]
    return out


def _rows_from_columns(stored: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    try:
        before_cols = [stored["before"][f] for f in BEFORE_FIELDS]
        derived = stored["after_from_before"]
        own_cols = [stored["after"][f] for f in AFTER_FIELDS]
        before = [MessageRecord._make(row) for row in zip(*before_cols, strict=True)]
        own = iter([SentRecord._make(row) for row in zip(*own_cols, strict=True)])
        after = [next(own) if k is None else sent_from(before[k]) for k in derived]
        if next(own, None) is not None:
            raise ValueError("more after columns than rows without a before row")
    except (KeyError, TypeError, IndexError, StopIteration) as exc:
        raise ValueError(f"a format 3 provenance needs 'before' and 'after' columns and 'after_from_before' "
                         f"({type(exc).__name__}: {exc})") from None
    return {"before": [r._asdict() for r in before], "after": [r._asdict() for r in after]}
