"""Workspace-confined file tools: read_file, list_dir, grep, write_file, edit_file (SPEC L3).

Why every path goes through ``resolve_in_workspace``: the model chooses the paths, so ``..``,
absolute paths and symlinks are all ways out of the workspace. The check resolves the path the way
the OS will (following symlinks, including dangling ones and symlinked parent folders) and refuses
anything that does not end up inside the resolved workspace with a ``Permission denied`` failure,
which the context engine keeps as failure evidence (C5/C6). Paths that use ``..`` but stay inside
(``src/../README.md``) are fine. Text is read and written as UTF-8 with newlines untouched.

Names and bytes that are not UTF-8 follow the text policy (SPEC L7, ``mxclaw_nb.text_policy``): a file
name byte 0xff is shown as ``\\xff`` (``display_name``: the escaped form, so two names never look alike),
file bytes that do not decode are shown the same way, and a path given back in the shown form names the file
it was shown for (``model_path``; a literal name is used when the shown form names nothing).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mxclaw_nb.text_policy import display, escape, unescape
from mxclaw_nb.tools.base import ToolContext, ToolResult, denied, failed, invalid
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
    path = model_path(ctx, path)
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise invalid(f"arguments: 'path' '{escape(path)}' holds a lone surrogate no file name can have") from None
    raw = Path(path).expanduser()
    target = (raw if raw.is_absolute() else ctx.workspace / raw).resolve()
    if not target.is_relative_to(ctx.workspace):
        raise denied(f"'{path}' resolves to {target}, which is outside the workspace {ctx.workspace}")
    return target


def _rel(ctx: ToolContext, p: Path) -> str:
    return display_name(p.relative_to(ctx.workspace).as_posix() or ".")


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head


def read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Read a UTF-8 text file, whole or a line window (offset = first line, 1-based; limit = count)."""
    p = resolve_in_workspace(ctx, args["path"])
    if p.is_dir():
        raise failed(f"'{args['path']}' is a directory; use list_dir")
    if not p.exists():
        raise failed(f"no such file: '{args['path']}'")
    size = p.stat().st_size
    offset, limit = args.get("offset"), args.get("limit")
    if offset is not None and offset < 1:
        raise invalid(f"arguments: 'offset' is the first line to read, 1-based (got {offset})")
    if limit is not None and limit < 1:
        raise invalid(f"arguments: 'limit' must be >= 1 (got {limit})")
    with p.open("rb") as fh:
        if _is_binary(fh.read(8192)):
            raise failed(f"'{args['path']}' looks like a binary file ({size} bytes); not shown")
    if offset is None and limit is None:
        if size > MAX_READ_FILE_BYTES:
            raise failed(f"'{args['path']}' has {size} bytes; read it in parts with offset and limit")
        text = display(p.read_bytes().decode("utf-8", errors="surrogateescape"))
        return ToolResult(text, meta={"path": _rel(ctx, p), "bytes": size})
    first = offset or 1
    count = limit or DEFAULT_READ_LINES
    picked: list[str] = []
    total = 0
    with p.open("r", encoding="utf-8", errors="surrogateescape", newline="") as fh:
        for total, line in enumerate(fh, start=1):
            if first <= total < first + count:
                picked.append(line)
    if first > max(total, 1):
        raise invalid(f"arguments: 'offset' {first} is past the end ('{args['path']}' has {total} lines)")
    last = first + len(picked) - 1
    header = f"[lines {first}-{last} of {total} in {_rel(ctx, p)}]\n"
    return ToolResult(header + display("".join(picked)), meta={"path": _rel(ctx, p), "bytes": size})


def list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """List a folder: sub-folders end in '/', files show their size, symlinks their target."""
    p = resolve_in_workspace(ctx, args["path"])
    if not p.exists():
        raise failed(f"no such directory: '{args['path']}'")
    if not p.is_dir():
        raise failed(f"'{args['path']}' is a file, not a directory; use read_file")
    entries = sorted(os.scandir(p), key=lambda e: e.name)
    lines = []
    for e in entries[:MAX_LIST_ENTRIES]:
        name = display_name(e.name)
        if e.is_symlink():
            lines.append(f"{name} -> {display_name(os.readlink(e.path))}")
        elif e.is_dir():
            lines.append(name + "/")
        else:
            lines.append(f"{name}  ({e.stat().st_size} bytes)")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[... {len(entries) - MAX_LIST_ENTRIES} more entries not shown]")
    head = f"{_rel(ctx, p)}: {len(entries)} entries"
    return ToolResult("\n".join([head, *lines]), meta={"path": _rel(ctx, p), "entries": len(entries)})


