"""The calibration benchmark's miss analysis (benchmarks/bench_cache_misses.py): which calls are
large misses, what the state after one was, and the bounds it reports, on runs written here in
the mini-swe-agent 2.x format (usage with cached and reasoning tokens, provider times)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from refold.lab.cache import CALIBRATED
from refold.lab.replay import Settings
from refold.lab.replay.runner import TaskResult, replay_history
from refold.loaders import load

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_cache_calibration as cal  # noqa: E402
import bench_cache_misses as precede  # noqa: E402
import bench_cache_states as states  # noqa: E402

CALLS = 6


def _run(path: Path, cached: list[int | None]) -> Path:
    """A gpt-5-mini tool-call run of ``CALLS`` calls, each adding about 5k tokens of output; call
    ``i`` reports ``cached[i]`` tokens (None: the documented rule's hit), prompt counts exact."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {"role": "user", "content": "Fix parse().\n" + "\n".join(f"rule {j}: keep case {j}" for j in range(300))},
    ]
    for i in range(CALLS):
        call = {"function": {"arguments": json.dumps({"command": f"cat part{i}.py"}), "name": "bash"}, "id": f"c{i}", "type": "function"}
        usage = {"prompt_tokens": 1, "completion_tokens": 20 + 100 * (i % 2), "prompt_tokens_details": {"cached_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 100 * (i % 2)}}
        response = {"id": f"chatcmpl-{i}", "created": 1_700_000_000 + 4 * i, "model": "gpt-5-mini-2025-08-07",
                    "system_fingerprint": None, "service_tier": "default", "usage": usage}
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call],
                     "extra": {"actions": [{"command": f"cat part{i}.py", "tool_call_id": f"c{i}"}], "response": response,
                               "timestamp": 1_700_000_001.5 + 4 * i}})
        body = "\n".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}" for j in range(400))
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": body})
    data = {"info": {"model_stats": {"api_calls": CALLS}, "config": {"model": {"model_name": "openai/gpt-5-mini"}},
                     "mini_version": "2.2.4"}, "messages": msgs, "trajectory_format": "mini-swe-agent-1.1"}
    path.write_text(json.dumps(data))
    r = TaskResult(file=str(path))
    replay_history(load(path), Settings(policies=("base",), validate=False, tokenizer="o200k", cache="openai-exact"), r)
    pc = r.policies["base"]["per_call"]
    for m, n, hit, c in zip([x for x in msgs if x["role"] == "assistant"], pc["prompt_tokens"], pc["cached_tokens"], cached, strict=True):
        m["extra"]["response"]["usage"].update(prompt_tokens=n, prompt_tokens_details={"cached_tokens": hit if c is None else c})
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    d = tmp_path_factory.mktemp("runs")
    warm = [None] * CALLS
    # b: call 3 (index 2) reached a cold machine, the call after it one holding the missed call
    paths = [_run(d / "a.traj.json", warm), _run(d / "b.traj.json", [None, None, 0, None, None, None])]
    return cal._runs([str(p) for p in paths], "o200k", "gpt-5-mini")


def test_large_misses_and_the_state_after_them(runs: list[Any]) -> None:
    ev = precede.evidence(runs, dict(CALIBRATED["openai"]))
    assert ev["calls"] == 2 * (CALLS - 1)
    assert ev["large_misses"] == {"fit": 0, "test": 1}
    after = ev["recorded_outcomes"]["after a large miss: the state the next call reached"]
    assert after == {precede.HOLDS: {"fit": [0, 0], "test": [0, 1]}}
    prev = ev["recorded_outcomes"]["previous stored call a large miss"]
    assert prev["yes"]["test"] == [0, 1] and prev["no"]["test"] == [1, CALLS - 2]
    # every call has the same recorded response fields: listed as carrying no information
    text = "\n".join(precede.lines("gpt-5-mini", ev))
    assert "response field `service_tier` = default" in text
    # the miss came after a reply with reasoning (100 tokens): the row says so on the test half
    assert "| previous reply's reasoning tokens | 1-199 | 0/2 (0%) | 1/2 (50%) |" in text


def test_blind_bound_is_what_the_misses_alone_cost() -> None:
    # nine exact calls, one miss predicted at the fine grid's hit: bias 0.09 until hits are lowered
    rows = [(1000, 900, 0.9)] * 9 + [(1000, 900, 0.0)]
    got = precede.blind_bound(rows, [False] * 9 + [True])
    # lowered by m: bias (0.9 - 9m) / 10 <= 0.03 from m = 0.067; MAE (0.9 + 7.2m) / 10
    assert got["lowered_by"] == pytest.approx(0.067)
    assert got["mae"] == pytest.approx(0.1382, abs=1e-4)
    assert got["mae_unlowered"] == pytest.approx(0.09)
    assert precede.blind_bound(rows[:9], [False] * 9) == {"mae": 0.0, "bias": 0.0, "lowered_by": 0.0, "mae_unlowered": 0.0}


def test_combinations_find_a_value_that_tells_misses() -> None:
    def call(half: str, a: str, big: bool) -> precede.Call:
        return precede.Call("r", half, 10_000, 8_000, 0 if big else 8_000, big, {"a": a, "b": "x" if big else "y"})

    calls = [call("fit", "1", True)] * 5 + [call("fit", "0", False)] * 10 + [call("test", "1", True), call("test", "0", False)]
    seen, over = precede.combinations(calls)
    assert seen == 6  # a=0, a=1, b=x, b=y, (a=0, b=y), (a=1, b=x)
    assert [cond for share, _, cond, _ in over if share == 1.0] == [(("a", "1"),), (("b", "x"),), (("a", "1"), ("b", "x"))]
    effect = precede.rule_effect(calls, (("a", "1"),))
    assert effect["ratio"] == 0.0 and effect["test_after"] == 0.0 < effect["test_before"]


def test_states_count_the_misses_and_what_can_be_scored(runs: list[Any]) -> None:
    ev = states.evidence(runs, 640, 1.5)
    fit, test = ev["halves"]["fit"], ev["halves"]["test"]
    # every call stored, none above the documented rule's hit; run b's cold call hit zero
    assert (fit["replayed"], fit["scored"], test["replayed"], test["scored"]) == (CALLS, CALLS, CALLS, CALLS)
    assert fit["above_fine"] == fit["above_fine_with_replies"] == test["above_fine_with_replies"] == 0
    assert (fit["large"], test["large"], test["large_zero"], test["large_older"], test["large_other"]) == (0, 1, 1, 0, 0)
    assert ev["leading_tokens_shared_by_all_runs"] == len(runs[0].calls[0].ids)  # the two runs open alike
    assert ev["longest_overlap_of_two_runs_s"] == 4.0 * (CALLS - 1)  # recorded at the same times
    assert sum(n for _, n in ev["large_misses_by_day"].values()) == 2 * (CALLS - 1)
    # calls 2 and 4 (0-based) follow a reply that reasoned (odd calls reason), 4 s later: past a 1.5 s tier
    assert (test["after_reasoned"], test["after_reasoned_stale"]) == (2, 2)
    assert states.evidence(runs, 640, 5.0)["halves"]["test"]["after_reasoned_stale"] == 0
    text = "\n".join(states.lines("gpt-5-mini", ev))
    assert "| test | 1 | 6 | 6 | 0 | 0 | 1 | 1 | 0 | 0 |" in text
