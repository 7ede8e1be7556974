"""A hosted prefix cache forgets a prompt left idle longer than its lifetime: the replay starts
every policy cold after such a recorded gap, as the render's cost rule assumes (simulated)."""

from __future__ import annotations

from typing import Any

from refold.history import History
from refold.lab.replay import Options, make_projector
from refold.lab.replay.metrics import measure
from refold.tokens import get_tokenizer
from refold.wire import step_time

T0 = 1_760_000_000.0
TOK = get_tokenizer("chars4")


def run(gaps: dict[int, float], n: int = 20) -> History:
    """Step i complete at T0 + 5*i seconds, plus ``gaps[i]`` extra idle seconds before it."""
    h = History([{"role": "system", "content": "You fix bugs. " * 200}, {"role": "user", "content": "Fix it. " * 200}])
    at = T0
    for i in range(1, n + 1):
        at += 5 + gaps.get(i, 0.0)
        body = "\n".join(f"{i}:{j} some output line that is long enough to count" for j in range(40))
        reply: dict[str, Any] = {"role": "assistant", "content": f"THOUGHT: look at f{i}.\n```bash\ncat f{i}.py\n```"}
        obs = {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>", "extra": {"timestamp": at}}
        h.append(reply, [obs], meta={"time": step_time(reply, [obs])})
    return h


def cached_per_call(h: History, policy: str, cache: str) -> tuple[list[int], int]:
    m = measure(h, make_projector(policy, Options(tokenizer=TOK, cache=cache)), TOK, cache_name=cache)
    return m.per_call["cached_tokens"], m.cold_calls


def test_a_gap_longer_than_the_lifetime_starts_every_policy_cold() -> None:
    for policy in ("base", "default"):
        warm, cold_warm = cached_per_call(run({}), policy, "openai")
        cold, cold_n = cached_per_call(run({12: 900.0}), policy, "openai")
        assert cold_warm == 0 and cold_n == 1
        assert warm[12] > 0 and cold[12] == 0  # the call made after step 12 meets an empty cache
        assert cold[:12] == warm[:12] and cold[13] > 0  # before it nothing differs; after it the cache refills


def test_a_gap_within_the_lifetime_and_a_self_hosted_cache_change_nothing() -> None:
    assert cached_per_call(run({12: 200.0}), "base", "openai") == cached_per_call(run({}), "base", "openai")
    assert cached_per_call(run({12: 900.0}), "base", "vllm") == cached_per_call(run({}), "base", "vllm")
