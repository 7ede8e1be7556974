"""The shingle table of deduplication: where each window of ``W`` consecutive lines of the shown
outputs occurs, by the window's hash.

A window keeps its ``MAX_CANDIDATES`` most recent positions, oldest first (a position is a source,
the index of an indexed output, and the window's first line in that source's kept lines). Adding
an output costs a few passes made in C (hashing its windows, one dict update), not a Python loop
per line: a 200,000-line output is indexed in tens of milliseconds, and a position is one int
(``source << 32 | line``), so the table holds no per-window tuples or lists the garbage collector
has to walk. Only the positions of windows one output repeats more than twice (a log printing the
same block again and again) are read by a Python loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from itertools import compress, filterfalse
from operator import ne, sub

W = 3  # lines per shingle
MAX_CANDIDATES = 8  # most recent positions kept per shingle
_PEELED = 2  # layers of repeated windows taken off in C before one Python pass reads the rest
SHIFT = 32
LINE = (1 << SHIFT) - 1


def window_hashes(lines: Sequence[str]) -> list[int]:
    """``hash(tuple(lines[p : p + W]))`` for every p, made in C."""
    return list(map(hash, zip(*(lines[k:] for k in range(W)), strict=False)))  # shorter slices end it


def kept_windows(hashes: list[int], numbers: list[int]) -> tuple[list[int], Sequence[int]]:
    """The windows of the kept lines ``numbers`` (1-based lines of an output whose window hashes are
    ``hashes``) that lie inside one contiguous kept segment: their hashes and their first kept line."""
    n = len(numbers) - W + 1
    if n <= 0:
        return [], ()
    if numbers[-1] - numbers[0] == len(numbers) - 1:  # ascending: one segment
        start = numbers[0] - 1
        return hashes[start : start + n], range(n)
    at = list(compress(range(n), map((W - 1).__eq__, map(sub, numbers[W - 1 :], numbers))))
    return [hashes[numbers[q] - 1] for q in at], at


class Shingles:
    """Window hash -> its most recent positions: ``_levels[k]`` holds the (k+1)-th most recent
    position of every window seen at least k+1 times (k < ``MAX_CANDIDATES``), so a window's
    positions are ints in a few dicts, and adding an output is a few dict updates made in C."""

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        self._levels: list[dict[int, int]] = [{}]

    def known(self, hashes: list[int]) -> compress[int]:
        """The indices of ``hashes`` that the table has, ascending (made in C)."""
        return compress(range(len(hashes)), map(self._levels[0].__contains__, hashes))

    @property
    def levels(self) -> list[dict[int, int]]:
        """The levels themselves (read-only): a caller that stops at the first valid position reads them."""
        return self._levels

    def recent(self, key: int) -> list[tuple[int, int]]:
        """(source, line) of each position of window ``key``, most recent first."""
        out: list[tuple[int, int]] = []
        for level in self._levels:
            c = level.get(key)
            if c is None:
                break
            out.append((c >> SHIFT, c & LINE))
        return out

    def add(self, source: int, hashes: list[int], lines: Sequence[int]) -> None:
        """Add the windows ``hashes`` of ``source``, window i starting at its kept line ``lines[i]``
        (ascending): the same table as appending each position in turn and keeping the last few."""
        if not hashes:
            return
        base = source << SHIFT
        layers = _layers(hashes, list(map(base.__add__, lines)))
        levels = self._levels
        while len(levels) < min(MAX_CANDIDATES, len(levels) + len(layers)):
            levels.append({})
        # a window with m positions here moves its older positions m levels down (those past the
        # last level drop out): per m, the keys to move from each level are found first, then
        # moved from the deepest level up, so that each move reads positions not yet moved
        for m in range(1, len(layers) + 1):
            keys: Iterable[int] = filterfalse(layers[m].__contains__, layers[m - 1]) if m < len(layers) else layers[m - 1]
            moves: list[list[int]] = []
            for j in range(len(levels) - m):
                keys = list(filter(levels[j].__contains__, keys))  # lists: cheaper to build than sets
                if not keys:
                    break
                moves.append(keys)
            for j in range(len(moves) - 1, -1, -1):
                levels[j + m].update(zip(moves[j], map(levels[j].__getitem__, moves[j]), strict=True))
        for k, layer in enumerate(layers[: len(levels)]):
            levels[k].update(layer)


def _layers(hashes: list[int], codes: list[int]) -> list[dict[int, int]]:
    """Per window, its positions in this output, most recent first: ``layers[k]`` maps each window
    seen more than k times here to its (k+1)-th most recent position. The first layers are peeled
    off in C (a dict keeps the last position of each window, the rest go on); the positions of
    windows seen more often than that (a log repeating a block) are then read in one Python pass."""
    layers: list[dict[int, int]] = []
    while hashes and len(layers) < min(_PEELED, MAX_CANDIDATES):
        layer = dict(zip(hashes, codes, strict=True))  # the last position of each
        layers.append(layer)
        if len(layer) == len(hashes):
            return layers
        rest = list(map(ne, codes, map(layer.__getitem__, hashes)))
        hashes, codes = list(compress(hashes, rest)), list(compress(codes, rest))
    depth = MAX_CANDIDATES - len(layers)
    if not hashes or depth <= 0:
        return layers
    tails: dict[int, deque[int]] = {}
    for h, c in zip(hashes, codes, strict=True):
        tail = tails.get(h)
        if tail is None:
            tail = tails[h] = deque(maxlen=depth)
        tail.append(c)
    more: list[dict[int, int]] = [{} for _ in range(max(map(len, tails.values())))]
    for h, tail in tails.items():
        for k, c in enumerate(reversed(tail)):
            more[k][h] = c
    return layers + more
