"""Workspace-confined file tools: read_file, list_dir, grep, write_file, edit_file (SPEC L3).

Why every open goes through ``beneath.open_beneath``: the model chooses the paths, so ``..``, absolute
paths, symlinks and hard links are all ways out of the workspace, and checking a name before opening it
races with a folder swapped for a symlink. Each call opens the workspace once and resolves the path
relative to that descriptor with the kernel refusing any step out of it (``openat2`` with
``RESOLVE_BENEATH``, L5); what was opened is then checked on the descriptor: only regular files with a
single link are read or changed, FIFOs, sockets and devices are refused at once (``O_NONBLOCK``, so
nothing hangs), and ``grep`` walks by descriptor (``os.fwalk``) without following symlinked folders, so
a symlink loop cannot trap it. Refusals are ``Permission denied`` failures, which the context engine
keeps as failure evidence (C5/C6). Paths that use ``..`` but stay inside (``src/../README.md``) are
fine. Text is read and written as UTF-8 with newlines untouched. ``resolve_in_workspace`` remains as
a name-level check for callers that only need to know where a path leads.

Names and bytes that are not UTF-8 follow the text policy (SPEC L7, ``mxclaw_nb.text_policy``): a file
name byte 0xff is shown as ``\\xff`` (``display_name``: the escaped form, so two names never look alike),
file bytes that do not decode are shown the same way, and a path given back in the shown form names the file
it was shown for (``model_path``; a literal name is used when the shown form names nothing).
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mxclaw_nb.text_policy import display, escape, unescape
from mxclaw_nb.tools.base import ToolContext, ToolResult, denied, failed, invalid
from mxclaw_nb.tools.beneath import OutsideWorkspace, kind_of, makedirs_beneath, open_beneath, workspace_fd
from mxclaw_nb.tools.registry import Tool

MAX_READ_FILE_BYTES = 20_000_000
DEFAULT_READ_LINES = 2_000
MAX_LIST_ENTRIES = 1_000
GREP_MAX_HITS = 200
GREP_MAX_FILE_BYTES = 5_000_000
GREP_LINE_CLIP = 300
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
)


def display_name(name: str) -> str:
    """A file name as tools show it: `escape`d (SPEC L7), so two different names never look the same."""
    return escape(name)


def model_path(ctx: ToolContext, path: str) -> str:
    """The path a model means: the name shown as `path` (its `unescape`) if that exists, else `path` as given."""
    if "\\" not in path:
        return path
    original = unescape(path)
    if original != path and os.path.lexists(ctx.workspace / original):
        return original
    return path


def utf8(text: str, what: str) -> bytes:
    """`text` as UTF-8 bytes for a file; an Invalid-arguments failure naming `what` if it cannot be (SPEC L7)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = escape(exc.object[exc.start:exc.end])
        raise invalid(f"arguments: '{what}' holds text that is not valid Unicode ({bad} at character {exc.start}); "
                      "files are written as UTF-8 text") from None


def resolve_in_workspace(ctx: ToolContext, path: str) -> Path:
    """Resolve a model-given path; raise a 'Permission denied' ToolError if it leaves the workspace."""
    if not isinstance(path, str) or not path.strip():
        raise invalid("arguments: 'path' must be a non-empty string")
    if "\x00" in path:
        raise invalid("arguments: 'path' contains a NUL character")
    raw = Path(path).expanduser()
    target = (raw if raw.is_absolute() else ctx.workspace / raw).resolve()
    if not target.is_relative_to(ctx.workspace):
        raise denied(f"'{path}' resolves to {target}, which is outside the workspace {ctx.workspace}")
    return target


