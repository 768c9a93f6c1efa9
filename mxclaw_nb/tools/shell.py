"""The ``bash`` tool: forbidden list, approval policy, then a sandboxed, bounded subprocess (SPEC L3, L5, L8, L11).

Why this order: a forbidden command is refused before anyone is asked (there is no point asking to
run ``sudo``); then the approval policy decides (``allow`` runs, ``deny`` refuses, ``ask`` asks the
context's approver, and with no approver or an approver that cannot answer -- a headless kernel --
the command is denied rather than run). Every decision is emitted as ``approval.decided`` so the
loop stores it. Denials and forbidden commands are failure results with the ``Permission denied``
and ``Forbidden`` markers so C5/C6 keep them as evidence.

The forbidden list is a convenience -- an early, readable refusal of the obvious -- not the boundary:
``x=rm; $x -rf /`` or ``base64 -d | sh`` pass any list. The boundary is the operating-system sandbox
(``sandbox.py``, SPEC L5) that runs every approved command: bubblewrap or Landlock, the workspace and a
private temp folder writable, the home hidden, no network unless enabled, nothing outliving the call,
and a minimal environment with no secret in it (L6); never as the host's root, under limits (L8), with the
store's files out of reach (L11: a placement where they cannot be kept read-only refuses the command).

The command runs in its own process group with cwd = workspace and stdin closed; on timeout (or an
interrupt) the whole group is killed (and the sandbox's process tree with it), so ``sleep 100 &``
children cannot keep the call hanging. Output is captured by reader threads with a per-stream cap,
so ``yes`` cannot exhaust memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO, Any

from mxclaw_nb.tools.base import ToolContext, ToolError, ToolResult, denied, failed
from mxclaw_nb.tools.policy import describe_pattern, forbidden_match
from mxclaw_nb.tools.registry import Tool
from mxclaw_nb.tools.sandbox import (
    SANDBOX_HOME,
    Launch,
    Sandbox,
    resolve_sandbox,
    shell_environment,
    store_placement_problem,
)

CAPTURE_LIMIT_BYTES = 8_000_000
_DRAIN_SECONDS = 0.5
_APPROVER_FAILED = object()


class _Capture:
    """Read a pipe to EOF in a thread, keeping at most CAPTURE_LIMIT_BYTES and counting the rest."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.kept = bytearray()
        self.dropped = 0
        self._pipe = pipe
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while chunk := self._pipe.read1(65536):  # type: ignore[attr-defined]
            room = CAPTURE_LIMIT_BYTES - len(self.kept)
            self.kept += chunk[: max(room, 0)]
            self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self, label: str) -> str:
        out = bytes(self.kept).decode("utf-8", errors="surrogateescape")  # shown as \\xHH (L7, registry)
        if self.dropped:
            out += f"\n[... {self.dropped} more bytes of {label} discarded beyond the capture limit]"
        return out


class _SandboxInit:
    """bwrap's sandbox init (pid 1 of the command's PID namespace), from its ``--info-fd`` report.

    Opened as a pidfd as soon as bwrap reports it, so the kill after the command cannot hit a reused pid.
    """

    def __init__(self, info_read: int | None) -> None:
        self.pidfd: int | None = None
        self._fd = info_read
        self.thread: threading.Thread | None = None
        if info_read is not None:
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()

    def _read(self) -> None:
        assert self._fd is not None
        data = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(self._fd, 4096):
                data += chunk
        os.close(self._fd)
        match = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
        if match:
            with contextlib.suppress(OSError):
                self.pidfd = os.pidfd_open(int(match.group(1)))

    def kill(self) -> None:
        if self.thread is not None:
            self.thread.join(1.0)
            self.thread = None
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            os.close(self.pidfd)
            self.pidfd = None


def decide(command: str, ctx: ToolContext, kind: str = "shell") -> tuple[bool, str]:
    """Apply the approval policy of this kind of code; return (allowed, who decided) and emit approval.decided.

    `kind` is "shell" (the `approval` setting) or "python" (`python_approval`: kernel code, never sandboxed,
    L5). `by` is "policy" (allow/deny mode), "user" (the approver answered True/False), "nobody" (no
    approver, or it returned None: no one can answer) or "error" (the approver raised).
    """
    mode = ctx.python_approval if kind == "python" else ctx.approval
    if mode == "allow":
        allowed, by = True, "policy"
    elif mode == "deny":
        allowed, by = False, "policy"
    elif ctx.approver is None:
        allowed, by = False, "nobody"
    else:
        answer: object
        ctx.emit("approval.pending", {"command": command, "kind": kind})  # N6: the turn says whom it waits for
        try:
            answer = ctx.approver(command)
        except Exception:  # a broken approval UI must not run the command
            answer = _APPROVER_FAILED
        allowed = answer is True
        by = "nobody" if answer is None else "error" if answer is _APPROVER_FAILED else "user"
    ctx.emit("approval.decided", {"command": command, "decision": "allow" if allowed else "deny", "by": by})
    return allowed, by


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)`` woken by the exit itself (a pidfd), not by Popen's polling, which sleeps in doubling
    steps up to 50 ms and so adds up to half a command's run time to every short command."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):
        proc.wait(timeout=timeout)
        return
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(pidfd)
    proc.wait()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _stop(proc: subprocess.Popen[bytes], sandbox: Sandbox) -> None:
    """End a command and everything it started (the landlock runner reaps its tree on SIGTERM)."""
    if sandbox.kind == "landlock" and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2.0)
    _kill_group(proc)


