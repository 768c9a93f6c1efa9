"""SPEC C7, N2: the stored transcript read lazily (`store.rows.StoredRows`, a real DuckDB file) and a build's input
as that head plus its own messages (`context.rows.Spliced`): each behaves as the list it stands for, and a resumed
first call reads only a few chunks of a long session's rows."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mxclaw_nb.context.rows import Spliced, copied, with_appended
from mxclaw_nb.store.rows import CHUNK, HEAD, TAIL
from mxclaw_nb.store.writer import Store

_ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(100, 120), max_size=4)),
    st.tuples(st.just("cut"), st.integers(0, 40)),
    st.tuples(st.just("slice"), st.tuples(st.integers(-45, 45), st.integers(-45, 45), st.sampled_from([1, 2, -1]))),
    st.tuples(st.just("index"), st.integers(-45, 45)),
    st.tuples(st.just("copy"), st.none()),
), max_size=25)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 99), max_size=30), st.integers(0, 30), st.lists(st.integers(0, 9), max_size=5), _ops)
def test_c7_property_spliced_behaves_as_the_list_it_stands_for(head, h, tail, ops):
    h = min(h, len(head))
    growing = list(head)  # a head that grows later (its first h items stay)
    s = Spliced(growing, h, tail)
    model = [*head[:h], *tail]
    for op, arg in ops:
        growing.append(7)
        if op == "add":
            s += arg
            model += arg
        elif op == "cut" and arg <= len(model):
            del s[arg:]
            del model[arg:]
        elif op == "slice":
            got = s[slice(*arg)]
            assert list(got) == model[slice(*arg)]
        elif op == "index":
            if -len(model) <= arg < len(model):
                assert s[arg] == model[arg]
        elif op == "copy":
            other = copied(s)
            assert other == s and other is not s
            other += [1]
            assert list(s) == model
        assert len(s) == len(model) and list(s) == model and list(reversed(s)) == model[::-1]
        assert s == Spliced(growing, 0, model)  # the same head: compared past it
    assert with_appended(s, [5]) == [*model, 5] and with_appended(model, [5]) == [*model, 5]


def _store(tmp_path: Path, n: int) -> Store:
    store = Store(str(tmp_path / "rows.duckdb"))
    store.create_session(session_id="s", source="test")
    store.append_messages("s", [{"role": "user" if k % 3 == 0 else "assistant", "content": f"m{k}"}
                                for k in range(n)], turn=0)
    return store


def test_c7_stored_rows_read_only_the_chunks_that_are_used(tmp_path):
    n = 5 * CHUNK + 7
    store = _store(tmp_path, n)
    rows = store.transcript_rows("s")
    assert rows is not None and len(rows) == n and rows.fetched == 0 and rows.users == len(range(0, n, 3))
    assert rows[-1] == {"role": "assistant" if (n - 1) % 3 else "user", "content": f"m{n - 1}"}
    # the last rows (what a compacting view reads from the end) and the first few (a saved state's boundary rows)
    assert rows.fetched == TAIL + HEAD
    assert [m["content"] for m in rows[n - 3:]] == [f"m{k}" for k in range(n - 3, n)]
    assert [rows[k]["content"] for k in range(HEAD)] == [f"m{k}" for k in range(HEAD)] and rows.fetched == TAIL + HEAD
    assert rows[n - TAIL - 1]["content"] == f"m{n - TAIL - 1}"  # reading on from the end: a larger read backwards
    assert rows.fetched == TAIL + HEAD + CHUNK
    assert rows[0] is rows[0]  # decoded once, the same object on every read
    back = list(reversed(rows))
    assert [m["content"] for m in back] == [f"m{k}" for k in range(n - 1, -1, -1)]
    assert list(rows) == store.load_transcript("s") and rows.fetched == n
    other = store.transcript_rows("s")
    assert other is not None and other[CHUNK]["content"] == f"m{CHUNK}" and other.fetched == 1  # an isolated row: alone
    rows.extend([{"role": "user", "content": "later"}])
    assert len(rows) == n + 1 and rows[-1]["content"] == "later" and rows[n:] == [{"role": "user", "content": "later"}]
    store.close()


def test_c7_a_session_whose_seqs_are_not_positions_is_read_eagerly(tmp_path):
    store = _store(tmp_path, 5)
    store.append_message("s", {"role": "user", "content": "x"}, turn=1)
    assert store.transcript_rows("s") is not None
    assert store.transcript_rows("nope") is None  # no rows: the caller reads (and seeds) the usual way
    con = store._lease  # noqa: SLF001 - make a gap in the seqs as an import from elsewhere might
    with con.connection("test") as c:
        c.execute("DELETE FROM messages WHERE session_id = 's' AND seq = 2")
    assert store.transcript_rows("s") is None
    store.close()


def test_c7_a_spliced_input_is_compared_by_its_tail_only():
    head: list[Any] = [{"role": "user", "content": str(k)} for k in range(10)]
    a = with_appended(Spliced(head, 8), [{"role": "user", "content": "x"}])
    b = Spliced(head, 6, copy.deepcopy([*head[6:8], {"role": "user", "content": "x"}]))
    assert a == b and a != Spliced(head, 9)
    assert a[:4] == head[:4] and isinstance(a[:4], Spliced) and a[3:5] == head[3:5]


def test_c7_stored_rows_read_in_order_take_larger_reads(tmp_path):
    n = 40 * CHUNK
    store = _store(tmp_path, n)
    rows = store.transcript_rows("s")
    assert rows is not None
    reads: list[tuple[int, int]] = []
    fetch = rows._fetch
    rows._fetch = lambda a, b: reads.append((a, b)) or fetch(a, b)
    assert [rows[k]["content"] for k in range(n)] == [f"m{k}" for k in range(n)]  # a plan of everything, in order
    assert len(reads) <= 8 and reads[0][0] == 0 and reads[-1][1] == n  # not one per 512 rows (40 queries)
    assert all(b == c for (_, b), (c, _) in zip(reads, reads[1:], strict=False))  # each read once
    store.close()
