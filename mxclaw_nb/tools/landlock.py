"""Landlock confinement for one shell command, where bubblewrap cannot run (SPEC L5, L8).

The shell tool uses ``make_preexec``: the runner below, run in ``subprocess``'s forked child instead of a new
interpreter per command (no Python start-up: about 20 ms instead of 100-150 ms per command). The script form
remains for running a command by hand.

Why a small module of our own: the PyPI binding (``landlock`` 1.0.0.dev) covers the filesystem only,
and this needs network (ABI 4) and signal scoping (ABI 6) too; the kernel interface is three system
calls and three structs. Run as a script (``python landlock.py --workspace WS --tmp T --home H
[--keep DIR ...] [--network] -- bash -c CMD``), so it needs nothing but the standard library and works whatever
``sys.path`` the kernel had. The runner:

1. becomes a child subreaper, so every process the command starts -- ``nohup``, ``setsid``, double
   forks -- is re-parented to it, never to init;
2. forks the command; the child (only the child: the runner stays outside its domain, so with signal
   scoping the command cannot kill the runner to orphan its children) restricts itself: writes only
   beneath the workspace and the private temp folder, reads and executes everywhere except the user's
   home, /home, /root and the shared temp folders (the workspace and the ``--keep`` toolchain folders
   inside them stay usable), TCP bind/connect refused unless ``--network``,
   abstract Unix sockets and signals confined to the sandbox (ABI >= 6), no new privileges, every
   capability dropped from the bounding set (root inside is root without rights);
3. waits for the command, then kills and reaps every descendant still alive, and exits with the
   command's status. SIGTERM/SIGINT to the runner (the tool's timeout) does the same.

Not covered by Landlock (said in the README): UDP, connecting to named Unix sockets, reading files
outside the home. ``bwrap`` covers those and is preferred by ``sandbox="auto"``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER = 38, 24, 36
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4

# Filesystem rights (ABI 1 unless noted)
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << b for b in range(4, 13))  # REMOVE_DIR .. MAKE_SYM
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # ABI 2, 3, 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where Landlock is missing or disabled."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        value = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(value), 0)


def _fs_rights(abi: int) -> int:
    rights = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | _MAKE_AND_REMOVE
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


def read_roots(hidden: list[Path]) -> list[Path]:
    """Every path to allow reading when the ``hidden`` folders must not be: the siblings on the way to each."""
    hide = {h for h in hidden if h.is_absolute() and h.exists() and h != Path("/")}
    on_the_way = {p for h in hide for p in h.parents}

    def walk(here: Path) -> list[Path]:
        try:
            names = sorted(os.listdir(here))
        except OSError:
            return []
        out: list[Path] = []
        for name in names:
            p = here / name
            if p in hide:
                continue
            out.extend(walk(p) if p in on_the_way and not p.is_symlink() else [p])
        return out

    return walk(Path("/")) if hide else [Path("/")]


def hidden_roots(home: str) -> list[Path]:
    """What Landlock lets the command read: everything but the home, /home, /root and the shared temp folders."""
    return read_roots([Path(home), Path("/tmp"), Path("/var/tmp"), Path("/root"), Path("/home")])


def restrict(workspace: str, tmp: str, home: str, *, network: bool, toolchains: tuple[str, ...] = (),
             roots: list[Path] | None = None, abi: int | None = None) -> None:
    """Confine this process and its future children (Landlock + no_new_privs + no capabilities)."""
    libc = _libc()
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    fs = _fs_rights(abi)
    attr = _RulesetAttr(fs, 0 if network or abi < 4 else NET_BIND_TCP | NET_CONNECT_TCP,
                        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")

    def allow(path: Path | str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # vanished or unreadable: nothing to allow
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = _PathBeneathAttr(rights & fs, fd)
            if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
        finally:
            os.close(fd)

    read = EXECUTE | READ_FILE | READ_DIR
    for root in hidden_roots(home) if roots is None else roots:
        allow(root, read)
    for device in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"):
        allow(device, READ_FILE | WRITE_FILE | (IOCTL_DEV if abi >= 5 else 0))
    for keep in toolchains:
        allow(keep, read)
    allow(workspace, fs)
    allow(tmp, fs)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):  # EINVAL past the last capability; EPERM when unprivileged (nothing to drop)
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break


def _descendants(root: int) -> list[int]:
    """Children of ``root`` now (as a subreaper, every orphan below us becomes one)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == root:
            found.append(int(entry))
    return found


def reap_all() -> None:
    """Kill and reap every process left below this one, until none is left."""
    me = os.getpid()
    for _ in range(1000):
        try:  # the common case: nothing is left, no need to scan /proc
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            continue
        kids = _descendants(me)
        if not kids:
            break
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


def make_preexec(workspace: str, tmp: str, home: str, *, network: bool,
                 toolchains: tuple[str, ...] = ()) -> Callable[[], None]:
    """The runner without a new interpreter per command (L5, L8): run in ``subprocess``'s forked child.

    The child becomes the subreaper and forks again; the grandchild restricts itself (Landlock) and returns, so
    ``subprocess`` execs the command in it; the child never returns: it waits for the command, kills and reaps
    every process left below it, and exits with the command's status (on SIGTERM/SIGINT/SIGHUP: the same,
    at once). It first closes every descriptor it holds, so ``subprocess`` sees the exec and the output pipes
    end with the command's processes. The rules (the folders to read) are computed here, before the fork.
    """
    roots = hidden_roots(home)
    abi = abi_version()
    libc = _libc()

    def preexec() -> None:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        child = os.fork()
        if child == 0:
            restrict(workspace, tmp, home, network=network, toolchains=toolchains, roots=roots, abi=abi)
            return  # subprocess execs the command here, confined
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 16)

        def stop(_sig: int, _frame: object) -> None:
            reap_all()
            os._exit(137)

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, stop)
        status = 0
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:
                continue
        reap_all()
        code = os.waitstatus_to_exitcode(status)
        os._exit(128 - code if code < 0 else code)

    return preexec


def main(argv: list[str]) -> int:
    """The runner: ``--workspace WS --tmp T --home H [--network] -- program args...``."""
    if "--" not in argv:
        print("usage: landlock.py --workspace WS --tmp T --home H [--network] -- program args...", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1 :]
    values: dict[str, str] = {}
    keep: list[str] = []
    i = 0
    while i < len(opts):
        if opts[i] == "--keep" and i + 1 < len(opts):
            keep.append(opts[i + 1])
            i += 2
        elif opts[i] in ("--workspace", "--tmp", "--home") and i + 1 < len(opts):
            values[opts[i]] = opts[i + 1]
            i += 2
        else:
            i += 1
    workspace, tmp, home = values.get("--workspace"), values.get("--tmp"), values.get("--home", "")
    if not workspace or not tmp or not command:
        print("landlock.py: --workspace, --tmp and a command are required", file=sys.stderr)
        return 2
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            restrict(workspace, tmp, home, network="--network" in opts, toolchains=tuple(keep))
            os.chdir(workspace)
            os.execvp(command[0], command)
        except BaseException as exc:  # never run unconfined
            os.write(2, f"mxclaw_nb sandbox: {exc}\n".encode())
        os._exit(126)

    def stop(_sig: int, _frame: object) -> None:
        reap_all()
        os._exit(137)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, stop)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    reap_all()
    return os.waitstatus_to_exitcode(status) if status >= 0 else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.exit(128 - code if code < 0 else code)
