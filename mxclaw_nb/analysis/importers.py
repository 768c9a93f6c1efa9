"""Import transcripts from files into the store as sessions (SPEC S4).

Why: replaying compaction policies is only useful on real traffic, and most real traffic lives in
files: OpenAI chat-format JSONL exports (one conversation per line, as in ``../shared/transcripts``)
and the session logs agents leave on disk (Claude Code, Codex CLI; parsed in ``agent_logs.py``).
Every importer turns its input into ``Conversation`` values first (pure parsing, testable without a
database), reporting bad lines by number instead of stopping, then writes each conversation as one
session. Nothing is repaired on the way in: the transcript keeps its real-world quirks (dangling
calls, orphan results), and the context engine repairs the *view* as it would for a live session.

Turns are numbered by user messages (messages before the first user message are turn 0, like the
frozen context of a live session); within a turn, each assistant message starts a new iteration and
its tool results share it. Session ids are derived from the conversation's content, so importing the
same file twice imports nothing new (the second run reports the sessions as skipped).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mxclaw_nb.analysis.jsonl import GZIP_ERRORS, gzip_problem, read_jsonl
from mxclaw_nb.events import record
from mxclaw_nb.records import RequestRecord
from mxclaw_nb.store.errors import StoreError

ROLES = ("system", "user", "assistant", "tool", "developer", "function")  # as the store takes them
# Keys under which a conversation object holds its messages: the OpenAI shape, then the nested trajectories of
# public agent runs (tau-bench `historical_trajectories`: "traj"; SWE-agent `.traj` files: "history").
MESSAGE_KEYS = ("messages", "traj", "history")


@dataclass
class Conversation:
    """One parsed conversation: id, messages, and where it came from."""

    id: str
    messages: list[dict[str, Any]]
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    title: str | None = None
    workspace: str | None = None
    model: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (declared stored event, payload)
    # E1: the harness's per-call usage, {"index": assistant message position, "usage": {...} in the record's
    # column names, "at": ISO timestamp or None}; stored as request records beside the transcript
    calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ImportReport:
    """What an import did: sessions created, messages written, lines skipped or rejected."""

    path: str
    format: str
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): already imported
    errors: list[tuple[int, str]] = field(default_factory=list)  # (line, message): not imported
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no line was rejected."""
        return not self.errors

    def __str__(self) -> str:
        n = len(self.sessions)
        head = (f"imported {n} session{'s' if n != 1 else ''} ({self.messages} messages) from {self.path} "
                f"[{self.format}] in {self.seconds:.2f} s")
        if self.skipped:
            head += f"; {len(self.skipped)} already imported"
        if self.errors:
            shown = "\n".join(f"  line {n}: {msg}" for n, msg in self.errors[:10])
            more = f"\n  ... and {len(self.errors) - 10} more" if len(self.errors) > 10 else ""
            head += f"; {len(self.errors)} bad lines:\n{shown}{more}"
        return head


def message_problem(message: Any, k: int) -> str | None:
    """Why message ``k`` cannot be stored (None when it can): the store's own rules, said up front."""
    if not isinstance(message, dict):
        return f"message {k} is a {type(message).__name__}, not an object"
    role = message.get("role")
    if role not in ROLES:
        return f"message {k} has role {role!r}; expected one of {', '.join(ROLES)}"
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f"message {k} tool_calls is a {type(calls).__name__}; expected a list"
    return None


def _messages_of(row: dict[str, Any]) -> Any:
    for key in MESSAGE_KEYS:
        if isinstance(row.get(key), list):
            return row[key]
    return None


def parse_openai_line(line: str, default_id: str) -> Conversation:
    """One JSONL line -> Conversation; ValueError with a readable reason when the line is unusable."""
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    return parse_openai_row(row, default_id)


