"""SPEC C7, N2: a build's input as a long read-only head plus its own short tail, without a copy of the head.

A fresh process resuming a long stored session must not read and decode every stored row to make its first
request: the store hands the transcript over as a lazy `Sequence` (its rows fetched by seq range where they are
read, `store.rows.StoredRows`), and the loop appends the turn's messages to it as a `Spliced` instead of copying
it into a list. The engine treats a `Spliced` like the list it otherwise gets: the session cache cuts it back and
extends it in place (`del s[k:]`, `s += more`, only past the head's part or by shrinking it), compares two of
them over the same head by their tails only, and reads its head from the end (the safe tail, the summary) item by
item. Iterating it reads the whole head (the everything-fits path sends it all anyway).

Pure: the head is any `Sequence` (the store's lazy rows, or a list in tests); this module does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Any


class Spliced(Sequence[Any]):
    """`head[:h] + tail`: the first `h` items of `head` (a sequence that may only grow: its first `h` items never
    change) followed by a list of this object's own."""

    __slots__ = ("_h", "_head", "_tail")

    def __init__(self, head: Sequence[Any], h: int | None = None, tail: Iterable[Any] = ()) -> None:
        self._head, self._h, self._tail = head, len(head) if h is None else h, list(tail)

    @property
    def head(self) -> Sequence[Any]:
        return self._head

    @property
    def h(self) -> int:
        """How many of the head's items this sequence starts with."""
        return self._h

    def __len__(self) -> int:
        return self._h + len(self._tail)

    def __getitem__(self, k: Any) -> Any:
        h = self._h
        if isinstance(k, slice):
            start, stop, step = k.indices(len(self))
            if step != 1:
                return list(self)[k]
            stop = max(start, stop)
            if start == 0 and stop > 0:  # a prefix: the same head, no read of it
                return Spliced(self._head, min(h, stop), self._tail[: max(0, stop - h)])
            return self._span(start, stop)
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self._head[k] if k < h else self._tail[k - h]

    def _span(self, start: int, stop: int) -> list[Any]:
        """Items start..stop-1 as a list (the head read only where the span covers it)."""
        h = self._h
        out = list(self._head[start:min(h, stop)]) if start < min(h, stop) else []
        out += self._tail[max(0, start - h):max(0, stop - h)]
        return out

    def __iter__(self) -> Iterator[Any]:
        return chain(islice(self._head, self._h), self._tail)

    def __reversed__(self) -> Iterator[Any]:  # item by item: the readers from the end stop early
        return chain(reversed(self._tail), map(self._head.__getitem__, range(self._h - 1, -1, -1)))

    def __delitem__(self, k: Any) -> None:
        if not isinstance(k, slice):
            raise TypeError("only a cut from a position to the end")
        start, stop, step = k.indices(len(self))
        if step != 1 or stop < len(self):
            raise TypeError("only a cut from a position to the end")
        if start < self._h:
            self._h = start
            self._tail.clear()
        else:
            del self._tail[start - self._h:]

    def __iadd__(self, more: Iterable[Any]) -> Spliced:
        self._tail += more
        return self

    def extend(self, more: Iterable[Any]) -> None:
        self._tail += more

    def copy(self) -> Spliced:
        return Spliced(self._head, self._h, self._tail)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Spliced) and other._head is self._head:  # the same head: compare past the shorter
            if len(other) != len(self):
                return False
            lo, n = min(self._h, other._h), len(self)
            return self._span(lo, n) == other._span(lo, n)
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Spliced(<{self._h} of {type(self._head).__name__}>, {self._tail!r})"


def with_appended(transcript: Sequence[Any], more: Iterable[Any]) -> Any:
    """`[*transcript, *more]`: a list for a list, a `Spliced` over any other sequence (not read)."""
    if transcript.__class__ is list:
        return [*transcript, *more]
    if isinstance(transcript, Spliced):
        out = transcript.copy()
        out += more
        return out
    return Spliced(transcript, len(transcript), more)


def copied(messages: Sequence[Any]) -> Any:
    """A copy the caller may extend: a list's copy, or a `Spliced` over the same head."""
    return messages.copy() if isinstance(messages, Spliced) else list(messages)