def _rel(ctx: ToolContext, p: Path) -> str:
    return p.relative_to(ctx.workspace).as_posix() or "."


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def _relative_arg(ctx: ToolContext, path: object) -> str:
    """The model's path as a path relative to the workspace (not yet resolved: the kernel does that)."""
    if not isinstance(path, str) or not path.strip():
        raise invalid("arguments: 'path' must be a non-empty string")
    if "\x00" in path:
        raise invalid("arguments: 'path' contains a NUL character")
    path = model_path(ctx, path)
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise invalid(f"arguments: 'path' '{escape(path)}' holds a lone surrogate no file name can have") from None
    raw = os.path.expanduser(path)
    if not os.path.isabs(raw):
        return os.path.normpath(raw) if raw.strip("/") else "."
    norm, ws = os.path.normpath(raw), str(ctx.workspace)
    if norm == ws:
        return "."
    if norm.startswith(ws.rstrip("/") + "/"):
        return norm[len(ws.rstrip("/")) + 1 :]
    raise denied(f"'{path}' is outside the workspace {ctx.workspace}")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def store_guard(ctx: ToolContext) -> tuple[set[tuple[int, int]], set[tuple[int, int]], str]:
    """The store's files as (device, inode) pairs, the folders holding them, and the database's name (L11)."""
    if not ctx.protected:
        return set(), set(), ""
    files = {i for p in ctx.protected if not p.is_dir() and (i := _identity(p)) is not None}
    folders = {i for p in ctx.protected if (i := _identity(p.parent)) is not None}
    folders |= {i for p in ctx.protected if p.is_dir() and (i := _identity(p)) is not None}  # <db>.turns
    return files, folders, ctx.protected[0].name


def _check_store(ctx: ToolContext, root_fd: int, path: str, rel: str) -> None:
    """Refuse the store's files and any name beside the database that starts with its name (L11), wherever the
    store lies: by identity (device and inode), so no other spelling or link reaches them."""
    files, folders, db_name = store_guard(ctx)
    if not folders:
        return
    parent, name = os.path.split(os.path.normpath(rel))
    try:
        pfd = open_beneath(ctx.workspace, root_fd, parent or ".", os.O_PATH | os.O_DIRECTORY)
    except OSError:
        pfd = None
    if pfd is not None:
        try:
            st = os.fstat(pfd)
            in_store = (st.st_dev, st.st_ino) in folders and (name.startswith(db_name) or
                                                                  os.path.basename(parent).startswith(db_name))
        finally:
            os.close(pfd)
        if in_store:
            raise denied(f"'{path}' is one of the agent's store files; the tools never touch them")
    try:
        fd = open_beneath(ctx.workspace, root_fd, rel, os.O_PATH)
    except OSError:
        return
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if (st.st_dev, st.st_ino) in files or (st.st_dev, st.st_ino) in folders and stat.S_ISDIR(st.st_mode) \
            and os.path.basename(os.path.normpath(rel)).startswith(db_name):
        raise denied(f"'{path}' is one of the agent's store files; the tools never touch them")


def _open(ctx: ToolContext, root_fd: int, path: str, rel: str, flags: int, *, what: str = "file") -> int:
    """open_beneath with the tool's failure texts (L5), never on the store's files (L11)."""
    _check_store(ctx, root_fd, path, rel)
    try:
        return open_beneath(ctx.workspace, root_fd, rel, flags)
    except OutsideWorkspace as exc:
        raise denied(f"'{path}' {exc.strerror} {ctx.workspace}") from None
    except FileNotFoundError:
        raise failed(f"no such {what}: '{path}'") from None
    except NotADirectoryError:
        raise failed(f"'{path}' is a file, not a directory; use read_file") from None
    except IsADirectoryError:
        raise failed(f"'{path}' is a directory") from None
    except OSError as exc:
        if exc.errno not in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP, errno.ETXTBSY):
            raise
        try:  # a FIFO without reader, a socket, a device: name what it is
            probe = open_beneath(ctx.workspace, root_fd, rel, os.O_PATH)
            kind = kind_of(os.fstat(probe).st_mode)
            os.close(probe)
        except OSError:
            kind = "not a regular file"
        raise failed(f"'{path}' is {kind}, not a regular file; it is not opened") from None


