"""One turn at a time per session across processes, read-only databases, reading beside the agent (S3, L1, N1).

Real processes (tests/helpers/turn_worker.py) with the offline demo model drive one session at once;
a read-only filesystem is a read-only bind mount in a private mount namespace (`unshare -m`, skipped
where that is not allowed); DuckDB's own `read_only` mode covers the rest.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from mxclaw_nb.agent import Agent
from mxclaw_nb.store.writer import Store, StoreError

WORKER = Path(__file__).parent / "helpers" / "turn_worker.py"
pytestmark = pytest.mark.slow


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def facts(proc: subprocess.Popen[str], timeout: float = 240) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def first_fact(proc: subprocess.Popen[str], timeout: float = 60) -> dict:
    """Wait for the worker's first JSON line (it keeps running)."""
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("{"):
            return json.loads(line)
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read() if proc.stderr else "worker ended")
    raise AssertionError("no fact from the worker")


def new_session(path: Path) -> str:
    with Store(path) as store:
        return store.create_session(workspace=str(path.parent), model="demo", source="demo")


def test_s3_two_processes_driving_one_session_take_turns(tmp_path: Path) -> None:
    """Two processes x 3 demo turns at once: turn numbers 1..6 once each, turns never interleave, no row lost."""
    path = tmp_path / "shared.duckdb"
    sid = new_session(path)
    workers = [spawn("turns", str(path), sid, "3", str(tmp_path), name, "2") for name in ("A", "B")]
    results = [facts(w) for w in workers]
    turns_reported = sorted(f["turn"] for r in results for f in r if "turn" in f)
    assert turns_reported == [1, 2, 3, 4, 5, 6]
    assert all(f["status"] in ("ok", "max_iterations") for r in results for f in r if "status" in f)
    assert sum(len(r[-1]["waits"]) for r in results) >= 1  # they really did meet
    waits = [w for r in results for w in r[-1]["waits"]]
    assert all(w.startswith("process ") for w in waits), waits  # the waiter names the holder
    with Store(path) as store:
        rows = store.sql("SELECT seq, turn, role, content FROM messages WHERE session_id = ? ORDER BY seq", [sid])
        events = store.sql("SELECT turn, type FROM events WHERE session_id = ? AND type IN "
                           "('turn.started', 'turn.finished', 'turn.failed')", [sid])
        requests = store.sql("SELECT turn, count(*) AS n FROM requests WHERE session_id = ? GROUP BY turn", [sid])
    users = rows[rows.role == "user"]
    assert list(users.turn) == [1, 2, 3, 4, 5, 6]  # unique, in order
    assert list(rows.seq) == list(range(len(rows)))  # no gap, no duplicate position
    assert rows.turn.is_monotonic_increasing  # one turn at a time: no interleaved messages
    assert sorted(c.split(" ")[0] for c in users.content) == ["A"] * 3 + ["B"] * 3
    for turn in range(1, 7):  # every turn complete: started, ended, answered, its model calls recorded
        kinds = sorted(events[events.turn == turn].type)
        assert kinds[0] in ("turn.finished", "turn.failed") and kinds[1] == "turn.started", (turn, kinds)
        assert (rows[(rows.turn == turn)].role == "assistant").any()
        assert int(requests[requests.turn == turn].n.iloc[0]) >= 1


def test_s3_a_busy_session_names_its_holder_and_a_killed_holder_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    sid = new_session(path)
    holder = spawn("hold", str(path), sid, "60")
    try:
        fact = first_fact(holder)
        told: list[str] = []
        with Store(path) as store:
            started = time.monotonic()
            busy = rf"session {sid[:8]} is running a turn in process {fact['pid']} "
            with pytest.raises(StoreError, match=busy), store.turn_lock(sid, timeout=1.0, on_wait=told.append):
                pass
            assert 0.9 <= time.monotonic() - started < 10
            assert told and told[0].startswith(f"process {fact['pid']} on ")
            other = store.create_session()
            with store.turn_lock(other, timeout=0.5):  # another session is not blocked
                pass
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            with store.turn_lock(sid, timeout=5.0):  # the OS dropped the dead holder's lock
                pass
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()


def test_s3_the_same_session_in_two_threads_waits_and_a_turn_cannot_nest(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    with Store(path) as store:
        sid = store.create_session()
        order: list[str] = []
        with store.turn_lock(sid):
            with pytest.raises(StoreError, match="already running a turn of session"), store.turn_lock(sid):
                pass

            def other_thread() -> None:
                with store.turn_lock(sid):
                    order.append("thread")

            thread = threading.Thread(target=other_thread)
            thread.start()
            time.sleep(0.3)
            order.append("main done")
        thread.join(timeout=10)
        assert order == ["main done", "thread"]


def test_n1_a_turn_in_the_magic_says_whom_it_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    path = tmp_path / "m.duckdb"
    monkeypatch.setenv("MXCLAW_DB", str(path))
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "mxclaw_nb")
    try:
        m = shell.magics_manager.registry["AgentMagics"]
        sid = m.get_agent().session_id
        m.store().create_session(session_id=sid, workspace=str(m.get_agent().workspace), model="demo")
        holder = spawn("hold", str(path), sid, "2")
        fact = first_fact(holder)
        with capture_output() as cap:
            result = shell.run_cell("%agent the stock tests fail, fix them")
        holder.communicate(timeout=30)
        text = cap.stdout + cap.stderr
        assert result.error_in_exec is None and "Traceback" not in text
        assert f"Waiting: session {sid[:8]} is running a turn in process {fact['pid']} on " in text
        assert "(done" in text or "Stopped" in text
    finally:
        shell.run_line_magic("unload_ext", "mxclaw_nb")


