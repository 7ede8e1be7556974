"""One simulated vLLM v1 engine: block pool, prefix cache, FCFS scheduler with preemption.

Follows cache_spec.md §1.3-1.7 (vLLM 0.33.0):

* KV lives in ``B``-token blocks (``capacity_blocks`` usable blocks; vLLM's null block is not
  counted).  Each full block carries a chained hash (computed up front for the whole
  prompt + output of a request, see :mod:`.workload`); a block is registered in the cache when its
  last token is *scheduled*; duplicates are not merged (lookups use the oldest copy).
* Blocks with ``ref_cnt == 0`` sit in a free queue, LRU by release time: a request's blocks are
  released tail-first; hashed blocks are appended at the tail, un-hashed (partial) blocks are put
  at the head (PR #42656).  Eviction happens when a block is popped from the head for reuse.
* Lookup at admission: the longest run of leading cached blocks within ``(num_tokens - 1) // B``
  blocks; ``num_tokens`` includes already generated tokens for a preempted request.
* Admission (``schedule``): running requests first, in admission order, then the waiting queue
  FCFS, only if nothing was preempted in this step; ``scheduler_reserve_full_isl=True`` (the whole
  sequence must fit); head-of-line blocking; chunked prefill under ``max_num_batched_tokens``.
* Preemption by recompute: when a running request cannot get a block, the most recently admitted
  running request is preempted (all its blocks freed, hashes kept) and put at the head of the
  waiting queue.  Watermark 0, no lookahead/speculative tokens, no CPU swap.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

__all__ = ["BlockPool", "Engine", "Request", "StepPlan"]


@dataclass(eq=False, slots=True)
class Request:
    """One model call of one session (a turn)."""

    rid: int
    session: int
    turn: int
    arrival: float
    prompt_len: int
    out_len: int  # tokens to generate (>= 1)
    hashes: list[int]  # chained hashes of the full blocks of prompt + output
    num_tokens: int = 0  # prompt + tokens generated so far
    num_computed: int = 0  # tokens whose KV is computed (scheduled)
    generated: int = 0
    blocks: list[int] = field(default_factory=list)
    state: list[int] = field(default_factory=list)  # hybrid models' per-sequence state pages
    registered: int = 0  # leading blocks of ``blocks`` registered in the cache
    preemptions: int = 0
    cached_tokens: int = -1  # prefix hit at the first admission (-1 = not admitted yet)
    hit_tokens_total: int = 0  # prefix hits over all admissions (incl. after preemption)
    prefilled_tokens: int = 0  # tokens actually computed (incl. recompute after preemption)
    first_scheduled: float = -1.0
    first_token: float = -1.0
    finished: float = -1.0
    waited: float = 0.0  # total time in the waiting queue (first wait + after preemptions)
    wait_since: float = 0.0

    def __post_init__(self) -> None:
        if self.out_len < 1:
            raise ValueError(f"out_len must be >= 1, got {self.out_len}")
        self.num_tokens = self.prompt_len
        self.wait_since = self.arrival

    @property
    def queue_wait(self) -> float:
        """Arrival to first scheduling."""
        return self.first_scheduled - self.arrival

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def kv_tokens(self) -> int:
        """KV tokens the request holds at its end (the last sampled token is never computed)."""
        return self.prompt_len + self.out_len - 1


class BlockPool:
    """vLLM's ``BlockPool`` (§1.5): ref counts, hash -> blocks map, LRU free queue."""

    def __init__(self, capacity_blocks: int, *, free_partial_first: bool = True) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
        self.capacity = capacity_blocks
        self.free_partial_first = free_partial_first
        self.ref = [0] * capacity_blocks
        self.key: list[int | None] = [None] * capacity_blocks
        self.cached: dict[int, list[int]] = {}  # hash -> physical copies, oldest first
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(capacity_blocks))
        self.evictions = 0

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def pinned(self) -> int:
        """Blocks with ``ref_cnt > 0`` (vLLM's reported KV-cache usage)."""
        return self.capacity - len(self.free)

    @property
    def cached_blocks(self) -> int:
        return sum(len(v) for v in self.cached.values())

    def lookup(self, hashes: list[int], limit: int) -> list[int]:
        """Blocks of the longest run of leading cached hashes among the first ``limit``."""
        hit: list[int] = []
        for h in hashes[: max(limit, 0)]:
            copies = self.cached.get(h)
            if not copies:
                break
            hit.append(copies[0])
        return hit

    def get_new_blocks(self, n: int) -> list[int]:
        if n > len(self.free):
            raise AssertionError(f"need {n} blocks, {len(self.free)} free")
        out = []
        for _ in range(n):
            b = self.free.popitem(last=False)[0]
            k = self.key[b]
            if k is not None:  # EVICTION
                copies = self.cached[k]
                copies.remove(b)
                if not copies:
                    del self.cached[k]
                self.key[b] = None
                self.evictions += 1
            self.ref[b] = 1
            out.append(b)
        return out

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.free[b]
            self.ref[b] += 1

    def register(self, block: int, h: int) -> None:
        self.key[block] = h
        self.cached.setdefault(h, []).append(block)

    def release(self, blocks: list[int]) -> None:
        """Free a request's blocks, tail first."""
        head: list[int] = []
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.free_partial_first and self.key[b] is None:
                    head.append(b)
                else:
                    self.free[b] = None
        for b in reversed(head):  # keep their release order at the head
            self.free[b] = None
            self.free.move_to_end(b, last=False)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one engine step computes (input to a step-time model)."""

    prefill_tokens: int  # new tokens of requests still in prefill
    prefill_attn: int  # sum over prefill chunks of n * (context before the chunk + n / 2)
    decode_seqs: int
    decode_ctx: int  # sum of the contexts of the decoding requests
    kv_used_blocks: int
    kv_total_blocks: int
    scheduled: tuple[tuple[Request, int], ...]

    @property
    def empty(self) -> bool:
        return not self.scheduled


class Engine:
    """The scheduler of §1.7 over a :class:`BlockPool`."""

    def __init__(
        self,
        capacity_blocks: int,
        block_size: int = 16,
        *,
        max_num_batched_tokens: int = 8192,
        max_num_seqs: int = 1024,
        free_partial_first: bool = True,
        state_blocks: int = 0,
    ) -> None:
        self.pool = BlockPool(capacity_blocks, free_partial_first=free_partial_first)
        self.B = block_size
        # hybrid (GDN) models: every running sequence pins its linear-attention state, pages of
        # the same pool (cache_spec.md §1.9); 0 for full-attention models
        self.state_blocks = state_blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.preemptions = 0

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _need(self, req: Request, n_tokens: int, hit: list[int]) -> int:
        blocks = -(-n_tokens // self.B) - len(req.blocks) - len(hit)
        state = 0 if req.state else self.state_blocks
        return max(blocks, 0) + state + sum(1 for b in hit if self.pool.ref[b] == 0)

    def _allocate(self, req: Request, n_new: int, hit: list[int], full_must_fit: bool) -> bool:
        """``allocate_slots`` (§1.6); False if the free queue cannot supply the blocks."""
        computed = req.num_computed + len(hit) * self.B
        free = self.pool.num_free
        if full_must_fit and self._need(req, req.num_tokens, hit) > free:
            return False
        if self._need(req, computed + n_new, hit) > free:
            return False
        self.pool.touch(hit)
        if self.state_blocks and not req.state:
            req.state = self.pool.get_new_blocks(self.state_blocks)
        req.blocks.extend(hit)
        req.num_computed = computed
        want = -(-(computed + n_new) // self.B) - len(req.blocks)
        if want > 0:
            req.blocks.extend(self.pool.get_new_blocks(want))
        n_full = min(min(computed + n_new, req.num_tokens) // self.B, len(req.hashes))
        for i in range(req.registered, n_full):
            if i >= len(hit):  # hit blocks are cached already
                self.pool.register(req.blocks[i], req.hashes[i])
        req.registered = max(req.registered, n_full)
        return True

    def _preempt(self, req: Request, now: float) -> None:
        self.running.remove(req)
        self.pool.release(req.blocks + req.state)
        req.blocks, req.state = [], []
        req.registered = 0
        req.num_computed = 0
        req.preemptions += 1
        req.wait_since = now
        self.preemptions += 1
        self.waiting.appendleft(req)

    def schedule(self, now: float) -> StepPlan:
        budget = self.max_num_batched_tokens
        out: list[tuple[Request, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed, budget)
            ok = self._allocate(req, n, [], False)
            while not ok:
                victim = self.running[-1]
                self._preempt(victim, now)
                preempted = True
                if victim is req:
                    break
                ok = self._allocate(req, n, [], False)
            if not ok:
                break
            out.append((req, n))
            budget -= n
            i += 1
        if not preempted:
            while budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
                req = self.waiting[0]
                hit = self.pool.lookup(req.hashes, (req.num_tokens - 1) // self.B)
                n = min(req.num_tokens - len(hit) * self.B, budget)
                if not self._allocate(req, n, hit, True):
                    break  # head-of-line blocking
                self.waiting.popleft()
                self.running.append(req)
                req.waited += now - req.wait_since
                req.hit_tokens_total += len(hit) * self.B
                if req.cached_tokens < 0:
                    req.cached_tokens = len(hit) * self.B
                    req.first_scheduled = now
                out.append((req, n))
                budget -= n
        return self._plan(out)

    def _plan(self, out: list[tuple[Request, int]]) -> StepPlan:
        pf = pa = ds = dc = 0
        for req, n in out:
            if _is_decode(req, n):
                ds += 1
                dc += req.num_computed
            else:
                pf += n
                pa += n * req.num_computed + n * n // 2
        return StepPlan(pf, pa, ds, dc, self.pool.pinned, self.pool.capacity, tuple(out))

    def finish_step(self, plan: StepPlan, now: float) -> list[Request]:
        """Advance the scheduled requests; return those that finished (their blocks are freed)."""
        done: list[Request] = []
        for req, n in plan.scheduled:
            if not _is_decode(req, n):
                req.prefilled_tokens += n
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                continue  # chunked prefill goes on
            req.generated += 1
            req.num_tokens += 1
            if req.first_token < 0:
                req.first_token = now
            if req.generated >= req.out_len:
                req.finished = now
                done.append(req)
        for req in done:
            self.running.remove(req)
            self.pool.release(req.blocks + req.state)
            req.blocks, req.state = [], []
        return done


def _is_decode(req: Request, n: int) -> bool:
    """A decode step: one token, the last sampled one (not part of a (re)prefill)."""
    return n == 1 and req.generated > 0 and req.num_computed + 1 == req.num_tokens
