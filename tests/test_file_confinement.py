"""File tools against links, races and special files (SPEC L5): real filesystem, real threads."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from pathlib import Path

import pytest

from mxclaw_nb.tools import ToolContext, ToolRegistry, default_registry
from mxclaw_nb.tools.beneath import has_openat2


@pytest.fixture
def reg() -> ToolRegistry:
    return default_registry()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / "src").mkdir(parents=True)
    (w / "src" / "a.py").write_text("x = 1\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("OUTSIDE-SECRET\n")
    return w


def run(reg: ToolRegistry, ws: Path, tool: str, **args: object) -> tuple[bool, str]:
    res = reg.run(tool, json.dumps(args), ToolContext(ws, "s"))
    return res.is_error, res.content


def test_l5_hard_link_to_outside_is_refused(reg: ToolRegistry, ws: Path) -> None:
    secret = ws.parent / "outside" / "secret.txt"
    os.link(secret, ws / "hard.txt")
    for tool, args in [("read_file", {}), ("edit_file", {"old_string": "OUTSIDE", "new_string": "pwned"}),
                       ("write_file", {"content": "pwned"})]:
        err, text = run(reg, ws, tool, path="hard.txt", **args)
        assert err and text.startswith("Permission denied:") and "hard links" in text, text
        assert "OUTSIDE-SECRET" not in text
    err, text = run(reg, ws, "grep", pattern="SECRET", path=".")
    assert not err and text.startswith("No matches") and "1 hard-linked files skipped" in text
    assert secret.read_text() == "OUTSIDE-SECRET\n"


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_l5_special_files_answer_at_once(reg: ToolRegistry, ws: Path, kind: str) -> None:
    path = ws / "special"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    for tool, args in [("read_file", {"path": "special"}), ("edit_file", {"path": "special", "old_string": "a",
                                                                           "new_string": "b"}),
                       ("write_file", {"path": "special", "content": "x"}), ("grep", {"pattern": ".", "path": "."}),
                       ("grep", {"pattern": ".", "path": "special"}), ("list_dir", {"path": "."})]:
        start = time.monotonic()
        err, text = run(reg, ws, tool, **args)
        assert time.monotonic() - start < 1.0, f"{tool} on a {kind} took too long"
        if tool == "list_dir":
            assert "special  (a FIFO (named pipe))" in text or "special  (a socket)" in text
        elif tool == "grep" and args["path"] == ".":
            assert "1 non-regular files skipped" in text
        else:
            assert err and "not a regular file" in text, (tool, text)


def test_l5_symlink_loops_do_not_break_grep_or_list_dir(reg: ToolRegistry, ws: Path) -> None:
    (ws / "loop").symlink_to("loop")
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "src" / "up").symlink_to("..")  # a folder loop
    err, text = run(reg, ws, "grep", pattern="x =", path=".")
    assert not err and "src/a.py:1: x = 1" in text and "symlinks not followed" in text
    err, text = run(reg, ws, "list_dir", path=".")
    assert not err and "loop -> loop" in text and "a -> b" in text
    err, text = run(reg, ws, "read_file", path="loop")
    assert err


def test_l5_symlinks_inside_are_followed_and_out_refused(reg: ToolRegistry, ws: Path) -> None:
    (ws / "rel").symlink_to("src/a.py")
    (ws / "abs").symlink_to(ws / "src" / "a.py")
    (ws / "out").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "outdir").symlink_to(ws.parent / "outside")
    assert run(reg, ws, "read_file", path="rel") == (False, "x = 1\n")
    assert run(reg, ws, "read_file", path="abs") == (False, "x = 1\n")
    for path in ("out", "outdir/secret.txt", "src/../../outside/secret.txt", "/proc/self/root/etc/passwd"):
        err, text = run(reg, ws, "read_file", path=path)
        assert err and text.startswith("Permission denied:") and "outside the workspace" in text, (path, text)
    err, text = run(reg, ws, "write_file", path="outdir/new.txt", content="pwned")
    assert err and not (ws.parent / "outside" / "new.txt").exists()


def test_l5_directory_symlink_swap_race(reg: ToolRegistry, ws: Path) -> None:
    """A folder swapped for a symlink to outside while the tools open paths through it: 0 escapes."""
    outside = ws.parent / "outside"
    target = ws / "d"
    target.mkdir()
    (target / "f.txt").write_text("inside\n")
    link = ws / "d.link"
    link.symlink_to(outside)
    libc = ctypes.CDLL(None, use_errno=True)
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:  # atomically exchange 'd' (a real folder) and 'd.link' (a symlink out)
        nonlocal swaps
        old, new = bytes(target), bytes(link)
        while not stop.is_set():
            if libc.renameat2(-100, old, -100, new, 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
                raise OSError(ctypes.get_errno(), "renameat2")
            swaps += 1

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    trials = 3000
    reads = writes = escapes = ok_reads = 0
    try:
        for i in range(trials):
            err, text = run(reg, ws, "read_file", path="d/secret.txt" if i % 2 else "d/f.txt")
            reads += 1
            if "OUTSIDE-SECRET" in text:
                escapes += 1
            ok_reads += not err
            run(reg, ws, "write_file", path=f"d/w{i % 7}.txt", content="pwned")
            writes += 1
    finally:
        stop.set()
        thread.join(5)
    leaked = sorted(p.name for p in outside.iterdir() if p.name != "secret.txt")
    print(f"swap race: {trials} trials, {reads} reads, {writes} writes, {swaps} swaps, "
          f"{escapes} escaped reads, {len(leaked)} files written outside (openat2: {has_openat2()})")
    assert swaps > 100 and ok_reads > 0  # the race really ran, and reads through the real folder worked
    assert escapes == 0 and leaked == []
    assert (outside / "secret.txt").read_text() == "OUTSIDE-SECRET\n"
