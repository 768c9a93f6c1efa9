"""One session per notebook: how the agent kernel knows its notebook and finds the notebook's session (SPEC N4).

How the kernel knows the notebook: Jupyter Server starts every kernel of a notebook with the environment
variable `JPY_SESSION_NAME` set to the notebook's path (`SessionManager.get_kernel_env`), and "Restart
kernel" starts the new process with the same environment. `MXCLAW_NOTEBOOK` overrides it (any name: for
papermill, a console or a script), and VS Code's `__vsc_ipynb_file__` is used when neither is set. Where
nothing names the notebook (jupyter console, papermill, nbclient without the variable) every kernel starts a
new session, as `%%agent` does in a Python kernel; `%agent resume <id>` continues a stored one.

Where the mapping lives: an append-only `notebook.bound` event (payload `{"notebook": name}`) in the session
the notebook used, written the first time the kernel sees that session stored. The notebook's session is the
one with the newest such event, so after `%agent new` (or `%agent resume`) and a turn, reopening the
notebook continues the session it used last. Renaming or moving the notebook changes the name: the kernel
then starts a new session (resume the old one with `%agent resume`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

EVENT = "notebook.bound"
ENV_OVERRIDE = "MXCLAW_NOTEBOOK"
ENV_JUPYTER = "JPY_SESSION_NAME"



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


def bind(store: Any, session_id: str, notebook: str) -> None:
    """Record that `notebook` uses `session_id` from now on (append-only, SPEC S2)."""
    store.append_event(session_id, EVENT, {"notebook": notebook})
