"""Tests for refold.lab.cache: brute-force references, hand-computed cases, KV sizes, costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import KVCapacityError
from refold.lab.cache import (
    CACHE_NAMES,
    CALIBRATED,
    AnthropicCache,
    CacheResult,
    CalibratedCache,
    DeepSeekCache,
    NoCache,
    OpenAICache,
    PrefixCacheSim,
    Price,
    ReplayedCache,
    SglangRadixCache,
    VllmPrefixCache,
    calibrated,
    common_prefix_len,
    cost_usd,
    kv_bytes,
    kv_spec,
    load_prices,
    make_cache,
    session_peak_kv_bytes,
)

KIB = 1024
MIB = 1024 * 1024


# --------------------------------------------------------------------------- brute-force references


class RefVllm:
    """Plain vLLM block pool: keys are whole prefix tuples, lookups walk block by block."""

    def __init__(self, block: int, capacity: int | None) -> None:
        self.b = block
        self.cap = capacity
        self.key: dict[int, tuple[int, ...]] = {}  # block id -> prefix, in registration order
        self.free: list[int] = list(range(capacity)) if capacity else []
        self.next_id = capacity or 0

    def _alloc(self, n: int) -> tuple[list[int], int]:
        out, ev = [], 0
        for _ in range(n):
            if self.cap is None:
                out.append(self.next_id)
                self.next_id += 1
                continue
            x = self.free.pop(0)
            if x in self.key:
                del self.key[x]
                ev += 1
            out.append(x)
        return out, ev

    def request(self, toks: list[int], gen: list[int]) -> CacheResult:
        b, p = self.b, len(toks)
        hit: list[int] = []
        for i in range((p - 1) // b if p else 0):
            want = tuple(toks[: (i + 1) * b])
            copies = [x for x, k in self.key.items() if k == want]
            if not copies:
                break
            hit.append(copies[0])
        for x in hit:
            if self.cap is not None:
                self.free.remove(x)
        new, ev = self._alloc(-(-p // b) - len(hit))
        blocks = hit + new
        for i in range(len(hit), p // b):
            self.key[blocks[i]] = tuple(toks[: (i + 1) * b])
        all_toks = toks + gen
        n_kv = p + max(len(gen) - 1, 0)
        more, ev2 = self._alloc(-(-n_kv // b) - len(blocks))
        blocks += more
        for i in range(p // b, n_kv // b):
            self.key[blocks[i]] = tuple(all_toks[: (i + 1) * b])
        if self.cap is not None:
            for x in reversed(blocks):
                if x in self.key:
                    self.free.append(x)
                else:
                    self.free.insert(0, x)
        cached = len(hit) * b
        return CacheResult(p, cached, (p // b) * b - cached, (ev + ev2) * b)

    def n_cached(self) -> int:
        if self.cap is None:
            return len(set(self.key.values()))
        return len(self.key)


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# request streams: each request extends or diverges from an earlier token list
@st.composite
def streams(draw: st.DrawFn) -> tuple[int, int | None, list[tuple[list[int], list[int], int]]]:
    block = draw(st.sampled_from([1, 2, 3, 4, 16]))
    n_req = draw(st.integers(1, 14))
    histories: list[list[int]] = []
    reqs: list[tuple[list[int], list[int], int]] = []
    alphabet = st.integers(0, 2)
    max_len = 0
    for _ in range(n_req):
        extend = draw(st.booleans())
        if histories and extend:
            base = draw(st.sampled_from(histories))
            cut = draw(st.integers(0, len(base)))
            toks = base[:cut] + draw(st.lists(alphabet, max_size=3 * block + 2))
        else:
            toks = draw(st.lists(alphabet, min_size=1, max_size=6 * block))
        if not toks:
            toks = [0]
        gen = draw(st.lists(alphabet, max_size=2 * block + 1))
        histories.append(toks + gen)
        reqs.append((toks, gen, draw(st.integers(0, 2))))
        max_len = max(max_len, len(toks) + len(gen))
    capacity = draw(st.one_of(st.none(), st.integers(-(-max_len // block), -(-max_len // block) + 12)))
    return block, capacity, reqs


# 200 random streams: each vLLM rule also has a hand case below (extension, last-token cap, generated
# blocks, divergence and LRU eviction, pins, sessions)
@settings(max_examples=200, deadline=None)
@given(streams(), st.booleans())
def test_vllm_matches_bruteforce(
    stream: tuple[int, int | None, list[tuple[list[int], list[int], int]]], count_only: bool
) -> None:
    block, capacity, reqs = stream
    sim = VllmPrefixCache(block, capacity)
    ref = RefVllm(block, capacity)
    unique = -1000
    for toks, gen, session in reqs:
        if count_only:  # only the number of generated tokens is known: never matchable
            got = sim.request(toks, generated=len(gen), session=session)
            placeholders = list(range(unique, unique - len(gen), -1))
            unique -= len(gen)
            assert got == ref.request(toks, placeholders)
        else:
            got = sim.request(toks, generated=gen, session=session)
            assert got == ref.request(toks, gen)
        assert sim.cached_blocks == ref.n_cached()
        assert sim.pinned_blocks == 0


@settings(max_examples=200, deadline=None)
@given(streams())
def test_sglang_and_openai_and_deepseek_match_lcp_reference(
    stream: tuple[int, int | None, list[tuple[list[int], list[int], int]]],
) -> None:
    _, _, reqs = stream
    sg, oa, ds = SglangRadixCache(), OpenAICache(min_tokens=4, increment=2), DeepSeekCache(unit=3)
    seen_sg: list[list[int]] = []
    seen_oa: list[list[int]] = []
    for toks, gen, _ in reqs:
        p = len(toks)
        best = max((lcp(toks, s) for s in seen_sg), default=0)
        assert sg.request(toks, generated=gen).cached_tokens == min(best, p - 1)
        seen_sg.append(toks + gen[: max(len(gen) - 1, 0)])
        best = max((lcp(toks, s) for s in seen_oa), default=0)
        want = 0 if p < 4 or best < 4 else 4 + 2 * ((best - 4) // 2)
        assert oa.request(toks, generated=gen).cached_tokens == want
        assert ds.request(toks).cached_tokens == 3 * (min(best, 3 * (best // 3)) // 3)
        seen_oa.append(toks)


# --------------------------------------------------------------------------- vLLM hand cases


def test_vllm_extension_hits_full_blocks() -> None:
    sim = VllmPrefixCache(16)
    first = list(range(100))
    r1 = sim.request(first)
    assert (r1.cached_tokens, r1.written_tokens, r1.recomputed_tokens) == (0, 96, 100)
    r2 = sim.request(first + list(range(1000, 1030)))
    assert (r2.prompt_tokens, r2.cached_tokens, r2.written_tokens) == (130, 96, 32)
    assert r2.recomputed_tokens == 34


def test_vllm_last_token_cap() -> None:
    sim = VllmPrefixCache(16)
    toks = list(range(64))
    sim.request(toks)
    again = sim.request(toks)
    assert again.cached_tokens == 48  # P - 1 = 63 -> 3 full blocks; whole last block recomputed
    assert again.written_tokens == 16  # the duplicate copy vLLM registers
    assert sim.request(toks + [7]).cached_tokens == 64


def test_vllm_generated_blocks_are_cached_except_last_sampled_token() -> None:
    sim = VllmPrefixCache(16)
    prompt = list(range(20))
    out = list(range(500, 513))  # 20 + 13 - 1 = 32 computed tokens -> 2 full blocks
    sim.request(prompt, generated=out)
    assert sim.request(prompt + out + [9, 9, 9]).cached_tokens == 32
    sim2 = VllmPrefixCache(16)
    sim2.request(prompt, generated=out[:12])  # 31 computed tokens -> only block 0
    assert sim2.request(prompt + out[:12] + [9]).cached_tokens == 16
    sim3 = VllmPrefixCache(16, capacity_blocks=8)
    sim3.request(prompt, generated=13)  # count only: capacity used, never matchable
    assert sim3.cached_blocks == 2
    assert sim3.request(prompt + out + [9]).cached_tokens == 16


def test_vllm_divergence_and_lru_eviction_tail_first() -> None:
    sim = VllmPrefixCache(4, capacity_blocks=6)
    a = list(range(12))  # 3 blocks
    sim.request(a)
    b = list(range(100, 112))  # 3 blocks, pool now full
    sim.request(b)
    # a's blocks were released first -> evicted first, tail first: a's block 2, then 1
    c = list(range(200, 208))
    r = sim.request(c)
    assert r.evicted_tokens == 8
    assert sim.request(a + [1]).cached_tokens == 4  # only a's first block survived
    with pytest.raises(KVCapacityError):
        sim.request(list(range(30)))


def test_vllm_concurrent_pins_and_partial_block_order() -> None:
    sim = VllmPrefixCache(4, capacity_blocks=4)
    r1 = sim.begin(list(range(6)))  # 2 blocks pinned
    r2 = sim.begin(list(range(6)))  # hits block 0 (pinned twice), allocates 1 more
    assert r2.result.cached_tokens == 4
    assert sim.pinned_blocks == 3
    with pytest.raises(KVCapacityError):
        sim.begin(list(range(50, 58)))  # needs 2 blocks, 1 free
    sim.finish(r1)
    sim.finish(r2)
    assert sim.pinned_blocks == 0
    with pytest.raises(ValueError, match="already finished"):
        sim.finish(r2)


def test_vllm_sessions_share_one_server() -> None:
    sim = VllmPrefixCache(16)
    system = list(range(64))
    sim.request(system + [1] * 40, session="s1")
    r = sim.request(system + [2] * 40, session="s2")
    assert r.cached_tokens == 64


# --------------------------------------------------------------------------- SGLang


def test_sglang_token_granular_and_capped() -> None:
    sg = SglangRadixCache()
    toks = list(range(100))
    assert sg.request(toks).cached_tokens == 0
    assert sg.request(toks).cached_tokens == 99
    assert sg.request(toks[:57] + [5]).cached_tokens == 57
    paged = SglangRadixCache(page_size=16)
    paged.request(toks)
    assert paged.request(toks[:57] + [5]).cached_tokens == 48


def test_sglang_lru_leaf_eviction() -> None:
    sg = SglangRadixCache(capacity_tokens=30)
    a, b = list(range(10)), list(range(100, 110))
    sg.request(a)
    sg.request(b)
    sg.request(a + [1])  # touches a again (a is now more recent than b)
    r = sg.request(list(range(200, 215)))  # needs 15; 30 - 21 = 9 free -> evict LRU leaf b
    assert r.evicted_tokens == 10
    assert sg.tree.total <= 30
    assert sg.request(a + [1, 2]).cached_tokens == 11
    assert sg.request(b + [1]).cached_tokens == 0


# --------------------------------------------------------------------------- providers


def test_openai_thresholds_and_increments() -> None:
    oa = OpenAICache()
    small = list(range(1000))
    oa.request(small)
    assert oa.request(small + [1]).cached_tokens == 0  # below 1024
    big = list(range(3000))
    assert oa.request(big).cached_tokens == 0  # shares 1000 with `small`
    assert oa.request(big[:1500] + [7] * 10).cached_tokens == 1408  # 1024 + 3*128
    assert oa.request(big[:1151] + [7] * 10).cached_tokens == 1024
    assert oa.request(big[:1152] + [7] * 10).cached_tokens == 1152
    assert oa.request(big).cached_tokens == 2944  # full repeat, 1024 + 15*128
    never = OpenAICache(route_hit_rate=0.0)
    never.request(big)
    assert never.request(big).cached_tokens == 0


def test_anthropic_breakpoints_min_and_lookback() -> None:
    an = AnthropicCache("claude-sonnet-4.5")  # min 1024
    toks = list(range(3000))
    bounds = list(range(100, 3001, 100))  # 30 blocks of 100 tokens
    r1 = an.request(toks, breakpoints=[3000], boundaries=bounds)
    assert (r1.cached_tokens, r1.written_tokens) == (0, 3000)
    # change block 25 (tokens 2400..2499): walking back from block 30 finds block 24 (2400 tokens)
    edited = toks[:2450] + [-1] + toks[2451:]
    r2 = an.request(edited, breakpoints=[3000], boundaries=bounds)
    assert (r2.cached_tokens, r2.written_tokens) == (2400, 600)
    # change block 5: the 20-block window from block 30 reaches block 11 only -> miss
    edited = toks[:450] + [-1] + toks[451:]
    assert an.request(edited, breakpoints=[3000], boundaries=bounds).cached_tokens == 0
    # a fresh edit in block 5 with a second breakpoint at block 11: its window reaches block 1,
    # and the unchanged prefix through block 4 (400 tokens) is found
    edited = toks[:450] + [-5] + toks[451:]
    two = an.request(edited, breakpoints=[1100, 3000], boundaries=bounds)
    assert (two.cached_tokens, two.written_tokens) == (400, 2600)
    assert an.request(edited, breakpoints=[1100, 3000], boundaries=bounds).cached_tokens == 3000
    short = AnthropicCache("claude-haiku-4.5")  # min 4096
    assert short.request(toks, breakpoints=[3000]).cached_tokens == 0
    assert short.request(toks, breakpoints=[3000]).written_tokens == 0
    with pytest.raises(ValueError, match="at most 4"):
        an.request(toks, breakpoints=[1100, 1200, 1300, 1400, 1500])
    with pytest.raises(ValueError, match="unknown Anthropic model"):
        AnthropicCache("claude-nonexistent")


def test_anthropic_auto_breakpoint_extension() -> None:
    an = AnthropicCache(min_tokens=1024)
    toks = list(range(2000))
    an.request(toks)
    r = an.request(toks + list(range(5000, 5500)), boundaries=[2000])
    assert (r.cached_tokens, r.written_tokens) == (2000, 500)


def test_deepseek_units() -> None:
    ds = DeepSeekCache()
    toks = list(range(1000))
    assert ds.request(toks).cached_tokens == 0
    assert ds.request(toks[:700] + [1] * 50).cached_tokens == 640
    assert ds.request(toks).cached_tokens == 960
    v4 = DeepSeekCache("v4")
    v4.request(toks, generated=[1, 2, 3], boundaries=[300])
    assert v4.request(toks[:700] + [1] * 5).cached_tokens == 300  # last whole unit: boundary 300
    assert v4.request(toks + [1, 2, 3, 4]).cached_tokens == 1003  # end of model output
    assert v4.request(toks[:700] + [2] * 5).cached_tokens == 700  # detected common prefix (700)
    assert DeepSeekCache("v4", interval=64).request(toks).cached_tokens == 0


def test_factory_and_protocol() -> None:
    for name in CACHE_NAMES:
        sim = make_cache(name)
        assert isinstance(sim, PrefixCacheSim)
        assert sim.request(list(range(10))).prompt_tokens == 10
    assert make_cache("vllm", capacity_blocks=10).request([1] * 40).evicted_tokens == 0
    assert NoCache().request([1, 2, 3]) == CacheResult(3, 0, 0)
    assert set(CACHE_NAMES) == {
        "vllm", "sglang", "openai", "gemini-openrouter", "openai-expected", "gemini-openrouter-expected",
        "openai-replayed", "gemini-openrouter-replayed",
        "openai-exact", "anthropic", "deepseek", "none",
    }
    with pytest.raises(ValueError, match="valid choices: vllm, sglang, openai, gemini-openrouter"):
        make_cache("tgi")


def test_calibrated_profile_grid_routes_and_expected_misses() -> None:
    toks = list(range(10_000))
    sim = CalibratedCache("t", min_tokens=1024, increment=128)
    assert sim.request(toks[:3000]).cached_tokens == 0
    assert sim.request(toks[:5000]).cached_tokens == 1024 + 128 * ((3000 - 1024) // 128)
    # one cache per route: another endpoint starts cold
    routed = CalibratedCache("t", min_tokens=2000, increment=2000, per_route=True)
    routed.request(toks[:6000], session="A")
    assert routed.request(toks[:7000], session="B").cached_tokens == 0
    assert routed.request(toks[:7000], session="A").cached_tokens == 6000
    # expected value of a 10% miss rate: 90% of the hit, every time (totals stay unbiased)
    ev = CalibratedCache("t", min_tokens=1000, increment=1000, miss_rate=0.1)
    ev.request(toks[:4000])
    assert ev.request(toks[:5000]).cached_tokens == 3600
    # shortfalls: always, and more after a reply that reasoned (generated given as a count)
    sf = CalibratedCache("t", min_tokens=1000, increment=1000, shortfall=100, reasoning_shortfall=400)
    sf.request(toks[:4000], generated=[1, 2])
    assert sf.request(toks[:5000], generated=50).cached_tokens == 3900
    assert sf.request(toks[:6000]).cached_tokens == 5000 - 500
    # a reply without reasoning is cached with its prompt
    gen = CalibratedCache("t", min_tokens=1000, increment=1000, cache_generated=True)
    gen.request(toks[:2500], generated=toks[2500:4100])
    assert gen.request(toks[:5000]).cached_tokens == 4000
    with pytest.raises(ValueError):
        CalibratedCache("t", min_tokens=0, increment=1)
    assert calibrated("gemini-openrouter").per_route and not calibrated("openai").per_route
    assert calibrated("openai", miss_rate=0.5).miss_rate == 0.5
    # the expected-value profiles spread the misses over every call: totals unbiased, never 0
    ev_openai = make_cache("openai-expected")
    ev_openai.request(toks[:4000])
    assert ev_openai.request(toks[:5000]).cached_tokens == round(3968 * (1 - 0.04))  # no time given: fine grid


def test_calibrated_time_tiers_fall_to_coarse_chunks_after_fine_ttl() -> None:
    toks = list(range(10_000))
    fine, coarse = 1024 + 128 * ((3000 - 1024) // 128), 640 + 1024 * ((3000 - 640) // 1024)
    assert (fine, coarse) == (2944, 2688)

    def second_hit(gap: float | None, **kw: object) -> int:
        sim = CalibratedCache("t", min_tokens=1024, increment=128, fine_ttl=2.0, chunk_offset=640, **kw)  # type: ignore[arg-type]
        sim.now = None if gap is None else 100.0
        sim.request(toks[:3000])
        sim.now = None if gap is None else 100.0 + gap
        return sim.request(toks[:5000]).cached_tokens

    assert second_hit(1.0) == fine  # within the fine tier's life
    assert second_hit(2.0) == coarse  # at fine_ttl: only the chunks remain
    assert second_hit(60.0) == coarse
    assert second_hit(None) == fine  # no recorded time: fresh
    assert second_hit(5.0, shortfall=100) == coarse - 100
    # a chunk below the minimum is no hit; the tier is per key (route)
    sim = CalibratedCache("t", min_tokens=1024, increment=128, fine_ttl=2.0, chunk_offset=640)
    sim.now = 0.0
    sim.request(toks[:1600])
    sim.now = 10.0
    assert sim.request(toks[:3000]).cached_tokens == 0  # 640 < 1,024; the fine grid would give 1,536
    routed = CalibratedCache("t", min_tokens=1024, increment=128, per_route=True, fine_ttl=2.0, chunk_offset=640)
    routed.now = 0.0
    routed.request(toks[:3000], session="A")
    routed.now = 1.0
    routed.request(toks[:100], session="B")  # another route's request does not refresh A's clock
    routed.now = 2.5
    assert routed.request(toks[:5000], session="A").cached_tokens == coarse
    for bad in ({"chunk_offset": 1024}, {"chunk": 0}, {"fine_ttl": -1.0}):
        with pytest.raises(ValueError, match="chunk"):
            CalibratedCache("t", min_tokens=1024, increment=128, **bad)  # type: ignore[arg-type]
    assert calibrated("openai").fine_ttl is not None and calibrated("gemini-openrouter").fine_ttl is None


def test_calibrated_chunk_reasoned_holds_a_reasoned_prompt_in_chunks_only() -> None:
    toks = list(range(10_000))
    fine, chunk = 1024 + 128 * ((3000 - 1024) // 128), 640 + 1024 * ((3000 - 640) // 1024)
    sim = CalibratedCache("t", min_tokens=1024, increment=128, chunk_offset=640, chunk_reasoned=True)
    sim.request(toks[:2000], generated=[1, 2])  # no reasoning: the prompt is held on the fine grid
    sim.request(toks[:3000], generated=300)  # reasoning: this prompt is held in whole chunks only
    # the better of the chunk grid of the reasoned prompt and the fine grid of the earlier one
    assert sim.request(toks[:5000]).cached_tokens == max(chunk, 1024 + 128 * ((2000 - 1024) // 128)) == chunk
    assert sim.request(toks[:6000]).cached_tokens == 1024 + 128 * ((5000 - 1024) // 128)  # that call did not reason
    # an unreplied call's output estimate counts as reasoning; off (the default), every prompt is fine
    off = CalibratedCache("t", min_tokens=1024, increment=128, chunk_offset=640)
    off.request(toks[:3000], generated=300)
    assert off.request(toks[:5000]).cached_tokens == fine
    # stale (past fine_ttl): the chunk grid of the longest prefix held either way
    tiers = CalibratedCache("t", min_tokens=1024, increment=128, chunk_offset=640, chunk_reasoned=True, fine_ttl=1.0)
    tiers.now = 0.0
    tiers.request(toks[:3000], generated=300)
    tiers.now = 5.0
    assert tiers.request(toks[:5000]).cached_tokens == chunk
    assert "chunk_reasoned" not in CALIBRATED["openai"]  # fitted, not shipped (cache_calibration.md)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=6000), min_size=1, max_size=8),
    st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=8, max_size=8),
    st.floats(min_value=0.5, max_value=10.0),
    st.sampled_from([0, 128, 640, 896]),
)
def test_time_tiers_never_exceed_the_fine_grid_and_sit_on_the_chunk_grid(
    lengths: list[int], gaps: list[float], ttl: float, offset: int
) -> None:
    toks = list(range(7000))
    tiered = CalibratedCache("t", min_tokens=1024, increment=128, fine_ttl=ttl, chunk_offset=offset)
    flat = CalibratedCache("t", min_tokens=1024, increment=128)
    now = 0.0
    for n, gap in zip(lengths, gaps, strict=False):
        now += gap
        tiered.now = now
        hit, ref = tiered.request(toks[:n]).cached_tokens, flat.request(toks[:n]).cached_tokens
        assert hit <= ref
        assert hit == ref or hit == 0 or (hit - offset) % 1024 == 0


def _replay_states(prompts: list[list[int]], recorded: list[int]) -> tuple[list[int], list[int]]:
    probe = ReplayedCache("openai")
    states = [probe.probe(p, r) for p, r in zip(prompts, recorded, strict=True)]
    sim = ReplayedCache("openai")
    got = []
    for k, p in enumerate(prompts):
        sim.calls, sim.as_of = k, states[k]
        got.append(sim.request(p).cached_tokens)
    return states, got


def test_replayed_cache_reproduces_recorded_hits_and_transfers_staleness() -> None:
    toks = list(range(20_000))
    prompts = [toks[:2000], toks[:3000], toks[:4000], toks[:5000], toks[:6000]]
    grid = [0, 1920, 2944, 3968, 4992]  # 1,024 + 128k below each previous prompt
    # call 2 reached a cold machine, call 4 one that held only calls 0..1
    recorded = [0, grid[1], 0, grid[3], grid[2]]
    states, got = _replay_states(prompts, recorded)
    assert states == [-1, 0, -1, 2, 1]
    assert got == recorded
    # another policy's prompts meet the same states: call 4 sees its own calls 0..1 only
    other = [toks[:1500], toks[:2500], toks[:3500], toks[:4500], toks[:5500]]
    sim = ReplayedCache("openai")
    hits = []
    for k, p in enumerate(other):
        sim.calls, sim.as_of = k, states[k]
        hits.append(sim.request(p).cached_tokens)
    assert hits == [0, 1408, 0, 3456, 2432]
    # no state given: the calibrated profile's own hit
    plain, cal = ReplayedCache("openai"), calibrated("openai")
    for p in prompts:
        assert plain.request(p).cached_tokens == cal.request(p).cached_tokens
    # a recorded hit between two states: the closest one
    states, got = _replay_states(prompts[:3], [0, 1920, 2000])
    assert states[2] == 0 and got[2] == 1920  # state 0's 1,920 is closer to 2,000 than state 1's 2,944


def test_common_prefix_len() -> None:
    a = list(range(10000))
    assert common_prefix_len(a, a + [1]) == 10000
    for k in (0, 1, 63, 64, 4095, 4096, 4097, 9999):
        b = a[:k] + [-1] + a[k + 1 :]
        assert common_prefix_len(a, b) == k
    assert common_prefix_len((1, 2, 3), [1, 2, 4]) == 2


# --------------------------------------------------------------------------- KV sizes


def test_kv_bytes_table() -> None:
    assert kv_bytes("Qwen/Qwen3-32B", 1) == 256 * KIB
    assert kv_bytes("llama-3.1-8b", 1) == 128 * KIB
    assert kv_bytes("llama-3.1-70b", 1) == 320 * KIB
    assert kv_bytes("qwen3-8b", 1) == 144 * KIB
    assert kv_bytes("qwen3-30b-a3b", 1000) == 1000 * 96 * KIB
    assert kv_spec("qwen3.6-27b").bytes_per_token() == 64 * KIB
    assert kv_spec("qwen3.6-27b").state_bytes() == 153_944_064  # 146.8 MiB (fp32 SSM)
    assert kv_spec("qwen3.5-35b-a3b").bytes_per_token() == 20 * KIB
    assert kv_spec("qwen3.6-35b-a3b").state_bytes() == 64_389_120  # 61.4 MiB
    assert kv_spec("qwen3-next-80b-a3b").bytes_per_token() == 24 * KIB
    assert round(kv_spec("qwen3-next-80b-a3b").state_bytes() / MIB, 1) == 37.7
    assert kv_bytes("qwen3.6-27b", 100, sequences=0) == 100 * 64 * KIB
    assert session_peak_kv_bytes("qwen3-32b", [(1000, 50), (3000, 200), (2000, 10)]) == 3200 * 256 * KIB
    assert session_peak_kv_bytes("qwen3-32b", []) == 0
    with pytest.raises(ValueError, match="unknown model"):
        kv_bytes("gpt-2", 1)


# --------------------------------------------------------------------------- prices


def test_cost_arithmetic() -> None:
    sonnet = Price(3.0, 0.3, 3.75, 15.0)
    # 10k prompt: 6k read, 3k written, 1k plain; 500 out
    assert cost_usd(sonnet, 10_000, 6_000, 3_000, 500) == pytest.approx(
        (1_000 * 3 + 6_000 * 0.3 + 3_000 * 3.75 + 500 * 15) / 1e6
    )
    mini = Price(0.25, 0.025, None, 2.0)  # writes billed as input
    assert cost_usd(mini, 2_000, 1_024, 976, 100) == pytest.approx((976 * 0.25 + 1_024 * 0.025 + 200) / 1e6)
    with pytest.raises(ValueError, match="exceeds prompt"):
        cost_usd(mini, 10, 8, 5, 0)


def test_load_prices(tmp_path: Path) -> None:
    j = tmp_path / "p.json"
    j.write_text(json.dumps({"m": {"input_per_mtok": 1, "cached_input_per_mtok": 0.1, "output_per_mtok": 4}}))
    assert load_prices(j) == {"m": Price(1.0, 0.1, None, 4.0)}
    t = tmp_path / "p.toml"
    t.write_text(
        "[x]\ninput_per_mtok = 3\ncached_input_per_mtok = 0.3\ncache_write_per_mtok = 3.75\noutput_per_mtok = 15\n"
    )
    assert load_prices(t)["x"].cache_write_per_mtok == 3.75
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"m": {"input_per_mtok": "cheap", "cached_input_per_mtok": 0, "output_per_mtok": 1}})
    )
    with pytest.raises(ValueError, match=r"bad\.json: price 'm' field 'input_per_mtok'") as e:
        load_prices(bad)
    assert "\n" not in str(e.value)
    missing = tmp_path / "m.json"
    missing.write_text(json.dumps({"m": {"input_per_mtok": 1, "output_per_mtok": 1}}))
    with pytest.raises(ValueError, match="missing field 'cached_input_per_mtok'"):
        load_prices(missing)
    broken = tmp_path / "broken.toml"
    broken.write_text("[x\n")
    with pytest.raises(ValueError, match=r"broken\.toml: cannot read"):
        load_prices(broken)
    yaml = tmp_path / "p.yaml"
    yaml.write_text("m:\n  input_per_mtok: 1\n")
    with pytest.raises(ValueError, match=r"p\.yaml: cannot read price table \(read as JSON: give a \.json or \.toml file\)"):
        load_prices(yaml)
