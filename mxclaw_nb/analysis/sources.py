"""Turn whatever the analyst has into (id, messages) pairs: files, stores, session ids, plain lists.

Why: replays and comparisons run over stored sessions, imported files and lists built in a notebook
cell; each entry point accepting all of them (and failing with one clear message otherwise) keeps
the notebook code short. Files are read with the importer's parser, so a bad line is reported the
same way everywhere (here as a warning: a comparison should not die on one broken conversation).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mxclaw_nb.analysis.importers import Conversation, read_openai_jsonl
from mxclaw_nb.messages import modernize_legacy_calls

Pair = tuple[str, list[dict[str, Any]]]
TRANSCRIPT_GLOBS = ("*.jsonl", "*.jsonl.gz", "*.json", "*.json.gz")


def _is_store(obj: Any) -> bool:
    return hasattr(obj, "load_transcript") and hasattr(obj, "sessions")


def _is_messages(obj: Any) -> bool:
    return isinstance(obj, list) and (not obj or (isinstance(obj[0], dict) and "role" in obj[0]))


def one_conversation(item: Any, store: Any = None) -> Pair:
    """(id, messages) for a message list, (id, messages) pair, Conversation, {"messages"} dict or session id
    (legacy function calls read as the tool calls they are: `messages.modernize_legacy_calls`)."""
    sid, messages = _one_conversation(item, store)
    return sid, modernize_legacy_calls(messages)


def _one_conversation(item: Any, store: Any = None) -> Pair:
    if isinstance(item, Conversation):
        return item.id, item.messages
    if _is_messages(item):
        return "messages", item
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], list):
        return str(item[0]), item[1]
    if isinstance(item, dict) and isinstance(item.get("messages"), list):
        return str(item.get("id", "messages")), item["messages"]
    if isinstance(item, str):
        if store is None:
            raise ValueError(f"{item!r} looks like a session id: pass store=Store(...) to load it")
        messages = store.load_transcript(item)
        if not messages:
            raise ValueError(f"session {item!r} has no messages in {store!r}")
        return item, messages
    raise ValueError(f"cannot replay a {type(item).__name__}: give a list of messages, an (id, messages) pair, "
                     "a Conversation, or a session id with store=")


def _files(path: Path) -> list[Path]:
    # every file the importer reads: JSON lines and whole JSON documents, gzipped or not
    files = sorted(f for pattern in TRANSCRIPT_GLOBS for f in path.glob(pattern)) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"no transcripts ({', '.join(TRANSCRIPT_GLOBS)}) in {path}")
    return files


def read_pairs(path: str | Path) -> list[Pair]:
    """All conversations of a JSONL file or of every ``*.jsonl(.gz)`` in a folder (bad lines warned, skipped)."""
    out: list[Pair] = []
    for file in _files(Path(path)):
        good, bad = read_openai_jsonl(file)
        for line_no, message in bad[:5]:
            warnings.warn(f"{file}:{line_no}: skipped: {message}", stacklevel=3)
        if len(bad) > 5:
            warnings.warn(f"{file}: {len(bad) - 5} more bad lines skipped", stacklevel=3)
        out.extend((conv.id, conv.messages) for _, conv in good)
    return out


def conversations(source: Any, store: Any = None) -> list[Pair]:
    """Every (id, messages) in ``source``: a path, a Store, a dict {id: messages} or an iterable of items."""
    return [(sid, modernize_legacy_calls(messages)) for sid, messages in _conversations(source, store)]


def _conversations(source: Any, store: Any = None) -> list[Pair]:
    if isinstance(source, str | Path) and (store is None or Path(source).exists()):
        return read_pairs(source)
    if _is_store(source):
        return [(sid, source.load_transcript(sid)) for sid in source.sessions()["id"]]
    if hasattr(source, "columns") and "id" in getattr(source, "columns", ()):  # a sessions DataFrame
        if store is None:
            raise ValueError("a sessions DataFrame needs store= to load the transcripts")
        return [one_conversation(str(sid), store) for sid in source["id"]]
    if isinstance(source, dict) and not isinstance(source.get("messages"), list):
        return [(str(k), list(v)) for k, v in source.items()]
    if _is_messages(source) or isinstance(source, str | Conversation) or (
            isinstance(source, dict) and "messages" in source):
        return [one_conversation(source, store)]
    if not isinstance(source, Iterable):
        raise ValueError(f"cannot compare over a {type(source).__name__}")
    return [one_conversation(item, store) for item in source]
