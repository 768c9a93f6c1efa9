"""Cells of notebooks/01-quickstart.ipynb: the magics on the offline demo model, then real endpoints."""

# ruff: noqa: E501 - cell code is dedented by 8 columns in the notebook, where it fits in 120

from __future__ import annotations

from nb_cells import CHECK, SETUP_NOTE, code, md, setup

FIX = "The unit tests of the inventory package fail. Find out why and fix them."
LOG = "Look at the build log and tell me what the slowest step was."
SUM = "Summarize what you changed and what you checked, with file names."

CELLS = [
    md(
        """
        # 01 · Quickstart

        mxclaw_nb is a coding agent that lives in the notebook and shows what fills its context window:
        how many tokens each request carries, when the context is compacted, and what the model actually saw.

        This notebook runs **offline**: with no API key configured, mxclaw_nb answers with a built-in *demo model*,
        served on 127.0.0.1 through the same code path as a real provider. Its steps are scripted for a small
        sample project (a fresh copy is made for every session), so you can watch the context engine work without a
        key. At the end you will see how to point it at OpenAI, vLLM, llama.cpp or Ollama.

        Token figures marked **est.** are conservative estimates (SPEC C1); **calibrated** figures are anchored on
        the token counts the provider reported; **reported** figures come from the provider itself.
        """
    ),
    SETUP_NOTE,
    setup(),
    md(
        """
        ## Load the extension

        `%load_ext mxclaw_nb` registers the `%agent` line magic and the `%%agent` cell magic. Settings are
        traitlets, so `%config AgentMagics.<setting> = ...` works (as does `%agent config key=value`).

        Two settings for this tour: the demo model (so the notebook stays offline even if you have an
        `OPENAI_API_KEY` set), and `approval = "allow"` so the demo's shell commands run without asking. With a real
        model keep the default `"ask"`: each shell command then waits for your Approve/Deny click.
        """
    ),
    code(
        """
        %load_ext mxclaw_nb
        %config AgentMagics.model = "mxclaw-demo"
        %config AgentMagics.approval = "allow"
        """
    ),
    code("%agent help"),
    md(
        """
        ## A first turn

        A `%%agent` cell sends its body as the prompt. While the turn runs you see a compact live log: the context
        gauge line before each model call, each tool call with its outcome, and compactions when they happen.
        Everything is stored in DuckDB as it happens.
        """
    ),
    code(f"%%agent\n{FIX}"),
    md(
        """
        ## What did the model see?

        `%agent gauge` shows the last request by layer (system prompt, project instructions, skills, memory, user
        input, assistant, tool results, summaries) against the compaction threshold and the context window.
        `%agent view` opens the compaction inspector: the transcript (*Before*), what was sent (*After*), and the
        summary, with one row per message and what happened to it.
        """
    ),
    code("%agent gauge"),
    code("%agent view"),
    md(
        """
        ## Keep going until the context fills up

        The demo model's window is 16,000 tokens, with the threshold at 0.8 × 16,000 = 12,800. Two more turns push
        the request past it: first the engine replaces old successful tool outputs with placeholders
        (**micro**compaction), then, when that is not enough, it summarizes older messages (**summary**). The line
        magic `%agent <prompt>` runs a turn just like the cell magic.
        """
    ),
    code(f"%agent {LOG}"),
    code(f"%agent {SUM}"),
    md(
        """
        The timeline plots the prompt tokens of every model call of the session, with the threshold and window
        lines and a marker at each compaction (coloured by stage).
        """
    ),
    code("%agent timeline"),
    md(
        """
        `%agent view` always shows the *last* call. Any stored call can be inspected: `%agent sql` returns a
        DataFrame, and a stored request row is enough for the inspector (it reads the call's messages from the store
        the magics use, SPEC N3). Here, the call where compaction saved the most tokens. (A line ending in `?` would ask IPython for help instead of running the magic.)
        """
    ),
    code(
        """
        from mxclaw_nb.widgets import CompactionInspector

        biggest = %agent sql SELECT * FROM requests WHERE stage <> 'unchanged' ORDER BY before_tokens - after_tokens DESC LIMIT 1
        CompactionInspector(biggest.iloc[0])
        """
    ),
    md(
        """
        Each compaction is a `context.compacted` event with before/after token figures and the summary text. The
        figures are in the unit of the counter that decided the compaction, named in the `unit` column: `est.` until
        the provider has reported usage, `calibrated` after that (SPEC T3, N5).
        """
    ),
    code("%agent events --type context.compacted"),
    md(
        """
        **The transcript is safe, the view is trimmed.** Compaction only changes what is *sent*; the stored
        transcript keeps every message, which `%agent transcript` lists. `%agent dry-run` shows the next request
        view without calling the model, and `%agent compact` shows what compaction would do right now (nothing is
        stored).
        """
    ),
    code("%agent transcript"),
    code("%agent dry-run And what should I check next"),
    code("%agent compact"),
    code("%agent sessions"),
    md(
        """
        ## The same from Python

        The magics are a thin layer over `mxclaw_nb.Agent`. Use it directly in scripts and experiments: `run()`
        returns a `TurnResult` with the final text and every request view of the turn, and `agent.store` reads the
        DuckDB store as pandas DataFrames.
        """
    ),
    code(
        """
        from mxclaw_nb import Agent

        agent = Agent(model="mxclaw-demo", approval="allow")
        print(agent.label)
        print(agent.policy, "· threshold", f"{agent.policy.threshold:,}", "est. tokens")
        """,
        CHECK,
    ),
    code(
        f"""
        result = agent.run("{FIX}")
        print(result.status, "·", result.iterations, "model calls ·", len(result.compactions), "compactions")
        print(result.text[:300])
        """
    ),
    code(
        """
        requests = agent.store.requests(agent.session_id)
        requests[["turn", "iteration", "stage", "estimate_tokens", "calibrated_tokens", "prompt_tokens_reported"]]
        """
    ),
    code(
        """
        from mxclaw_nb.widgets import ContextGauge

        ContextGauge(result.views[-1])
        """
    ),
    md(
        """
        ## Use a real model

        Any OpenAI-compatible Chat Completions endpoint works. Configure it with environment variables **before**
        starting Jupyter, or with `%config` in the notebook (`%agent config` lists every setting and where its value
        comes from). The model needs tool calling (function calling) support. Local servers need no key.

        | setting (`%config AgentMagics.…`) | environment variable | meaning |
        |---|---|---|
        | `base_url` | `OPENAI_BASE_URL` | the endpoint, e.g. `http://127.0.0.1:8000/v1` |
        | `api_key_env` | (names the variable, default `OPENAI_API_KEY`) | where the key is read from |
        | `model` | `MXCLAW_MODEL` | model name as the endpoint knows it |
        | `context_window_tokens` | `MXCLAW_CONTEXT_WINDOW` | window, if the model is not in the built-in table |
        | `threshold_ratio`, `keep_recent_tokens` | | compaction threshold (default 0.8) and safe-tail budget (8,000) |
        | `db` | `MXCLAW_DB` | the DuckDB file |

        **OpenAI**

        ```bash
        export OPENAI_API_KEY=sk-...
        export MXCLAW_MODEL=gpt-4o-mini
        ```

        **vLLM** (`vllm serve Qwen/Qwen2.5-Coder-7B-Instruct --enable-auto-tool-choice --tool-call-parser hermes`)

        ```python
        %config AgentMagics.base_url = "http://127.0.0.1:8000/v1"
        %config AgentMagics.model = "Qwen/Qwen2.5-Coder-7B-Instruct"
        %config AgentMagics.context_window_tokens = 32768
        ```

        **llama.cpp** (`llama-server -m model.gguf --jinja -c 16384 --port 8080`)

        ```python
        %config AgentMagics.base_url = "http://127.0.0.1:8080/v1"
        %config AgentMagics.model = "local"
        %config AgentMagics.context_window_tokens = 16384
        ```

        **Ollama** (`OLLAMA_CONTEXT_LENGTH=32768 ollama serve`, then `ollama pull qwen2.5-coder`)

        ```python
        %config AgentMagics.base_url = "http://127.0.0.1:11434/v1"
        %config AgentMagics.model = "qwen2.5-coder"
        %config AgentMagics.context_window_tokens = 32768
        ```

        **From Python**: `Agent(base_url="http://127.0.0.1:8000/v1", api_key="...", model="...",
        context_window_tokens=32768)` takes the same settings as arguments.

        Set the window to what the server really allows (`--max-model-len` for vLLM, `-c` for llama.cpp,
        `OLLAMA_CONTEXT_LENGTH` or a Modelfile's `num_ctx` for Ollama, whose default is much smaller than the
        models' own windows): the threshold is computed from it. Remove the `%config AgentMagics.model =
        "mxclaw-demo"` line above (or set `model` to your model) to leave the demo, and keep `approval` at `"ask"`.

        ## Next

        - **02 · Context management tour**: every pipeline stage with small examples, and the article's worked example.
        - **03 · Compaction experiments**: sweep window, threshold ratio and tail budget over many sessions.
        - **04 · Cross-session analysis**: SQL over the DuckDB store, Parquet export.
        """
    ),
]
