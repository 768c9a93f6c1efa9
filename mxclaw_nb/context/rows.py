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


class HeadTail(Sequence[Any]):
    """A sequence of `_h` items made where read (`_item`, `_items`) followed by a list of its own (`_tail`): what the
    session cache does to its lists it supports too (read, cut back from a position to the end, extend). The base of
    `Spliced` and of the resumed plan's lazily made lists (`repair.SentForms`, `incremental._Roles`)."""

    __slots__ = ("_h", "_tail")

    def __init__(self, h: int, tail: Iterable[Any] = ()) -> None:
        self._h, self._tail = h, list(tail)

    def _item(self, k: int) -> Any:  # 0 <= k < self._h
        raise NotImplementedError

    def _items(self, start: int, stop: int) -> list[Any]:  # 0 <= start < stop <= self._h
        return list(map(self._item, range(start, stop)))

    def _cut(self, h: int) -> None:  # keep only the first h (< self._h) head items
        self._h = h

    def __len__(self) -> int:
        return self._h + len(self._tail)

    def _span(self, start: int, stop: int) -> list[Any]:
        """Items start..stop-1 as a list (the head read only where the span covers it)."""
        h = self._h
        out = self._items(start, min(h, stop)) if start < min(h, stop) else []
        out += self._tail[max(0, start - h):max(0, stop - h)]
        return out

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            start, stop, step = k.indices(len(self))
            return self._span(start, max(start, stop)) if step == 1 else [self[i] for i in range(start, stop, step)]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return self._item(k) if k < self._h else self._tail[k - self._h]

    def __iter__(self) -> Iterator[Any]:
        return chain(map(self._item, range(self._h)), self._tail)

    def __reversed__(self) -> Iterator[Any]:  # item by item: the readers from the end stop early
        return chain(reversed(self._tail), map(self._item, range(self._h - 1, -1, -1)))

    def __delitem__(self, k: Any) -> None:
        start, stop, step = k.indices(len(self)) if isinstance(k, slice) else (0, 0, 0)
        if step != 1 or stop < len(self):
            raise TypeError("only a cut from a position to the end")
        if start < self._h:
            self._cut(start)
            self._tail.clear()
        else:
            del self._tail[start - self._h:]

    def __iadd__(self, more: Iterable[Any]) -> HeadTail:
        self._tail += more
        return self

    def extend(self, more: Iterable[Any]) -> None:
        self._tail += more


class Spliced(HeadTail):
    """`head[:h] + tail`: the first `h` items of `head` (a sequence that may only grow: its first `h` items never
    change) followed by a list of this object's own."""

    __slots__ = ("_head",)

    def __init__(self, head: Sequence[Any], h: int | None = None, tail: Iterable[Any] = ()) -> None:
        super().__init__(len(head) if h is None else h, tail)
        self._head = head

    @property
    def head(self) -> Sequence[Any]:
        return self._head

    @property
    def h(self) -> int:
        """How many of the head's items this sequence starts with."""
        return self._h

    def _item(self, k: int) -> Any:
        return self._head[k]

    def _items(self, start: int, stop: int) -> list[Any]:
        return list(self._head[start:stop])

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice) and k.step in (None, 1):
            start, stop, _ = k.indices(len(self))
            if start == 0 and stop > 0:  # a prefix: the same head, no read of it
                return Spliced(self._head, min(self._h, stop), self._tail[: max(0, stop - self._h)])
        return super().__getitem__(k)

    def __iter__(self) -> Iterator[Any]:
        return chain(islice(self._head, self._h), self._tail)

    def copy(self) -> Spliced:
        return Spliced(self._head, self._h, self._tail)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Spliced) and other._head is self._head:  # the same head: compare past the shorter
            lo, n = min(self._h, other._h), len(self)
            return len(other) == n and self._span(lo, n) == other._span(lo, n)
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
        out.extend(more)
        return out
    return Spliced(transcript, len(transcript), more)


def copied(messages: Sequence[Any]) -> Any:
    """A copy the caller may extend: a list's copy, or a `Spliced` over the same head."""
    return messages.copy() if isinstance(messages, Spliced) else list(messages)
