"""The tool registry: OpenAI tool schemas, argument validation and never-raising dispatch.

Why it never raises: a model's tool call is untrusted input. Invalid JSON, an unknown tool name or
a missing argument must come back to the model as an ``Invalid ...`` failure result so the loop
goes on and the model can correct itself (SPEC L7: bad input gets a clear error); a bug inside a tool becomes a
``Tool failed: ...`` result. Only ``KeyboardInterrupt`` (the notebook's stop button) passes
through, because the loop turns that into an interrupted turn (L4).

Results leave ``run`` under the text policy (SPEC L7): text that is not valid Unicode (a file name
byte that is not UTF-8, a lone surrogate echoed from the model's arguments) is in its escaped form.

``finalize`` applies A1/A3 (artifact or truncated fallback) to a result so the loop stays small;
``run`` itself returns the raw, full result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mxclaw_nb.secrets import redact, register_env
from mxclaw_nb.text_policy import display, is_valid
from mxclaw_nb.tools import artifacts as artifacts
from mxclaw_nb.tools.base import ToolContext, ToolError, ToolResult
from mxclaw_nb.tools.beneath import NotReadable, read_capped

Handler = Callable[[dict[str, Any], ToolContext], "ToolResult | str"]
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


@dataclass(frozen=True)
class Tool:
    """A named tool: description and JSON-schema parameters for the model, and its handler."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler

    def schema(self) -> dict[str, Any]:
        """This tool in the OpenAI Chat Completions "tools" shape."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def _coerce(name: str, value: Any, spec: dict[str, Any]) -> Any:
    """Check one argument against its schema type; accept "12" for integers and "true" for booleans."""
    kind = spec.get("type")
    if kind is None or value is None:
        return value
    if kind == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    ok = isinstance(value, _TYPES.get(kind, (object,)))
    if kind in ("integer", "number") and isinstance(value, bool):
        ok = False
    if not ok:
        raise ToolError(f"Invalid arguments: '{name}' must be of type {kind} (got {type(value).__name__})")
    return value


ENV_FILE_CAP = 1_048_576
_env_seen: dict[Path, tuple[int, int]] = {}


def register_workspace_env(workspace: Path) -> None:
    """L6: register the values of secret-named variables in the workspace's `.env` (read beneath it, L9), so a
    key kept there is redacted in every form from every tool output; re-read only when the file changed."""
    env = workspace / ".env"
    try:
        st = env.stat()
    except OSError:
        return
    if _env_seen.get(env) == (st.st_mtime_ns, st.st_size):
        return
    try:
        got = read_capped(workspace, ".env", ENV_FILE_CAP)
    except NotReadable:
        return
    _env_seen[env] = (st.st_mtime_ns, st.st_size)
    if got is not None:
        register_env(got[0].decode("utf-8", "replace"))


class ToolRegistry:
    """Named tools, their schemas for the provider, and safe dispatch of model tool calls."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        # T1: counts every change of the tool set, so whoever derives data from the schemas (the agent's
        # tool-definitions layer) knows cheaply when to derive it again
        self.version = 0
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add a tool; a name can be registered once."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self.version += 1

    def names(self) -> list[str]:
        """Registered tool names in registration order."""
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI "tools" list for every registered tool."""
        return [t.schema() for t in self._tools.values()]

    def parse_arguments(self, tool: Tool, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """Decode and validate a tool call's JSON arguments, raising ToolError('Invalid ...')."""
        if isinstance(arguments, dict):
            raw: Any = arguments
        elif arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            raw = {}
        else:
            try:
                raw = json.loads(arguments)
            except (json.JSONDecodeError, TypeError) as exc:
                raise ToolError(f"Invalid arguments for tool '{tool.name}': not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ToolError(
                f"Invalid arguments for tool '{tool.name}': expected a JSON object, got {type(raw).__name__}"
            )
        props: dict[str, Any] = tool.parameters.get("properties", {})
        missing = [k for k in tool.parameters.get("required", []) if raw.get(k) is None]
        if missing:
            raise ToolError(
                f"Invalid arguments for tool '{tool.name}': missing required argument(s) "
                + ", ".join(repr(m) for m in missing)
            )
        try:
            return {k: _coerce(k, v, props[k]) for k, v in raw.items() if k in props}
        except ToolError as exc:
            where = f"Invalid arguments for tool '{tool.name}':"
            raise ToolError(str(exc).replace("Invalid arguments:", where)) from None

    def run(self, name: str, arguments: str | dict[str, Any] | None, ctx: ToolContext) -> ToolResult:
        """Run one tool call; every bad input or tool error becomes a failure ToolResult."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                display(f"Invalid tool: unknown tool '{name}'. Available tools: {', '.join(self._tools)}"),
                is_error=True,
                meta={"error": "unknown_tool"},
            )
        register_workspace_env(ctx.workspace)  # L6: before and after the call (a tool may write the .env)
        try:
            args = self.parse_arguments(tool, arguments)
            out = tool.handler(args, ctx)
            register_workspace_env(ctx.workspace)
        except ToolError as exc:
            return ToolResult(redact(display(str(exc))), is_error=True)
        except Exception as exc:  # a bug or an OS error inside a tool must not end the turn
            return ToolResult(redact(display(f"Tool failed: {type(exc).__name__}: {exc}")), is_error=True)
        result = out if isinstance(out, ToolResult) else ToolResult(out)
        # SPEC L7: the model, the store and the UI all get the escaped form
        if isinstance(result.content, str) and not is_valid(result.content):
            result = replace(result, content=display(result.content))
        # L6: a key the tool read (a .env file, a printed environment) never reaches the model or the store.
        return replace(result, content=redact(result.content))

    def finalize(self, result: ToolResult, ctx: ToolContext) -> ToolResult:
        """Apply A1/A3: large results become an artifact preview (or a truncated fallback)."""
        if not artifacts.needs_artifact(result.content):
            return result
        store = ctx.artifacts
        put = None if store is None else (lambda text: store.put_artifact(ctx.session_id, text))
        errors: list[Exception] = []
        content, artifact_id = artifacts.record_tool_output(result.content, put, on_error=errors.append)
        meta = dict(result.meta)
        meta["bytes"] = len(result.content.encode("utf-8", "surrogatepass"))
        meta["chars"] = len(result.content)
        meta["artifact_id"] = artifact_id
        meta["truncated"] = artifact_id is None
        if errors or store is None:
            reason = f"{type(errors[0]).__name__}: {errors[0]}" if errors else "no artifact store"
            meta["artifact_error"] = reason
            ctx.emit("artifact.fallback", {"reason": reason, "bytes": meta["bytes"]})
        return replace(result, content=content, meta=meta)