def run_command(command: str, ctx: ToolContext, sandbox: Sandbox | None = None) -> ToolResult:
    """Run an approved command in the sandbox (L5, L8) with the minimal environment (L6).

    The result carries exit code, stdout and stderr, and ``meta["sandbox"]`` names what confined it.
    `sandbox` overrides the one ``ctx.sandbox`` resolves to (a given bwrap binary, in tests and benches).
    """
    sandbox = sandbox or resolve_sandbox(ctx.sandbox)
    shell = shutil.which("bash") or "/bin/sh"
    private_tmp = tempfile.mkdtemp(prefix="mxclaw-shell-") if sandbox.kind != "bwrap" else None
    if sandbox.kind == "bwrap":
        home, tmp = SANDBOX_HOME, "/tmp"
    else:
        assert private_tmp is not None
        home, tmp = os.path.join(private_tmp, "home"), private_tmp
        os.mkdir(home)
    env = shell_environment(os.environ, home=home, tmp=tmp, allow=ctx.shell_env, secrets=ctx.secrets)
    try:
        problem = store_placement_problem(ctx.workspace, ctx.protected, sandbox.kind)
        if problem:  # L11: refused visibly rather than run where the store could be damaged
            raise denied(f"{problem}; the command was not run")
        try:
            launch = sandbox.launch(command, ctx.workspace, network=ctx.network, shell=shell, tmp=private_tmp,
                                    limits=ctx.limits, protect=ctx.protected)
        except OSError as exc:  # L8: never run weaker than the sandbox says
            raise failed(f"the {sandbox.kind} sandbox could not be set up ({exc}); the command was not run") from None
        return _run(launch, command, ctx, env, sandbox)
    except ToolError as exc:
        return ToolResult(str(exc), is_error=True, meta={"sandbox": sandbox.kind, "exit_code": None})
    finally:
        if private_tmp is not None:
            shutil.rmtree(private_tmp, ignore_errors=True)


def _run(launch: Launch, command: str, ctx: ToolContext, env: dict[str, str], sandbox: Sandbox) -> ToolResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            launch.argv,
            cwd=ctx.workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
            preexec_fn=launch.preexec,
            pass_fds=launch.pass_fds,
        )
    except (OSError, subprocess.SubprocessError) as exc:  # the rootless set-up failed in the child (L8)
        why = launch.setup_error() or str(exc)
        launch.release()
        raise failed(f"the {sandbox.kind} sandbox could not be set up ({why}); the command was not run") from None
    finally:
        for fd in launch.close:
            os.close(fd)
    init = _SandboxInit(launch.info_read)
    if launch.error_read is not None:
        os.close(launch.error_read)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(proc.stdout), _Capture(proc.stderr)
    timed_out = False
    try:
        _wait(proc, ctx.shell_timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        init.kill()
        _stop(proc, sandbox)
        proc.wait()
    except BaseException:  # KeyboardInterrupt: leave no process behind, then let the loop handle it
        init.kill()
        _stop(proc, sandbox)
        proc.wait()
        raise
    finally:
        init.kill()  # L5: the command is done; whatever it left in the sandbox ends with its PID namespace
    for cap in (out, err):
        cap.thread.join(_DRAIN_SECONDS)
    if out.thread.is_alive() or err.thread.is_alive():
        _kill_group(proc)  # background children still hold the pipes open
        for cap in (out, err):
            cap.thread.join(_DRAIN_SECONDS)
    duration = time.monotonic() - start
    stdout, stderr = out.text("stdout"), err.text("stderr")
    meta: dict[str, Any] = {
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "duration_s": round(duration, 3),
        "stdout_chars": len(stdout),
        "stderr_chars": len(stderr),
        "sandbox": sandbox.kind,
    }
    streams = (("stdout", stdout), ("stderr", stderr))
    body = "".join(f"\n[{name}]\n{text.rstrip(chr(10))}" for name, text in streams if text) or "\n(no output)"
    if timed_out:
        head = f"Tool failed: timed out after {ctx.shell_timeout:g} s; the command was killed"
        return ToolResult(head + body, is_error=True, meta=meta)
    if proc.returncode != 0:
        return ToolResult(f"Tool failed: exit code {proc.returncode}{body}", is_error=True, meta=meta)
    return ToolResult(f"exit code 0{body}", meta=meta)


def bash(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """The bash tool: forbidden check, approval, then run in the workspace."""
    command = args["command"]
    if not command.strip():
        raise ToolError("Invalid arguments for tool 'bash': 'command' is empty")
    pattern = forbidden_match(command, ctx.forbidden)
    if pattern is not None:
        ctx.emit("approval.decided", {"command": command, "decision": "deny", "by": "forbidden-list"})
        name = describe_pattern(pattern)
        raise ToolError(f"Forbidden: the command matches the forbidden pattern '{name}' and was not run")
    allowed, by = decide(command, ctx)
    if not allowed:
        if by == "user":
            raise denied("the user denied running this command")
        if by == "policy":
            raise denied("the approval policy is 'deny', so shell commands are not run")
        if by == "error":
            raise denied("the approval prompt failed, so the command was not run")
        raise denied("nobody could approve this command (no interactive approver), so it was not run")
    return run_command(command, ctx)


SHELL_TOOL = Tool(
    "bash",
    "Run a shell command with bash in the workspace folder. Returns the exit code, stdout and stderr. "
    "Subject to the user's approval and a forbidden-command list; has a timeout. Runs in a sandbox: only the "
    "workspace and $TMPDIR are writable, the home folder is hidden and there is no network unless enabled.",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The shell command line"}},
        "required": ["command"],
    },
    bash,
)
