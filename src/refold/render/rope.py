"""A persistent sequence of chunks: a layout copies runs of the previous one by sharing chunks.

A boundary move changes a few steps out of thousands. Copying the previous layout's lists costs
O(history) per move (and as much again to free them); a ``Rope`` built from another shares every
chunk that lies wholly inside a copied run, so building one costs O(changed + chunks). Numeric
ropes keep each chunk's sum, so a prefix sum (characters before a message, messages before a
step) is O(chunk + chunks) too.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar, cast

T = TypeVar("T")
CHUNK = 128  # items per chunk a builder aims at; a copied piece shorter than half of it is merged


class Rope(Generic[T]):
    """An immutable sequence of items held in shared chunks."""

    __slots__ = ("chunk_sums", "chunks", "ends", "n", "sums", "total")

    def __init__(self, chunks: list[tuple[T, ...]], sums: list[int] | None) -> None:
        self.chunks = chunks
        self.ends = list(itertools.accumulate(map(len, chunks)))  # items up to and with chunk i
        self.chunk_sums = sums  # each chunk's sum (a numeric rope)
        self.sums = list(itertools.accumulate(sums)) if sums is not None else None  # cumulative
        self.total = self.sums[-1] if self.sums else 0
        self.n = self.ends[-1] if self.ends else 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> T:
        if not 0 <= i < self.n:
            raise IndexError(i)
        c = bisect.bisect_right(self.ends, i)
        return self.chunks[c][i - (self.ends[c - 1] if c else 0)]

    def __iter__(self) -> Iterator[T]:
        return itertools.chain.from_iterable(self.chunks)

    def to_list(self) -> list[T]:
        return list(itertools.chain.from_iterable(self.chunks))

    def since(self, i: int) -> list[T]:
        """Items i.. as a list."""
        if i <= 0:
            return self.to_list()
        if i >= len(self):
            return []
        c = bisect.bisect_right(self.ends, i)
        head = self.chunks[c][i - (self.ends[c - 1] if c else 0) :]
        return [*head, *itertools.chain.from_iterable(self.chunks[c + 1 :])]

    def common(self, other: Rope[T], i: int, stop: int) -> int:
        """The first index in i..stop-1 where the items of ``self`` and ``other`` differ (``stop``
        if none); shared chunks are skipped whole, the rest compared a chunk's slice at a time."""
        while i < stop:
            ca, cb = bisect.bisect_right(self.ends, i), bisect.bisect_right(other.ends, i)
            xa, xb = i - (self.ends[ca - 1] if ca else 0), i - (other.ends[cb - 1] if cb else 0)
            a, b = self.chunks[ca], other.chunks[cb]
            n = min(len(a) - xa, len(b) - xb, stop - i)
            if (a is b and xa == xb) or a[xa : xa + n] == b[xb : xb + n]:  # tuples compare by identity first
                i += n
                continue
            for k in range(n):
                u, v = a[xa + k], b[xb + k]
                if u is not v and u != v:
                    return i + k
        return stop

    def sum_to(self, i: int) -> int:
        """The sum of the first ``i`` items (a numeric rope)."""
        assert self.sums is not None
        if i <= 0:
            return 0
        if i >= len(self):
            return self.total
        c = bisect.bisect_right(self.ends, i)
        before = self.ends[c - 1] if c else 0
        return (self.sums[c - 1] if c else 0) + sum(cast("tuple[int, ...]", self.chunks[c][: i - before]))


class Builder(Generic[T]):
    """Builds a ``Rope`` by appending items and copying runs of other ropes."""

    __slots__ = ("chunks", "numeric", "pending", "sums")

    def __init__(self, numeric: bool = False) -> None:
        self.chunks: list[tuple[T, ...]] = []
        self.sums: list[int] | None = [] if numeric else None
        self.numeric = numeric
        self.pending: list[T] = []

    def append(self, item: T) -> None:
        self.pending.append(item)
        if len(self.pending) >= CHUNK:
            self._flush()

    def extend(self, items: list[T]) -> None:
        self.pending += items
        if len(self.pending) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        p = self.pending
        for a in range(0, len(p), CHUNK):
            self._push(tuple(p[a : a + CHUNK]), None)
        self.pending = []

    def _push(self, chunk: tuple[T, ...], total: int | None) -> None:
        if self.sums is not None and total is None:
            total = sum(cast("tuple[int, ...]", chunk))
        if self.chunks and len(self.chunks[-1]) + len(chunk) <= CHUNK and (len(chunk) < CHUNK // 2 or len(self.chunks[-1]) < CHUNK // 2):
            chunk = self.chunks.pop() + chunk  # small pieces merge: the chunk count stays ~ n / CHUNK
            if self.sums is not None:
                assert total is not None
                total += self.sums.pop()
        self.chunks.append(chunk)
        if self.sums is not None:
            assert total is not None
            self.sums.append(total)

    def copy(self, rope: Rope[T], a: int, b: int) -> None:
        """Append items a..b-1 of ``rope``; chunks wholly inside are shared, not copied."""
        if a >= b:
            return
        ends = rope.ends
        c = bisect.bisect_right(ends, a)
        start = ends[c - 1] if c else 0
        if a > start or b < ends[c]:  # the first chunk in part
            piece = rope.chunks[c][a - start : b - start]
            self.pending += piece
            if len(self.pending) >= CHUNK:
                self._flush()
            a = start + len(rope.chunks[c]) if b >= ends[c] else b
            c += 1
        if a >= b:
            return
        last = bisect.bisect_right(ends, b) - 1  # chunks c..last lie wholly inside
        if last >= c:
            self._flush()
            self._push(rope.chunks[c], None if rope.chunk_sums is None else rope.chunk_sums[c])  # may merge
            self.chunks += rope.chunks[c + 1 : last + 1]
            if self.sums is not None:
                assert rope.chunk_sums is not None
                self.sums += rope.chunk_sums[c + 1 : last + 1]
            a = ends[last]
            c = last + 1
        if a < b:  # the last chunk in part
            start = ends[c - 1] if c else 0
            self.pending += rope.chunks[c][a - start : b - start]
            if len(self.pending) >= CHUNK:
                self._flush()

    def build(self) -> Rope[T]:
        self._flush()
        return Rope(self.chunks, self.sums)


_EMPTY: Rope[object] = Rope([], None)
_EMPTY_NUMERIC: Rope[object] = Rope([], [])


def empty(numeric: bool = False) -> Rope[T]:
    """The empty rope (one shared value: a rope is never changed)."""
    return cast("Rope[T]", _EMPTY_NUMERIC if numeric else _EMPTY)
