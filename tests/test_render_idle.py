"""After an idle gap longer than the provider's cache lifetime the cache is cold, so the boundary
moves for free; the gap comes from the times recorded in the history (render stays pure)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.mechanisms.boundary import idle_s
from refold.render import Renderer, render
from refold.wire import step_time

T0 = 1_760_000_000.0


def run(gaps: dict[int, float], n: int = 24) -> History:
    """A run whose step i was complete at T0 + 5*i seconds, plus ``gaps[i]`` extra before step i."""
    h = History([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}])
    at = T0
    for i in range(1, n + 1):
        at += 5 + gaps.get(i, 0.0)
        body = "\n".join(f"{i}:{j} some output line that is long enough to count" for j in range(40))
        reply: dict[str, Any] = {"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: -\n```bash\ncat f{i}.py\n```"}
        obs = {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>", "extra": {"timestamp": at}}
        h.append(reply, [obs], meta={"time": step_time(reply, [obs])})
    return h


CONFIG = Config.parse(cache="openai", boundary={"min_remaining": 1, "remaining": 1})  # a short horizon: moves rarely pay


def kept_calls(h: History, config: Config = CONFIG) -> list[int]:
    """Calls at which the seed's boundary would have moved but the cost rule kept the old one."""
    r = Renderer(config)
    return [t for t in range(len(h) + 1) if r.render(h, t).stats.boundary < config.policy.boundary(t)]


def test_the_idle_gap_is_read_from_recorded_times() -> None:
    h = run({10: 400.0})
    assert idle_s(h, 10) == 405.0 and idle_s(h, 11) == 5.0
    assert idle_s(h, 1) is None
    assert idle_s(History.from_messages([{"role": "user", "content": "x"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}] * 1), 1) is None


def test_a_cold_cache_makes_the_move_free() -> None:
    warm = kept_calls(run({}))
    assert warm, "the horizon should make the cost rule keep the boundary somewhere"
    t = warm[0]
    cold = run({t: 400.0})  # the call after step t comes 400 s after the one before: past OpenAI's 5-minute cache
    r = Renderer(CONFIG)
    stats = [r.render(cold, u).stats for u in range(t + 1)]
    assert stats[t].boundary == CONFIG.policy.boundary(t)
    assert t not in kept_calls(cold)
    assert render(cold, CONFIG, t).messages == r.render(cold, t).messages  # the memo agrees with the pure function


def test_a_gap_within_the_cache_lifetime_changes_nothing() -> None:
    t = kept_calls(run({}))[0]
    assert kept_calls(run({t: 200.0})) == kept_calls(run({}))
    short_ttl = CONFIG.override(["boundary.cache_ttl_s=100"])
    assert t not in kept_calls(run({t: 200.0}), short_ttl)  # the configured lifetime wins over the profile's


def test_the_fixed_rule_and_a_profile_without_lifetime_ignore_gaps() -> None:
    fixed = CONFIG.override(["boundary.rule=fixed"])
    assert kept_calls(run({}), fixed) == []
    vllm = CONFIG.replace(cache="vllm")
    assert kept_calls(run({5: 9999.0, 11: 9999.0}), vllm) == kept_calls(run({}), vllm)


def test_one_renderer_tells_runs_apart_by_their_times() -> None:
    t = kept_calls(run({}))[0]
    warm, cold = run({}), run({t: 400.0})
    r = Renderer(CONFIG)
    assert r.render(warm, t).messages == render(warm, CONFIG, t).messages
    assert r.render(cold, t).messages == render(cold, CONFIG, t).messages  # same digests, other times
    assert render(warm, CONFIG, t).messages != render(cold, CONFIG, t).messages


def test_step_time_reads_each_format() -> None:
    mini2 = {"role": "tool", "content": "x", "extra": {"timestamp": T0 + 3}}
    assert step_time({"role": "assistant", "content": "a", "extra": {"timestamp": T0}}, [mini2]) == T0 + 3
    mini1_next = {"role": "assistant", "content": "b", "extra": {"response": {"created": int(T0) + 9}}}
    mini1 = {"role": "assistant", "content": "a", "extra": {"response": {"created": int(T0)}}}
    assert step_time(mini1, [{"role": "user", "content": "o"}], mini1_next) == T0 + 9  # when the next call began
    assert step_time(mini1, [{"role": "user", "content": "o"}]) == T0  # the last step: its own call
    refold_next = {"role": "assistant", "content": "b", "extra": {"refold": {"time": T0 + 7}}}
    assert step_time(mini1, [], refold_next) == T0 + 7
    assert step_time({"role": "assistant", "content": "a", "action": "ls"}, [{"role": "user", "content": "o"}]) is None
    assert step_time({"role": "assistant", "content": "a", "extra": {"timestamp": True}}, []) is None
    assert step_time({"role": "assistant", "content": "a", "extra": {"timestamp": 12}}, []) is None  # not unix seconds
    h = History.from_messages([{"role": "user", "content": "task"}, mini1, {"role": "user", "content": "o"}, mini1_next, {"role": "user", "content": "p"}])
    assert [s.meta.get("time") for s in h.steps] == [T0 + 9, T0 + 9]  # the last step: when its own call began


@settings(max_examples=15, deadline=None)
@given(st.dictionaries(st.integers(2, 18), st.sampled_from([0.0, 200.0, 400.0, 5000.0]), max_size=6), st.permutations(range(19)))
def test_with_any_gaps_the_memo_is_pure_and_never_hides_more_than_the_fixed_rule(gaps: dict[int, float], order: list[int]) -> None:
    h = run(gaps, 18)
    r = Renderer(CONFIG)
    for t in order:
        out = r.render(h, t)
        assert out.messages == render(h, CONFIG, t).messages
        assert out.stats.boundary <= CONFIG.policy.boundary(t)
