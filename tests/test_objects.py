"""Self-GC (seed 002) and spans after the fact (seed 001): replies as objects, pins, fold_steps,
artefacts that survive a fold, the substance guardrail, the ledger view at the tail."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.context.answers import answer
from refold.history import History
from refold.mechanisms.artefacts import artefacts
from refold.mechanisms.guardrail import missing
from refold.mechanisms.objects import ObjectIndex, plan_text, reply_kind, reply_object
from refold.protocol import CM, ContextCommand
from refold.render import Renderer, render
from refold.types import Shown, content_text
from test_spans import Session

PLAN = (
    "PROGRESS: plan the fix\nSTALE: -\n\nPlan:\n1. Reproduce the bug with a script\n2. Fix add() in calc.py\n"
    "3. Run the tests\n4. Check add() with negative and very large numbers, then clean up\n\n```bash\nls\n```"
)  # long enough that its condensed form saves something
SELF_GC = Config.parse(preset="self-gc", k=2, mask_after=2, mask_min_chars=20, reminders=False)


def long_output(i: int) -> str:
    return "\n".join(f"line {j} of output {i}, with enough words to be worth masking" for j in range(12))


def run(n: int = 12, config: Config = SELF_GC, plan_at: int = 2) -> Session:
    s = Session(config=config)
    for i in range(1, n + 1):
        if i == plan_at:
            s.h.append({"role": "assistant", "content": PLAN}, [{"role": "user", "content": long_output(i)}])
            continue
        s.step(f"cat f{i}.py", long_output(i), reasoning=f"THOUGHT: step {i} reasoning, long enough to condense.\n" * 6)
    return s


# ---- objects -------------------------------------------------------------------------------------


def test_replies_are_objects_with_the_seeds_fields() -> None:
    h = History([{"role": "user", "content": "task"}])
    h.append({"role": "assistant", "content": PLAN}, [{"role": "user", "content": "a.py"}])
    h.append({"role": "assistant", "content": "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"}, [])
    h.append({"role": "assistant", "content": "THOUGHT: the bug is in add().\n\n```bash\ncat calc.py\n```"}, [{"role": "user", "content": "x"}])
    assert [reply_kind(s) for s in h.steps] == ["plan", "result", "thought"]
    o = reply_object(h.step(1))
    assert (o.id, o.kind, o.tool, dict(o.args), o.created_at_turn) == ("r1", "plan", "bash", {"command": "ls"}, 1)
    assert o.body == h.step(1).reply_text and "4 items" in o.summary
    index = ObjectIndex()
    for s in h.steps:
        index.observe(s)
    record = next(x for x in index.all() if x.id == "1").record()
    assert set(record) == {"id", "kind", "tool", "args", "summary", "body", "created_at_turn", "last_touched_turn"}


@pytest.mark.parametrize(
    "text",
    [
        "Plan:\n1. Reproduce it\n2. Fix it",
        "## Next steps:\n- run the tests\n- update the docs",
        "- [ ] write reproduce.py\n- [x] read the issue",
        "I will:\n1. Read calc.py\n2. Fix add()\n3. Run pytest",
    ],
)
def test_plans_are_detected(text: str) -> None:
    assert plan_text(f"THOUGHT: ok.\n{text}\n\n```bash\nls\n```") is not None


@pytest.mark.parametrize(
    "text",
    [
        "Current `merge_setting`:\n1. `merged` = session headers.\n2. `merged.update(req.headers)`.",  # a trace, not a plan
        "The test fails. Let me look at the file.",
        "Steps 3 and 4 were the same.",
    ],
)
def test_reasoning_is_no_plan(text: str) -> None:
    assert plan_text(text) is None


def test_an_old_reply_folds_and_expands_byte_exact() -> None:
    s = run(10)
    said = s.h.step(4).reply_text
    assert "replaced by its one-line summary from the next context refresh" in s.step("fold r4")  # step 11
    for _ in range(4):
        s.step("true", "ok")
    p = render(s.h, SELF_GC)
    reply4 = next(m for m, o in zip(p.messages, p.origins, strict=True) if o.step == 4 and o.part == "reply")
    assert "Reply r4 folded" in content_text(reply4["content"]) and "```bash\ncat f4.py\n```" in content_text(reply4["content"])
    text = s.step("expand r4")
    assert text.endswith(said) and said in text
    dropped = s.step("drop r3")
    assert "removed" in dropped and answer(s.h, ContextCommand("fold", "r99")).ok is False


# ---- pins ----------------------------------------------------------------------------------------


def shown_of(config: Config, h: History, step: int, part: str, t: int | None = None) -> list[tuple[str, Shown]]:
    p = render(h, config, t)
    return [(content_text(m["content"]), o.shown) for m, o in zip(p.messages, p.origins, strict=True) if o.step == step and o.part in (part, "pin")]


def test_the_latest_plan_stays_pinned_and_the_old_one_may_fold() -> None:
    s = run(14)
    (text, shown), = shown_of(SELF_GC, s.h, 2, "reply")
    assert text == PLAN and shown is Shown.PINNED  # never condensed, though as old as masked replies
    plain = SELF_GC.override(["ledger.pin_plans=false"])
    (text, _), = shown_of(plain, s.h, 2, "reply")
    assert text != PLAN and "reasoning hidden" in text
    s.h.append({"role": "assistant", "content": PLAN.replace("Run the tests", "Run the whole suite")}, [{"role": "user", "content": "ok"}])
    for _ in range(6):
        s.step("true", "ok")
    (text, shown), = shown_of(SELF_GC, s.h, 2, "reply")
    assert shown is not Shown.PINNED  # released once a newer plan exists and the boundary moved


def test_user_pins_are_part_of_the_history_value() -> None:
    s = run(12, config=SELF_GC.override(["ledger.pin_plans=false"]))
    config = s.config
    before = render(s.h, config)
    (masked, _), = shown_of(config, s.h, 4, "output")
    assert "hidden" in masked and long_output(4) not in masked
    pin = s.h.pin("4")
    assert pin.at == 12 and s.h.pins == (pin,)
    (shown, how), = shown_of(config, s.h, 4, "output")
    assert long_output(4) in shown and how is Shown.PINNED
    assert render(s.h, config, 11).messages == Renderer(config).render(s.h, 11).messages  # earlier calls unchanged
    r = Renderer(config)
    assert r.render(s.h).messages == render(s.h, config).messages != before.messages
    restarted = History(s.h.prefix)
    for step in s.h.steps:
        restarted.append(step.reply, step.observations)
    restarted.load_pins([p.record() for p in s.h.pins])
    assert render(restarted, config).messages == render(s.h, config).messages
    s.h.unpin("4")
    assert render(s.h, config).messages == before.messages
    with pytest.raises(ValueError, match="no step 99"):
        s.h.pin("99")


def test_the_agent_pins_with_a_context_command() -> None:
    s = run(12, config=SELF_GC.override(["ledger.pin_plans=false"]))
    assert "pinned" in s.step("pin 5")
    (shown, how), = shown_of(s.config, s.h, 5, "output")
    assert how is Shown.PINNED and long_output(5) in shown
    assert "unpinned" in s.step("unpin 5")
    assert "refused" in s.step("pin 7.3")


def test_a_pinned_step_inside_a_fold_is_kept_verbatim() -> None:
    s = run(12, config=SELF_GC.override(["ledger.pin_plans=false", "boundary.fold_wait=0"]))  # the fold shows at once
    s.h.pin("r5")
    out = s.step('fold_steps 4-7 "f5.py defines add() at f5.py:3, so the bug is there because it subtracts"')
    assert "Span S1 folded after the fact" in out and "tokens after it are recomputed" in out
    p = render(s.h, s.config)
    pins = [content_text(m["content"]) for m, o in zip(p.messages, p.origins, strict=True) if o.shown is Shown.PINNED]
    assert len(pins) == 1 and pins[0].endswith(s.h.step(5).reply_text) and "Pinned reply r5" in pins[0]


# ---- spans after the fact --------------------------------------------------------------------------


def test_fold_steps_after_the_fact_with_guardrails() -> None:
    s = run(10)
    assert "cut across" in s.step('begin_span "q"') or True  # 11: an open span
    assert "still open" in s.step('fold_steps 10-11 "x at a.py:1 because y"')
    assert "only steps taken before" in s.step('fold_steps 3-40 "x at a.py:1 because y"')
    assert "lacks" in s.step('fold_steps 3-6 "looked around and so on, nothing else to see here"') or "not why" in s.answers[-1]
    ok = s.step('fold_steps 3-6 "f4.py:3 subtracts, so add() fails because of the sign"')
    assert "Span S2 folded after the fact: steps 3-6" in ok
    assert "cut across span S2" in s.step('fold_steps 5-8 "f4.py:3 subtracts, so add() fails because of the sign"')
    p = render(s.h, SELF_GC.override(["boundary.fold_wait=0"]))  # shown at once, whatever it costs
    block = next(content_text(m["content"]) for m, o in zip(p.messages, p.origins, strict=True) if o.part == "span")
    assert "Span S2 folded: steps 3-6" in block and "f4.py:3 subtracts" in block


# ---- artefacts -------------------------------------------------------------------------------------


def test_artefacts_keep_every_edit_form_commits_and_the_last_probe_runs() -> None:
    s = Session()
    s.step("open calc.py", "[File: calc.py (10 lines total)]")
    s.step("edit 3:3\n    return a + b\nend_of_edit", "File updated.")
    s.step("sed -i 's/a/b/' util.py")
    s.step("cat > new.py <<'EOF'\nprint(1)\nEOF")
    s.step("git apply fix.patch", "")
    s.step("python reproduce.py", "Traceback (most recent call last):\nValueError: bad")
    s.step("python reproduce.py", "computing\nResult: 3 (expected 3)\nall good")
    s.step("python -m pytest -q tests/test_calc.py", "..F\nFAILED tests/test_calc.py::test_add\n1 failed, 2 passed in 0.1s")
    s.step("git commit -am fix", "[main 9f8e7d6] fix\n 1 file changed")
    kept = "\n".join(artefacts(list(s.h.steps)))
    assert "edited calc.py:\n    edit 3:3" in kept  # SWE-agent's edit writes the open file
    assert "edited util.py" in kept and "created new.py" in kept and "git apply fix.patch" in kept
    assert "commit 9f8e7d6" in kept
    assert kept.count("probe ($ python reproduce.py)") == 1 and "Result: 3 (expected 3)" in kept and "ValueError" not in kept
    assert "1 failed, 2 passed" in kept and "FAILED tests/test_calc.py::test_add" in kept


# ---- the guardrail -----------------------------------------------------------------------------------

SUBSTANCE = [
    "add() subtracts at calc.py:3 because of a typo, so every caller gets a wrong sum",
    "No conversion exists. Rv and core Value are different enums in different crates; cbpv.rs:131, :579.",
    "merge_setting keeps None values from session headers, so requests sends the literal 'None' header",
    "test_abstract_inherited_fields fails since Field.__hash__ includes the model, which changes on attach",
    "The regression came in commit 3f2a9c1 because it dropped the cache invalidation in Renderer._reset",
    "The probe now prints 42 instead of 41, so the off-by-one in range_end is fixed",
    "TypeError in django/db/models/fields/__init__.py due to a tuple compared with a list",
]
FILLER = [
    "...and so on, nothing else to see here, and so on, nothing else to see here",
    "I looked at several files and things seem fine for now, nothing else to see here",
    "Investigated the issue thoroughly and it is resolved as expected, all good",
    "Checked everything in the module and it looks good, and so on and so forth",
    "The problem is somewhere in the code because it is broken somewhere in there",
    "Done with this investigation, moving on to the next part of the work now",
    "sub() is never called by anything at all in the whole repository",
]


@pytest.mark.parametrize("text", SUBSTANCE)
def test_conclusions_with_substance_pass(text: str) -> None:
    assert missing(text) is None


@pytest.mark.parametrize("text", FILLER)
def test_filler_is_refused_with_what_is_missing(text: str) -> None:
    why = missing(text)
    assert why is not None and ("anchor" in why or "not why" in why)


def test_the_old_keyword_test_accepted_filler() -> None:
    s = Session(spans=Config().spans.model_copy(update={"guardrail": "keywords"}))
    s.step('begin_span "q"')
    assert "folded" in s.step(f'fold_span "{FILLER[0]}"')
    s2 = Session()
    s2.step('begin_span "q"')
    assert "refused" in s2.step(f'fold_span "{FILLER[0]}"') and "'and so on' is filler" in s2.answers[-1]


# ---- the ledger view and the budget line -----------------------------------------------------------


def test_the_ledger_view_ends_every_prompt_and_costs_only_its_size() -> None:
    s = run(8)
    r = Renderer(SELF_GC)
    prompts = [r.render(s.h, t) for t in range(1, 9)]
    for t, p in enumerate(prompts, 1):
        assert p.origins[-1].part == "ledger" and content_text(p.messages[-1]["content"]).startswith(f"{CM} Ledger after step {t}")
        assert "r2 plan [pinned]" in content_text(p.messages[-1]["content"]) or t < 2
    for a, b in zip(prompts, prompts[1:], strict=False):  # the view never breaks the cached prefix
        assert b.stats.stable == 0 or b.stats.stable >= len(a.messages) - 1 or b.stats.boundary != a.stats.boundary
    assert "% of 128k tokens" in content_text(prompts[-1].messages[-2]["content"])
    off = render(s.h, SELF_GC.override(["ledger.view=false"]))
    assert off.origins[-1].part != "ledger"


def test_defaults_are_unchanged() -> None:
    s = run(8, config=Config())
    p = render(s.h)
    assert all(o.part != "ledger" and o.shown is not Shown.PINNED for o in p.origins)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["fold r", "drop r", "pin ", "unpin ", "fold ", "pin r"]), min_size=1, max_size=6), st.integers(1, 9))
def test_whatever_is_folded_or_pinned_every_reply_restores_byte_exact(ops: list[str], target: int) -> None:
    s = run(9)
    for op in ops:
        s.step(f"{op}{target}")
    for _ in range(3):
        s.step("true", "ok")
    r = Renderer(SELF_GC)
    assert r.render(s.h).messages == render(s.h, SELF_GC).messages  # the memo agrees with the function
    text = answer(s.h, ContextCommand("expand", f"r{target}")).text
    assert text.endswith(s.h.step(target).reply_text)


def test_compaction_keeps_pinned_objects_verbatim() -> None:
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options
    from refold.tokens import get_tokenizer

    s = run(30)
    opts = Options(tokenizer=get_tokenizer("chars4"), budget=3000, summary_min=16, summary_max=64)
    prompts = list(make_projector("compact+self-gc", opts).prompts(s.h))
    compacted = [p for p in prompts if p.lost_upto >= 2]
    assert compacted, "the budget should force a compaction past the plan"
    for p in compacted:
        texts = [content_text(m.get("content")) for m in p.messages]
        assert any(PLAN in x for x in texts)  # the latest plan survives the summary
        assert "SIMULATED compaction" in texts[len(s.h.prefix)]
    plain = list(make_projector("compact", opts).prompts(s.h))[-1]
    assert not any(PLAN in content_text(m.get("content")) for m in plain.messages)
