"""Store errors: one exception type whose message names the database path and what to do.

Why: DuckDB and the OS report failures in their own words ("IO Error: Could not set lock...",
"No space left on device"). A notebook user needs to know which file is affected and what to try
next, so every failure leaving the store goes through `translate`, which keeps the original
exception as `__cause__` for debugging but leads with a plain sentence and a remedy.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path


def _is_duckdb_error(exc: BaseException) -> bool:
    # Not importing duckdb here keeps `%load_ext` light; an exception from DuckDB means it is imported.
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(exc, duckdb.Error)


MOVE_HINT = "set MXCLAW_DB (or pass Store(path=...)) to a file in a writable folder"


class StoreError(RuntimeError):
    """A store operation failed; the message names the database file and a remedy."""

    def __init__(self, path: Path | str | None, message: str) -> None:
        self.path = Path(path) if path is not None else None
        super().__init__(f"{path}: {message}" if path is not None else message)


def _is_disk_full(text: str, exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    lowered = text.lower()
    return any(s in lowered for s in ("no space left", "file too large", "disk quota", "disk is full"))


def _is_permission(text: str, exc: BaseException) -> bool:
    if isinstance(exc, PermissionError | IsADirectoryError | NotADirectoryError):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR):
        return True
    lowered = text.lower()
    return any(s in lowered for s in ("permission denied", "read-only file system", "not a directory"))


def translate(path: Path, exc: BaseException, action: str) -> StoreError:
    """Turn a DuckDB/OS exception raised while doing `action` into a StoreError with a remedy."""
    if isinstance(exc, StoreError):
        return exc
    text = str(exc)
    if "not a valid DuckDB database file" in text or "unable to open database file" in text.lower():
        msg = (
            f"cannot {action}: this file is not a DuckDB database (or is damaged). It was left untouched; "
            f"move it away or {MOVE_HINT}."
        )
    elif "different configuration than existing connections" in text:
        msg = (
            f"cannot {action}: this process already has the file open through another DuckDB connection with "
            "other settings (e.g. duckdb.connect(path, read_only=True)). Close that connection first; to read "
            "the store from this kernel use store.sql(...), `with store.reader() as con:` or %agent sql."
        )
    elif "Could not set lock" in text or "Conflicting lock" in text:
        msg = (
            f"cannot {action}: another program holds the database open ({text.strip()}). Close that program "
            "(e.g. a duckdb shell) and retry; mxclaw_nb processes hand the file over by themselves."
        )
    elif _is_disk_full(text, exc):
        msg = (
            f"cannot {action}: the disk is full or the file size limit was reached ({text.strip()}). "
            f"Rows stored earlier are intact; free some space or {MOVE_HINT}."
        )
    elif _is_permission(text, exc):
        msg = f"cannot {action}: the folder or file is not writable ({text.strip()}); {MOVE_HINT}."
    elif _is_duckdb_error(exc):
        msg = f"cannot {action}: DuckDB error: {text.strip()}"
    else:
        msg = f"cannot {action}: {type(exc).__name__}: {text.strip()}"
    err = StoreError(path, msg)
    err.__cause__ = exc
    return err
