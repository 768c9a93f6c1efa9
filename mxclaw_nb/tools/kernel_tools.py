"""SPEC K1: kernel-native tools -- ``python`` (code in the user's namespace) and ``kernel_variables``.

``python`` runs in the user's IPython namespace, so it cannot live in the OS sandbox (L5) by necessity;
it goes through the same approval policy as ``bash`` (``ask`` by default: a person sees the code).
Each result records structured facts in ``meta["facts"]`` (kind, type, shape, columns, variable names,
exception type/message/last user frame) so the context engine compacts by type (K2, K3) without
ever seeing a live object.
"""

from __future__ import annotations

import ast
import contextlib
import io
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator, MutableMapping
from functools import partial
from typing import Any

from mxclaw_nb.tools.base import ToolContext, ToolResult
from mxclaw_nb.tools.registry import Tool
from mxclaw_nb.tools.shell import decide

MAX_OUTPUT = 20_000
Namespace = MutableMapping[str, Any]


def describe(value: Any) -> dict[str, Any]:
    """Type facts of a value, without its contents (K1 manifest, K2 placeholder facts)."""
    facts: dict[str, Any] = {"type": type(value).__name__}
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
        facts["shape"] = list(shape)
    columns = getattr(value, "columns", None)
    if columns is not None and not callable(columns):
        with contextlib.suppress(Exception):
            facts["columns"] = [str(c) for c in list(columns)[:50]]
    dtype = getattr(value, "dtype", None)
    if dtype is not None and "columns" not in facts:
        facts["dtype"] = str(dtype)
    with contextlib.suppress(Exception):
        if not isinstance(value, (str, bytes)) and hasattr(value, "__len__"):
            facts["len"] = len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        facts["memory"] = nbytes
    else:
        with contextlib.suppress(Exception):
            mem = value.memory_usage(deep=False)
            facts["memory"] = int(mem.sum() if hasattr(mem, "sum") else mem)
    if type(value).__name__ == "Figure":
        facts["kind"] = "plot"
        with contextlib.suppress(Exception):  # K2: a plot compacts to a caption, here its axes' titles
            titles = [str(ax.get_title()) for ax in value.axes if ax.get_title()]
            if titles:
                facts["caption"] = "; ".join(titles)[:120]
    return facts


def _public(ns: Namespace) -> dict[str, Any]:
    return {k: v for k, v in ns.items() if not k.startswith("_") and k not in {"In", "Out", "exit", "quit",
            "get_ipython"} and not callable(v) and type(v).__name__ != "module"}


def kernel_variables(args: dict[str, Any], ctx: ToolContext, ns: Callable[[], Namespace]) -> ToolResult:
    """K1: a manifest of the user's namespace (name, type, shape/dtype/columns, len, memory; no values)."""
    wanted = str(args.get("filter") or "")
    rows = []
    for name, value in sorted(_public(ns()).items()):
        if wanted and wanted.lower() not in name.lower():
            continue
        facts = describe(value)
        rows.append(f"{name}: " + ", ".join(f"{k}={v}" for k, v in facts.items() if k != "kind"))
    text = "\n".join(rows) or "(no user variables)"
    return ToolResult(text[:MAX_OUTPUT], meta={"facts": {"kind": "manifest", "count": len(rows)}})


CELL_CHARS, OUT_CHARS, MAX_CELLS = 600, 300, 20


def _cell_range(spec: str, last: int) -> range:
    """`"3-7"` -> cells 3..7, `"5"` -> cell 5, `""` -> the last MAX_CELLS cells (1-based execution counts)."""
    spec = spec.strip()
    if not spec:
        return range(max(1, last - MAX_CELLS + 1), last + 1)
    low, _, high = spec.partition("-")
    try:
        a = int(low)
        b = int(high) if high.strip() else a
    except ValueError:
        raise ValueError(f"range must look like 3-7 or 5 (got {spec!r})") from None
    a, b = max(1, min(a, b)), min(last, max(a, b))
    return range(a, b + 1)


def notebook_cells(args: dict[str, Any], ctx: ToolContext, ns: Callable[[], Namespace]) -> ToolResult:
    """K1: the cells run so far in this kernel (IPython's `In`) and their results (`Out`), bounded and previewed."""
    space = ns()
    inputs = space.get("In")
    outputs = space.get("Out")
    if not isinstance(inputs, list) or len(inputs) < 2:
        return ToolResult("(no cells have run in this kernel yet)", meta={"facts": {"kind": "cells", "count": 0}})
    outputs = outputs if isinstance(outputs, dict) else {}
    try:
        wanted = _cell_range(str(args.get("range") or ""), len(inputs) - 1)
    except ValueError as exc:
        return ToolResult(f"Tool failed: {exc}", is_error=True)
    shown = list(wanted)[-MAX_CELLS:]
    parts = []
    for n in shown:
        source = str(inputs[n])
        clipped = source if len(source) <= CELL_CHARS else f"{source[:CELL_CHARS]}… ({len(source):,} characters)"
        parts.append(f"In [{n}]:\n{clipped}")
        if n in outputs:
            text = repr(outputs[n])
            parts.append(f"Out[{n}]: " + (text if len(text) <= OUT_CHARS else f"{text[:OUT_CHARS]}… "
                                          f"({len(text):,} characters; {type(outputs[n]).__name__})"))
    more = len(wanted) - len(shown)
    head = f"{len(shown)} of {len(inputs) - 1} cells" + (f" (the first {more} of the range left out)" if more else "")
    return ToolResult((head + "\n\n" + "\n".join(parts))[:MAX_OUTPUT],
                      meta={"facts": {"kind": "cells", "count": len(shown)}})