def _walk_files(ctx: ToolContext, root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            f = Path(dirpath) / name
            # A symlinked file may point outside the workspace: only follow it when it stays inside.
            if f.is_symlink() and not f.resolve().is_relative_to(ctx.workspace):
                continue
            found.append(f)
    return found


def grep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Search files under a path for a regex; 'path:line: text' hits, bounded, skipping binaries."""
    try:
        flags = re.IGNORECASE if args.get("ignore_case") else 0
        rx = re.compile(args["pattern"], flags)
    except re.error as exc:
        raise invalid(f"regex {args['pattern']!r}: {exc}") from None
    root = resolve_in_workspace(ctx, args["path"])
    if not root.exists():
        raise failed(f"no such file or directory: '{args['path']}'")
    max_hits = min(max(1, args.get("max_hits") or GREP_MAX_HITS), 2_000)
    hits: list[str] = []
    searched = total = 0
    for f in _walk_files(ctx, root):
        try:
            if f.stat().st_size > GREP_MAX_FILE_BYTES:
                continue
            data = f.read_bytes()
        except OSError:
            continue
        if _is_binary(data[:8192]):
            continue
        searched += 1
        for n, line in enumerate(data.decode("utf-8", errors="surrogateescape").splitlines(), start=1):
            if rx.search(line):
                total += 1
                if len(hits) < max_hits:
                    line = display(line)
                    shown = line if len(line) <= GREP_LINE_CLIP else line[:GREP_LINE_CLIP] + "…"
                    hits.append(f"{_rel(ctx, f)}:{n}: {shown}")
    if not hits:
        return ToolResult(f"No matches for {args['pattern']!r} in {_rel(ctx, root)} ({searched} files searched)")
    head = f"{total} matching lines in {_rel(ctx, root)} ({searched} files searched)"
    if total > len(hits):
        head += f"; showing the first {len(hits)}"
    return ToolResult("\n".join([head, *hits]), meta={"hits": total, "files": searched})


def write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Create or overwrite a UTF-8 text file, creating parent folders."""
    p = resolve_in_workspace(ctx, args["path"])
    if p.is_dir():
        raise failed(f"'{args['path']}' is a directory")
    data = utf8(args["content"], "content")
    p.parent.mkdir(parents=True, exist_ok=True)
    existed = p.exists()
    p.write_bytes(data)
    verb = "Overwrote" if existed else "Created"
    lines = args["content"].count("\n") + (0 if args["content"].endswith("\n") or not data else 1)
    return ToolResult(
        f"{verb} {_rel(ctx, p)}: {len(data)} bytes, {lines} lines", meta={"path": _rel(ctx, p), "bytes": len(data)}
    )


def edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Replace old_string by new_string in a file; old_string must occur exactly once."""
    p = resolve_in_workspace(ctx, args["path"])
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise invalid("edit: old_string is empty; use write_file to create a file")
    if old == new:
        raise invalid("edit: old_string and new_string are identical; nothing would change")
    utf8(new, "new_string")  # the file text itself decoded as strict UTF-8: only new_string can be invalid
    if not p.is_file():
        raise failed(f"no such file: '{args['path']}'")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise failed(f"'{args['path']}' is not valid UTF-8 text; edit_file edits UTF-8 files only") from None
    count = text.count(old)
    if count == 0:
        raise invalid(f"edit: old_string was not found in {_rel(ctx, p)}; read the file and copy the text exactly")
    if count > 1:
        raise invalid(
            f"edit: old_string occurs {count} times in {_rel(ctx, p)}; it must occur exactly once, "
            "so include more surrounding lines"
        )
    at = text.index(old)
    p.write_bytes((text[:at] + new + text[at + len(old) :]).encode("utf-8"))
    line = text.count("\n", 0, at) + 1
    return ToolResult(f"Edited {_rel(ctx, p)}: replaced 1 occurrence at line {line}", meta={"path": _rel(ctx, p)})


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
