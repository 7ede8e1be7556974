"""Which stored paths overlap a path (``shell_paths.paths_overlap``), without scanning them all.

``paths_overlap(a, b)`` holds exactly when the ``/``-separated components of one path are a
contiguous run of the other's (``"/" + b + "/"`` within ``"/" + a + "/"`` aligns at slashes).
So each distinct stored path is filed under every contiguous run of its components, and a query
looks up its own string (stored paths that contain it) and each run of its components (stored
paths it contains). Paths with many components stay in a list scanned the old way, so a
pathological path costs what it always did, never a quadratic number of keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from ..shell_paths import paths_overlap

T = TypeVar("T")

MAX_PARTS = 12  # runs filed per path: at most 78


def runs(path: str) -> Iterator[str]:
    """Every contiguous run of ``path``'s components, as a path."""
    parts = path.split("/")
    for i in range(len(parts)):
        for j in range(i + 1, len(parts) + 1):
            yield "/".join(parts[i:j])


class PathIndex(Generic[T]):
    """Items filed by path; ``overlapping(p)``: the items whose path overlaps ``p``."""

    def __init__(self) -> None:
        self._items: dict[str, list[T]] = {}  # distinct path -> its items, in filing order
        self._within: dict[str, list[str]] = {}  # a run of components -> the short paths holding it
        self._long: list[str] = []  # paths of more than MAX_PARTS components

    def add(self, path: str, item: T) -> None:
        items = self._items.get(path)
        if items is not None:
            items.append(item)
            return
        self._items[path] = [item]
        if path.count("/") >= MAX_PARTS:
            self._long.append(path)
            return
        for run in set(runs(path)):
            self._within.setdefault(run, []).append(path)

    def overlapping(self, path: str) -> list[T]:
        """The items filed under a path that overlaps ``path`` (each once; order unspecified)."""
        if path.count("/") >= MAX_PARTS:
            found = {p for p in self._items if paths_overlap(p, path)}
        else:
            found = set(self._within.get(path, ()))  # stored paths holding path's components
            found.update(r for r in runs(path) if r in self._items)  # stored paths path holds
            found.update(p for p in self._long if paths_overlap(p, path))
        return [item for p in found for item in self._items[p]]
