"""The render path keeps its prompts: byte-identical digests for every call of every real run in the
repo and of generated histories under every shipped configuration (tests/golden.py), and the memo
gives the same prompts as rendering from scratch for any order of calls."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden import CONFIGS, GOLDEN, compute, differences, generated, prompt_digest
from refold.render import Renderer


def test_every_prompt_matches_the_golden_digests() -> None:
    want = json.loads(GOLDEN.read_text())
    bad = differences(compute(), want)
    assert not bad, f"{len(bad)} prompts changed, first: {bad[:5]} (deliberate? run python tests/golden.py --update)"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(CONFIGS)), st.sampled_from(["cost", "fixed"]), st.integers(0, 5),
    st.lists(st.integers(0, 40), min_size=1, max_size=30),
)
def test_memo_equals_rendering_from_scratch_in_any_call_order(cname: str, rule: str, seed: int, calls: list[int]) -> None:
    # the cost rule renders every call before t anyway; the fixed rule renders call t alone
    # (agent folds after the fact, under both rules: tests/test_spans.py)
    h = generated(seed)
    config = CONFIGS[cname].override([f"boundary.rule={rule}"])
    memo = Renderer(config)
    for t in calls:
        got = memo.render(h, t)
        fresh = Renderer(config).render(h, t)
        assert prompt_digest(got.messages) == prompt_digest(fresh.messages), f"t={t}"
        assert got.origins == fresh.origins and got.stats.boundary == fresh.stats.boundary
