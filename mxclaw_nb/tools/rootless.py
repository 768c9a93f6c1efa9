"""Never the host's root inside the sandbox (SPEC L8): an unprivileged id, an id-mapped workspace, a seccomp filter.

Why: bubblewrap started by root maps the sandbox's uid 0 to the host's root. Capabilities are dropped, but
some kernel checks look at the uid only: a root-owned file is writable by its owner, and the non-network
sysctls under ``/proc/sys`` (``kernel.core_pattern``: a program the kernel runs as root on a crash) only ask
"is the caller root". So when the kernel runs as root, every sandboxed command runs as ``HOST_ID``, an id
no account uses, inside a user namespace where it is ``SANDBOX_ID`` (1000), without any capability:

- two user namespaces are made once per process (``unshare -U`` holds each while its maps are written):
  one maps ``SANDBOX_ID`` to ``HOST_ID`` (bwrap's ``--userns``: the command's id), one maps on-disk 0 to
  ``HOST_ID`` (the id map of the workspace mount);
- per command, in the forked child before bwrap starts (``preexec``): a private mount namespace, the
  workspace cloned (``open_tree``), id-mapped (``mount_setattr``: files owned by root on disk belong to
  ``HOST_ID`` there, and what the command creates is owned by root on disk) and attached to a staging
  folder that ``HOST_ID`` can reach; folders it cannot reach (a workspace or a toolchain under the 0700
  ``/root``) are bound to staging folders too. bwrap then binds the staged folders where they belong.

Nothing here is changed on the host but an empty staging folder (0711, removed at exit); the mounts live in
the child's private mount namespace and die with it. Where a step fails (a kernel without id-mapped mounts,
a file system that refuses them), bwrap is refused with that reason (``Sandbox.detail``), never run as root.

The seccomp filter (``seccomp_program``) is a short classic-BPF deny list handed to bwrap's ``--seccomp``:
new namespaces, mounts, ``ptrace``, kernel keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, module
and kexec loading fail with EPERM (``clone3`` with ENOSYS, so the C library falls back to ``clone``, whose
namespace flags are checked); a foreign system-call ABI (i386, x32) kills the process. Written here because
bwrap takes raw BPF and libseccomp's Python binding is not on PyPI; the program is ~60 instructions.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import platform
import resource
import stat
import struct
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

SANDBOX_ID = 1000  # the command's uid/gid inside the sandbox when the kernel runs as root
HOST_ID = 2_147_418_112  # 0x7fff0000: the host id it has there; no account uses it

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_REC, _MS_PRIVATE, _MS_BIND = 0x4000, 0x40000, 0x1000
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # one number on every architecture
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, 0o2000000
_AT_FDCWD, _AT_EMPTY_PATH, _MOVE_MOUNT_F_EMPTY_PATH = -100, 0x1000, 0x4
_MOUNT_ATTR_IDMAP = 0x00100000


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


_LIBC = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def running_as_root() -> bool:
    """True when commands would otherwise run as the host's root (L8)."""
    return os.geteuid() == 0


