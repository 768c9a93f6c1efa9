"""The "mx-claw agent" kernel: a notebook whose plain cells are agent turns (SPEC N4).

Why: the notebook itself is the conversation. A plain cell is one turn in the notebook's session, exactly
what `%%agent` does in a Python kernel (live log, widgets, everything stored in DuckDB as it happens); a
cell starting with `%` or `%%` is a magic as usual (`%agent view`, `%config AgentMagics.model = ...`),
and `%%python` makes a cell Python. The kernel is ipykernel's IPython kernel with a thin `do_execute`
override, so widgets, display, interrupts and restarts behave as in any Python kernel.

Shape: `spec` installs and removes the kernelspec (`python -m mxclaw_nb.kernel install [--user |
--sys-prefix | --prefix P]`); `cells` classifies and rewrites cells and computes completions (pure);
`binding` maps the notebook to its session in the store; `agent_kernel` is the kernel class. This
package's root stays light: `python -m mxclaw_nb.kernel install` must not import the kernel.
"""

from __future__ import annotations

KERNEL_NAME = "mx-claw-agent"
DISPLAY_NAME = "mx-claw agent"

__all__ = ["KERNEL_NAME", "DISPLAY_NAME"]
