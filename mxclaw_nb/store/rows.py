"""SPEC C7, N2, S3: a session's stored transcript as a lazily read `Sequence` (what a fresh process resumes from).

`len` comes from one COUNT; an item is fetched where it is first read, with the rows around it (by seq range, in
chunks of `CHUNK`), decoded once and kept, so the first model call after a kernel restart reads only what the view
sends and what the summary needs, not every stored row. Rows read later (`extend`) are kept as they come. Only for
a session whose seqs are 0..n-1 (then position = seq); `Store.transcript_rows` says None otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import Any

from mxclaw_nb.context.rows import HeadTail

Message = dict[str, Any]
CHUNK = 512  # rows per read: one query's cost shared; the safe tail and what the summary reads from the end


class StoredRows(HeadTail):
    """The first `count` stored messages of a session (seq 0..count-1), read by `fetch(start, stop)` on demand,
    then the messages `extend`ed onto it. Only grows; items are the same dict objects on every read."""

    __slots__ = ("_ahead", "_fetch", "_got", "_loaded", "fetched", "users")

    def __init__(self, fetch: Callable[[int, int], list[Message]], count: int, users: int = 0) -> None:
        super().__init__(count)
        self._fetch = fetch
        self.users = users  # how many of the `count` stored messages are the user's (the turn number: one COUNT)
        self._got: list[Message | None] = [None] * count
        self.fetched = 0  # rows read so far (what a bench or test checks)
        self._loaded = 0  # positions filled (== count: every row is here, nothing is looked for)
        self._ahead = (0, CHUNK)  # (where the last forward read ended, how many rows the next one there reads)

    def _load(self, start: int, stop: int) -> None:
        """Read the rows of positions start..stop-1 not read yet (one query over the span)."""
        if self._loaded == self._h:
            return
        got = self._got
        while start < stop and got[start] is not None:
            start += 1
        while stop > start and got[stop - 1] is not None:
            stop -= 1
        if start >= stop:
            return
        rows = self._fetch(start, stop)
        if len(rows) != stop - start:
            raise RuntimeError(f"the store returned {len(rows)} messages for seq {start}..{stop - 1}")
        for k, row in enumerate(rows, start):
            if got[k] is None:
                got[k] = row
                self._loaded += 1
        self.fetched += len(rows)

    def _item(self, k: int) -> Message:
        row = self._got[k]
        if row is None:
            end, size = self._ahead
            if k == end:  # read in order (a plan of everything, without a saved one): larger reads, fewer queries
                a, size = k, min(size * 4, 64 * CHUNK)
            else:
                a, size = k - k % CHUNK, CHUNK
            stop = min(a + size, self._h)
            self._load(a, stop)
            self._ahead = (stop, size)
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