def _user_namespace(id_map: str) -> int:
    """A descriptor of a new user namespace whose uid and gid maps are `id_map` (made by root)."""
    holder = subprocess.Popen(["unshare", "-U", "sh", "-c", "echo ready; exec sleep 60"], stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != b"ready":
            why = (holder.stderr.read() if holder.stderr else b"").decode("utf-8", "replace").strip()
            raise OSError(f"unshare -U failed: {why or 'no user namespace'}")
        proc = Path(f"/proc/{holder.pid}")
        (proc / "uid_map").write_text(id_map)
        (proc / "setgroups").write_text("deny")
        (proc / "gid_map").write_text(id_map)
        return os.open(proc / "ns" / "user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()


class RootlessState:
    """The per-process pieces: the two user namespaces and the staging folder (L8)."""

    def __init__(self) -> None:
        self.sandbox_ns = _user_namespace(f"{SANDBOX_ID} {HOST_ID} 1\n")
        self.idmap_ns = _user_namespace(f"0 {HOST_ID} 1\n")
        self.stage = Path(tempfile.mkdtemp(prefix="mxclaw-stage-"))
        os.chmod(self.stage, 0o711)
        self._slots: dict[str, Path] = {}
        atexit.register(self.cleanup)

    def slot(self, name: str) -> Path:
        """An empty folder in the staging folder (the mount point of one staged source)."""
        if name not in self._slots:
            p = self.stage / name
            p.mkdir(exist_ok=True)
            self._slots[name] = p
        return self._slots[name]

    def cleanup(self) -> None:
        for p in self._slots.values():
            with contextlib.suppress(OSError):
                p.rmdir()
        with contextlib.suppress(OSError):
            self.stage.rmdir()


@functools.cache
def rootless_state() -> RootlessState:
    """Made once per process (raises OSError with the reason where it cannot be)."""
    return RootlessState()


def reachable_by_others(path: Path) -> bool:
    """True when an unrelated uid can reach `path` (every folder on the way searchable by others)."""
    for folder in [*reversed(path.parents), path]:
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return True


def make_preexec(workspace: Path, staged: Iterable[tuple[str, Path]], state: RootlessState,
                 rlimits: Iterable[tuple[int, int]] = (), error_fd: int | None = None) -> Callable[[], None]:
    """The child's set-up before bwrap runs: a private mount namespace, the id-mapped workspace on its staging
    folder, and the other sources bwrap could not reach bound on theirs (runs after fork, before exec)."""
    ws = os.fsencode(workspace)
    ws_slot = os.fsencode(state.slot("workspace"))
    binds = [(os.fsencode(src), os.fsencode(state.slot(name))) for name, src in staged]
    attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, state.idmap_ns)
    size = ctypes.c_size_t(ctypes.sizeof(attr))
    libc = _LIBC
    limits = list(rlimits)

    def preexec() -> None:
        try:
            setup()
        except BaseException as exc:  # subprocess only says "Exception occurred in preexec_fn": tell why
            if error_fd is not None:
                with contextlib.suppress(OSError):
                    os.write(error_fd, str(exc).encode("utf-8", "replace")[:1000])
            raise

    def setup() -> None:
        for which, value in limits:  # L8: inherited by bwrap and the command
            resource.setrlimit(which, (value, value))
        _check(libc.unshare(_CLONE_NEWNS), "unshare(mount namespace)")
        _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount(private)")
        tree = _check(libc.syscall(_SYS_OPEN_TREE, _AT_FDCWD, ws, _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC),
                      "open_tree(workspace)")
        _check(libc.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr), size),
               "id-mapped mount of the workspace")
        _check(libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, ws_slot, _MOVE_MOUNT_F_EMPTY_PATH),
               "move_mount(workspace)")
        os.close(tree)
        for src, dst in binds:
            _check(libc.mount(src, dst, None, _MS_BIND | _MS_REC, None), f"bind {os.fsdecode(src)}")

    return preexec


# -- seccomp -------------------------------------------------------------------------------------------------
_DENIED = {  # name: (x86_64, aarch64)
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "ptrace": (101, 117), "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271), "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282), "kexec_load": (246, 104),
    "kexec_file_load": (320, 294), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "quotactl": (179, 60), "personality": (135, 92),
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_ARCH = {"x86_64": (0xC000003E, 0), "amd64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}
_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
_RET_KILL, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as raw BPF (``struct sock_filter`` array) for bwrap's ``--seccomp``; None on other CPUs."""
    arch = _ARCH.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    audit, col = arch
    denied = sorted({v[col] for v in _DENIED.values()})
    ld_w_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list[tuple[int, int, int, int]] = []
    # labels are resolved after: "kill", "eperm", "enosys", "allow"
    fix: list[tuple[int, str, str]] = []

    def op(code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        if isinstance(jt, str) or isinstance(jf, str):
            fix.append((len(prog), jt if isinstance(jt, str) else "", jf if isinstance(jf, str) else ""))
        prog.append((code, 0 if isinstance(jt, str) else jt, 0 if isinstance(jf, str) else jf, k))

    op(ld_w_abs, 4)  # seccomp_data.arch
    op(jeq, audit, 0, "kill")
    op(ld_w_abs, 0)  # seccomp_data.nr
    if col == 0:
        op(jge, 0x40000000, "kill", 0)  # x32 system calls on x86_64
    for nr in denied:
        op(jeq, nr, "eperm", 0)
    op(jeq, _CLONE3[col], "enosys", 0)
    op(jeq, _CLONE[col], 0, "allow")
    op(ld_w_abs, 16)  # clone's flags (args[0], low word)
    op(jset, _NAMESPACE_FLAGS, "eperm", "allow")
    labels = {"allow": len(prog)}
    prog.append((ret, 0, 0, _RET_ALLOW))
    labels["eperm"] = len(prog)
    prog.append((ret, 0, 0, _RET_ERRNO | _EPERM))
    labels["enosys"] = len(prog)
    prog.append((ret, 0, 0, _RET_ERRNO | _ENOSYS))
    labels["kill"] = len(prog)
    prog.append((ret, 0, 0, _RET_KILL))
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        for at, tlabel, flabel in fix:
            if at == i:
                if tlabel:
                    jt = labels[tlabel] - i - 1
                if flabel:
                    jf = labels[flabel] - i - 1
        out.append(struct.pack("=HBBI", code, jt, jf, k))
    return b"".join(out)


def seccomp_fd() -> int | None:
    """A fresh memfd holding the filter (bwrap reads it to the end), or None where there is no filter."""
    program = seccomp_program()
    if program is None:
        return None
    fd = os.memfd_create("mxclaw-seccomp", os.MFD_CLOEXEC)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