def _check_regular(ctx: ToolContext, fd: int, path: str, verb: str) -> os.stat_result:
    """Refuse anything but a regular file with one name (fstat on the open descriptor, L5)."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise failed(f"'{path}' is a directory; use list_dir")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise failed(f"'{path}' is {kind_of(st.st_mode)}, not a regular file; it is not {verb}")
    if st.st_nlink > 1:
        os.close(fd)
        raise denied(f"'{path}' has {st.st_nlink} hard links; another name of it may be outside the workspace "
                     f"{ctx.workspace}, so it is not {verb}")
    return st


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY


def read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Read a UTF-8 text file, whole or a line window (offset = first line, 1-based; limit = count)."""
    path = args["path"]
    rel = _relative_arg(ctx, path)
    offset, limit = args.get("offset"), args.get("limit")
    if offset is not None and offset < 1:
        raise invalid(f"arguments: 'offset' is the first line to read, 1-based (got {offset})")
    if limit is not None and limit < 1:
        raise invalid(f"arguments: 'limit' must be >= 1 (got {limit})")
    with workspace_fd(ctx.workspace) as root:
        fd = _open(ctx, root, path, rel, _READ)
        size = _check_regular(ctx, fd, path, "read").st_size
        with os.fdopen(fd, "rb") as fh:
            if _is_binary(fh.read(8192)):
                raise failed(f"'{path}' looks like a binary file ({size} bytes); not shown")
            fh.seek(0)
            shown = display_name(os.path.normpath(rel))
            if offset is None and limit is None:
                if size > MAX_READ_FILE_BYTES:
                    raise failed(f"'{path}' has {size} bytes; read it in parts with offset and limit")
                text = display(fh.read().decode("utf-8", errors="surrogateescape"))
                return ToolResult(text, meta={"path": shown, "bytes": size})
            first = offset or 1
            count = limit or DEFAULT_READ_LINES
            picked: list[str] = []
            total = 0
            reader = io.TextIOWrapper(fh, encoding="utf-8", errors="surrogateescape", newline="")
            for total, line in enumerate(reader, start=1):
                if first <= total < first + count:
                    picked.append(line)
            reader.detach()
    if first > max(total, 1):
        raise invalid(f"arguments: 'offset' {first} is past the end ('{path}' has {total} lines)")
    last = first + len(picked) - 1
    header = f"[lines {first}-{last} of {total} in {shown}]\n"
    return ToolResult(header + display("".join(picked)), meta={"path": shown, "bytes": size})


def list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """List a folder: sub-folders end in '/', files show their size, symlinks their target (not followed)."""
    path = args["path"]
    rel = _relative_arg(ctx, path)
    with workspace_fd(ctx.workspace) as root:
        fd = _open(ctx, root, path, rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NONBLOCK, what="directory")
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            lines = []
            for e in entries[:MAX_LIST_ENTRIES]:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    lines.append(f"{display_name(e.name)}  (vanished)")
                    continue
                name = display_name(e.name)
                if stat.S_ISLNK(st.st_mode):
                    lines.append(f"{name} -> {display_name(os.readlink(e.name, dir_fd=fd))}")
                elif stat.S_ISDIR(st.st_mode):
                    lines.append(name + "/")
                elif stat.S_ISREG(st.st_mode):
                    lines.append(f"{name}  ({st.st_size} bytes)")
                else:
                    lines.append(f"{name}  ({kind_of(st.st_mode)})")
        finally:
            os.close(fd)
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[... {len(entries) - MAX_LIST_ENTRIES} more entries not shown]")
    shown = display_name(os.path.normpath(rel))
    head = f"{shown}: {len(entries)} entries"
    return ToolResult("\n".join([head, *lines]), meta={"path": shown, "entries": len(entries)})


