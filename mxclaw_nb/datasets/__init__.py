"""Real public agent transcripts shipped with the package, so analyses run on real traffic anywhere.

Why: replaying compaction policies (notebook 03) and querying imported sessions (notebook 04) says
something only on real agent runs, and a fresh clone or a ``pip install`` has no ``../shared/transcripts``
beside it. This package carries a small, rule-based subset of those shared transcripts (gzipped JSONL in
OpenAI chat format, one conversation per line, copied byte for byte: dangling calls, reused tool-call
ids and ``\\r\\n`` in observations are kept), their MIT licence texts and a README on provenance and
selection (``scripts/make_datasets.py`` rebuilds them). Files are parsed by the importer's own reader
(``analysis.importers.read_openai_jsonl``), so a shipped file, a shared file and a user's export read the
same way and import as the same sessions.

    from mxclaw_nb import datasets
    datasets.available()                  # ['swe-agent', 'tau-bench']
    convs = datasets.load("swe-agent")    # [Conversation(id, messages, source, meta), ...]
    datasets.load("tau-bench", full=True) # all 200 from the shared folder, when it is present
    datasets.info()                       # one row per dataset: counts, licence, origin, file
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mxclaw_nb.analysis.accuracy import DEFAULT_TRANSCRIPTS as DEFAULT_SHARED
from mxclaw_nb.analysis.importers import Conversation, read_openai_jsonl

__all__ = ["DATASETS", "DEFAULT_SHARED", "ENV_FOLDER", "Dataset", "available", "full_path", "info", "licence_text",
           "load", "path", "shared_folder"]

#: Environment variable naming a folder that holds the full shared set (``<name>.jsonl`` files).
ENV_FOLDER = "MXCLAW_TRANSCRIPTS"


@dataclass(frozen=True)
class Dataset:
    """One shipped dataset: where it came from, under which licence, and how the subset was chosen."""

    name: str
    origin: str
    licence: str
    selection: str
    conversations: int  # shipped
    full_conversations: int  # in the shared set it was taken from

    @property
    def file(self) -> str:
        """The shipped file's name inside this package."""
        return f"{self.name}.jsonl.gz"

    @property
    def licence_file(self) -> str:
        """The licence text's file name inside this package."""
        return f"LICENSE.{self.name}.txt"


DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset("swe-agent", "github.com/SWE-agent/SWE-agent: trajectories/demonstrations and tests/test_data/trajectories",
            "MIT, Copyright (c) 2024 John Yang, Carlos E. Jimenez, Alexander Wettig, Shunyu Yao, Karthik Narasimhan, "
            "Ofir Press", "all conversations", 23, 23),
    Dataset("tau-bench", "github.com/sierra-research/tau-bench: historical_trajectories/gpt-4o-airline.json "
            "(real GPT-4o runs)", "MIT, Copyright (c) 2024 Sierra", "the longest trial of each of the 50 tasks",
            50, 200),
)}


def available() -> list[str]:
    """Names of the shipped datasets."""
    return list(DATASETS)


def _dataset(name: str) -> Dataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"no dataset {name!r}; available: {', '.join(DATASETS)}") from None


def _resource(filename: str) -> Path:
    # Package data of a regular (unzipped) install or a checkout is a real file; that is all we support.
    return Path(str(resources.files(__name__).joinpath(filename)))


def path(name: str) -> Path:
    """The shipped ``.jsonl.gz`` file of ``name`` (e.g. for ``import_openai_jsonl(store, path)``)."""
    return _resource(_dataset(name).file)


def licence_text(name: str) -> str:
    """The licence under which dataset ``name`` is redistributed."""
    return _resource(_dataset(name).licence_file).read_text(encoding="utf-8")


def shared_folder() -> Path | None:
    """The folder of the full shared set: ``$MXCLAW_TRANSCRIPTS`` or ``../shared/transcripts``; None if absent."""
    env = os.environ.get(ENV_FOLDER)
    folder = Path(env).expanduser() if env else DEFAULT_SHARED
    return folder if folder.is_dir() else None


def full_path(name: str) -> Path | None:
    """The full shared file of ``name`` (``<folder>/<name>.jsonl``), or None when it is not present."""
    _dataset(name)
    folder = shared_folder()
    file = folder / f"{name}.jsonl" if folder else None
    return file if file and file.is_file() else None


def load(name: str, *, full: bool = False) -> list[Conversation]:
    """Conversations of dataset ``name``: the shipped subset, or with ``full=True`` the whole shared file.

    Each is a ``Conversation`` (``id``, ``messages`` in OpenAI chat format, ``source``, ``meta``), usable
    wherever the analysis functions take conversations. Lines are parsed as the importer does; a shipped
    file never has bad lines (a test checks), so any would raise here rather than pass silently.
    """
    file = path(name)
    if full:
        found = full_path(name)
        if found is None:
            raise FileNotFoundError(f"the full {name} set is not present: looked for {name}.jsonl in "
                                    f"${ENV_FOLDER} or {DEFAULT_SHARED}; load({name!r}) gives the shipped subset")
        file = found
    good, bad = read_openai_jsonl(file)
    if bad:
        line, reason = bad[0]
        raise ValueError(f"{file}:{line}: {reason} ({len(bad)} bad lines)")
    return [conv for _, conv in good]


def info() -> list[dict[str, Any]]:
    """One record per dataset: name, shipped and full counts, licence, origin, selection, shipped file and bytes."""
    out = []
    for d in DATASETS.values():
        file = path(d.name)
        out.append({"name": d.name, "conversations": d.conversations, "of": d.full_conversations,
                    "selection": d.selection, "licence": d.licence, "origin": d.origin, "file": d.file,
                    "bytes": file.stat().st_size, "full_present": full_path(d.name) is not None})
    return out