def parse_openai_row(row: Any, default_id: str) -> Conversation:
    """One parsed JSONL value -> Conversation; ValueError with a readable reason when it is unusable."""
    if isinstance(row, list):
        row = {"messages": row}
    messages = _messages_of(row) if isinstance(row, dict) else None
    if messages is None:
        if isinstance(row, dict) and isinstance(row.get("conversations"), list):
            raise ValueError('a ShareGPT line ({"conversations": [{"from", "value"}]}) is not OpenAI chat format: '
                             'convert it to {"messages": [{"role", "content"}]} first')
        if isinstance(row, dict) and row.get("role") is not None:
            raise ValueError(f"a single message (role {row.get('role')!r}), not a conversation: a file of one message "
                             'per line reads as one conversation when every line is a message; else give '
                             '{"messages": [...]} per line')
        raise ValueError('expected {"messages": [...]} or a list of messages')
    if not messages:
        raise ValueError("the conversation has no messages")
    for k, m in enumerate(messages):
        problem = message_problem(m, k)
        if problem:
            raise ValueError(problem)
    conv_id = row.get("id")
    meta = row.get("meta") if isinstance(row.get("meta"), dict) else {}
    return Conversation(str(conv_id) if conv_id not in (None, "") else default_id, messages,
                        str(row.get("source") or ""), dict(meta))


def jsonl_name(path: str | Path) -> str:
    """The file's name without a ``.gz`` suffix: a gzipped copy imports as the same source (same session ids)."""
    name = Path(path).name
    return name[:-3] if name.endswith(".gz") else name


def read_openai_jsonl(path: str | Path) -> tuple[list[tuple[int, Conversation]], list[tuple[int, str]]]:
    """Parse an OpenAI chat-format ``.jsonl`` (or ``.jsonl.gz``) file: ([(line, conversation)], [(line, error)])."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no such transcript file: {file}")
    good, bad = [], []
    rows = list(read_jsonl(file))
    for line_no, row, error in _whole_document(file, rows) or _message_lines(rows) or rows:
        try:
            if error is not None:
                raise ValueError(error)
            good.append((line_no, parse_openai_row(row, f"{file.name}:{line_no}")))
        except ValueError as exc:
            bad.append((line_no, str(exc)))
    return good, bad


def _message_lines(rows: list[tuple[int, Any, str | None]]) -> list[tuple[int, Any, str | None]] | None:
    """A file of one message per line (a chat log written as it grew) as one conversation (item 1): every line
    a message object (a known role, no messages list of its own). None: the lines are conversations."""
    if not rows or not all(error is None and isinstance(row, dict) and row.get("role") in ROLES
                           and _messages_of(row) is None for _, row, error in rows):
        return None
    return [(rows[0][0], {"messages": [row for _, row, _ in rows]}, None)]


def _one_line_list(rows: list[tuple[int, Any, str | None]]) -> bool:
    """One line holding a list of conversations (not of messages): read as a document, one per item."""
    if len(rows) != 1 or not isinstance(rows[0][1], list) or not rows[0][1]:
        return False
    first = rows[0][1][0]
    return isinstance(first, dict) and "role" not in first and _messages_of(first) is not None


def _whole_document(file: Path, rows: list[tuple[int, Any, str | None]]) -> list[tuple[int, Any, str | None]] | None:
    """A file that is one JSON document rather than JSON lines, as (item number, conversation, error) rows.

    Read whole when named ``*.json`` (``.gz`` allowed), or when no line of it parses on its own but the text does
    (a pretty-printed file named ``.jsonl``): a list of messages or a ``{"messages"}`` object is one conversation
    (item 1), a list of those is one conversation per item. None: the file is JSON lines after all."""
    is_json = jsonl_name(file).endswith(".json") or _one_line_list(rows)
    if not is_json and (len(rows) < 2 or any(error is None for _, _, error in rows)):
        return None
    opener = gzip.open if file.name.endswith(".gz") else open
    try:
        with opener(file, "rt", encoding="utf-8-sig", errors="surrogateescape") as handle:  # as read_jsonl
            doc = json.load(handle)
    except ValueError as exc:
        return [(1, None, f"not JSON: {exc}")] if is_json else None
    except GZIP_ERRORS as exc:
        return [(1, None, gzip_problem(exc))] if is_json else None
    if isinstance(doc, list) and doc and not (isinstance(doc[0], dict) and "role" in doc[0]):
        return [(k, item, None) for k, item in enumerate(doc, 1)]
    return [(1, doc, None)]


def turn_plan(messages: Sequence[dict[str, Any]]) -> list[tuple[int, int | None, list[dict[str, Any]]]]:
    """Split messages into (turn, iteration, run) groups: turns by user messages, iterations by assistants."""
    groups: list[tuple[int, int | None, list[dict[str, Any]]]] = []
    turn, iteration = 0, None
    for m in messages:
        role = m.get("role")
        if role == "user":
            turn, iteration = turn + 1, None
        elif role == "assistant":
            iteration = (iteration or 0) + 1
        if groups and groups[-1][0] == turn and groups[-1][1] == iteration:
            groups[-1][2].append(m)
        else:
            groups.append((turn, iteration, [m]))
    return groups


def session_id_for(source: str, conv: Conversation) -> str:
    """Deterministic session id: the same conversation from the same source imports once."""
    blob = json.dumps([source, conv.id, conv.messages], sort_keys=True, ensure_ascii=False, default=str)
    # surrogatepass: a lone surrogate in the data (SPEC L7) hashes instead of raising; valid text is unchanged
    return "imp-" + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _bar(items: Iterable[Any], total: int, desc: str, progress: bool) -> Iterator[Any]:
    if not progress or total < 20:
        yield from items
        return
    from tqdm.auto import tqdm

    yield from tqdm(items, total=total, desc=desc, unit="conv")


def _batch(store: Any) -> Any:
    """The store's one-transaction batch when it has one (``Store.batch``), else a no-op context."""
    batch = getattr(store, "batch", None)
    return batch() if callable(batch) else contextlib.nullcontext()


