"""The shared-server simulator (refold.lab.serversim): hand-checked tiny scenarios, invariants, the CLI.

Step time is a constant 1 s per engine step in the hand-checked cases, so every clock value below
can be worked out on paper.  Nothing here is timed.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.history import History
from refold.lab.serversim import (
    Engine,
    ServerConfig,
    StepPlan,
    Trace,
    Turn,
    block_hashes,
    build_trace,
    capacity_blocks_for,
    dynamo_step,
    make_step_time,
    set_shared_prefixes,
    simulate,
)
from refold.loaders import load

from conftest import DATA, CliResult, run_cli

B = 16
RUN = Path(__file__).parent / "data" / "mswea-gemini3pro__django__django-16255.traj.json"
DEMO = Path(__file__).parents[1] / "src" / "refold" / "data" / "django__django-11477.traj.json.gz"


def one_second(plan: StepPlan) -> float:
    return 1.0


def trace(turns: list[tuple[list[int], int]], name: str = "t", policy: str = "p") -> Trace:
    """A trace from (prompt ids, output length) pairs; outputs are unique negative ids."""
    out: list[Turn] = []
    prev = None
    neg = 0
    for prompt, n_out in turns:
        seq = prompt + list(range(-neg - 1, -neg - n_out - 1, -1))
        neg += n_out
        hashes = block_hashes(seq, B, prev)
        prev = (seq, hashes)
        out.append(Turn(len(prompt), n_out, hashes))
    return Trace(name, policy, out, turns[0][0] if turns else [])


def cfg(capacity: int, **kw: float) -> ServerConfig:
    return ServerConfig(capacity_blocks=capacity, block_size=B, **kw)  # type: ignore[arg-type]


def test_single_request_timeline() -> None:
    # P=32: one prefill step samples token 1 (TTFT 1 s), two decode steps finish at t=3.
    r = simulate([trace([(list(range(32)), 3)])], 1, cfg(100), one_second)
    assert (r.requests, r.makespan, r.steps) == (1, 3.0, 3)
    assert (r.wait_mean, r.ttft_mean, r.cached_tokens, r.preemptions) == (0.0, 1.0, 0, 0)
    assert r.peak_blocks == 3  # ceil((32 + 2) / 16): the last sampled token has no KV
    assert r.prefilled_tokens == 32 and r.output_tokens == 3


def test_shared_prefix_hit_and_last_token_recomputed() -> None:
    shared = list(range(1000, 1032))  # two blocks common to both runs
    a = trace([(shared + list(range(16)), 1)], "a")
    b = trace([(shared + list(range(500, 516)), 1)], "b")
    set_shared_prefixes([a, b], B)
    assert a.shared_blocks == b.shared_blocks == 2
    # b starts after a finished: a's blocks sit in the free queue, still hashed
    r = simulate([a, b], 2, cfg(100, stagger=10.0), one_second)
    assert r.cached_tokens == 32 and r.prompt_tokens == 96
    # an identical 32-token prompt hits one block only: the last block is recomputed (P-1 cap)
    same = trace([(shared, 1)])
    same.shared_blocks = 2  # the copy (session 1) shares everything
    r2 = simulate([same], 2, cfg(100, stagger=10.0), one_second)
    assert r2.cached_tokens == 16


def test_copies_of_one_run_share_only_the_shared_prefix() -> None:
    t = trace([(list(range(64)), 1)])
    t.shared_blocks = 1
    r = simulate([t], 2, cfg(100, stagger=10.0), one_second)
    assert r.cached_tokens == 16  # session 1 is copy 1: salted after block 0


def test_next_turn_hits_the_previous_turn() -> None:
    p1 = list(range(40))
    out1 = [-1, -2, -3, -4, -5, -6, -7, -8, -9]
    turn2 = p1 + out1 + list(range(100, 121))  # 70 tokens
    t = Trace("s", "p", [Turn(40, 9, block_hashes(p1 + out1, B)), Turn(70, 1, block_hashes(turn2, B))], p1)
    r = simulate([t], 1, cfg(100), one_second)
    # turn 1 holds 40 + 9 - 1 = 48 tokens of KV (the last sampled token has none): 3 full blocks,
    # all in turn 2's prefix
    assert r.cached_tokens == 48
    short = Trace(
        "s", "p", [Turn(40, 8, block_hashes(p1 + out1[:8], B)), Turn(70, 1, block_hashes(turn2, B))], p1
    )
    assert simulate([short], 1, cfg(100), one_second).cached_tokens == 32  # 47 tokens: 2 full blocks


def test_queue_wait_when_capacity_is_exceeded() -> None:
    # capacity 4 blocks; each request pins 3 blocks at admission (full prompt must fit), so the
    # second waits until the first finishes at t=2 (prefill step, decode step).
    a = trace([(list(range(48)), 2)], "a")
    b = trace([(list(range(100, 148)), 2)], "b")
    r = simulate([a, b], 2, cfg(4, stagger=0.0), one_second)
    assert r.requests == 2 and r.preemptions == 0
    assert r.wait_p99 == 2.0 and r.wait_mean == 1.0
    assert r.makespan == 4.0 and r.peak_blocks == 4
    roomy = simulate([a, b], 2, cfg(8, stagger=0.0), one_second)
    assert roomy.wait_mean == 0.0 and roomy.makespan == 2.0


def test_capacity_forcing_a_preemption() -> None:
    # 5 blocks; both admitted (2 blocks each), then decode growth needs a 3rd block each:
    # the most recently admitted request (b) is preempted, recomputed later, and both finish.
    a = trace([(list(range(32)), 40)], "a")
    b = trace([(list(range(100, 132)), 40)], "b")
    r = simulate([a, b], 2, cfg(5, stagger=0.0), one_second)
    assert r.requests == 2
    assert r.preemptions >= 1 and r.preempted_requests == 1
    assert r.prefilled_tokens > 64  # b's recompute (partly covered by its own cached blocks)


def test_shorter_prompts_fewer_preemptions() -> None:
    def run(prompt_len: int) -> int:
        traces = [trace([(list(range(1000 * s, 1000 * s + prompt_len)), 48)], f"s{s}", "x") for s in range(4)]
        return simulate(traces, 4, cfg(20, stagger=0.0), one_second).preemptions

    # 20 blocks: four 96-token prompts grow to 9 blocks each (preemptions), four 32-token prompts
    # to ceil((32 + 47) / 16) = 5 blocks each, exactly the pool
    base, short = run(96), run(32)
    assert base > 0 and short == 0


def test_step_time_models_and_capacity() -> None:
    plan = StepPlan(0, 0, 0, 0, 0, 100, ())
    assert dynamo_step(plan) == 0.0
    assert (
        abs(dynamo_step(StepPlan(1000, 0, 0, 0, 0, 100, ())) - 0.0321044389) < 1e-9
    )  # 0.421 + 15.183 + 16.5 ms
    assert dynamo_step(StepPlan(0, 0, 4, 1000, 100, 100, ())) > dynamo_step(
        StepPlan(0, 0, 4, 1000, 0, 100, ())
    )
    roof = make_step_time("roofline", "qwen3.6-27b", "h100")
    decode = roof(StepPlan(0, 0, 1, 1000, 10, 100, ()))
    assert 0.015 < decode < 0.03  # 54 GB of weights at ~2.7 TB/s
    assert roof(StepPlan(8192, 8192 * 4096, 0, 0, 10, 100, ())) > decode
    blocks = capacity_blocks_for("qwen3.6-27b", 79.6)
    assert 18_000 < blocks < 21_000  # ~19 GiB of 64 KiB/token KV


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Trace], int, int]:
    n = draw(st.integers(1, 3))
    traces = []
    for s in range(n):
        k = draw(st.integers(1, 3))
        prompt: list[int] = []
        turns = []
        for _ in range(k):
            # a small alphabet makes runs share prefixes; prompts grow or get rewritten
            if prompt and draw(st.booleans()):
                prompt = prompt + draw(st.lists(st.integers(0, 2), min_size=1, max_size=40))
            else:
                prompt = draw(st.lists(st.integers(0, 2), min_size=1, max_size=80))
            turns.append((prompt, draw(st.integers(1, 40))))
        traces.append(trace(turns, f"s{s}"))
    set_shared_prefixes(traces, B)
    need = max(-(-t.max_kv_tokens // B) for t in traces)
    return traces, draw(st.integers(1, 6)), need + draw(st.integers(0, 8))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(8, 64))
def test_invariants(sc: tuple[list[Trace], int, int], budget: int) -> None:
    traces, w, capacity = sc

    def check(engine: Engine) -> None:
        pool = engine.pool
        assert pool.pinned <= pool.capacity
        held: dict[int, int] = {}
        for req in engine.running:
            for b in req.blocks:
                held[b] = held.get(b, 0) + 1
        assert all(pool.ref[b] == c for b, c in held.items())
        assert len(held) == pool.pinned and not set(held) & set(pool.free)
        assert all(not r.blocks for r in engine.waiting)

    conf = ServerConfig(capacity, B, budget, stagger=0.5, tool_delay=0.25)
    r = simulate(traces, w, conf, one_second, on_step=check)
    n = len(traces)
    assert r.requests == sum(len(traces[i % n].turns) for i in range(w))
    assert r.peak_blocks <= capacity
    assert r.wait_mean >= 0 and r.ttft_mean >= 1.0
    again = simulate(traces, w, conf, one_second)
    assert again.to_dict() == r.to_dict()  # deterministic


def test_cached_tokens_capped_per_request() -> None:
    seen = []
    a = trace([(list(range(48)), 1), (list(range(48)), 1), (list(range(47)), 1)])

    def check(engine: Engine) -> None:
        for req in engine.running:
            if req.cached_tokens >= 0:
                seen.append((req.cached_tokens, req.prompt_len))

    simulate([a], 1, cfg(50), one_second, on_step=check)
    assert seen and all(c <= p - 1 and c % B == 0 for c, p in seen)
    assert max(c for c, _ in seen) == 32


def test_build_trace_from_a_recorded_run() -> None:
    h = load(DEMO)  # 33 calls; refold-best removes about a third of the prompt tokens
    base = build_trace(h, "base", tokenizer="chars4")
    best = build_trace(h, "refold-best", tokenizer="chars4")
    assert len(base.turns) == len(h) == len(best.turns)
    assert best.prompt_tokens < base.prompt_tokens
    usage = h.step(1).meta.get("usage") or {}
    if isinstance(usage.get("completion_tokens"), int):
        assert base.turns[0].out_len == usage["completion_tokens"]
    fixed = build_trace(h, "base", tokenizer="chars4", output_tokens=7)
    assert {t.out_len for t in fixed.turns} == {7}


def test_a_recorded_reply_length_no_model_writes_is_read_as_unknown() -> None:
    """completion_tokens 10**7 (a mangled record) made a 10M-id placeholder list per call; 10**30
    an OverflowError traceback from refold simulate. The reply's own tokens stand in for it."""
    msgs: list[dict[str, object]] = [{"role": "user", "content": "task"}]
    for i in range(3):
        usage = {"prompt_tokens": 10, "completion_tokens": 10**7}
        msgs += [{"role": "assistant", "content": f"ls {i}", "extra": {"response": {"usage": usage}}}, {"role": "user", "content": "out"}]
    trace = build_trace(History.from_messages(msgs), "base", tokenizer="chars4")
    assert all(t.out_len < 100 for t in trace.turns)


