"""SPEC K2/K3 (extending C5/C6): typed placeholders and the Kernel state summary section."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mxclaw_nb.context.micro import placeholder_for, type_facts
from mxclaw_nb.context.summary import build_structured_summary

DF_FACTS = {"kind": "value", "type": "DataFrame", "shape": [10000, 12],
            "columns": ["id", "ts", "price", "qty"], "variables": ["df_sales"]}


def _tool(content: str, facts: dict | None = None, **extra: object) -> dict:
    msg: dict = {"role": "tool", "tool_call_id": "c1", "content": content, **extra}
    if facts is not None:
        msg["facts"] = facts
    return msg


def test_dataframe_placeholder_keeps_shape_columns_and_variable() -> None:
    text = placeholder_for(_tool("x" * 48210, DF_FACTS))
    assert text == ("[old tool output compacted: 48,210 characters; DataFrame 10,000x12 (id, ts, price, ...); "
                    "still in the kernel as df_sales]")


def test_plot_placeholder_is_a_caption() -> None:
    text = placeholder_for(_tool("y" * 5000, {"kind": "plot", "type": "Figure", "caption": "price over time"}))
    assert text is not None and "plot: price over time" in text


def test_failures_never_compacted_even_typed() -> None:
    tb = {"kind": "exception", "exc_type": "KeyError", "exc_message": "'prce'", "frame": "cell 3, line 2"}
    assert placeholder_for(_tool("Traceback ...\n" + "z" * 5000, tb, is_error=True)) is None
    assert placeholder_for(_tool("Tool failed: " + "z" * 5000, DF_FACTS)) is None


def test_untyped_result_keeps_plain_c5_placeholder() -> None:
    assert placeholder_for(_tool("a" * 500)) == "[old tool output compacted: 500 characters]"


def test_typed_placeholder_not_recompacted() -> None:
    text = placeholder_for(_tool("x" * 48210, DF_FACTS))
    assert text is not None
    assert placeholder_for(_tool(text, DF_FACTS)) is None


def test_kernel_state_section_names_the_variable() -> None:
    old = [{"role": "user", "content": "load the sales"}, _tool("x" * 3000, DF_FACTS),
           {"role": "assistant", "content": "loaded"}]
    summary = build_structured_summary(old)
    assert "Kernel state:\n- df_sales: DataFrame 10,000x12 (id, ts, price, ...)" in summary
    assert summary == build_structured_summary(list(old))


def test_kernel_state_none_recorded_when_no_variables() -> None:
    old = [_tool("x" * 3000, {"kind": "manifest", "count": 3}), {"role": "assistant", "content": "ok"}]
    assert build_structured_summary(old).endswith("Kernel state:\n- None recorded")


def test_plain_transcripts_summary_unchanged_by_k3() -> None:
    assert "Kernel state" not in build_structured_summary([{"role": "user", "content": "hi"}])


_names = st.text("abcdefghij_", min_size=1, max_size=8)
_facts = st.fixed_dictionaries({}, optional={
    "kind": st.sampled_from(["value", "plot", "manifest", "cells", "stream"]),
    "type": st.sampled_from(["DataFrame", "ndarray", "Series", "int", "Figure"]),
    "shape": st.lists(st.integers(0, 10**6), max_size=3),
    "columns": st.lists(_names, max_size=6), "variables": st.lists(_names, max_size=6),
    "caption": st.text(max_size=50), "count": st.integers(0, 100)})


@given(content=st.text(max_size=3000), facts=_facts, error=st.booleans())
def test_property_deterministic_shorter_never_on_failures(content: str, facts: dict, error: bool) -> None:
    msg = _tool(content, facts, is_error=error)
    first = placeholder_for(msg)
    assert first == placeholder_for(dict(msg))  # deterministic
    if error:
        assert first is None  # C5: failures are never compacted
    if first is not None:
        assert len(first) < len(content)
        assert first.startswith("[old tool output compacted: ")
        assert placeholder_for(_tool(first, facts)) is None
    assert type_facts(facts) == type_facts(dict(facts))


def test_k1_layers_tell_kernel_outputs_from_tool_results() -> None:
    """The gauge's layers (engine side): results of K1 tools, by their call's name or their recorded facts."""
    from mxclaw_nb.context import LAYERS, layer_tokens, message_layer
    from mxclaw_nb.context.layers import KERNEL_TOOLS
    from mxclaw_nb.tools.kernel_tools import kernel_tools

    assert {t.name for t in kernel_tools(dict)} == KERNEL_TOOLS
    calls = [{"id": f"c{n}", "type": "function", "function": {"name": n, "arguments": "{}"}}
             for n in ("read_file", "python", "notebook_cells")]
    msgs = [{"role": "assistant", "content": "", "tool_calls": calls},
            _tool("a" * 40, tool_call_id="cread_file"), _tool("b" * 80, tool_call_id="cpython"),
            _tool("c" * 120, tool_call_id="cnotebook_cells")]
    totals = layer_tokens(msgs, lambda m: len(str(m.get("content"))))
    assert list(totals) == list(LAYERS) and totals["tool results"] == 40 and totals["kernel outputs"] == 200
    assert message_layer(_tool("x", DF_FACTS)) == "kernel outputs"  # a stored result: its facts say so
    assert message_layer(_tool("x")) == "tool results"
