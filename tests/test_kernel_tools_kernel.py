"""K1-K3 in a real kernel (nbclient) against the shipped OpenAI-compatible test server: the agent reads a
DataFrame the user defined in an earlier cell, runs code beside it (after an approval), an old large output
becomes a typed placeholder, the kernel-state section names the variable the agent made, and the stored
transcript keeps the full outputs (S2)."""

from __future__ import annotations

from pathlib import Path

from mxclaw_nb.demo.server import TestServer

from .test_kernel import kernel_env, run_notebook, texts

MAKE = "by_price = df_sales.groupby('price').size()\nprint(df_sales.head(150).to_string())"
MORE = "print(df_sales.tail(150).to_string())"


def test_k1_k3_agent_uses_the_users_dataframe_in_a_real_kernel(tmp_path: Path) -> None:
    with TestServer(api_key="sk-k") as srv:
        # turn 1, approval=ask in a headless kernel: the python call is asked for and denied
        srv.enqueue_tool_calls([("kernel_variables", {"filter": "df"})])
        srv.enqueue_tool_calls([("python", {"code": "df_sales.shape"})])
        srv.enqueue_tool_calls([("notebook_cells", {"range": "1-2"})])
        srv.enqueue_text("The python call was not approved.")
        # turn 2, approval=allow: code beside the user's frame, two large outputs, then a small one
        srv.enqueue_tool_calls([("python", {"code": MAKE})])
        srv.enqueue_tool_calls([("python", {"code": MORE})])
        srv.enqueue_tool_calls([("python", {"code": "int(by_price.sum())"})])
        srv.enqueue_text("df_sales has 5000 rows; by_price counts them per price.")
        env = kernel_env(tmp_path / "k.duckdb", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-k",
                         MXCLAW_MODEL="test-model")
        nb, _ = run_notebook([
            "import pandas as pd\n"
            "df_sales = pd.DataFrame({'id': range(5000), 'price': [1.5, 2.25, 9.0, 12.5] * 1250})",
            "%load_ext mxclaw_nb\n%config AgentMagics.widgets = False\n"
            "%agent config context_window_tokens=5500 keep_recent_tokens=200",
            "%%agent\nwhat is in df_sales?",
            "%agent config approval=allow python_approval=allow",
            "%%agent\ncount the rows per price",
            "print('kernel has by_price:', 'by_price' in globals(), int(by_price.sum()))",
            "%agent sql SELECT type, json_extract_string(payload, '$.decision') AS decision, "
            "json_extract_string(payload, '$.command') AS command FROM events WHERE type = 'approval.decided'",
            "m = get_ipython().magics_manager.registry['AgentMagics']\n"
            "t = m.store().transcript(m.get_agent().session_id)\n"
            "outs = list(t[t.role == 'tool'].content)\n"
            "print('last rows:', sorted(c.rstrip().splitlines()[-1].split()[0] for c in outs\n"
            "                           if c.startswith('stdout')))",
            "%agent compact",
        ], tmp_path, env)
        requests = list(srv.requests)
    assert not any(o.output_type == "error" for c in nb.cells for o in c.outputs)
    # K1: kernel_variables saw the user's frame (name, type, shape, columns; no values)
    first_tool = next(m for m in requests[1]["messages"] if m["role"] == "tool")
    assert "df_sales" in first_tool["content"] and "DataFrame" in first_tool["content"]
    assert "5000" in first_tool["content"] and "price" in first_tool["content"]
    # K1: notebook_cells read the cells run so far (IPython's In), bounded to the range asked for
    cells = [m["content"] for r in requests for m in r["messages"] if m["role"] == "tool"
             and str(m["content"]).startswith("2 of ")]
    assert cells and "In [1]:\nimport pandas as pd" in cells[0] and "In [3]" not in cells[0]
    # an approval was asked for python: denied headless, then allowed by policy
    decisions = "".join(texts(nb.cells[6]))
    assert "deny" in decisions and "allow" in decisions and "df_sales.shape" in decisions
    # the code ran beside the user's data, in the user's namespace
    assert "kernel has by_price: True 5000" in "".join(texts(nb.cells[5]))
    # K2: at a later call, the first large output is a typed placeholder naming what stays in the kernel
    sent = [m["content"] for r in requests for m in r["messages"] if m["role"] == "tool"]
    typed = [c for c in sent if c.startswith("[old tool output compacted:")]
    assert any("still in the kernel as by_price" in c for c in typed), [c[:120] for c in sent]
    assert all("facts" not in m for r in requests for m in r["messages"])  # facts are stored, never sent
    # S2: the stored transcript keeps the full outputs
    assert "last rows: ['149', '4999']" in "".join(texts(nb.cells[7]))  # every row of both tables
    # K3: the summary's kernel-state section names the variable the compacted history created
    compacted = "".join(texts(nb.cells[8])) + "".join(texts(nb.cells[8], "text/html"))
    assert "Kernel state" in compacted and "by_price" in compacted, compacted[-3000:]
