"""The Mechanism protocol: the render path's built-in chain, and a mechanism added by name."""

from __future__ import annotations

import pytest

from refold.config import MECHANISMS, Config
from refold.errors import PolicyError
from refold.render import Renderer, render
from refold.render.layout import Layout
from refold.render.mechanism import BUILTIN, LayoutView, Mechanism, StepPlan, resolve
from refold.types import Origin, Shown

from builders import reply, text_history

MARK = "[pinned]"


class Shout:
    """A test mechanism: every reply behind the boundary gains a marker line."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        i = plan.step.index
        msg = {**plan.msgs[0], "content": f"{MARK} {i}\n" + str(plan.msgs[0].get("content"))}
        plan.put(0, msg, Origin(i, "reply", Shown.NOTE, (i,)))

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return None


def history(n: int = 14):  # type: ignore[no-untyped-def]
    big = "\n".join(f"line {j} of a long output" for j in range(60))
    return text_history(
        [(reply(f"step {i}", "-", f"cat f{i % 4}.txt"), f"<returncode>0</returncode>\n<output>\n{big}\n</output>") for i in range(1, n + 1)]
    )


def test_builtins_resolve_in_order_and_satisfy_the_protocol() -> None:
    chain = resolve(MECHANISMS)
    assert [type(m).__name__ for m in chain] == ["Spans", "Fold", "Dedup", "Ledger", "Masking", "Replies", "ReplyObjects", "Pins"]
    assert all(isinstance(m, Mechanism) for m in chain)
    assert set(MECHANISMS) == set(BUILTIN)


def test_a_mechanism_added_by_dotted_path_shapes_every_step_behind_the_boundary() -> None:
    h = history()
    config = Config.parse(mechanisms=[*MECHANISMS, f"{__name__}.Shout"])
    out = render(h, config)
    b = out.stats.boundary
    assert b > 0
    marked = [o.step for m, o in zip(out.messages, out.origins, strict=True) if o.part == "reply" and MARK in str(m["content"])]
    assert marked == list(range(1, b + 1))  # behind the boundary, and nowhere in the tail
    plain = render(h, Config())
    assert len(plain.messages) == len(out.messages) and not any(MARK in str(m.get("content")) for m in plain.messages)


def test_the_memo_gives_the_pure_result_with_a_custom_chain() -> None:
    h = history(20)
    config = Config.parse(mechanisms=[*MECHANISMS, f"{__name__}.Shout"])
    r = Renderer(config)
    for t in [*range(len(h) + 1), 7, 20, 3]:
        assert r.render(h, t).messages == render(h, config, t).messages


def test_dropping_a_mechanism_from_the_list_switches_it_off() -> None:
    h = history()
    without = Config.parse(mechanisms=[m for m in MECHANISMS if m != "dedup"])
    shown = {o.shown for o in render(h, without).origins}
    assert Shown.STUB not in shown and Shown.TRIMMED not in shown
    assert Shown.STUB in {o.shown for o in render(h, Config.parse(mask_after=None)).origins}


@pytest.mark.parametrize("spec", ["nope", "no.such.module.Thing", "refold.config.Config"])
def test_a_bad_mechanism_is_one_line_naming_the_field(spec: str) -> None:
    with pytest.raises(PolicyError, match="mechanisms") as e:
        Renderer(Config.parse(mechanisms=[*MECHANISMS, spec]))
    assert "\n" not in str(e.value)
