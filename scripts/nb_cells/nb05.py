"""Cells of notebooks/05-agent-notebook.ipynb: the "mx-claw agent" kernel, where a plain cell is a turn (SPEC N4)."""

# ruff: noqa: E501 - cell code is dedented by 8 columns in the notebook, where it fits in 120

from __future__ import annotations

from nb_cells import CHECK, SETUP_NOTE, code, md, setup

KERNELSPEC = {"display_name": "mx-claw agent", "language": "markdown", "name": "mx-claw-agent"}
LANGUAGE_INFO = {"name": "markdown"}

CELLS = [
    md(
        """
        # 05 · An agent notebook

        This notebook runs on the **mx-claw agent** kernel (pick it in JupyterLab's launcher, or *Kernel → Change
        Kernel*). In it the notebook *is* the conversation:

        - a **plain cell is one turn** of the agent, exactly what a `%%agent` cell does in a Python kernel: the live
          log, the widgets, everything stored in DuckDB as it happens;
        - a cell starting with `%` or `%%` is a **magic** as usual: `%agent view`, `%agent timeline`,
          `%config AgentMagics.model = ...`;
        - a cell starting with **`%%python`** is Python, in the kernel's namespace.

        Install the kernel once with `python -m mxclaw_nb.kernel install --user` (or `--sys-prefix` inside a
        virtual environment). Like the other notebooks this one runs offline on the demo model.
        """
    ),
    SETUP_NOTE,
    ("code", "%%python\n" + setup()[1], ()),
    md(
        """
        ## Settings are the same traits

        `%config AgentMagics.<setting>` and the environment variables work as in a Python kernel. Here: the demo
        model (offline even if you have an `OPENAI_API_KEY`), and shell commands allowed without asking.
        """
    ),
    code(
        """
        %config AgentMagics.model = "mxclaw-demo"
        %config AgentMagics.approval = "allow"
        """
    ),
    md("## Plain cells are prompts"),
    code("The unit tests of the inventory package fail. Find out why and fix them."),
    code("Look at the build log and tell me what the slowest step was."),
    md(
        """
        A question mark in a prompt is part of the prompt (in a magic line, `%agent?` is help as usual):
        """
    ),
    code("What did you change and check? Name the files."),
    md(
        """
        ## Magics still work

        Every `%agent` command is available: the request view of the last call, the timeline, SQL over the store.
        These are the prompts this notebook's session has stored so far:
        """
    ),
    code("%agent sql SELECT turn, content FROM messages WHERE role = 'user' ORDER BY seq", CHECK),
    code("%agent timeline"),
    md("## Python cells"),
    code(
        """
        %%python
        # The magics' Agent is the same object `from mxclaw_nb import Agent` gives in a Python kernel.
        agent = get_ipython().magics_manager.registry["AgentMagics"].get_agent()
        transcript = agent.transcript()
        print("prompts in this session:", sum(m["role"] == "user" for m in transcript))
        print("roles stored:", ", ".join(sorted({m["role"] for m in transcript})))
        """,
        CHECK,
    ),
    md(
        """
        ## One session per notebook

        The kernel continues **this notebook's session**: close and reopen the notebook, or restart the kernel, and
        the next prompt carries on where the last one stopped (`%agent new` starts a fresh session, which the
        notebook then keeps). Jupyter tells the kernel which notebook it serves through the `JPY_SESSION_NAME`
        environment variable; where nothing names the notebook (a console, papermill, this notebook's test run),
        each kernel starts a new session, and `%agent resume <id>` continues a stored one. `MXCLAW_NOTEBOOK=<name>`
        names it explicitly.
        """
    ),
    code("%agent sessions"),
]
