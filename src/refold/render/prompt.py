"""One call's prompt as three shared parts (prefix, layout, tail), and the ``Rendered`` that lists it lazily.

The prefix and the layout are shared with the renderer's memo; only the tail (steps after the
boundary, the ledger view) is this call's own. Joining them costs O(prompt) per call, the largest
cost of a call that moves nothing, so it happens when ``Rendered.messages`` is first read: each
``Rendered`` then holds its own fresh list, as before, and a caller that never reads it (a
benchmark, a replay that only counts) does not pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from ..types import Message, Origin, Rendered, RenderStats
from .rope import Rope

T = TypeVar("T")


class Joined(Generic[T]):
    """``prefix + layout + tail``, indexed without being copied (the parts are not changed after)."""

    __slots__ = ("layout", "n", "nm", "prefix", "size", "tail")

    def __init__(self, prefix: list[T], layout: Rope[T], tail: list[T]) -> None:
        self.prefix, self.layout, self.tail = prefix, layout, tail
        self.n = len(prefix)
        self.nm = self.n + len(layout)
        self.size = self.nm + len(tail)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> T:
        if i < 0:
            i += self.size
        if i < self.n:
            return self.prefix[i]
        if i < self.nm:
            return self.layout[i - self.n]
        return self.tail[i - self.nm]

    def __iter__(self) -> Iterator[T]:
        yield from self.prefix
        yield from self.layout
        yield from self.tail

    def to_list(self) -> list[T]:
        return [*self.prefix, *self.layout, *self.tail]

    def common(self, other: Joined[T], i: int = 0) -> int:
        """The first index from ``i`` on where ``self`` and ``other`` differ (or the shorter one's
        length): shared prefix lists and layout chunks are skipped whole."""
        stop = min(self.size, other.size)
        n = self.n
        if n == other.n:
            if self.prefix is other.prefix:
                i = max(i, min(n, stop))
            if i < min(n, stop):
                i = _first_diff(self.prefix, other.prefix, i, min(n, stop))
                if i < min(n, stop):
                    return i
            m = min(self.nm, other.nm) - n
            if n <= i < n + m:
                j = self.layout.common(other.layout, i - n, m)
                if j < m:
                    return n + j
                i = n + m
            if self.nm == other.nm:  # the tails line up: compare them as lists
                nm = self.nm
                return nm + _first_diff(self.tail, other.tail, max(0, i - nm), stop - nm) if i < stop else i
        while i < stop:
            u, v = self[i], other[i]
            if u is not v and u != v:
                return i
            i += 1
        return i

    def since(self, i: int) -> list[T]:
        """Items i.. as a list (O(what follows i))."""
        if i < self.n:
            return [*self.prefix[i:], *self.layout, *self.tail]
        if i < self.nm:
            return [*self.layout.since(i - self.n), *self.tail]
        return self.tail[i - self.nm :]


def _first_diff(a: list[T], b: list[T], i: int, stop: int) -> int:
    """The first index in i..stop-1 where ``a`` and ``b`` differ (``stop`` if none). The slices
    compare in C (identity first, as ``is`` then ``==``): a call's tail is mostly the last one's."""
    if a[i:stop] == b[i:stop]:
        return stop
    while a[i] is b[i] or a[i] == b[i]:
        i += 1
    return i


StatsArgs = tuple[int, int, int, int, int, int, int, float, int]
"""``RenderStats``' fields in order (the stats are built from them on first read)."""
OriginParts = tuple[list[Origin], Rope[Origin], list[Origin]]
"""The origins of the prefix, the layout and the tail (joined on first read)."""


class LazyRendered(Rendered):
    """A ``Rendered`` whose lists are joined, and whose stats are built, on first read (then kept:
    each list is its own fresh one). A frozen dataclass costs a call per field to build."""

    __slots__ = ("_args", "_messages", "_origins", "_parts", "_stats")
    _parts: tuple[Joined[Message], OriginParts]
    _args: StatsArgs
    _messages: list[Message]  # unset until first read
    _origins: list[Origin]
    _stats: RenderStats

    def __init__(self, messages: Joined[Message], origins: OriginParts, stats: StatsArgs | RenderStats) -> None:  # noqa: D107
        object.__setattr__(self, "_parts", (messages, origins))
        object.__setattr__(self, "_args" if type(stats) is tuple else "_stats", stats)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Rendered):
            return NotImplemented
        return (self.messages, self.origins, self.stats) == (other.messages, other.origins, other.stats)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[Rendered], tuple[list[Message], list[Origin], RenderStats]]:
        return Rendered, (self.messages, self.origins, self.stats)  # a copy or a pickle is a plain Rendered

    @property
    def messages(self) -> list[Message]:
        try:
            return self._messages
        except AttributeError:
            listed = self._parts[0].to_list()
            object.__setattr__(self, "_messages", listed)
            return listed

    @property
    def stats(self) -> RenderStats:
        try:
            return self._stats
        except AttributeError:
            built = RenderStats(*self._args)
            object.__setattr__(self, "_stats", built)
            return built

    @property
    def origins(self) -> list[Origin]:
        try:
            return self._origins
        except AttributeError:
            prefix, layout, tail = self._parts[1]
            listed = [*prefix, *layout, *tail]
            object.__setattr__(self, "_origins", listed)
            return listed
