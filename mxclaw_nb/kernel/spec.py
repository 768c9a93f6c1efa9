"""Install and remove the "mx-claw agent" kernelspec with jupyter_client's KernelSpecManager (SPEC N4).

`python -m mxclaw_nb.kernel install` writes `kernel.json` (argv: this Python, `-m mxclaw_nb.kernel -f
{connection_file}`) and the two logos into `<prefix>/share/jupyter/kernels/mx-claw-agent/`: the
system-wide folder by default, `--user` for the per-user data folder, `--sys-prefix` for the active
environment (what Binder and `scripts/test.sh` use), `--prefix P` for any other prefix.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from mxclaw_nb.kernel import DISPLAY_NAME, KERNEL_NAME

LOGOS = ("logo-32x32.png", "logo-64x64.png")


def kernel_json(python: str | None = None, display_name: str = DISPLAY_NAME) -> dict[str, Any]:
    """The kernel.json content: start this package's kernel with `python` (default: this interpreter)."""
    return {
        "argv": [python or sys.executable, "-m", "mxclaw_nb.kernel", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "markdown",
        "interrupt_mode": "signal",
        "metadata": {"debugger": False, "mxclaw_nb": {"plain_cell": "agent turn"}},
    }


def _location(user: bool, sys_prefix: bool, prefix: str | None) -> tuple[bool, str | None]:
    if sum(bool(x) for x in (user, sys_prefix, prefix)) > 1:
        raise ValueError("choose at most one of --user, --sys-prefix and --prefix")
    return user, (sys.prefix if sys_prefix else prefix)


def install(*, user: bool = False, sys_prefix: bool = False, prefix: str | None = None, name: str = KERNEL_NAME,
            display_name: str = DISPLAY_NAME) -> Path:
    """Install the kernelspec; returns the folder it was written to."""
    from jupyter_client.kernelspec import KernelSpecManager

    user, where = _location(user, sys_prefix, prefix)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / name
        folder.mkdir()
        (folder / "kernel.json").write_text(json.dumps(kernel_json(display_name=display_name), indent=1) + "\n")
        for logo in LOGOS:
            (folder / logo).write_bytes(resources.files("mxclaw_nb.kernel").joinpath("resources", logo).read_bytes())
        dest = KernelSpecManager().install_kernel_spec(str(folder), name, user=user, prefix=where)
    return Path(dest)


def uninstall(*, user: bool = False, sys_prefix: bool = False, prefix: str | None = None,
              name: str = KERNEL_NAME) -> Path:
    """Remove the kernelspec: from the given location, or wherever Jupyter finds it; returns the folder removed."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    from jupyter_core.paths import jupyter_data_dir

    user, where = _location(user, sys_prefix, prefix)
    if user or where:
        base = Path(jupyter_data_dir()) if user else Path(where or "") / "share" / "jupyter"
        folder = base / "kernels" / name
        if not (folder / "kernel.json").is_file():
            raise FileNotFoundError(f"no kernelspec {name!r} in {folder.parent}")
        shutil.rmtree(folder)
        return folder
    try:
        return Path(KernelSpecManager().remove_kernel_spec(name))
    except NoSuchKernel:
        raise FileNotFoundError(f"no kernelspec {name!r} is installed where Jupyter looks") from None


def main(argv: list[str]) -> int:
    """Command line: `install|uninstall [--user | --sys-prefix | --prefix P] [--name N]`."""
    parser = argparse.ArgumentParser(prog="python -m mxclaw_nb.kernel",
                                     description='Install or remove the "mx-claw agent" Jupyter kernel.')
    parser.add_argument("action", choices=("install", "uninstall"))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="the per-user Jupyter data folder")
    where.add_argument("--sys-prefix", action="store_true", help=f"this environment ({sys.prefix})")
    where.add_argument("--prefix", help="another prefix: <prefix>/share/jupyter/kernels")
    parser.add_argument("--name", default=KERNEL_NAME, help=f"kernelspec name (default {KERNEL_NAME})")
    parser.add_argument("--display-name", default=DISPLAY_NAME, help=f"launcher name (default {DISPLAY_NAME!r})")
    args = parser.parse_args(argv)
    try:
        if args.action == "install":
            path = install(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix, name=args.name,
                           display_name=args.display_name)
            print(f"Installed kernelspec {args.name} ({args.display_name!r}) in {path}")
        else:
            path = uninstall(user=args.user, sys_prefix=args.sys_prefix, prefix=args.prefix, name=args.name)
            print(f"Removed kernelspec {args.name} from {path}")
    except (OSError, ValueError) as exc:
        print(f"mxclaw_nb.kernel {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