# ---- CLI ----------------------------------------------------------------------------------------

def _cli(*args: str) -> CliResult:
    return run_cli("simulate", *args)  # the real entry point, in-process


def test_cli_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    res = _cli(
        str(RUN), "--tokenizer", "chars4", "--sessions", "1,2", "--kv-tokens", "100000", "--json", str(out)
    )
    assert res.returncode == 0, res.stderr
    assert "SIMULATED" in res.stdout and "refold-best" in res.stdout
    report = json.loads(out.read_text())
    assert report["simulated"] is True and len(report["results"]) == 4
    # the default model is hybrid: vLLM's aligned block (784) and 3 blocks of state per sequence
    assert report["settings"]["block_size"] == 784 and report["settings"]["state_blocks_per_sequence"] == 3
    assert report["settings"]["kv_tokens"] == 100000 // 784 * 784
    assert "Uncalibrated:" in res.stdout and report["uncalibrated"]
    res = _cli(str(RUN), "--tokenizer", "chars4", "--sessions", "1", "--kv-tokens", "100000", "--block-size", "16", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["settings"]["kv_tokens"] == 100000
    # a policy named twice is simulated once (it was two identical rows and results)
    res = _cli(str(RUN), "--tokenizer", "chars4", "--sessions", "1", "--policy", "base,base", "--json", str(out))
    assert res.returncode == 0, res.stderr
    assert len(json.loads(out.read_text())["results"]) == 1


def test_cli_reads_its_inputs_as_replay_does(tmp_path: Path) -> None:
    """simulate names a copy of one run and an empty folder as replay does (one input_runs)."""
    (tmp_path / "a.traj.json").write_bytes(RUN.read_bytes())
    (tmp_path / "b.traj.json").write_bytes(RUN.read_bytes())
    res = _cli(str(tmp_path), "--tokenizer", "chars4", "--sessions", "1", "--policy", "base")
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path / 'b.traj.json'} holds the same run as {tmp_path / 'a.traj.json'}" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _cli(str(empty), "--tokenizer", "chars4", "--sessions", "1")
    assert res.returncode == 2 and "no trajectory files found in the given paths" in res.stderr


