"""Subprocess worker for the per-session turn lock and read-only database tests (SPEC S3, L1, N1).

Why a separate script: one turn at a time per session only shows with real processes racing for one
session, and a read-only filesystem needs its own mount namespace. The tests launch
`python tests/helpers/turn_worker.py MODE ...` and read one JSON line per fact.

Modes:
  turns DB SESSION N READY_DIR NAME PEERS [nolock]  wait until PEERS workers are ready, run N demo turns
  hold DB SESSION SECONDS                           hold the session's turn lock, say so, sleep
  magics DB PREFIX                                  run read commands and a turn through %agent
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mxclaw_nb.store.writer import Store  # noqa: E402


def say(**fact: object) -> None:
    """Print one JSON fact and flush."""
    print(json.dumps(fact, ensure_ascii=False, default=str), flush=True)


def turns(db: str, session: str, count: int, ready_dir: str, name: str, peers: int, nolock: bool) -> None:
    """Start together with the other workers, then drive `session` for `count` demo turns."""
    from mxclaw_nb.agent import Agent
    from mxclaw_nb.demo.model import copy_demo_workspace

    if nolock:  # the measurement without the lock (what two kernels did before it existed)
        Store.turn_lock = lambda self, *a, **k: contextlib.nullcontext()  # type: ignore[method-assign]
    workspace = copy_demo_workspace(Path(ready_dir) / f"ws-{name}")
    agent = Agent(db=db, workspace=workspace, session_id=session, approval="deny", approver=None)
    waits: list[str] = []
    agent.subscribe(lambda kind, payload: waits.append(payload["holder"]) if kind == "turn.waiting" else None)
    (Path(ready_dir) / f"{name}.ready").touch()
    deadline = time.monotonic() + 60
    while len(list(Path(ready_dir).glob("*.ready"))) < peers and time.monotonic() < deadline:
        time.sleep(0.005)
    for i in range(count):
        result = agent.run(f"{name} turn {i}: the stock tests fail, fix them")
        say(name=name, i=i, turn=result.turn, status=result.status, waited=len(waits))
    say(name=name, done=True, waits=waits)
    agent.close()


def hold(db: str, session: str, seconds: float) -> None:
    """Hold the turn lock of `session` (as a long turn would) and report it."""
    store = Store(db)
    with store.turn_lock(session):
        say(held=True, pid=os.getpid())
        time.sleep(seconds)
    store.close()


def magics(db: str, prefix: str) -> None:
    """Read commands and one turn through %agent on `db`; reports each command's outcome."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    os.environ["MXCLAW_DB"] = db
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mxclaw_nb")
    for line in ("sessions", f"resume {prefix}", "view", "transcript", "events", "timeline",
                 "sql SELECT count(*) AS n FROM messages", "the stock tests fail, fix them"):
        with capture_output() as cap:
            result = shell.run_cell(f"%agent {line}")
        error = result.error_in_exec
        say(line=line, error=None if error is None else f"{type(error).__name__}: {error}",
            output=(cap.stdout + cap.stderr)[-1500:], outputs=len(cap.outputs))
    m = shell.magics_manager.registry["AgentMagics"]
    say(read_only=m.store().read_only, reason=m.store().read_only_reason)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "turns":
        turns(args[0], args[1], int(args[2]), args[3], args[4], int(args[5]), "nolock" in args[6:])
    elif mode == "hold":
        hold(args[0], args[1], float(args[2]))
    elif mode == "magics":
        magics(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode}")
