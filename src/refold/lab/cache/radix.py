"""Token radix tree and the SGLang RadixCache simulator (cache_spec.md §2, SGLang 0.5.23).

Modelled [SRC]: ``page_size`` (default 1, token granular); hit = longest common prefix with the
tree, searched within ``len - 1`` tokens rounded down to a page; matching refreshes the access
time of every node on the path and splits a node the match ends inside; after prefill the prompt is
inserted and at the end prompt + output (``P + O - 1`` tokens: the last sampled token has no KV);
a capacity in tokens; when short of space, unlocked leaves are evicted whole, least recently used
first (a parent whose last child went becomes a candidate).

Simplified: one request runs at a time (no scheduler, retraction or concurrent locks beyond the
running request's own path); the clock is a counter; the per-node ``lfu``/``priority`` policies
are not modelled.  Generated tokens passed only as a count are inserted as placeholder ids that
no prompt can match.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from ...errors import KVCapacityError
from .base import CacheResult, common_prefix_len, generated_ids

__all__ = ["RadixTree", "SglangRadixCache"]


class _Node:
    __slots__ = ("children", "key", "lock", "parent", "stamp", "unit")

    def __init__(self, key: list[int], parent: _Node | None) -> None:
        self.key = key
        self.children: dict[Hashable, _Node] = {}
        self.parent = parent
        self.stamp = 0
        self.lock = 0
        self.unit = False


class RadixTree:
    """Compressed token trie with page-aligned edges, access stamps, locks and unit marks."""

    def __init__(self, page_size: int = 1) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.page = page_size
        self.root = _Node([], None)
        self.total = 0  # tokens held by the tree
        self._clock = 0

    def _ck(self, seq: list[int], pos: int) -> Hashable:
        return seq[pos] if self.page == 1 else tuple(seq[pos : pos + self.page])

    def _split(self, node: _Node, k: int) -> _Node:
        parent = node.parent
        assert parent is not None
        new = _Node(node.key[:k], parent)
        new.stamp, new.lock = node.stamp, node.lock
        parent.children[self._ck(new.key, 0)] = new
        node.key = node.key[k:]
        node.parent = new
        new.children[self._ck(node.key, 0)] = node
        return new

    def _common(self, key: list[int], seq: list[int], pos: int, end: int) -> int:
        n = len(key)
        if pos + n <= end and key == seq[pos : pos + n]:
            return n
        k = common_prefix_len(key, seq[pos : min(pos + n, end)])
        return k - k % self.page

    def match(
        self, seq: list[int], limit: int, *, split: bool = False, touch: bool = False
    ) -> tuple[int, _Node, int]:
        """Longest prefix of ``seq[:limit]`` in the tree.

        Returns (matched tokens, deepest fully matched node, depth of the deepest unit mark on the
        path).  With ``split`` the node the match ends inside is split so the match ends on a node.
        """
        limit -= limit % self.page
        node, pos, unit = self.root, 0, 0
        while pos < limit:
            child = node.children.get(self._ck(seq, pos))
            if child is None:
                break
            k = self._common(child.key, seq, pos, limit)
            if touch:
                self._clock += 1
                child.stamp = self._clock
            if k < len(child.key):
                if k and split:
                    node = self._split(child, k)
                pos += k
                break
            node, pos = child, pos + k
            if child.unit:
                unit = pos
        return pos, node, unit

    def insert(self, seq: list[int]) -> int:
        """Insert ``seq`` (page-truncated); returns the number of tokens newly added."""
        end = len(seq) - len(seq) % self.page
        node, pos = self.root, 0
        self._clock += 1
        while pos < end:
            ck = self._ck(seq, pos)
            child = node.children.get(ck)
            if child is None:
                new = _Node(seq[pos:end], node)
                new.stamp = self._clock
                node.children[ck] = new
                self.total += end - pos
                return end - pos
            k = self._common(child.key, seq, pos, end)
            child.stamp = self._clock
            if k < len(child.key):
                child = self._split(child, k)
            node, pos = child, pos + k
        return 0

    def mark_unit(self, seq: list[int], depth: int) -> None:
        """Make ``seq[:depth]`` (already inserted) end on a node and flag that node as a unit."""
        node, pos = self.root, 0
        while pos < depth:
            child = node.children[self._ck(seq, pos)]
            if pos + len(child.key) > depth:
                child = self._split(child, depth - pos)
            node, pos = child, pos + len(child.key)
        if depth > 0:
            node.unit = True

    def lock(self, node: _Node, delta: int) -> None:
        n: _Node | None = node
        while n is not None and n is not self.root:
            n.lock += delta
            n = n.parent

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves, least recently used first, until ``num_tokens`` are freed."""
        heap: list[tuple[int, int, _Node]] = []
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n.children:
                stack.extend(n.children.values())
            elif n is not self.root and n.lock == 0:
                heap.append((n.stamp, id(n), n))
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[self._ck(leaf.key, 0)]
            freed += len(leaf.key)
            self.total -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))
        return freed


class SglangRadixCache:
    """SGLang's RadixCache for one server; ``capacity_tokens=None`` means unbounded."""

    name = "sglang"

    def __init__(self, page_size: int = 1, capacity_tokens: int | None = None) -> None:
        if capacity_tokens is not None and capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1 or None, got {capacity_tokens}")
        self.page_size = page_size
        self.capacity_tokens = capacity_tokens
        self.tree = RadixTree(page_size)
        self._placeholder = 0
        self.evicted_tokens = 0

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
    ) -> CacheResult:
        toks = list(tokens)
        p = len(toks)
        tree = self.tree
        matched, node, _ = tree.match(toks, max(p - 1, 0), split=True, touch=True)
        n_out, ids = generated_ids(generated)
        n_kv = p + max(n_out - 1, 0)
        if ids is None:
            ids = list(range(-self._placeholder - 1, -self._placeholder - n_out - 1, -1))
            self._placeholder += n_out
        evicted = 0
        tree.lock(node, +1)
        try:
            if self.capacity_tokens is not None:
                need = n_kv - matched
                if need > self.capacity_tokens - tree.total:
                    evicted = tree.evict(need - (self.capacity_tokens - tree.total))
                    self.evicted_tokens += evicted
                if need > self.capacity_tokens - tree.total:
                    raise KVCapacityError(
                        f"request needs {need} KV tokens, only {self.capacity_tokens - tree.total} "
                        f"of {self.capacity_tokens} can be freed"
                    )
            written = tree.insert(toks)
            toks.extend(ids)
            tree.insert(toks[:n_kv])
        finally:
            tree.lock(node, -1)
        return CacheResult(p, matched, written, evicted)