def test_cli_maxima_say_when_they_are_only_a_lower_bound() -> None:
    """'max w ... 24 (largest tested w)' read as if 24 were the largest w tried; a maximum at the
    largest w tried was printed as the maximum."""
    from rich.console import Console

    from refold.cli.simulate_output import print_maxima

    console = Console(width=300, record=True)
    maxima = {"base": {"no_preemption": 16, "wait": 48}, "tight": {"no_preemption": 0, "wait": 0}}
    print_maxima(console, maxima, 1.0, "the largest tested w that meets it", (8, 48))
    text = console.export_text()
    assert "base: max w without preemption 16, with mean queue wait <= 1s 48 or more (the largest w tried)" in text
    assert "tight: max w without preemption none (not even w=8)" in text


def test_cli_counts_the_sessions_of_a_multi_agent_file(tmp_path: Path) -> None:
    """A CodeR file holds one session per agent: the title and the JSON count sessions, not files."""
    coder = DATA / "bill" / "coder_multiagent.traj"
    out = tmp_path / "sim.json"
    res = _cli(str(coder), "--tokenizer", "chars4", "--sessions", "1", "--kv-tokens", "100000", "--json", str(out))
    assert res.returncode == 0, res.stderr
    title = res.stdout.split("KV pool")[0]
    assert "1 file (2 sessions)" in title, title
    report = json.loads(out.read_text())
    assert report["sessions"] == 2 and len(report["files"]) == 1
    assert "sessions_per_file" not in report  # it held the total, not a per-file count
    assert "replays the runs again" not in res.stdout  # w = 1: no run is used twice
    res = _cli(str(coder), "--tokenizer", "chars4", "--sessions", "3", "--kv-tokens", "100000")
    assert "w above 2 replays the runs again: session i is run i mod 2" in " ".join(res.stdout.split())


