"""The cost rule's peak-KV term: where KV memory is what the user pays for (a self-hosted server),
a move that keeps the session's largest prompt from growing may pay although the tokens it saves
alone would not; a hosted API bills tokens, so its rule is the plain J comparison."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.mechanisms.boundary import PRICES, Candidate, cost, peak_cost, recorded_config, should_move
from refold.render import Renderer

VLLM = Config.parse(cache="vllm")
OPENAI = Config.parse(cache="openai")


def test_only_growth_above_the_peak_is_priced() -> None:
    assert peak_cost(Candidate(900, 900), 0.1, 10, 10, peak=1000) == 0
    assert peak_cost(Candidate(1000, 0), 0.1, 10, 10, peak=1000) == 0
    assert peak_cost(Candidate(1100, 0), 0.1, 10, 10, peak=1000) == 0.1 * 20 * 100
    assert PRICES["vllm"].peak > 0 and PRICES["sglang"].peak > 0
    assert all(PRICES[p].peak == 0 for p in ("openai", "anthropic", "gemini", "deepseek"))


def test_a_move_that_keeps_the_peak_pays_on_a_self_hosted_server_only() -> None:
    # call 8: a 6,000-character output arrived; moving removes 4,000 but recomputes 12,000
    kept, moved, peak = Candidate(20_000, 20_000), Candidate(16_000, 8_000), 14_000
    t, r = 8, 8
    assert cost(moved, PRICES["vllm"], r) > cost(kept, PRICES["vllm"], r)  # tokens alone: keep
    assert should_move(VLLM, t, kept, moved, peak=peak)
    assert not should_move(VLLM.override(["boundary.peak_weight=0"]), t, kept, moved, peak=peak)
    assert not should_move(OPENAI, t, kept, moved, peak=peak)
    # below the peak nothing changes: the same move is kept
    assert not should_move(VLLM, t, kept, moved, peak=30_000)


sizes = st.integers(min_value=0, max_value=200_000)


@settings(max_examples=300, deadline=None)
@given(sizes, sizes, sizes, sizes, sizes, st.integers(1, 500), st.sampled_from(["vllm", "sglang", "openai", "anthropic"]))
def test_the_peak_term_only_adds_moves_to_smaller_prompts(ks: int, kc: int, ms: int, mc: int, peak: int, t: int, cache: str) -> None:
    config = Config.parse(cache=cache)
    kept, moved = Candidate(ks, min(kc, ks)), Candidate(ms, min(mc, ms))
    plain = should_move(config.override(["boundary.peak_weight=0"]), t, kept, moved, peak=peak)
    priced = should_move(config, t, kept, moved, peak=peak)
    if moved.size <= kept.size:
        assert priced or not plain  # every move J accepts is still made
    else:
        assert plain or not priced  # a larger prompt never gains from the peak term
    if PRICES[cache].peak == 0:
        assert priced == plain


BIG = (12, 13, 18)


def run(n: int = 22) -> History:
    """Small outputs and three large file reads: each read would raise the peak of a session whose
    older reads the plain rule keeps, since removing them does not pay in tokens alone."""
    h = History([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the bug."}])
    for i in range(1, n + 1):
        lines = 150 if i in BIG else 12
        body = "\n".join(f"{i}:{j} def helper_{j}(x): return x * {j}  # a line of the file" for j in range(lines))
        reply: dict[str, Any] = {"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: -\n```bash\ncat f{i}.py\n```"}
        h.append(reply, [{"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>"}])
    return h


def peak(config: Config, h: History) -> int:
    r = Renderer(config)
    return max(len(r.render(h, t).serialized()) for t in range(len(h) + 1))


def test_the_peak_term_lowers_a_runs_largest_prompt() -> None:
    h = run()
    plain = VLLM.override(["boundary.peak_weight=0"])
    assert peak(VLLM, h) < peak(plain, h)
    fixed = peak(VLLM.override(["boundary.rule=fixed"]), h)
    assert fixed <= peak(VLLM, h)  # never hides more than the fixed rule


# ---- the plain history until the protocol pays (prompt.deferred) ------------------------------


def plain_prompts(h: History) -> list[list[dict[str, Any]]]:
    r = Renderer(recorded_config(VLLM))
    return [r.render(h, t).messages for t in range(len(h) + 1)]


def test_a_short_session_is_sent_exactly_its_history() -> None:
    h = run(4)
    r = Renderer(VLLM)
    assert [r.render(h, t).messages for t in range(len(h) + 1)] == plain_prompts(h)
    assert all(r.render(h, t).stats.boundary == 0 for t in range(len(h) + 1))
    assert "Context management" in str(Renderer(VLLM.override(["prompt.deferred=false"])).render(h, 1).messages)


def test_the_protocol_arrives_after_the_prefix_with_the_first_omission() -> None:
    h = run()
    r = Renderer(VLLM)
    plain = plain_prompts(h)
    sent = [r.render(h, t) for t in range(len(h) + 1)]
    switch = next(t for t, p in enumerate(sent) if p.messages != plain[t])
    assert all(p.messages == plain[t] for t, p in enumerate(sent[:switch]))
    first = sent[switch]
    n = len(h.prefix)
    assert first.messages[:n] == plain[switch][:n]  # the prefix stays cached
    assert first.messages[n]["role"] == "user" and str(first.messages[n]["content"]).startswith("[context-manager]\n\n## Context management")
    assert first.stats.stable == n and first.stats.boundary > 0
    assert len(first.serialized()) < len(Renderer(recorded_config(VLLM)).render(h, switch).serialized())
    for t in range(switch, len(h) + 1):  # from then on the protocol's prompt, never hiding more than the fixed rule
        assert "[step 1]" in str(sent[t].messages) and sent[t].stats.boundary <= VLLM.policy.boundary(t)


def test_a_context_command_switches_at_once() -> None:
    h = run(3)
    shown = {"role": "user", "content": "[context-manager] Step 1 restored.", "extra": {"restore_of": [1]}}
    h.append({"role": "assistant", "content": "```bash\nrestore 1\n```"}, [shown])
    r = Renderer(VLLM)
    assert r.render(h, 3).messages == plain_prompts(h)[3]
    assert r.render(h, 4).messages != plain_prompts(h)[4]


def test_a_run_saved_before_deferral_keeps_the_protocol_from_the_first_call() -> None:
    saved = VLLM.saved()
    del saved["prompt"]["deferred"]
    assert not Config.from_saved(saved).prompt.deferred
    assert Config.from_saved(VLLM.saved()).prompt.deferred


def test_an_agent_taught_the_format_by_its_own_prompt_sees_labels_from_the_first_call() -> None:
    h = run(3)
    own = VLLM.override(["prompt.format_in_system=false"])
    assert "[step 1]" in str(Renderer(own).render(h, 1).messages)
    assert "[step 1]" not in str(Renderer(VLLM).render(h, 1).messages)
