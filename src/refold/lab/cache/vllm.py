"""vLLM v1 automatic prefix caching (APC) simulator, following cache_spec.md §1 (vLLM 0.33.0).

Modelled [SRC]: ``B``-token blocks; chained hashes over full blocks only (prompt and generated
tokens); hit = longest run of leading cached blocks, searched within ``(P - 1) // B`` blocks (the
last prompt token is always recomputed); blocks are registered when scheduled; no de-duplication
(a recomputed block whose hash is already cached becomes a second copy, lookups use the oldest
copy); ref counts; a free queue that is LRU by *release* time, with a request's blocks released
tail-first; un-hashed (partial) blocks are put at the head of the queue (PR #42656,
``free_partial_first=True``) or, for older vLLM, appended like the rest (``False``); eviction
happens when a block is popped from the queue head for reuse; the last sampled token's KV is never
computed, so a request holds ``P + max(O - 1, 0)`` tokens of KV.

Not modelled: scheduling, chunked prefill timing, preemption (``begin`` raises
:class:`KVCapacityError` where vLLM would queue or preempt), EAGLE's extra dropped block, LoRA /
multimodal / cache_salt extra keys (use separate instances as namespaces), hybrid-model coarse
blocks (pass ``block_size=784`` etc. to approximate, cache_spec.md §1.9 [UNVERIFIED]).

Performance: the lookup is a binary search, not a walk. This is exact because the set of cached
hashes is prefix-closed: a block is only ever registered together with all its ancestors, and an
ancestor is always released after (so evicted after) its descendants, or pinned with them.  Hashes
are memoized per ``session`` by comparing the new token list with that session's previous one, so
only changed/new blocks are hashed.  Hashing uses Python's tuple hash chained over blocks (64-bit,
deterministic for ints; collisions are ignored).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from itertools import repeat

from ...errors import KVCapacityError
from .base import CacheResult, first_difference, generated_ids

__all__ = ["VllmPrefixCache", "VllmRunning"]

_ROOT = 0x766C6C6D2D6E6F6E  # stands in for NONE_HASH; any fixed int works


@dataclass(slots=True)
class VllmRunning:
    """A request between :meth:`VllmPrefixCache.begin` and :meth:`VllmPrefixCache.finish`."""

    tokens: list[int]
    hashes: list[int]
    blocks: list[int]
    session: Hashable
    result: CacheResult
    evicted_blocks: int = 0
    done: bool = field(default=False)


class VllmPrefixCache:
    """One vLLM engine's prefix cache (one data-parallel rank), shared by any number of sessions.

    ``capacity_blocks`` is the number of usable KV blocks (vLLM's ``num_gpu_blocks - 1``); ``None``
    means unbounded: nothing is ever evicted and no physical blocks are tracked.
    """

    name = "vllm"

    def __init__(
        self,
        block_size: int = 16,
        capacity_blocks: int | None = None,
        *,
        free_partial_first: bool = True,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if capacity_blocks is not None and capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1 or None, got {capacity_blocks}")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.free_partial_first = free_partial_first
        self._seen: set[int] = set()  # unbounded mode: every hash ever registered
        self._map: dict[int, int] = {}  # bounded mode: hash -> oldest physical block holding it
        self._dups: dict[int, list[int]] = {}  # hash -> further copies, oldest first
        self._key_of: dict[int, int] = {}  # physical block -> its hash (hashed blocks only)
        self._ref: dict[int, int] = {}  # physical block -> ref count (absent = 0)
        self._free: OrderedDict[int, None] = OrderedDict()  # head is reused (evicted) first
        self._memo: dict[Hashable, tuple[list[int], list[int]]] = {}
        self._running = 0
        self._placeholder = 0
        self.evicted_blocks = 0
        if capacity_blocks is not None:
            self._free = OrderedDict.fromkeys(range(capacity_blocks))

    # ------------------------------------------------------------------ public API

    def request(
        self,
        tokens: Sequence[int],
        *,
        generated: Sequence[int] | int = (),
        session: Hashable = None,
        breakpoints: Sequence[int] = (),
        boundaries: Sequence[int] = (),
        same: int = 0,
    ) -> CacheResult:
        """Run one request to completion (lookup, prefill, decode, release)."""
        return self.finish(self.begin(tokens, session=session, same=same), generated=generated)

    def begin(self, tokens: Sequence[int], *, session: Hashable = None, same: int = 0) -> VllmRunning:
        """Admit a request: look up its prefix, pin hit blocks, allocate and register prompt blocks.

        Several requests may be running at once (concurrent sessions); their blocks stay pinned.
        Raises :class:`KVCapacityError` if the free queue cannot supply the blocks (vLLM would keep
        the request waiting; ``scheduler_reserve_full_isl=True`` semantics).
        ``same``: a hint from the caller, who vouches that the first ``same`` tokens equal those of
        the session's previous prompt (not its generated tokens); they are not compared.
        """
        toks, hashes = self._snapshot(session, tokens, same)
        b = self.block_size
        p = len(toks)
        hit = self._hit_blocks(hashes, (p - 1) // b if p else 0)
        cached = hit * b
        written = max(0, (p // b) * b - cached)
        if self.capacity_blocks is None:
            self._seen.update(hashes[hit:])
            run = VllmRunning(toks, hashes, [], session, CacheResult(p, cached, written))
            self._running += 1
            return run
        hit_ids = list(map(self._map.__getitem__, hashes[:hit]))
        n_new = -(-p // b) - hit
        free_hits = hit if self._running == 0 else sum(1 for x in hit_ids if x not in self._ref)
        if len(self._free) - free_hits < n_new:
            raise KVCapacityError(
                f"request needs {n_new} new KV blocks but only {len(self._free) - free_hits} "
                f"of {self.capacity_blocks} can be freed"
            )
        self._touch(hit_ids)
        new_ids, evicted = self._alloc(n_new)
        blocks = hit_ids + new_ids
        self._register(blocks[hit : p // b], hashes[hit : p // b])
        self._running += 1
        return VllmRunning(toks, hashes, blocks, session, CacheResult(p, cached, written, 0), evicted)

    def finish(self, run: VllmRunning, *, generated: Sequence[int] | int = ()) -> CacheResult:
        """Decode ``generated`` tokens, register the blocks they fill, release the request."""
        if run.done:
            raise ValueError("request already finished")
        run.done = True
        self._running -= 1
        b = self.block_size
        p = len(run.tokens)
        n_out, ids = generated_ids(generated)
        n_kv = p + max(n_out - 1, 0)  # the last sampled token never gets its KV computed
        hashes = run.hashes
        if ids is not None:
            run.tokens.extend(ids)
            self._chain(hashes, run.tokens, n_kv // b)
        else:
            parent = hashes[-1] if hashes else _ROOT
            for _ in range(len(hashes), n_kv // b):
                self._placeholder += 1
                parent = hash((parent, "generated", self._placeholder))
                hashes.append(parent)
        n_full = n_kv // b
        self._memo[run.session] = (run.tokens, hashes)
        if self.capacity_blocks is None:
            self._seen.update(hashes[p // b : n_full])
            return run.result
        blocks = run.blocks
        try:
            new_ids, evicted = self._alloc(-(-n_kv // b) - len(blocks))
        except KVCapacityError:
            new_ids, evicted = [], 0  # vLLM would preempt; keep the prompt part and stop decoding
            n_full = p // b
        blocks.extend(new_ids)
        run.evicted_blocks += evicted
        self._register(blocks[p // b : n_full], hashes[p // b : n_full])
        self._release(blocks)
        r = run.result
        return CacheResult(r.prompt_tokens, r.cached_tokens, r.written_tokens, run.evicted_blocks * b)

    # ------------------------------------------------------------------ inspection

    @property
    def cached_blocks(self) -> int:
        """Physical blocks holding a hash (unbounded mode: distinct hashes)."""
        return len(self._seen) if self.capacity_blocks is None else len(self._key_of)

    @property
    def pinned_blocks(self) -> int:
        """Blocks with ``ref_cnt > 0`` (what vLLM's usage metric reports)."""
        return 0 if self.capacity_blocks is None else self.capacity_blocks - len(self._free)

    # ------------------------------------------------------------------ internals

    def _snapshot(self, session: Hashable, tokens: Sequence[int], hint: int = 0) -> tuple[list[int], list[int]]:
        """Our own copy of ``tokens`` and its full-block hashes, reusing the session's last request.

        The previous token list is patched in place (only the differing tail is copied) and
        compared with one equal-length list comparison, which only compares pointers when the
        caller reuses int objects (e.g. a per-message token cache); only new blocks are hashed.
        With a ``hint`` the comparison starts there (a long prompt that changed near its end is
        otherwise scanned from the start).
        """
        b = self.block_size
        new = tokens if isinstance(tokens, list) else list(tokens)
        prev = self._memo.pop(session, None)
        hashes: list[int]
        if prev is None:
            toks, hashes = list(new), []
        else:
            toks, hashes = prev
            del hashes[len(toks) // b :]  # drop never-matchable placeholder blocks
            n = len(new)
            if len(toks) > n:
                del toks[n:]
            else:
                toks.extend(new[len(toks) :])
            if hint > 0:
                same = first_difference(toks, new, n, min(hint, n))
                toks[same:] = new[same:]
            elif toks == new:
                same = n
            else:
                same = first_difference(toks, new, n)
                toks[same:] = new[same:]
            del hashes[same // b :]
        self._chain(hashes, toks, len(toks) // b)
        return toks, hashes

    def _chain(self, hashes: list[int], toks: list[int], n_blocks: int) -> None:
        """Extend ``hashes`` with chained hashes of blocks ``len(hashes)..n_blocks-1`` of ``toks``."""
        b = self.block_size
        start = len(hashes) * b
        if n_blocks * b <= start:
            return
        parent = hashes[-1] if hashes else _ROOT
        # block tuples built and hashed at C level, then chained: h_i = H(h_{i-1}, H(block_i))
        it = iter(toks[start : n_blocks * b])
        append = hashes.append
        for bh in map(hash, zip(*([it] * b), strict=False)):
            parent = hash((parent, bh))
            append(parent)

    def _hit_blocks(self, hashes: list[int], limit: int) -> int:
        cache: set[int] | dict[int, int] = self._seen if self.capacity_blocks is None else self._map
        lo, hi = 0, min(limit, len(hashes))
        if hi and hashes[hi - 1] in cache:
            return hi
        while lo < hi:  # predicate "hashes[i] in cache" is monotone (prefix-closed set)
            mid = (lo + hi) // 2
            if hashes[mid] in cache:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _touch(self, hit_ids: list[int]) -> None:
        ref = self._ref
        if self._running == 0:  # nothing pinned: every hit block sits in the free queue
            deque(map(self._free.__delitem__, hit_ids), maxlen=0)
            ref.update(zip(hit_ids, repeat(1)))
            return
        for x in hit_ids:
            r = ref.get(x, 0)
            if r == 0:
                del self._free[x]
            ref[x] = r + 1

    def _alloc(self, n: int) -> tuple[list[int], int]:
        if n <= 0:
            return [], 0
        if n > len(self._free):
            raise KVCapacityError(f"need {n} KV blocks, {len(self._free)} free")
        pop = self._free.popitem
        out = [pop(last=False)[0] for _ in range(n)]  # from the queue head
        keys = list(map(self._key_of.pop, out, repeat(None)))
        evicted = n - keys.count(None)
        if evicted:  # EVICTION: the reused blocks lose their hashes
            if self._dups:
                for x, k in zip(out, keys, strict=True):
                    if k is not None:
                        self._drop(k, x)
            else:  # every hash has exactly one copy, held by this block
                deque(map(self._map.__delitem__, [k for k in keys if k is not None]), maxlen=0)
        self._ref.update(zip(out, repeat(1)))
        self.evicted_blocks += evicted
        return out, evicted

    def _drop(self, k: int, x: int) -> None:
        dups = self._dups.get(k)
        if self._map[k] == x:
            if dups:
                self._map[k] = dups.pop(0)
            else:
                del self._map[k]
        elif dups is not None:
            dups.remove(x)
        if dups is not None and not dups:
            del self._dups[k]

    def _register(self, ids: list[int], keys: list[int]) -> None:
        m = self._map
        self._key_of.update(zip(ids, keys, strict=True))
        if m.keys().isdisjoint(keys):
            m.update(zip(keys, ids, strict=True))
            return
        for x, k in zip(ids, keys, strict=True):
            if k in m:  # no de-duplication: a second copy under the same hash
                self._dups.setdefault(k, []).append(x)
            else:
                m[k] = x

    def _release(self, blocks: list[int]) -> None:
        ref, key_of, free = self._ref, self._key_of, self._free
        if self._running == 0 and len(ref) == len(blocks):  # only this request held blocks
            ref.clear()
            zero = blocks
        else:
            zero = []
            for x in blocks:
                r = ref[x] - 1
                if r:
                    ref[x] = r
                else:
                    del ref[x]
                    zero.append(x)
        ordered = zero[::-1]  # tail block first => tail evicted first
        # Only a request's last block can be un-hashed (partial); it goes to the head (PR #42656).
        if self.free_partial_first and ordered and ordered[0] not in key_of:
            free.update(dict.fromkeys(ordered[1:]))
            free[ordered[0]] = None
            free.move_to_end(ordered[0], last=False)
        else:
            free.update(dict.fromkeys(ordered))