# -- read-only databases -----------------------------------------------------------------------------------
def one_demo_turn(path: Path, workspace: Path) -> str:
    agent = Agent(db=str(path), workspace=str(workspace), approval="deny", approver=None)
    agent.run("the stock tests fail, fix them")
    agent.close()
    return agent.session_id


def test_s1_read_only_store_reads_and_refuses_writes_in_one_sentence(tmp_path: Path, demo_workspace: Path) -> None:
    path = tmp_path / "r.duckdb"
    sid = one_demo_turn(path, demo_workspace)
    with Store(path, read_only=True) as store:
        assert store.read_only and store.read_only_reason == "opened with read_only=True"
        before = store.sql("SELECT count(*) AS n FROM messages").n[0]
        assert len(store.sessions()) == 1 and store.load_transcript(sid) and not store.requests(sid).empty
        for write in (lambda: store.create_session(), lambda: store.append_event(sid, "x", {}),
                      lambda: store.append_message(sid, {"role": "user", "content": "hi"}, turn=9)):
            with pytest.raises(StoreError, match=r"the database is open read-only \(opened with read_only=True\)"):
                write()
        agent = Agent(db=store, workspace=str(demo_workspace), session_id=sid)
        with pytest.raises(StoreError, match=r"cannot run a turn \(nothing was stored or sent\): the database is open"):
            agent.run("one more turn")
        assert store.sql("SELECT count(*) AS n FROM messages").n[0] == before


def test_s4_reading_the_store_from_the_agents_own_process(tmp_path: Path, demo_workspace: Path) -> None:
    """Right after a turn, duckdb.connect(read_only=True) fails (DuckDB); store.reader() works; both documented."""
    path = tmp_path / "k.duckdb"
    agent = Agent(db=str(path), workspace=str(demo_workspace), approval="deny", approver=None)
    agent.run("the stock tests fail, fix them")
    store = agent.store
    with store.reader() as con:
        n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("DELETE FROM messages")
    assert n > 0 and store.sql("SELECT count(*) AS n FROM messages").n[0] == n
    with pytest.raises(duckdb.ConnectionException, match="different configuration"):
        duckdb.connect(str(path), read_only=True)
    store.release()  # the store lets go (as it does by itself after 3 s idle)
    outside = duckdb.connect(str(path), read_only=True)
    assert outside.execute("SELECT count(*) FROM messages").fetchone()[0] == n
    with pytest.raises(StoreError, match=r"Close that connection first.*store\.reader\(\)"):
        store.sessions()
    outside.close()
    assert len(store.sessions()) == 1  # and the store works again
    agent.close()


def _read_only_mount_works(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {folder} {folder} && "
                            f"mount -o remount,ro,bind {folder} {folder} && ! touch {folder}/probe"],
                           capture_output=True, text=True)
    return probe.returncode == 0


def test_s1_n1_database_on_a_read_only_filesystem(tmp_path: Path, demo_workspace: Path) -> None:
    """sessions, resume, view, transcript, events, timeline and sql work; a turn says why it cannot run."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if not _read_only_mount_works(folder):
        pytest.skip("no private mount namespace here (needs unshare -m and mount)")
    path = folder / "store.duckdb"
    sid = one_demo_turn(path, demo_workspace)
    with Store(path) as store:
        before = store.sql("SELECT count(*) AS n FROM messages").n[0]
    script = (f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && "
              f"exec {sys.executable} {WORKER} magics {path} {sid[:8]}")
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    reported = facts(proc)
    found = {f["line"]: f for f in reported if "line" in f}
    assert reported[-1]["read_only"] and reported[-1]["reason"].startswith("Read-only file system")
    for line, fact in found.items():
        assert "Traceback" not in fact["output"], (line, fact["output"])
        assert fact["error"] is None, (line, fact)
    assert "1 session in" in found["sessions"]["output"] and "resumed: 1 turn," in found[f"resume {sid[:8]}"]["output"]
    assert "request view of the last model call" in found["view"]["output"] and "Stage:" in found["view"]["output"]
    assert "prompt tokens per model call" in found["timeline"]["output"]
    assert "n\n0  " in found["sql SELECT count(*) AS n FROM messages"]["output"]
    turn = found["the stock tests fail, fix them"]["output"]
    assert "cannot run a turn (nothing was stored or sent): the database is open read-only" in turn
    assert "(Read-only file system" in turn and "Reading works" in turn
    with Store(path) as store:
        assert store.sql("SELECT count(*) AS n FROM messages").n[0] == before


def test_s1_a_read_only_store_held_past_max_hold_keeps_reading(tmp_path: Path, demo_workspace: Path) -> None:
    """S1: on a read-only filesystem a store held longer than `max_hold` asks whether a writer waits; that check
    must not try to create the queue lock (it raised EROFS out of `%agent view` on a loaded machine)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if not _read_only_mount_works(folder):
        pytest.skip("no private mount namespace here (needs unshare -m and mount)")
    path = folder / "store.duckdb"
    sid = one_demo_turn(path, demo_workspace)
    for suffix in (".lock", ".queue.lock"):  # a fresh copy: no lock file was ever made beside it
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    code = ("import sys, time\n"
            "from mxclaw_nb.store.writer import Store\n"
            "s = Store(sys.argv[1])\n"
            "s._lease.max_hold = 0.0\n"
            "for _ in range(3):\n"
            "    n = len(s.load_transcript(sys.argv[2])); time.sleep(0.02)\n"
            "print(s.read_only, n)\n")
    script = (f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} {folder} && "
              f"exec {sys.executable} -c '{code}' {path} {sid}")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    read_only, n = done.stdout.split()
    assert read_only == "True" and int(n) > 0
