"""The library's defaults: masking on, the cost-gated boundary, restores that stick, notes that survive."""

from __future__ import annotations

from refold.config import Config
from refold.history import History
from refold.render import Renderer
from refold.types import Shown, content_text

from builders import SYSTEM, TASK, numbered, reply, seed_config


def long_run(steps: int, restore_at: int | None = None, restored: int = 2) -> History:
    h = History([SYSTEM, TASK])
    for i in range(1, steps + 1):
        if i == restore_at:
            h.append({"role": "assistant", "content": reply(None, None, f"restore {restored}")},
                     [{"role": "user", "content": f"[context-manager] Step {restored} restored: " + "x = 1\n" * 200,
                       "extra": {"restore_of": [restored]}}])  # as mini and the proxy record an answered restore
            continue
        lines = [f"value_{i}_{n} = compute({n})  # a line long enough to count" for n in range(60)]
        h.append({"role": "assistant", "content": reply(None, None, f"nl -ba mod{i}.py")}, [{"role": "user", "content": numbered(lines)}])
    return h


def test_a_restored_step_stays_visible_while_the_agent_works_from_it() -> None:
    h = long_run(40, restore_at=20)
    r = Renderer(Config())
    seen = []
    for t in range(20, 33):  # the ten calls after the restore
        p = r.render(h, t)
        shown = [o.shown for o in p.origins if o.step == 20 and o.part == "output"]
        seen.append(shown == [Shown.RESTORED])
    assert all(seen), seen
    late = r.render(h, 40)  # later it may be hidden again, but only as a restorable note
    for m, o in zip(late.messages, late.origins, strict=True):
        if o.step == 20 and o.part == "output" and o.shown is Shown.NOTE:
            assert "restore 20" in content_text(m.get("content"))


def test_default_masks_old_outputs_and_keeps_at_least_five_recent_ones() -> None:
    h = long_run(40)
    p = Renderer(Config()).render(h)
    masked = {o.step for o in p.origins if o.part == "output" and o.shown is Shown.NOTE}
    assert masked, "nothing masked on a 40-step run"
    assert not masked & set(range(36, 41)), "one of the five most recent outputs is hidden"
    full = Renderer(seed_config()).render(h)
    assert len(p.serialized()) < 0.7 * len(full.serialized())


def test_the_cost_rule_never_hides_more_than_the_fixed_rule() -> None:
    h = long_run(40)
    cost, fixed = Renderer(Config()), Renderer(Config.parse(boundary={"rule": "fixed"}))
    for t in range(41):
        a, b = cost.render(h, t), fixed.render(h, t)
        assert a.stats.boundary <= b.stats.boundary
        hidden_a = {o.step for o in a.origins if o.shown is Shown.NOTE}
        hidden_b = {o.step for o in b.origins if o.shown is Shown.NOTE}
        assert hidden_a <= hidden_b, f"t={t}"


def test_a_move_that_does_not_pay_is_deferred_and_the_prefix_stays() -> None:
    h = long_run(12)
    r = Renderer(Config.parse(boundary={"min_remaining": 1}))
    prev = ""
    moves = 0
    for t in range(13):
        p = r.render(h, t)
        s = p.serialized()
        if prev and not s.startswith(prev):
            moves += 1
        prev = s
    fixed_moves = sum(1 for t in range(1, 13) if Config().policy.boundary(t) != Config().policy.boundary(t - 1))
    assert moves < fixed_moves


def test_reminders_are_dropped_behind_the_boundary() -> None:
    # a reminder spoke to the reply after its output: behind the boundary it is spent, paid at
    # every call for nothing; in the tail it stays (the cached prefix never changes between moves)
    h = History([SYSTEM, TASK])
    body = numbered([f"line_{n} = something_long_enough({n})" for n in range(80)])
    for i in range(1, 10):  # the same read again and again, replies without PROGRESS/STALE
        h.append({"role": "assistant", "content": reply(None, None, "nl -ba a.py")}, [{"role": "user", "content": body}])
        h.append({"role": "assistant", "content": reply(None, None, f"echo {i}")}, [{"role": "user", "content": f"{i}"}])
    p = Renderer(Config.parse(mask_after=None, boundary={"rule": "fixed"})).render(h)
    b = p.stats.boundary
    assert 0 < b < len(h)
    outputs = [(m, o) for m, o in zip(p.messages, p.origins, strict=True) if o.part == "output"]
    behind = [content_text(m.get("content")) for m, o in outputs if o.step is not None and o.step <= b]
    tail = [content_text(m.get("content")) for m, o in outputs if o.step is not None and o.step > b]
    assert any(o.shown is Shown.STUB for _, o in outputs)
    assert behind and not any("Reminder" in text for text in behind)
    assert tail and all("Reminder" in text for text in tail)


def test_budget_line_measures_the_prompt_it_is_in() -> None:
    h = long_run(30)
    config = Config.parse(ledger={"budget_tokens": 10_000, "chars_per_token": 4.0})
    r = Renderer(config)
    for t in range(1, 31):
        p = r.render(h, t)
        last = content_text(p.messages[-1].get("content"))
        pct = int(last.rsplit("context: ", 1)[1].split("%")[0])
        size = sum(len(content_text(m.get("content"))) for m in p.messages) / 4
        assert abs(pct - 100 * size / 10_000) <= 2, f"t={t}: says {pct}%, the prompt is {100 * size / 10_000:.0f}%"


def reasoned_run(steps: int) -> History:
    h = History([SYSTEM, TASK])
    for i in range(1, steps + 1):
        thought = "\n".join(f"Reasoning line {n} about step {i}, long enough to be worth hiding." for n in range(8))
        lines = [f"value_{i}_{n} = compute({n})  # a line long enough to count" for n in range(60)]
        h.append({"role": "assistant", "content": reply(None, None, f"nl -ba mod{i}.py", thought=thought)},
                 [{"role": "user", "content": numbered(lines)}])
    return h


def test_replies_behind_the_boundary_are_condensed_before_their_outputs() -> None:
    h = reasoned_run(30)
    p = Renderer(Config.parse(boundary={"rule": "fixed"})).render(h)
    b = p.stats.boundary
    replies = {o.step: o.shown for o in p.origins if o.part == "reply"}
    outputs = {o.step: o.shown for o in p.origins if o.part == "output"}
    assert all(replies[i] is Shown.NOTE for i in range(1, b + 1)), replies  # reply_after=0: every reply behind b
    assert all(replies[i] is Shown.RECEIVED for i in range(b + 1, 31))
    assert outputs[b] is Shown.RECEIVED and outputs[b - 1] is Shown.RECEIVED  # outputs: mask_after=2 steps longer
    assert outputs[b - 2] is Shown.NOTE
    for m, o in zip(p.messages, p.origins, strict=True):
        if o.part == "reply" and o.shown is Shown.NOTE:
            text = content_text(m.get("content"))
            assert f"nl -ba mod{o.step}.py" in text and f"restore {o.step}" in text  # the command stays, the rest restorable
    old = Renderer(Config.parse(boundary={"rule": "fixed"}, reply_after=None)).render(h)
    old_replies = {o.step: o.shown for o in old.origins if o.part == "reply"}
    assert old_replies[b - 1] is Shown.RECEIVED and old_replies[b - 2] is Shown.NOTE  # None: as old as masked outputs
