"""Store with real processes (SPEC S3, L4): concurrent writers, SIGKILL mid-turn, a foreign holder."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mxclaw_nb.store.writer import Store, StoreError

WORKER = Path(__file__).parent / "helpers" / "store_worker.py"
pytestmark = pytest.mark.slow


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def facts(proc: subprocess.Popen[str], timeout: float = 120) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_s3_two_processes_and_a_reader_share_one_file_without_losing_rows(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    n = 120
    with Store(path) as s:
        a, b, shared = s.create_session(), s.create_session(), s.create_session()
    workers = [spawn("append", str(path), a, shared, str(n), "A"), spawn("append", str(path), b, shared, str(n), "B")]
    reads = 0
    with Store(path) as reader:  # a third process-like user reading while both write
        while any(w.poll() is None for w in workers):
            reader.sessions()
            reads += 1
            reader.release()
            time.sleep(0.02)
    results = [facts(w) for w in workers]
    assert all(r[-1].get("done") for r in results)
    with Store(path) as s:
        for sid, tag in ((a, "A"), (b, "B")):
            assert [m["content"] for m in s.load_transcript(sid)] == [f"{tag}-{i} 你好" for i in range(n)]
        shared_msgs = [m["content"] for m in s.load_transcript(shared)]
        assert len(shared_msgs) == 2 * n
        for tag, result in (("A", results[0]), ("B", results[1])):
            # Each writer's messages keep their order, and each reported seq points at that message.
            assert [c for c in shared_msgs if c.startswith(tag)] == [f"{tag}-{i} 你好" for i in range(n)]
            for fact in result[:-1]:
                if fact["session"] == shared:
                    assert shared_msgs[fact["seq"]] == f"{tag}-{fact['i']} 你好"
        seqs = s.sql("SELECT seq FROM messages WHERE session_id = ? ORDER BY seq", [shared]).seq
        assert list(seqs) == list(range(2 * n))
    assert reads > 0


def test_s3_l4_sigkill_mid_turn_loses_nothing_already_appended(tmp_path: Path) -> None:
    path = tmp_path / "kill.duckdb"
    with Store(path) as s:
        sid = s.create_session()
    proc = spawn("forever", str(path), sid)
    reported = []
    assert proc.stdout is not None
    for line in proc.stdout:
        reported.append(json.loads(line))
        if len(reported) == 40:
            proc.send_signal(signal.SIGKILL)  # the child is mid-iteration: it appends without pause
            break
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    # The child ran ahead of our reading: collect everything it reported before it died.
    reported += [json.loads(line) for line in proc.stdout.read().splitlines() if line.endswith("}")]
    started = time.monotonic()
    with Store(path, timeout=10) as s:
        assert time.monotonic() - started < 5  # the dead holder's locks are gone
        contents = [m["content"] for m in s.load_transcript(sid)]
        assert contents[: len(reported)] == [f"answer {f['i']}" for f in reported]
        assert len(contents) - len(reported) in (0, 1)  # at most the one appended just before the kill
        assert len(s.requests(sid)) >= len(reported) and len(s.events(sid)) >= len(reported)
        assert s.append_message(sid, {"role": "user", "content": "next turn"}, turn=99) == len(contents)


def test_l4_sigkill_during_a_slow_tool_keeps_the_iterations_answer_record_and_events(tmp_path: Path) -> None:
    """One commit per iteration, but what the user has seen is committed while a slow tool still runs (L4)."""
    path = tmp_path / "slow.duckdb"
    with Store(path) as s:
        sid = s.create_session()
    proc = spawn("slow_tool", str(path), sid)
    assert proc.stdout is not None
    assert json.loads(proc.stdout.readline()) == {"seq": 0}
    time.sleep(1.0)  # the 'tool' runs; the committer thread has committed (0.2 s)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    with Store(path, timeout=10) as s:
        assert [m["content"] for m in s.load_transcript(sid)] == ["running a slow tool"]
        assert len(s.requests(sid)) == 1 and list(s.events(sid)["type"]) == ["tool.started"]


def test_s3_a_foreign_program_holding_the_file_gives_a_clear_error_then_waits(tmp_path: Path) -> None:
    path = tmp_path / "foreign.duckdb"
    Store(path).close()
    holder = spawn("hold", str(path), "1.5")
    assert holder.stdout is not None and json.loads(holder.stdout.readline()) == {"holding": True}
    with pytest.raises(StoreError, match="another program holds the database") as err:
        Store(path, timeout=0.3)
    assert str(path) in str(err.value)
    with Store(path, timeout=20) as s:  # waits until the holder lets go
        assert s.sessions().empty
    holder.wait(timeout=30)


def test_s3_an_idle_holder_hands_the_file_over_when_another_process_asks(tmp_path: Path) -> None:
    path = tmp_path / "handover.duckdb"
    with Store(path, idle_release=600) as holder:  # would keep the file for 10 minutes if nobody asked
        sid = holder.create_session()
        child = facts(spawn("open", str(path)))
        assert child[0]["ok"] and child[0]["seconds"] < 3.0
        # The holder gets the file back transparently on its next call.
        assert holder.append_message(sid, {"role": "user", "content": "still mine"}, turn=0) == 0


def test_s3_a_busy_holder_hands_the_file_over_within_its_hold_slice(tmp_path: Path) -> None:
    # The holder never goes idle (an append every few ms, like a bulk writer); the waiter announces itself on
    # `<db>.queue.lock` (filelock) and the holder's per-poll check (a flock try on a kept descriptor) must see it.
    path = tmp_path / "busy.duckdb"
    with Store(path, idle_release=600) as holder:
        sid = holder.create_session()
        child = spawn("open", str(path))
        appended, deadline = 0, time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            holder.append_message(sid, {"role": "user", "content": f"busy {appended}"}, turn=0)
            appended += 1
        got = facts(child)
        assert got[0]["ok"] and got[0]["seconds"] < 5.0, got
        assert appended > 10  # the holder really was busy while the child waited
        assert len(holder.load_transcript(sid)) == appended
