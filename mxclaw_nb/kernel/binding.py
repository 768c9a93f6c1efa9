"""One session per notebook: the session id lives in the notebook itself, and the store says where it went (SPEC N4).

Where the id lives: in the notebook's own metadata, `metadata.language_info.mxclaw.session_id`. The kernel
puts it in its `kernel_info` reply's `language_info`, and JupyterLab and Notebook 7 copy that object into the
notebook's metadata whenever a kernel starts for it (`NotebookPanel._updateLanguage`), so it is saved with the
notebook and travels with every rename, move and copy — JupyterLab renames `Untitled.ipynb` at the first
save, which a path alone does not survive. No frontend extension or private frontend API is involved: the
kernel reads the saved file (its path is `JPY_SESSION_NAME`, which Jupyter Server sets for a notebook's
kernels) and answers `kernel_info`. A session chosen later in the kernel's life (`%agent new`, `%agent
resume`) reaches the metadata at the next kernel start; until then the store's switch record (below) leads
from the id in the metadata to it.

What the store keeps: an append-only `notebook.bound` event (payload `{"notebook": path, "from": previous
session or null}`) in the session the notebook uses, written once the session is stored. From the id in the
metadata the kernel follows the switches that notebook's kernels made (`from`), so a notebook continues the
session it used last. What a kernel does at start (`plan`):

- the metadata names a stored session, last used by this path, or by a path that no longer holds a notebook
  naming it (a rename or move): continue it;
- the notebook at that other path still names it: this notebook is a copy; it starts its own session and says
  how to continue the original one instead (`%agent resume <id>`);
- the metadata names a session this store does not hold, and the notebook shows turns of it: the binding is
  gone (another database, a deleted file); a new session starts and the message says which session the
  notebook used to continue and how to resume it;
- no id in the metadata (a notebook from an older mxclaw_nb, another frontend): the newest binding of the
  notebook's path, as before.

`MXCLAW_NOTEBOOK` overrides the notebook's name (any name: papermill, a console or a script), and VS Code's
`__vsc_ipynb_file__` is used when neither is set. Where nothing names the notebook every kernel starts a
new session, as `%%agent` does in a Python kernel; `%agent resume <id>` continues a stored one.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENT = "notebook.bound"
ENV_OVERRIDE = "MXCLAW_NOTEBOOK"
ENV_JUPYTER = "JPY_SESSION_NAME"
META_KEY = "mxclaw"  # inside the notebook's metadata.language_info (and accepted at metadata top level)

def notebook_name(env: Mapping[str, str] | None = None, user_ns: Mapping[str, Any] | None = None) -> str | None:
    """The name the kernel binds its session to: $MXCLAW_NOTEBOOK, $JPY_SESSION_NAME, VS Code's file, or None."""
    env = os.environ if env is None else env
    for key in (ENV_OVERRIDE, ENV_JUPYTER):
        if env.get(key, "").strip():
            return env[key].strip()
    vsc = (user_ns or {}).get("__vsc_ipynb_file__")
    return str(vsc) if vsc else None


def session_for(store: Any, notebook: str) -> str | None:
    """The session id bound last to `notebook` in `store`, or None for a notebook not seen before."""
    return store.session_for_event(EVENT, "notebook", notebook)


def is_stored(store: Any, session_id: str) -> bool:
    """True once the session's row exists (its first turn has started)."""
    return bool(store.has_session(session_id))


def turns(store: Any, session_id: str) -> int:
    """How many prompts the session has stored."""
    return int(store.turn_count(session_id))


def bind(store: Any, session_id: str, notebook: str, previous: str | None = None) -> None:
    """Record that `notebook` uses `session_id` from now on, switched from `previous` (append-only, SPEC S2)."""
    store.append_event(session_id, EVENT, {"notebook": notebook, "from": previous})


def metadata_session(path: str | os.PathLike[str]) -> str | None:
    """The session id a saved notebook names in its metadata, or None (no file, not a notebook, no id)."""
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, ValueError, AttributeError):
        return None
    for block in ((meta.get("language_info") or {}).get(META_KEY), meta.get(META_KEY)):
        if isinstance(block, dict) and isinstance(block.get("session_id"), str) and block["session_id"].strip():
            return str(block["session_id"]).strip()
    return None


def shows_session(path: str | os.PathLike[str], session_id: str) -> bool:
    """True when the saved notebook's outputs show turns of the session (`session 3f2a91c0 · turn 2`)."""
    try:
        return f"session {session_id[:8]}" in Path(path).read_text(encoding="utf-8")
    except OSError:
        return False


def _bindings(store: Any) -> list[tuple[str, str, str | None]]:
    """Every `notebook.bound` event as (session, notebook, from), oldest first."""
    return [(str(sid), str(notebook), None if prev is None else str(prev))
            for sid, notebook, prev in store.event_fields(EVENT, ("notebook", "from"))]


def latest(store: Any, session_id: str) -> tuple[str, str | None]:
    """Follow the switches made from `session_id` by the kernels of the notebook that used it (`%agent new`,
    `%agent resume` record `from`), in order: (the session reached, the notebook path that bound it last)."""
    cur, where = session_id, None
    for sid, notebook, prev in _bindings(store):
        if sid == cur:
            where = notebook
        elif prev == cur and (where is None or notebook == where):
            cur, where = sid, notebook
    return cur, where


@dataclass(frozen=True)
class Plan:
    """What a kernel does about its notebook's session at start: the id, whether it continues a stored
    session, and the sentence it says on the first agent cell (None: nothing worth saying)."""

    session_id: str
    continues: bool
    message: str | None = None
    moved: bool = False  # continued under a new path (renamed or moved): bind it there


def plan(store: Any, notebook: str | None) -> Plan:
    """The session the kernel of `notebook` uses (see the module text for the cases)."""
    fresh = uuid.uuid4().hex
    if notebook is None:
        return Plan(fresh, False)
    named = metadata_session(notebook)
    if named is None:
        found = session_for(store, notebook)
        if found is None:
            return Plan(fresh, False)
        return Plan(found, True, _continuing(store, found))
    target, where = latest(store, named)
    if not is_stored(store, target):
        if shows_session(notebook, named):
            return Plan(fresh, False, (
                f"This notebook used to continue session {named[:8]}, which {store.path} does not hold (another "
                f"database, or a deleted one?). A new session starts here. To continue {named[:8]} instead, point "
                f"MXCLAW_DB (or %agent config db=...) at the database that holds it and run %agent resume {named}."))
        return Plan(named, False)  # its id, chosen by an earlier kernel that ran no turn: use it
    if where is not None and where != notebook and os.path.isfile(where) and \
            metadata_session(where) in (named, target) and _same_notebook(where, notebook) is False:
        turns_so_far = turns(store, target)
        return Plan(fresh, False, (
            f"This notebook is a copy of {where}, which continues session {target[:8]} ({turns_so_far} "
            f"turn{'s' if turns_so_far != 1 else ''}). This copy starts its own session (a fork: the original's "
            f"turns stay there). To continue {target[:8]} here instead, run %agent resume {target}."))
    moved = where is not None and where != notebook
    return Plan(target, True, _continuing(store, target, f"; the notebook was {where}" if moved else ""), moved)


def _same_notebook(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _continuing(store: Any, session_id: str, note: str = "") -> str:
    n = turns(store, session_id)
    return (f"Continuing this notebook's session {session_id[:8]} ({n} turn{'s' if n != 1 else ''} so far{note}); "
            "%agent new starts a fresh one.")