class _GrepWalk:
    """Files under a folder, walked by descriptor (os.fwalk), never following a symlinked folder."""

    def __init__(self, ctx: ToolContext, root_fd: int, rel: str) -> None:
        self.ctx, self.root_fd, self.rel = ctx, root_fd, rel
        self.skipped_links = self.skipped_special = self.skipped_hardlinks = 0
        self.store_files, self.store_folders, self.db_name = store_guard(ctx)
        self.turns = {i for p in ctx.protected if p.is_dir() and (i := _identity(p)) is not None}

    def in_turns(self, dir_fd: int) -> bool:
        st = os.fstat(dir_fd)
        return (st.st_dev, st.st_ino) in self.turns

    def _open_file(self, dir_fd: int, name: str, rel: str) -> int | None:
        try:
            fd = os.open(name, _READ | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
                self.skipped_special += 1  # a socket or a device that cannot be opened
            if exc.errno != errno.ELOOP:
                return None
            try:  # a symlinked file: followed only while it stays inside (checked by the kernel)
                fd = open_beneath(self.ctx.workspace, self.root_fd, rel, _READ)
            except OSError:
                self.skipped_links += 1
                return None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in self.store_files or (os.fstat(dir_fd).st_dev, os.fstat(dir_fd).st_ino) \
                in self.store_folders and (name.startswith(self.db_name) or self.in_turns(dir_fd)):
            os.close(fd)  # L11: the store's files are never read
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > GREP_MAX_FILE_BYTES:
            if not stat.S_ISREG(st.st_mode):
                self.skipped_special += 1
            elif st.st_nlink > 1:
                self.skipped_hardlinks += 1
            os.close(fd)
            return None
        return fd

    def files(self, top_fd: int) -> Iterator[tuple[str, int]]:
        """(workspace-relative name, open descriptor) of each searchable file, sorted."""
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
            keep = []
            for d in sorted(dirnames):
                if d in SKIP_DIRS:
                    continue
                if stat.S_ISLNK(os.stat(d, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    self.skipped_links += 1  # a symlinked folder (maybe a loop): not followed
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                rel = os.path.normpath(os.path.join(self.rel, dirpath, name))
                fd = self._open_file(dir_fd, name, rel)
                if fd is not None:
                    yield rel, fd


def grep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Search files under a path for a regex; 'path:line: text' hits, bounded, skipping binaries."""
    try:
        flags = re.IGNORECASE if args.get("ignore_case") else 0
        rx = re.compile(args["pattern"], flags)
    except re.error as exc:
        raise invalid(f"regex {args['pattern']!r}: {exc}") from None
    path = args["path"]
    rel = _relative_arg(ctx, path)
    max_hits = min(max(1, args.get("max_hits") or GREP_MAX_HITS), 2_000)
    hits: list[str] = []
    searched = total = 0
    with workspace_fd(ctx.workspace) as root:
        top = _open(ctx, root, path, rel, _READ, what="file or directory")
        walk = _GrepWalk(ctx, root, rel)
        try:
            if stat.S_ISDIR(os.fstat(top).st_mode):
                found: Iterator[tuple[str, int]] = walk.files(top)
            else:
                single = os.dup(top)
                _check_regular(ctx, single, path, "searched")  # closes it when refused
                found = iter([(os.path.normpath(rel), single)])
            for name, fd in found:
                try:
                    data = _read_all(fd)
                finally:
                    os.close(fd)
                if _is_binary(data[:8192]):
                    continue
                searched += 1
                for n, line in enumerate(data.decode("utf-8", errors="surrogateescape").splitlines(), start=1):
                    if rx.search(line):
                        total += 1
                        if len(hits) < max_hits:
                            line = display(line)
                            shown = line if len(line) <= GREP_LINE_CLIP else line[:GREP_LINE_CLIP] + "…"
                            hits.append(f"{display_name(name)}:{n}: {shown}")
        finally:
            os.close(top)
    where = display_name(os.path.normpath(rel))
    notes = []
    if walk.skipped_links:
        notes.append(f"{walk.skipped_links} symlinks not followed")
    if walk.skipped_special:
        notes.append(f"{walk.skipped_special} non-regular files skipped")
    if walk.skipped_hardlinks:
        notes.append(f"{walk.skipped_hardlinks} hard-linked files skipped")
    note = f"; {', '.join(notes)}" if notes else ""
    if not hits:
        return ToolResult(f"No matches for {args['pattern']!r} in {where} ({searched} files searched{note})")
    head = f"{total} matching lines in {where} ({searched} files searched{note})"
    if total > len(hits):
        head += f"; showing the first {len(hits)}"
    return ToolResult("\n".join([head, *hits]), meta={"hits": total, "files": searched})


def _open_for_write(ctx: ToolContext, root: int, path: str, rel: str, flags: int) -> tuple[int, bool]:
    """Open (creating when asked) a regular, single-link file for writing; (fd, existed)."""
    _check_store(ctx, root, path, rel)  # L11, before anything is created
    existed = True
    if flags & os.O_CREAT:
        try:
            fd = open_beneath(ctx.workspace, root, rel, flags | os.O_EXCL, 0o666)
            existed = False
        except FileExistsError:
            fd = _open(ctx, root, path, rel, flags & ~os.O_CREAT)
        except OutsideWorkspace as exc:
            raise denied(f"'{path}' {exc.strerror} {ctx.workspace}") from None
        except IsADirectoryError:
            raise failed(f"'{path}' is a directory") from None
    else:
        fd = _open(ctx, root, path, rel, flags)
    _check_regular(ctx, fd, path, "changed")
    return fd, existed


def _write_all(fd: int, data: bytes) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Create or overwrite a UTF-8 text file, creating parent folders."""
    path = args["path"]
    rel = _relative_arg(ctx, path)
    if rel == ".":
        raise failed(f"'{path}' is a directory")
    data = utf8(args["content"], "content")
    with workspace_fd(ctx.workspace) as root:
        parent = os.path.dirname(rel)
        if parent:
            try:
                makedirs_beneath(ctx.workspace, root, parent)
            except OutsideWorkspace as exc:
                raise denied(f"'{path}' {exc.strerror} {ctx.workspace}") from None
            except (NotADirectoryError, FileExistsError):
                raise failed(f"a parent of '{path}' is a file, not a folder") from None
        fd, existed = _open_for_write(ctx, root, path, rel, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    verb = "Overwrote" if existed else "Created"
    lines = args["content"].count("\n") + (0 if args["content"].endswith("\n") or not data else 1)
    shown = display_name(os.path.normpath(rel))
    return ToolResult(f"{verb} {shown}: {len(data)} bytes, {lines} lines", meta={"path": shown, "bytes": len(data)})


def edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Replace old_string by new_string in a file; old_string must occur exactly once."""
    path = args["path"]
    rel = _relative_arg(ctx, path)
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise invalid("edit: old_string is empty; use write_file to create a file")
    if old == new:
        raise invalid("edit: old_string and new_string are identical; nothing would change")
    utf8(new, "new_string")  # the file text itself decoded as strict UTF-8: only new_string can be invalid
    shown = display_name(os.path.normpath(rel))
    with workspace_fd(ctx.workspace) as root:
        fd, _ = _open_for_write(ctx, root, path, rel, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            try:
                text = _read_all(fd).decode("utf-8")
            except UnicodeDecodeError:
                raise failed(f"'{path}' is not valid UTF-8 text; edit_file edits UTF-8 files only") from None
            count = text.count(old)
            if count == 0:
                raise invalid(f"edit: old_string was not found in {shown}; read the file and copy the text exactly")
            if count > 1:
                raise invalid(
                    f"edit: old_string occurs {count} times in {shown}; it must occur exactly once, "
                    "so include more surrounding lines"
                )
            at = text.index(old)
            _write_all(fd, (text[:at] + new + text[at + len(old) :]).encode("utf-8"))
        finally:
            os.close(fd)
    line = text.count("\n", 0, at) + 1
    return ToolResult(f"Edited {shown}: replaced 1 occurrence at line {line}", meta={"path": shown})


def _params(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


_PATH = {"type": "string", "description": "Path relative to the workspace root"}
FILE_TOOLS = [
    Tool(
        "read_file",
        "Read a text file in the workspace. Optional offset (first line, 1-based) and limit (number of lines).",
        _params({"path": _PATH, "offset": {"type": "integer"}, "limit": {"type": "integer"}}, ["path"]),
        read_file,
    ),
    Tool(
        "list_dir",
        "List the entries of a workspace folder ('.' is the root).",
        _params({"path": _PATH}, ["path"]),
        list_dir,
    ),
    Tool(
        "grep",
        "Search files under a path (recursive) for a Python regular expression; returns path:line: text hits.",
        _params(
            {
                "pattern": {"type": "string", "description": "Python regular expression"},
                "path": _PATH,
                "ignore_case": {"type": "boolean"},
                "max_hits": {"type": "integer"},
            },
            ["pattern", "path"],
        ),
        grep,
    ),
    Tool(
        "write_file",
        "Create or overwrite a text file in the workspace with the given content.",
        _params({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
        write_file,
    ),
    Tool(
        "edit_file",
        "Replace old_string with new_string in a file. old_string must occur exactly once in the file.",
        _params(
            {"path": _PATH, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            ["path", "old_string", "new_string"],
        ),
        edit_file,
    ),
]
