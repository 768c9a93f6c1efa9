"""The ``read_artifact`` tool: read a stored large tool result back by bytes, lines or search (SPEC A2).

Why it asks the store with the *calling* session's id: artifacts are session-scoped, so an id
copied from another session must read as "not found" rather than leak that session's data. The
text logic (ranges, search, output bounds) lives in ``mxclaw_nb.tools.artifacts``; this module only picks
the mode from the arguments and turns the reader's ``Invalid ...`` messages into failure results.
"""

from __future__ import annotations

from typing import Any

from mxclaw_nb.tools import artifacts as artifacts
from mxclaw_nb.tools.base import ToolContext, ToolResult, failed, invalid
from mxclaw_nb.tools.registry import Tool

_BYTE_KEYS = ("byte_start", "byte_end")
_LINE_KEYS = ("line_start", "line_end")


def read_artifact(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Read an artifact of this session: byte range, line range, or search; default: first lines."""
    artifact_id = args["artifact_id"].strip()
    modes = [
        name
        for name, keys in (("byte range", _BYTE_KEYS), ("line range", _LINE_KEYS), ("search", ("search",)))
        if any(args.get(k) is not None for k in keys)
    ]
    if len(modes) > 1:
        raise invalid(
            f"arguments for tool 'read_artifact': use one of byte range, line range or search "
            f"(got {' and '.join(modes)})"
        )
    if ctx.artifacts is None:
        raise failed("artifact storage is not available in this session")
    text = ctx.artifacts.get_artifact(ctx.session_id, artifact_id)
    if text is None:
        raise failed(f"artifact '{artifact_id}' was not found in this session")
    mode = modes[0] if modes else "line range"
    if mode == "search":
        out = artifacts.search(
            text,
            args["search"],
            regex=bool(args.get("regex", False)),
            context=args.get("context", 2) if args.get("context") is not None else 2,
            max_hits=args.get("max_hits", 20) if args.get("max_hits") is not None else 20,
        )
    elif mode == "byte range":
        out = artifacts.read_bytes(text, args.get("byte_start") or 0, args.get("byte_end"))
    else:
        out = artifacts.read_lines(text, args.get("line_start") or 1, args.get("line_end"))
    if out.startswith("Invalid"):
        return ToolResult(out, is_error=True, meta={"artifact_id": artifact_id})
    header = (
        f"[artifact {artifact_id}: {len(text.encode('utf-8', 'surrogatepass'))} bytes, "
        f"{len(text.splitlines())} lines]\n"
    )
    return ToolResult(header + out, meta={"artifact_id": artifact_id, "mode": mode})


_INT = {"type": "integer"}
ARTIFACT_TOOL = Tool(
    "read_artifact",
    "Read a large tool output stored as an artifact (its id is in the preview line '[artifact <id>]'). "
    "Choose one: byte_start/byte_end (0-based, end exclusive), line_start/line_end (1-based, inclusive), "
    "or search (literal text, or a regex with regex=true; context lines and max_hits). Output is bounded.",
    {
        "type": "object",
        "properties": {
            "artifact_id": {"type": "string"},
            "byte_start": _INT,
            "byte_end": _INT,
            "line_start": _INT,
            "line_end": _INT,
            "search": {"type": "string"},
            "regex": {"type": "boolean"},
            "context": _INT,
            "max_hits": _INT,
        },
        "required": ["artifact_id"],
    },
    read_artifact,
)
