"""The stored JSON columns decode to exactly what `json.loads` gives (S2), through the faster orjson path (N2).

A resumed session decodes every stored row once; the codec parses with orjson where it agrees with
`json.loads` and falls back to it elsewhere. These properties hold the two to the same values (by `repr`, so
NaN, -0.0, int-vs-float and key order count) for any JSON the store can hold.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.store.codec import loads, message_to_row, row_to_message

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
STORABLE = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
            | st.text())  # the store refuses NaN and infinities (allow_nan=False): a clear ValueError
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(value=VALUES, ascii_only=st.booleans())
def test_s2_loads_equals_json_loads(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert repr(loads(text)) == repr(json.loads(text))


def test_s2_loads_on_texts_orjson_reads_differently() -> None:
    for text in ("NaN", "[Infinity, -Infinity]", "123456789012345678901234567890", "-98765432109876543210",
                 '"\\ud800"', '"\ud800x"', "1e400", '{"a": 1, "a": 2}', "-0", "-0.0", "0.1",
                 "18446744073709551615", "9223372036854775807", '"\\u0000"', "[1.0, 1, 1e2]"):
        assert repr(loads(text)) == repr(json.loads(text)), text


@settings(max_examples=200, deadline=None)
@given(args=st.text(), content=st.text() | st.none(), extra=st.dictionaries(st.sampled_from(["x_meta", "weight"]),
                                                                             STORABLE, max_size=2))
def test_s2_a_stored_message_decodes_to_itself(args: str, content: str | None, extra: dict[str, Any]) -> None:
    message = {"role": "assistant", "content": content,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}],
               **extra}
    assert repr(row_to_message(message_to_row(message))) == repr(message)