def _deferred(store: Any) -> Any:
    """The store's queued writes (``Store.deferred``) when it has them, else a no-op context."""
    deferred = getattr(store, "deferred", None)
    return deferred() if callable(deferred) else contextlib.nullcontext()


_BULK_MESSAGES = 20_000  # messages per bulk transaction of an import (memory stays bounded)


def _quiet(kind: str, payload: dict[str, Any]) -> None:
    """Imported events have no live subscribers."""


def write_conversations(store: Any, items: Sequence[tuple[int, Conversation]], report: ImportReport, source: str,
                        *, progress: bool = True) -> ImportReport:
    """Store each (line, conversation) as a session, filling ``report``; existing sessions are skipped.

    With a store that has ``import_sessions`` (S1, S4: the bulk path), conversations go in as Arrow tables, many
    per transaction; when such a transaction is refused, its conversations are stored one by one, each whole or
    not at all, so a bad one is reported by line and the others still import."""
    known = store.session_ids(source=source)
    bulk = getattr(store, "import_sessions", None)
    pending: list[tuple[int, Conversation, dict[str, Any]]] = []
    queued: set[str] = set()  # ids in `pending` (a conversation repeated in one file imports once)

    def flush() -> None:
        if not pending:
            return
        try:
            if not callable(bulk):
                raise StoreError(Path(report.path), "no bulk path")
            bulk([p[2] for p in pending])
            for _line, conv, item in pending:
                _imported(report, known, item["session_id"], conv)
        except (StoreError, ValueError):
            for line_no, conv, item in pending:
                _write_one(store, report, known, line_no, conv, item)
        pending.clear()
        queued.clear()

    count = 0
    for line_no, conv in _bar(items, len(items), f"import {Path(report.path).name}", progress):
        sid = session_id_for(source, conv)
        if sid in known or sid in queued:
            report.skipped.append((line_no, f"{conv.id}: already imported as {sid}"))
            continue
        meta = {"conversation_id": conv.id, "file": report.path, "line": line_no, "format": report.format}
        if conv.source:
            meta["origin"] = conv.source
        if conv.meta:
            meta["meta"] = conv.meta
        item = {"session_id": sid, "workspace": conv.workspace, "model": conv.model, "source": source,
                "title": conv.title or conv.id, "meta": meta, "runs": turn_plan(conv.messages)}
        if conv.events or conv.calls:  # events (e.g. harness.compaction), per-call usage: this session on its own
            _write_one(store, report, known, line_no, conv, item)
            continue
        pending.append((line_no, conv, item))
        queued.add(sid)
        count += len(conv.messages)
        if count >= _BULK_MESSAGES:
            flush()
            count = 0
    flush()
    return report


