"""SPEC K1 (with K2): the kernel tools on a real IPython shell's namespace; approval policy (L3)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mxclaw_nb.context.micro import placeholder_for
from mxclaw_nb.tools.base import ToolContext
from mxclaw_nb.tools.kernel_tools import kernel_variables, run_python


def _ctx(tmp_path: Path, approval: str = "ask", answer: bool | None = True) -> tuple[ToolContext, list[str]]:
    asked: list[str] = []

    def approver(code: str) -> bool | None:
        asked.append(code)
        return answer

    return ToolContext(workspace=tmp_path, session_id="s", approval=approval, approver=approver), asked


def test_python_reads_user_dataframe_after_approval(tmp_path: Path) -> None:
    ns = {"df_sales": pd.DataFrame({"id": range(5000), "price": [1.0] * 5000})}
    ctx, asked = _ctx(tmp_path)
    res = run_python({"code": "big = df_sales.assign(x=1)\nprint(big.to_string())\nbig"}, ctx, lambda: ns)
    assert asked and "df_sales" in asked[0]
    assert not res.is_error and "big" in ns
    facts = res.meta["facts"]
    assert facts["type"] == "DataFrame" and facts["shape"] == [5000, 3] and facts["variables"] == ["big"]
    msg = {"role": "tool", "tool_call_id": "c", "content": res.content, "facts": facts}
    text = placeholder_for(msg)
    assert text is not None and "DataFrame 5,000x3 (id, price, x); still in the kernel as big" in text


def test_python_denied_is_failure(tmp_path: Path) -> None:
    ctx, _ = _ctx(tmp_path, answer=False)
    res = run_python({"code": "1"}, ctx, lambda: {})
    assert res.is_error and res.content.startswith("Permission denied")


def test_python_exception_keeps_type_message_frame(tmp_path: Path) -> None:
    ctx, _ = _ctx(tmp_path, approval="allow")
    res = run_python({"code": "x = 1\ny = {}['prce']"}, ctx, lambda: {})
    assert res.is_error and res.meta["facts"]["exc_type"] == "KeyError"
    assert "line 2" in res.meta["facts"]["frame"]


def test_kernel_variables_manifest_has_no_values(tmp_path: Path) -> None:
    ns = {"df": pd.DataFrame({"secret_col": [123456789]}), "n": 42, "_hidden": 1}
    ctx, _ = _ctx(tmp_path)
    res = kernel_variables({}, ctx, lambda: ns)
    assert "df: type=DataFrame, shape=[1, 1]" in res.content and "secret_col" in res.content
    assert "123456789" not in res.content and "_hidden" not in res.content


def test_k1_notebook_cells_previews_inputs_and_results_bounded(tmp_path: Path) -> None:
    from mxclaw_nb.tools.kernel_tools import MAX_CELLS, notebook_cells

    ctx, _ = _ctx(tmp_path)
    ns = {"In": ["", "import pandas as pd", "df = pd.DataFrame({'a': range(3)})", "df", "x = 'y' * 5000\nx"],
          "Out": {3: pd.DataFrame({"a": range(3)}), 4: "y" * 5000}}
    res = notebook_cells({}, ctx, lambda: ns)
    assert not res.is_error and res.content.startswith("4 of 4 cells")
    assert "In [2]:\ndf = pd.DataFrame" in res.content and "Out[3]:" in res.content
    assert "(5,002 characters; str)" in res.content and len(res.content) < 3_000  # the long result is previewed
    assert res.meta["facts"] == {"kind": "cells", "count": 4}
    only = notebook_cells({"range": "2-3"}, ctx, lambda: ns)
    assert "In [1]" not in only.content and "In [2]" in only.content and "In [4]" not in only.content
    assert notebook_cells({"range": "x"}, ctx, lambda: ns).is_error
    many = {"In": [""] + [f"c{i}" for i in range(1, 51)], "Out": {}}
    assert notebook_cells({}, ctx, lambda: many).content.startswith(f"{MAX_CELLS} of 50 cells")
    assert notebook_cells({}, ctx, lambda: {}).content.startswith("(no cells")
    assert placeholder_for({"role": "tool", "content": "z" * 400, "facts": res.meta["facts"]}) == \
        "[old tool output compacted: 400 characters; 4 cells]"


def test_k1_python_stops_at_its_time_limit_and_lets_an_interrupt_through(tmp_path: Path) -> None:
    import pytest

    ctx, _ = _ctx(tmp_path, approval="allow")
    ctx.shell_timeout = 0.3
    res = run_python({"code": "import time\ntime.sleep(5)"}, ctx, lambda: {})
    assert res.is_error and "longer than 0.3 s (shell_timeout)" in res.content
    assert res.meta["facts"]["exc_type"] == "PythonTimeout"
    assert not run_python({"code": "1 + 1"}, ctx, lambda: {}).is_error  # the timer was cancelled
    with pytest.raises(KeyboardInterrupt):  # an interrupt of the kernel ends the turn, not just the tool
        run_python({"code": "raise KeyboardInterrupt"}, ctx, lambda: {})


def test_k1_python_time_limit_holds_in_a_worker_thread(tmp_path: Path) -> None:
    # ipykernel 7 can run cells in subshell threads, where no SIGALRM reaches the code: the limit must still hold.
    import threading
    import time

    ctx, _ = _ctx(tmp_path, approval="allow")
    ctx.shell_timeout = 0.3
    results: dict[str, object] = {}

    def work() -> None:
        started = time.monotonic()
        results["busy"] = run_python({"code": "n = 0\nwhile True:\n    n += 1"}, ctx, lambda: {})
        results["busy_s"] = time.monotonic() - started
        results["sleepy"] = run_python({"code": "import time\nfor _ in range(100):\n    time.sleep(0.05)"}, ctx,
                                       lambda: {})
        quick = [run_python({"code": "sum(range(1000))"}, ctx, lambda: {}) for _ in range(20)]
        time.sleep(0.6)  # past the quick calls' limits: a cancelled timer must not fire into this thread later
        results["quick"] = quick
        results["after"] = "reached"

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    busy, sleepy = results["busy"], results["sleepy"]
    assert busy.is_error and "longer than 0.3 s (shell_timeout)" in busy.content  # type: ignore[attr-defined]
    assert busy.meta["facts"]["exc_type"] == "PythonTimeout"  # type: ignore[attr-defined]
    assert results["busy_s"] < 3.0
    assert sleepy.is_error and "shell_timeout" in sleepy.content  # type: ignore[attr-defined]
    assert all(not r.is_error for r in results["quick"])  # type: ignore[attr-defined]
    assert results["after"] == "reached"


def test_l5_python_has_its_own_approval_setting(tmp_path: Path) -> None:
    """`approval` covers shell commands only: with approval=allow python code is still asked for; only
    python_approval=allow runs it unprompted, and python_approval=deny refuses it whatever `approval` says."""
    seen: list[tuple[str, dict]] = []

    def ctx(approval: str, python_approval: str, answer: bool | None) -> tuple[ToolContext, list[str]]:
        asked: list[str] = []

        def approver(code: str) -> bool | None:
            asked.append(code)
            return answer

        return ToolContext(workspace=tmp_path, session_id="s", approval=approval, python_approval=python_approval,
                           approver=approver, on_event=lambda k, p: seen.append((k, p))), asked

    ns: dict = {}
    c, asked = ctx("allow", "ask", None)  # nobody answers: denied, though shell commands would run
    res = run_python({"code": "x = 1"}, c, lambda: ns)
    assert asked == ["x = 1"] and res.is_error and "x" not in ns
    assert ("approval.pending", {"command": "x = 1", "kind": "python"}) in seen
    assert seen[-1] == ("approval.decided", {"command": "x = 1", "decision": "deny", "by": "nobody"})
    c, asked = ctx("deny", "allow", None)
    assert not run_python({"code": "x = 2"}, c, lambda: ns).is_error and ns["x"] == 2 and asked == []
    c, asked = ctx("allow", "deny", True)
    assert run_python({"code": "x = 3"}, c, lambda: ns).is_error and ns["x"] == 2 and asked == []
    with pytest.raises(ValueError, match="python_approval must be one of allow, ask, deny"):
        ToolContext(workspace=tmp_path, session_id="s", python_approval="sometimes")
