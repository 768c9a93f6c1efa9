"""SPEC L9 drill: F1's project files are read the way the file tools read, or not at all.

Every file the frozen context reads (AGENTS.md, .mx-claw/AGENTS.md, .mx-claw/project.json, a skill's SKILL.md,
the project memory, and the user memory beneath the home folder) is planted with each hostile shape a cloned
repository or an earlier shell command can leave: a symlink to a secret outside, a symlinked folder component
(`.mx-claw -> outside`), a FIFO, a link to /dev/zero, a character device node (/dev/zero itself, made inside the
workspace), a hard link to the secret, and a file far over the cap. The secret never reaches the frozen context,
nothing hangs (each load runs under a watchdog), memory stays bounded, and each refusal is a visible note.
A whole turn through the real `openai` client and a real DuckDB file then shows the note stored as a
`frozen.note` event and in the live log, the user message stored, and nothing of the secret sent or stored.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mxclaw_nb.frozen import MAX_FILE_BYTES, load_frozen
from tests.helpers.drill import new_tally, print_tally

SECRET = "TOP-SECRET-outside-the-workspace-9f3a"
# (root "ws" or "home", path under the root): every file F1 reads
FILES = [("ws", "AGENTS.md"), ("ws", ".mx-claw/AGENTS.md"), ("ws", ".mx-claw/project.json"),
         ("ws", ".mx-claw/skills/deploy/SKILL.md"), ("ws", ".mx-claw/memory.md"), ("home", ".mx-claw/memory.md")]


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "skills" / "deploy").mkdir(parents=True, exist_ok=True)
    for rel in ("secret.txt", "AGENTS.md", "project.json", "memory.md", "skills/deploy/SKILL.md"):
        (out / rel).write_text(f'{{"verification": "{SECRET}"}}' if rel.endswith(".json") else SECRET + "\n")
    return out


def _symlink_file(target: Path, outside: Path, rel: str) -> None:
    target.symlink_to(outside / "secret.txt")


def _symlink_folder(target: Path, outside: Path, rel: str) -> None:
    """The first folder component of `rel` (`.mx-claw`, or the skill's folder) is a link to a folder outside."""
    if "/" not in rel:  # AGENTS.md has no folder component: the workspace's own is the root itself
        target.symlink_to(outside / "AGENTS.md")
        return
    first = target.parent if "skills/" in rel else target.parent
    while first.name not in (".mx-claw", "deploy"):
        first = first.parent
    if first.name == "deploy":
        first.symlink_to(outside / "skills" / "deploy", target_is_directory=True)
    else:
        first.symlink_to(outside, target_is_directory=True)


def _fifo(target: Path, outside: Path, rel: str) -> None:
    os.mkfifo(target)


def _dev_zero_link(target: Path, outside: Path, rel: str) -> None:
    target.symlink_to("/dev/zero")


def _device_node(target: Path, outside: Path, rel: str) -> None:
    os.mknod(target, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's device, inside the workspace


def _hard_link(target: Path, outside: Path, rel: str) -> None:
    os.link(outside / "secret.txt", target)


def _oversize(target: Path, outside: Path, rel: str) -> None:
    with target.open("wb") as fh:  # sparse: 2 GB that cost no disk
        fh.write(b"x" * 100 + b"\n")
        fh.truncate(2 * 1024**3)


CASES: dict[str, Callable[[Path, Path, str], None]] = {
    "symlink to a file outside": _symlink_file,
    "symlinked folder component": _symlink_folder,
    "FIFO": _fifo,
    "link to /dev/zero": _dev_zero_link,
    "device node (char 1,5)": _device_node,
    "hard link to a file outside": _hard_link,
    "2 GB file": _oversize,
}
DRILL = new_tally()


@pytest.fixture(scope="module", autouse=True)
def drill_tally(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints the drill's tally (cases tried, escapes, leaks, hangs) once the module's cases have run."""
    yield
    print_tally(request, "L9", DRILL)



def _plant(tmp_path: Path, where: str, rel: str, case: str) -> tuple[Path, Path]:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    root = ws if where == "ws" else home
    target = root / rel
    if case != "symlinked folder component" or "/" not in rel:
        target.parent.mkdir(parents=True, exist_ok=True)
    elif "skills/" in rel:
        target.parent.parent.mkdir(parents=True, exist_ok=True)
    CASES[case](target, _outside(tmp_path), rel)
    return ws, home


def _load_with_watchdog(ws: Path, home: Path, seconds: float = 10.0) -> tuple[list, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(load_frozen(ws, home=home)), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        DRILL["hangs"] += 1
        pytest.fail(f"loading the frozen context hung for {seconds} s")
    return out[0]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("where", "rel"), FILES, ids=[f"{w}:{r}" for w, r in FILES])
def test_l9_every_frozen_file_refuses_every_hostile_shape(tmp_path: Path, where: str, rel: str, case: str) -> None:
    ws, home = _plant(tmp_path, where, rel, case)
    tracemalloc.start()
    try:
        messages, notes = _load_with_watchdog(ws, home)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    DRILL["cases"] += 1
    text = json.dumps(messages, ensure_ascii=False)
    if SECRET in text:
        DRILL["leaks"] += 1
    assert SECRET not in text, f"{case} at {rel}: the secret reached the frozen context"
    assert peak < 8 * MAX_FILE_BYTES + 4_000_000, f"{case}: {peak:,} bytes traced while loading"
    if case == "2 GB file":  # not refused: capped before reading, and said so
        said = {".mx-claw/project.json": "not valid JSON", ".mx-claw/skills/deploy/SKILL.md": "- deploy: xxxxxxxx"}
        assert said.get(rel, "truncated: the file has 2147483648 bytes; at most") in text, text[:300]
        return
    shown = "~/.mx-claw/memory.md" if where == "home" else rel
    mine = [n for n in notes if n["file"] == shown or (case == "symlinked folder component" and "skills/" in rel
                                                       and n["file"] == ".mx-claw/skills")]
    assert mine, f"{case} at {rel}: refused silently ({notes})"
    note = mine[0]["note"]
    assert all(n["note"] in text for n in notes), "each note is in the frozen context"
    reason = {"FIFO": "a FIFO (named pipe), not a regular file", "device node (char 1,5)": "a device, not a regular",
              "hard link to a file outside": "has 2 hard links"}.get(case, "outside")
    assert reason in note, note


def test_l9_links_that_stay_inside_are_followed(tmp_path: Path) -> None:
    """A relative link inside the workspace (docs/AGENTS.md, a shared skills folder) still works: L9 refuses only
    links out, like the file tools."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    (ws / "docs").mkdir(parents=True)
    (ws / "docs" / "AGENTS.md").write_text("Run make check.\n")
    (ws / "AGENTS.md").symlink_to("docs/AGENTS.md")
    messages, notes = load_frozen(ws, home=home)
    assert notes == [] and messages[0]["content"] == "[project instructions] AGENTS.md\nRun make check."


def test_l9_a_turn_with_planted_project_files_stores_notes_and_never_the_secret(tmp_path: Path) -> None:
    """The whole first turn: a FIFO AGENTS.md (once a hang) and `.mx-claw -> outside` (once a leak)."""
    from mxclaw_nb import Agent
    from mxclaw_nb.demo.server import TestServer
    from mxclaw_nb.notebook.livelog import LiveLog
    from mxclaw_nb.provider.client import OpenAIProvider

    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    outside = _outside(tmp_path)
    os.mkfifo(ws / "AGENTS.md")
    (ws / ".mx-claw").symlink_to(outside, target_is_directory=True)
    with TestServer() as srv:
        srv.enqueue_text("hello")
        provider = OpenAIProvider(base_url=srv.base_url, api_key="k", model="test-model", call_deadline=20)
        agent = Agent(workspace=ws, db=str(tmp_path / "s.duckdb"), provider=provider, home=home)
        log = LiveLog(agent.label, agent.session_id, mode="off")
        agent.subscribe(log.handle)
        done: list = []
        thread = threading.Thread(target=lambda: done.append(agent.run("hi")), daemon=True)
        thread.start()
        thread.join(30)
        assert done, "the first turn hung"
        sent = json.dumps(srv.requests)
    assert done[0].text == "hello"
    assert SECRET not in sent
    events = agent.store.events(agent.session_id)
    notes = [json.loads(p) if isinstance(p, str) else p for p in events[events["type"] == "frozen.note"]["payload"]]
    assert {n["file"] for n in notes} >= {"AGENTS.md", ".mx-claw/AGENTS.md", ".mx-claw/project.json"}
    assert any("FIFO" in n["note"] for n in notes)
    text = log.to_text()
    assert "⚠ AGENTS.md was not read: it is a FIFO (named pipe)" in text
    assert text.index("⚠ AGENTS.md") > text.index("turn 1")
    stored = json.dumps(agent.transcript(), ensure_ascii=False) + events.to_csv()
    assert SECRET not in stored and "was not read" in stored
    assert agent.transcript()[-2] == {"role": "user", "content": "hi"}
    agent.close()
