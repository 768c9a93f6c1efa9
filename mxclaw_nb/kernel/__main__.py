"""`python -m mxclaw_nb.kernel install|uninstall ...` manages the kernelspec; anything else starts the kernel.

Jupyter starts the kernel as `python -m mxclaw_nb.kernel -f {connection_file}` (the kernelspec's argv).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Dispatch: install / uninstall the kernelspec, or launch the kernel with the remaining arguments."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("install", "uninstall"):
        from mxclaw_nb.kernel.spec import main as spec_main

        return spec_main(args)
    from ipykernel.kernelapp import IPKernelApp

    from mxclaw_nb.kernel.agent_kernel import AgentKernel

    IPKernelApp.launch_instance(argv=args, kernel_class=AgentKernel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