def call_records(conv: Conversation) -> list[RequestRecord]:
    """E1: one request record per model call the harness logged usage for (figures `reported`, its own count
    of its own request with its system prompt and tools; `created_at` its timestamp, as it is)."""
    where: dict[int, tuple[int, int | None]] = {}
    k = 0
    for turn, iteration, run in turn_plan(conv.messages):
        for _ in run:
            where[k] = (turn, iteration)
            k += 1
    out = []
    for call in conv.calls:
        turn, iteration = where.get(call["index"], (None, None))
        usage = {key: value for key, value in call["usage"].items() if isinstance(value, int) and value >= 0}
        out.append(RequestRecord(turn=turn, iteration=iteration, model=call.get("model") or conv.model,
                                 counter="reported", created_at=_timestamp(call.get("at")),
                                 extra={"imported_from": conv.source, "message_index": call["index"]}, **usage))
    return out


def _timestamp(value: Any) -> datetime | None:
    """An ISO timestamp as a naive UTC datetime (the store's convention), None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp


def _imported(report: ImportReport, known: set[str], sid: str, conv: Conversation) -> None:
    known.add(sid)
    report.sessions.append(sid)
    report.messages += len(conv.messages)


def _write_one(store: Any, report: ImportReport, known: set[str], line_no: int, conv: Conversation,
               item: dict[str, Any]) -> None:
    """One conversation in its own transaction: imported whole or not at all."""
    sid = item["session_id"]
    if sid in known:
        report.skipped.append((line_no, f"{conv.id}: already imported as {sid}"))
        return
    try:
        with _batch(store):
            store.create_session(workspace=item["workspace"], model=item["model"], source=item["source"],
                                 title=item["title"], meta=item["meta"], session_id=sid)
            with _deferred(store):  # the runs of a conversation go in as multi-row INSERTs, not a row each
                for turn, iteration, run in item["runs"]:
                    store.append_messages(sid, run, turn=turn, iteration=iteration)
                for kind, payload in conv.events:  # e.g. harness.compaction (S4), with the session or not at all
                    record(store, _quiet, sid, kind, payload, turn=payload.get("turn"))
                for rec in call_records(conv):  # E1: SQL over the harness's own per-call usage
                    store.append_request(sid, rec)
    except (StoreError, ValueError) as exc:
        report.errors.append((line_no, f"{conv.id}: could not be stored: {exc}"))
        return
    _imported(report, known, sid, conv)


def import_openai_jsonl(store: Any, path: str | Path, *, progress: bool = True) -> ImportReport:
    """Import an OpenAI chat-format JSONL file (one conversation per line) into ``store``."""
    started = time.perf_counter()
    file = Path(path)
    good, bad = read_openai_jsonl(file)
    report = ImportReport(str(file), "openai-jsonl", errors=bad)
    write_conversations(store, good, report, f"import:{jsonl_name(file)}", progress=progress)
    report.errors.sort()
    report.seconds = time.perf_counter() - started
    return report
