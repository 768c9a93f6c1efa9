"""SPEC C7, N2, S3: a session's stored transcript as a lazily read `Sequence` (what a fresh process resumes from).

`len` comes from one COUNT; an item is fetched where it is first read (by seq range), decoded once and kept, so the
first model call after a kernel restart reads only what the view sends and what the summary needs, not every stored
row. How much one read takes follows how the rows are read: the last row brings the last `TAIL` rows with it (the
safe tail and the summary read from the end) and the first `HEAD` (the boundary rows a saved engine state is checked
against: the first message, the first one after the system prompts), in one query; any other row is read alone; a
row right after (before) the last read continues it forward (backward) with `GROWTH` times as many rows (a plan of
everything reads forward from 0: a few queries, not one per chunk). Rows read later (`extend`) are kept as they
come. Only for a session whose seqs are 0..n-1 (then position = seq); `Store.transcript_rows` says None otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any

from mxclaw_nb.context.rows import HeadTail

Message = dict[str, Any]
HEAD = 8  # rows read from the start with the last rows, in the same query
TAIL = 128  # rows read with the last one: a compacting view's safe tail and what its summary reads, as a rule
GROWTH = 4  # a read continuing the last one reads this many times its rows
MAX_READ = 32_768  # rows per read at most (a plan of everything: one query's cost shared, memory bounded)
CHUNK = TAIL * GROWTH  # what the first read continuing the tail backwards reads


class StoredRows(HeadTail):
    """The first `count` stored messages of a session (seq 0..count-1), read by `fetch(start, stop, head=0)` on
    demand (the rows of seqs start..stop-1, after those of seqs 0..head-1), then the messages `extend`ed onto it.
    Only grows; items are the same dict objects on every read."""

    __slots__ = ("_ahead", "_behind", "_fetch", "_got", "_loaded", "fetched", "users")

    def __init__(self, fetch: Callable[..., list[Message]], count: int, users: int = 0) -> None:
        super().__init__(count)
        self._fetch = fetch
        self.users = users  # how many of the `count` stored messages are the user's (the turn number: one COUNT)
        self._got: list[Message | None] = [None] * count
        self.fetched = 0  # rows read so far (what a bench or test checks)
        self._loaded = 0  # positions filled (== count: every row is here, nothing is looked for)
        self._ahead = (-1, 0)  # (where the last forward read ended, how many rows it read)
        self._behind = (-1, 0)  # (where the last backward read started, how many rows it read)

    def _load(self, start: int, stop: int, head: int = 0) -> None:
        """Read the rows of positions start..stop-1 not read yet (one query over the span), and when `head` those of
        positions 0..head-1 in the same query (head <= start)."""
        if self._loaded == self._h:
            return
        got = self._got
        while start < stop and got[start] is not None:
            start += 1
        while stop > start and got[stop - 1] is not None:
            stop -= 1
        while head and got[head - 1] is not None:
            head -= 1
        if start >= stop:
            return
        rows = self._fetch(start, stop, head) if head else self._fetch(start, stop)
        if len(rows) != stop - start + head:
            raise RuntimeError(f"the store returned {len(rows)} messages for seq {start}..{stop - 1}"
                               + (f" and 0..{head - 1}" if head else ""))
        for k, row in zip(chain(range(head), range(start, stop)), rows, strict=True):
            if got[k] is None:
                got[k] = row
                self._loaded += 1
        self.fetched += len(rows)

    def _item(self, k: int) -> Message:
        row = self._got[k]
        if row is None:
            h = self._h
            end, ahead = self._ahead
            start, behind = self._behind
            if k == end:  # continues the last forward read (a plan of everything, in order)
                a, b = k, min(k + min(ahead * GROWTH, MAX_READ), h)
                self._ahead = (b, b - a)
            elif k + 1 == start:  # continues the last backward read (the tail, read from the end)
                a, b = max(0, k + 1 - min(behind * GROWTH, MAX_READ)), k + 1
                self._behind = (a, b - a)
            elif k == h - 1:  # the last row: the rows before it are read next, as a rule (and the first few)
                a, b = max(0, h - TAIL), h
                self._behind = (a, b - a)
                if a > HEAD:
                    self._load(a, b, HEAD)
                    self._ahead = (HEAD, HEAD)
            else:  # an isolated row (a boundary row a saved state is checked against); a run forward may follow
                a, b = k, k + 1
                self._ahead = (b, 1)
            self._load(a, b)
            row = self._got[k]
        assert row is not None
        return row

    def _items(self, start: int, stop: int) -> list[Message]:
        self._load(start, stop)
        return self._got[start:stop]  # type: ignore[return-value]

    def _cut(self, h: int) -> None:
        raise TypeError("stored rows are never removed (S1)")

    def __iter__(self) -> Iterator[Message]:  # the whole transcript: one read of what is missing
        self._load(0, self._h)
        return chain(self._got, self._tail)

    def __eq__(self, other: object) -> bool:  # as the list it stands for (reads every row)
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StoredRows({len(self)} messages, {self.fetched} of {self._h} read)"