def test_hybrid_state_pins_blocks_and_hits_stop_at_the_prompt() -> None:
    from refold.lab.cache.kv import hybrid_block_size, state_blocks
    from refold.lab.serversim.engine import Engine, Request

    assert hybrid_block_size("qwen3.6-27b") == 784 and hybrid_block_size("qwen3-next-80b-a3b") == 544
    assert hybrid_block_size("qwen3-32b") is None and state_blocks("qwen3-32b", 16) == 0
    assert state_blocks("qwen3.6-27b", 784) == 3
    eng = Engine(9, 4, state_blocks=3)
    req = Request(0, 0, 0, 0.0, prompt_len=8, out_len=2, hashes=[1, 2])
    eng.add(req)
    eng.schedule(0.0)
    assert len(req.state) == 3 and eng.pool.pinned == 2 + 3  # prompt blocks + state
    big = Request(1, 1, 0, 0.0, prompt_len=8, out_len=2, hashes=[3, 4])
    eng.add(big)
    plan = eng.schedule(0.0)
    assert big not in [r for r, _ in plan.scheduled]  # its 2 KV + 3 state blocks exceed the 4 free
    h = History.from_messages([{"role": "user", "content": "task " * 50}, {"role": "assistant", "content": "ok " * 40}, {"role": "user", "content": "out"}, {"role": "assistant", "content": "done"}])
    full = build_trace(h, "base", tokenizer="chars4", block_size=4)
    cut = build_trace(h, "base", tokenizer="chars4", block_size=4, prompt_only_hashes=True)
    assert all(len(t.hashes) == (t.prompt_len - 1) // 4 for t in cut.turns)
    assert len(full.turns[0].hashes) > len(cut.turns[0].hashes)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    cases = [
        ("--sessions", "0"),
        ("--sessions", "a,b"),
        ("--sessions", "8,100000"),  # ran for minutes with no output
        ("--policy", "nope"),
        ("--kv-tokens", "1000", "--gpu-gib", "80"),
        ("--kv-tokens", "64"),  # the run's largest request does not fit
        ("--gpu", "tpu"),
        ("--step-model", "magic"),
        ("--model", "gpt-9"),
        ("--stagger", "nan"),  # NaN compares false with every bound: it once hung the simulation
        ("--tool-delay", "inf"),
        ("--gpu-gib", "nan"),
        ("--wait-threshold", "nan"),
        ("--kv-tokens", "99999999999999999999"),  # a MemoryError traceback: the pool is held block by block
        ("--gpu-gib", "1e300"),  # a ValueError traceback (NaN in the sizing)
        ("--block-size", "99999999999999999999"),
    ]
    for extra in cases:
        res = _cli(str(RUN), "--tokenizer", "chars4", *extra)
        assert res.returncode == 2, (extra, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("refold: error:"), (extra, res.stderr)
    missing = _cli(str(tmp_path / "nothing.json"))
    assert missing.returncode == 2 and "no such file" in missing.stderr
    # it said "max_num_batched_tokens must be >= 1": vLLM's name, not the flag the user typed
    batched = _cli(str(RUN), "--tokenizer", "chars4", "--max-batched-tokens", "0")
    assert batched.returncode == 2 and "--max-batched-tokens must be >= 1, got 0" in batched.stderr
