"""Race-free opening of model-given paths beneath the workspace (SPEC L5, file tools).

Why file descriptors: checking a resolved path and then opening it by name leaves a window in which
a folder can be swapped for a symlink to ``/`` (a time-of-check/time-of-use race). Every open here is
relative to a descriptor of the workspace and is checked by the kernel *during* resolution:

- Linux >= 5.6: ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS``: ``..`` or a symlink
  leading out of the workspace at any component fails with ``EXDEV``; ``/proc/self/fd`` tricks fail.
  ``RESOLVE_BENEATH`` refuses absolute symlinks even when they point back inside, so on ``EXDEV`` the
  lexically resolved target is tried once more as a relative path -- again under ``RESOLVE_BENEATH``,
  so whatever changes in between, the open cannot leave the workspace.
- elsewhere: a walk one component at a time with ``O_NOFOLLOW``, so no symlink is followed at all
  (a symlink inside the workspace is then refused with a clear message, never followed out).

What is opened is then checked on the descriptor (``fstat``), not on the name: only regular files
are read or written (a FIFO, socket or device is refused at once; opens use ``O_NONBLOCK`` so a FIFO
cannot hang the call), and a file with more than one hard link is refused, since its other name may
be outside the workspace.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every Linux architecture (added with the unified table)
RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH = 0x02, 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class OutsideWorkspace(OSError):
    """The path leads out of the workspace (through ``..``, an absolute path or a symlink)."""


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library (not Linux)
        return None


_LIBC = _libc()
_HAVE_OPENAT2: bool | None = None


def has_openat2() -> bool:
    """True when this kernel has ``openat2`` (probed once)."""
    global _HAVE_OPENAT2
    if _HAVE_OPENAT2 is None:
        _HAVE_OPENAT2 = False
        if _LIBC is not None and os.uname().sysname == "Linux":
            how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0, RESOLVE_BENEATH)
            fd = _LIBC.syscall(_SYS_OPENAT2, -100, b".", ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd >= 0:
                os.close(fd)
                _HAVE_OPENAT2 = True
    return _HAVE_OPENAT2


def _openat2(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    assert _LIBC is not None
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    raw = os.fsencode(rel)
    while True:
        fd = _LIBC.syscall(_SYS_OPENAT2, dir_fd, raw, ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):  # EAGAIN: a concurrent rename; the kernel asks to retry
            raise OSError(err, os.strerror(err), rel)


def _walk_nofollow(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    """Portable fallback: one component at a time, never following a symlink."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    stack = [os.dup(dir_fd)]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "..":
                if len(stack) == 1:
                    raise OSError(errno.EXDEV, "leads outside the workspace", rel)
                os.close(stack.pop())
                if last:
                    return os.open(".", flags | os.O_CLOEXEC, dir_fd=stack[-1])
                continue
            if last:
                return os.open(part, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=stack[-1])
            stack.append(os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1]))
        return os.open(".", flags | os.O_CLOEXEC, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def open_beneath(root: Path, root_fd: int, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open ``rel`` (relative to the workspace) so that no step can leave it; raises OutsideWorkspace."""
    opener = _openat2 if has_openat2() else _walk_nofollow
    try:
        return opener(root_fd, rel or ".", flags, mode)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ELOOP):
            raise
        first = exc
    # An absolute symlink, or a `..` through a symlink: see where it lexically leads, and try that,
    # still beneath the workspace descriptor (a concurrent swap makes it fail, never escape).
    target = Path(os.path.realpath(root / rel))
    if target != root and not target.is_relative_to(root):
        raise OutsideWorkspace(errno.EXDEV, f"resolves to {target}, which is outside the workspace", rel)
    relative = "." if target == root else target.relative_to(root).as_posix()
    if relative == rel:
        raise OutsideWorkspace(first.errno or errno.EXDEV, "a symlink is not followed on this system", rel)
    try:
        return opener(root_fd, relative, flags, mode)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.ELOOP):
            raise OutsideWorkspace(exc.errno, "leads outside the workspace (it changed while being opened)",
                                   rel) from None
        raise


@contextlib.contextmanager
def workspace_fd(root: Path) -> Iterator[int]:
    """A descriptor of the workspace folder for one tool call."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def kind_of(mode: int) -> str:
    """A readable name of a file type, for refusals ("a FIFO", "a directory", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def makedirs_beneath(root: Path, root_fd: int, rel_dir: str) -> None:
    """Create the folders of ``rel_dir`` one by one, each inside a folder opened beneath the workspace."""
    parts = [p for p in rel_dir.split("/") if p not in ("", ".")]
    for i in range(len(parts)):
        prefix = "/".join(parts[: i + 1])
        try:
            os.close(open_beneath(root, root_fd, prefix, os.O_PATH | os.O_DIRECTORY))
            continue
        except FileNotFoundError:
            pass
        parent = "/".join(parts[:i]) or "."
        pfd = open_beneath(root, root_fd, parent, os.O_PATH | os.O_DIRECTORY)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(parts[i], dir_fd=pfd)
        finally:
            os.close(pfd)


class NotReadable(OSError):
    """A file beneath a root that is refused before its bytes are read (SPEC L9): `reason` says why, in words."""

    def __init__(self, rel: str, reason: str) -> None:
        super().__init__(errno.EPERM, reason, rel)
        self.rel, self.reason = rel, reason


def read_capped(root: Path, rel: str, cap: int) -> tuple[bytes, int] | None:
    """The first `cap` bytes of the regular file `rel` beneath `root`, and its size; None when it does not exist.

    SPEC L9: the same opener as the file tools (no link out of `root` at any component, race-free), a
    non-blocking open (a FIFO cannot hang the caller), then checks on the descriptor: a regular file with one
    link, else `NotReadable`. At most `cap` bytes are read, whatever the file claims (a file that grows while
    read, a device): memory stays bounded.
    """
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NotReadable(rel, f"its folder {root} cannot be opened ({exc.strerror or exc})") from None
    try:
        fd = open_beneath(root, root_fd, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OutsideWorkspace as exc:
        where = str(exc.strerror).replace("the workspace", str(root))
        raise NotReadable(rel, f"it {where}; links out are never followed") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
            raise NotReadable(rel, "it is not a regular file (a socket or device)") from None
        raise NotReadable(rel, f"it cannot be opened ({exc.strerror or exc})") from None
    finally:
        os.close(root_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(rel, f"it is {kind_of(st.st_mode)}, not a regular file")
        if st.st_nlink > 1:
            raise NotReadable(rel, f"it has {st.st_nlink} hard links (another name of it may be outside {root})")
        chunks, left = [], cap
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), st.st_size
    finally:
        os.close(fd)