class PythonTimeout(Exception):
    """The agent's code ran past its time limit (the shell_timeout setting)."""

    limit = 0.0

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or f"the code ran longer than {self.limit:g} s (shell_timeout) and was stopped")


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise PythonTimeout in the code after `seconds` of real time.

    In the main thread (a classic kernel runs cells there) a SIGALRM timer, which also cuts a blocking call such
    as `time.sleep` short. In any other thread (ipykernel 7's subshells, a worker thread) a timer thread raises
    the exception in this thread asynchronously (`PyThreadState_SetAsyncExc`): Python code stops at its next
    bytecode; a blocking C call is stopped only when it returns.
    """
    expired = type("PythonTimeout", (PythonTimeout,), {"limit": seconds, "__module__": __name__})
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def alarm(signum: int, frame: Any) -> None:
            raise expired()

        previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    yield from _thread_time_limit(seconds, expired)


def _thread_time_limit(seconds: float, expired: type[PythonTimeout]) -> Iterator[None]:
    import ctypes

    target = ctypes.c_ulong(threading.get_ident())
    mu, state = threading.Lock(), {"active": True, "fired": False}

    def fire() -> None:
        with mu:
            if state["active"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(target, ctypes.py_object(expired))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with mu:
            state["active"] = False
            if state["fired"]:  # raised but maybe not yet delivered: never let it land in the caller's code
                ctypes.pythonapi.PyThreadState_SetAsyncExc(target, None)


def run_python(args: dict[str, Any], ctx: ToolContext, ns: Callable[[], Namespace]) -> ToolResult:
    """K1: run code in the user's namespace after approval; stdout/stderr, value facts, exception."""
    code = str(args.get("code") or "")
    allowed, by = decide(code, ctx, kind="python")  # L5: its own setting (python_approval)
    if not allowed:
        return ToolResult(f"Permission denied: python code not approved ({by})", is_error=True)
    space = ns()
    before = {k: id(v) for k, v in space.items()}
    out, err = io.StringIO(), io.StringIO()
    facts: dict[str, Any] = {"kind": "value"}
    value: Any = None
    try:
        tree = ast.parse(code, "<agent-python>")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _time_limit(ctx.shell_timeout):
            exec(compile(tree, "<agent-python>", "exec"), space)  # noqa: S102 - K1: the user's kernel, approved
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<agent-python>", "eval"), space)  # noqa: S307
    except KeyboardInterrupt:
        raise  # the user interrupted the kernel: the turn ends as interrupted (L4), not as a tool failure
    except BaseException as exc:  # noqa: BLE001 - reported to the model as a failure, never raised
        frames = [f for f in traceback.extract_tb(sys.exc_info()[2]) if f.filename == "<agent-python>"]
        frame = f"line {frames[-1].lineno}: {frames[-1].line or ''}".strip() if frames else ""
        facts = {"kind": "exception", "exc_type": type(exc).__name__, "exc_message": str(exc)[:200],
                 "frame": frame}
        text = (f"Tool failed: {type(exc).__name__}: {exc}\n{frame}\n"
                f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}")
        return ToolResult(text[:MAX_OUTPUT], is_error=True, meta={"facts": facts})
    created = sorted(k for k, v in space.items() if not k.startswith("_") and before.get(k) != id(v)
                     and not isinstance(v, types.ModuleType))  # an `import pandas as pd` is no result to name
    parts = []
    if out.getvalue():
        parts.append("stdout:\n" + out.getvalue())
    if err.getvalue():
        parts.append("stderr:\n" + err.getvalue())
    if value is not None:
        facts.update(describe(value))
        parts.append(f"value ({facts['type']}):\n{value!r}")
    elif created:
        facts.update(describe(space[created[-1]]))
    facts["variables"] = created
    return ToolResult(("\n".join(parts) or "(no output)")[:MAX_OUTPUT], meta={"facts": facts})


def kernel_tools(ns: Callable[[], Namespace]) -> list[Tool]:
    """The K1 tools bound to a namespace provider (the notebook layer passes the shell's ``user_ns``;
    the tool layer never imports IPython: tests/test_architecture.py)."""
    return [Tool(PYTHON_TOOL.name, PYTHON_TOOL.description, PYTHON_TOOL.parameters, partial(run_python, ns=ns)),
            Tool(KERNEL_VARIABLES_TOOL.name, KERNEL_VARIABLES_TOOL.description, KERNEL_VARIABLES_TOOL.parameters,
                 partial(kernel_variables, ns=ns)),
            Tool(NOTEBOOK_CELLS_TOOL.name, NOTEBOOK_CELLS_TOOL.description, NOTEBOOK_CELLS_TOOL.parameters,
                 partial(notebook_cells, ns=ns))]


PYTHON_TOOL = Tool("python", "Run Python code in the user's kernel namespace (approval required; not OS-sandboxed). "
                   "Returns stdout/stderr, the last expression's value and type facts, or the exception.",
                   {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
                   lambda a, c: run_python(a, c, dict))
KERNEL_VARIABLES_TOOL = Tool("kernel_variables", "List the user's kernel variables: name, type, shape, dtype, "
                             "columns, length, memory (no values). Optional substring filter.",
                             {"type": "object", "properties": {"filter": {"type": "string"}}},
                             lambda a, c: kernel_variables(a, c, dict))
NOTEBOOK_CELLS_TOOL = Tool("notebook_cells", "The cells run so far in this kernel and their results, previewed and "
                           "bounded (at most 20 cells). Optional range like '3-7' or '5'; default the last cells.",
                           {"type": "object", "properties": {"range": {"type": "string"}}},
                           lambda a, c: notebook_cells(a, c, dict))
