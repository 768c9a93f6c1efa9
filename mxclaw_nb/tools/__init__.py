"""Workspace tools for the agent: file tools, the bash tool and read_artifact (SPEC L3, A2).

Why a package with a registry: the loop only needs ``registry.schemas()`` for the provider,
``registry.run(name, arguments, ctx)`` for each tool call (it never raises on bad input) and
``registry.finalize(result, ctx)`` to apply A1/A3 before storing the result. Tool names and their
required arguments are public: the demo model and users' prompts rely on them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mxclaw_nb.tools.base import APPROVAL_MODES, ArtifactStore, ToolContext, ToolError, ToolResult
    from mxclaw_nb.tools.files import resolve_in_workspace
    from mxclaw_nb.tools.policy import DEFAULT_FORBIDDEN, forbidden_match
    from mxclaw_nb.tools.registry import Tool, ToolRegistry

# Names load from their module on first use (PEP 562), so that the loop, which types against `tools.base`'s data
# carriers, does not load the file tools, the shell or the sandbox prober by importing this package.
_HOME = {
    "APPROVAL_MODES": "base", "ArtifactStore": "base", "ToolContext": "base", "ToolError": "base",
    "ToolResult": "base", "resolve_in_workspace": "files", "DEFAULT_FORBIDDEN": "policy",
    "forbidden_match": "policy", "Tool": "registry", "ToolRegistry": "registry",
}

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_FORBIDDEN",
    "ArtifactStore",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "default_registry",
    "forbidden_match",
    "resolve_in_workspace",
]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"mxclaw_nb.tools.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_registry(namespace: Callable[[], dict[str, Any]] | None = None) -> ToolRegistry:
    """All built-in tools: read_file, list_dir, grep, write_file, edit_file, bash, read_artifact, recall (R1); with a
    `namespace` (the kernel's user namespace, K1) also python and kernel_variables."""
    from mxclaw_nb.tools.artifact_tool import ARTIFACT_TOOL
    from mxclaw_nb.tools.files import FILE_TOOLS
    from mxclaw_nb.tools.kernel_tools import kernel_tools
    from mxclaw_nb.tools.recall_tool import RECALL_TOOL
    from mxclaw_nb.tools.registry import ToolRegistry
    from mxclaw_nb.tools.shell import SHELL_TOOL

    extra = kernel_tools(namespace) if namespace is not None else []
    return ToolRegistry([*FILE_TOOLS, SHELL_TOOL, ARTIFACT_TOOL, RECALL_TOOL, *extra])
