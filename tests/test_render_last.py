"""The last prompt's sizes: ``FoldSizer`` reads the shared parts and gives ``fold_effect``'s numbers."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden import CONFIGS, generated
from refold.config import Config
from refold.mechanisms.spans import Span, fold_effect
from refold.render import Renderer
from refold.render.last import FoldSizer
from refold.render.prompt import Joined


def spans_to_size(r: Renderer, t: int) -> list[Span]:
    """Every span of the book, and a few made-up ranges ending at or before step t (a fold_steps)."""
    book = r.span_book
    made = [Span(f"X{a}", "q", a, None, 0, b) for a, b in ((1, 1), (max(1, t // 2), max(1, t - 1)), (t, t + 1))]
    return [*book.spans.values(), *made]


def check(config: Config, seed: int, steps: int) -> int:
    """Every call: the sizer on the renderer's last prompt == fold_effect on the listed prompt."""
    h = generated(seed, steps)
    r = Renderer(config)
    sizer = FoldSizer()
    fast = 0
    for t in range(len(h) + 1):
        p = r.render(h, t)
        if r._plain_sent is not None:  # prompt.deferred: the plain history was sent, the protocol's prompt is held
            continue
        last = r._last
        assert list(last.msgs) == p.messages and list(Joined(*last.origins)) == p.origins
        for span in spans_to_size(r, t):
            for block in (0, 57):
                want = fold_effect(p.messages, p.origins, span, block)
                assert sizer.effect(last, span, block) == want, (t, span)
        fast += last.layout is not None
    return fast


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(CONFIGS)), st.integers(0, 10_000), st.integers(5, 80))
def test_the_sizer_gives_fold_effects_numbers(cname: str, seed: int, steps: int) -> None:
    check(CONFIGS[cname], seed, steps)


def test_the_sizer_reads_the_layout_on_long_runs() -> None:
    # 300 steps: many chunks of 128 messages, shared between layouts, and span folds inside them
    assert check(Config(), 7, 300) > 250
