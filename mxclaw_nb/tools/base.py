"""Shared value types of the tool layer: results, the per-call context and the artifact Protocol.

Why a separate module: the registry, every tool and the query loop all speak these types, and the
loop must be able to type against them without importing any concrete tool. The store is reached
only through the small ``ArtifactStore`` Protocol, so the tools never import DuckDB and tests can
pass a dict-backed store. Failure texts start with the SPEC's markers (``Invalid``,
``Permission denied``, ``Forbidden``, ``Tool failed``) because the context engine recognises
failures by them (C5, C6); the helpers here are the one place those prefixes are spelled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mxclaw_nb.secrets import check_env_allow
from mxclaw_nb.settings import NETWORK_MODES, SANDBOX_MODES, Settings  # one owner: the settings table
from mxclaw_nb.tools.policy import DEFAULT_FORBIDDEN

APPROVAL_MODES = ("allow", "ask", "deny")
from mxclaw_nb.settings import MAX_TOOL_CALLS  # noqa: E402 - default bound per model response (L3), one owner


@dataclass
class ToolResult:
    """One tool outcome: the text for the model, a failure flag and details for UI and store."""

    content: str
    is_error: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


class ArtifactStore(Protocol):
    """Session-scoped artifact storage (implemented by mxclaw_nb.store.writer.Store)."""

    def put_artifact(self, session_id: str, text: str) -> str:
        """Store text for the session and return its artifact id."""
        ...

    def get_artifact(self, session_id: str, artifact_id: str) -> str | None:
        """Return the artifact's text, or None when the session has no such artifact."""
        ...


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use (SPEC L8); the defaults are the settings' defaults.

    ``memory_mb`` bounds each process's data (``RLIMIT_DATA``: heap and private writable mappings, not the
    address space, so runtimes that reserve large address ranges still start); ``processes`` bounds the
    processes and threads of one command (``RLIMIT_NPROC``, counted in the command's own user namespace, so
    your other processes do not count; bwrap only); ``file_mb`` bounds each file written (``RLIMIT_FSIZE``);
    ``tmp_mb`` is the size of the private ``/tmp`` (and ``/var/tmp``, ``/dev/shm``) tmpfs (bwrap only).
    """

    memory_mb: int = 4096
    processes: int = 512
    file_mb: int = 2048
    tmp_mb: int = 1024


@dataclass
class ToolContext:
    """Everything a tool call may use: workspace, session, artifact store, approval policy."""

    workspace: Path
    session_id: str
    artifacts: ArtifactStore | None = None
    approval: str = "ask"  # L5: shell commands (bash)
    python_approval: str = "ask"  # L5: the `python` tool's code (runs unsandboxed in the user's kernel)
    approver: Callable[[str], bool | None] | None = None
    forbidden: tuple[str, ...] = DEFAULT_FORBIDDEN
    shell_timeout: float = 60.0
    on_event: Callable[[str, dict[str, Any]], None] | None = None
    sandbox: str = "auto"  # L5: "auto" | "bwrap" | "landlock" | "off"
    network: str = "off"  # L5: the sandboxed shell's network, "off" | "on"
    shell_env: tuple[str, ...] = ()  # L6: extra variable names passed to the shell
    secrets: tuple[str, ...] = field(default=(), repr=False)  # L6: values the shell never gets
    max_tool_calls: int = MAX_TOOL_CALLS
    limits: Limits = field(default_factory=Limits)  # L8: memory, processes, file size, private temp size
    protected: tuple[Path, ...] = ()  # L11: the store's files: read-only in the sandbox, refused by file tools
    # N1: the session's settings; the fields above are the values resolved for tools (environment included)
    settings: Settings = field(default_factory=Settings)

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).expanduser().resolve()
        for name, mode in (("approval", self.approval), ("python_approval", self.python_approval)):
            if mode not in APPROVAL_MODES:
                raise ValueError(f"{name} must be one of {', '.join(APPROVAL_MODES)} (got {mode!r})")
        if not self.shell_timeout > 0:
            raise ValueError(f"shell_timeout must be > 0 seconds (got {self.shell_timeout!r})")
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)} (got {self.sandbox!r})")
        if self.network not in NETWORK_MODES:
            raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)} (got {self.network!r})")
        self.shell_env = check_env_allow(self.shell_env)
        self.protected = tuple(Path(p).absolute() for p in self.protected)
        if isinstance(self.max_tool_calls, bool) or not isinstance(self.max_tool_calls, int) \
                or self.max_tool_calls < 1:
            raise ValueError(f"max_tool_calls must be an integer >= 1 (got {self.max_tool_calls!r})")

    def emit(self, kind: str, payload: dict[str, Any]) -> None:
        """Send an event to the subscriber, if any."""
        if self.on_event is not None:
            self.on_event(kind, payload)


class ToolError(Exception):
    """Raised inside a tool to end it with a failure result whose text is the message."""


def invalid(message: str) -> ToolError:
    """A bad-input failure: text starts with 'Invalid'."""
    return ToolError(message if message.startswith("Invalid") else f"Invalid {message}")


def denied(message: str) -> ToolError:
    """A confinement or approval failure: text starts with 'Permission denied:'."""
    return ToolError(f"Permission denied: {message}")


def failed(message: str) -> ToolError:
    """Any other failure: text starts with 'Tool failed:'."""
    return ToolError(f"Tool failed: {message}")
