"""Span folding (seed 001) on scripted sessions, and the invariants with spans and ledger operations."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.context.answers import answer
from refold.context.recognize import from_shell, from_tool_call
from refold.history import History
from refold.mechanisms.boundary import plain_first, recorded_config
from refold.mechanisms.ledger import DEFAULT_LEDGER, LedgerPolicy
from refold.mechanisms.spans import DEFAULT_SPANS, SpanPolicy
from refold.policy import Policy
from refold.protocol import CM, COMMAND_NAMES
from refold.render import Renderer
from refold.restore import restore_text
from refold.types import Facts, Message, Outcome, Rendered, Shown, content_text
from refold.wire import answer_record

from builders import SYSTEM, TASK, numbered, seed_config

GOOD = "add used subtraction at calc.py:3, so the test failed; fixed it there"


def out(body: str) -> str:
    return f"<returncode>0</returncode>\n<output>\n{body}\n</output>"


class Session:
    """Drives a history the way an integration does: context commands are answered from it."""

    def __init__(
        self,
        *,
        tools: bool = False,
        policy: Policy | None = None,
        spans: SpanPolicy = DEFAULT_SPANS,
        ledger: LedgerPolicy = DEFAULT_LEDGER,
        config: Config | None = None,
    ) -> None:
        self.h = History([SYSTEM, TASK])
        self.messages: list[Message] = [SYSTEM, TASK]  # the agent's own list, as mini keeps it
        self.tools = tools
        self.policy = config.policy if config else policy or Policy()
        self.spans, self.ledger = (config.spans, config.ledger) if config else (spans, ledger)
        self._config = config
        self.answers: list[str] = []

    @property
    def config(self) -> Config:
        return self._config or Config(policy=self.policy, spans=self.spans, ledger=self.ledger)

    def renderer(self) -> Renderer:
        return Renderer(self._config or seed_config(self.policy, spans=self.spans, ledger=self.ledger))

    def step(
        self, command: str, output: str = "", *, progress: str | None = None, stale: str = "-", reasoning: str = "Working.\n"
    ) -> str:
        i = len(self.h) + 1
        head = f"PROGRESS: {progress or f'step {i}'}\nSTALE: {stale}\n"
        name, _, arg = command.partition(" ")
        if self.tools:
            cmd = from_tool_call(name, json.dumps({"arg": arg.strip('"')})) if name in COMMAND_NAMES else None
            fn = {"name": name, "arguments": json.dumps({"arg": arg.strip('"')})} if cmd else {
                "name": "bash",
                "arguments": json.dumps({"command": command}),
            }
            reply: dict[str, Any] = {"role": "assistant", "content": head, "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}]}
        else:
            cmd = from_shell(command)
            reply = {"role": "assistant", "content": f"{head}{reasoning}```bash\n{command}\n```"}
        obs: dict[str, Any] = {"role": "tool", "tool_call_id": f"c{i}"} if self.tools else {"role": "user"}
        if cmd is not None:
            a = answer(self.h, cmd, self.config)
            obs |= {"content": a.text, "extra": answer_record(cmd.name, a)}
            self.answers.append(a.text)
        else:
            obs["content"] = out(output)
        if len(self.messages) != 2 + sum(1 + len(x.observations) for x in self.h.steps):
            self.messages = self.h.messages()  # a test appended to the history itself
        self.messages += [reply, obs]
        self.h.extend_from_messages(self.messages)
        return str(obs["content"])


def investigation(s: Session) -> None:
    s.step("ls", "calc.py\ntest_calc.py")  # 1
    s.step('begin_span "why does add fail?"')  # 2
    s.step("grep -n add calc.py", "3:    return a - b")  # 3
    s.step('begin_span "is sub used anywhere?"')  # 4
    s.step("grep -rn 'sub(' .", "")  # 5
    s.step('fold_span "no"')  # 6: refused, too short
    s.step('fold_span "sub() is never called by anything at all"')  # 7: refused, no why
    s.step('fold_span "sub() is unused because grep -rn finds no callers"')  # 8
    s.step("sed -i 's/a - b/a + b/' calc.py")  # 9
    s.step("cat > test_add.py <<'EOF'\ndef test_add():\n    assert add(1, 2) == 3\nEOF")  # 10
    s.step("python -m pytest -q", "1 passed in 0.01s")  # 11
    s.step("git commit -am 'fix add'", "[main 1a2b3c4] fix add\n 1 file changed")  # 12
    s.step(f'fold_span "{GOOD}"')  # 13


def blocks(p: Rendered) -> list[tuple[str, tuple[int, ...]]]:
    return [(m["content"], o.covers) for m, o in zip(p.messages, p.origins, strict=True) if o.part == "span"]


def test_nested_spans_fold_in_place_with_artefacts() -> None:
    s = Session()
    investigation(s)
    assert "stays open" in s.answers[2] and "too short" in s.answers[2]
    assert "stays open" in s.answers[3] and "why" in s.answers[3]
    r = s.renderer()
    p8 = r.render(s.h, 8)  # the inner span folds at once, while the outer stays open
    (inner, covers), = blocks(p8)
    assert covers == (4, 5, 6, 7, 8) and "Span S2" in inner and "grep -rn finds no callers" in inner
    p = r.render(s.h, 13)
    (block, covers), = blocks(p)
    assert covers == tuple(range(2, 14))
    assert block.startswith(CM) and "Question: why does add fail?" in block and GOOD in block
    assert "Inner span S2 (steps 4-8): is sub used anywhere? -> sub() is unused" in block
    assert "edited calc.py" in block and "s/a - b/a + b/" in block
    assert "created test_add.py" in block and "commit 1a2b3c4" in block and "1 passed" in block
    assert "grep -n add" not in block  # the search folded away
    assert all(o.step is None or o.step < 2 or o.part == "span" for o in p.origins)
    for i in range(2, 14):  # everything stays restorable
        for m in r.received(s.h, i):
            assert content_text(m.get("content")) in restore_text(s.h, [i])


def test_expand_shows_one_level() -> None:
    s = Session()
    investigation(s)
    text = s.step("expand S1")
    assert "Span S2 folded" in text and "Inner" not in text.split("Span S2 folded")[0]
    assert "Step 3 restored" in text and "Step 5 restored" not in text  # inner steps stay folded
    assert "Step 9 restored" in text
    assert s.h.step(14).restore_of == (2, 3, 9, 10, 11, 12, 13)
    inner = s.step("expand S2")
    assert "Step 5 restored" in inner
    assert CM in s.step("expand S9") and "not a folded span" in s.answers[-1]


def test_fold_cost_is_the_tail_after_the_span_start() -> None:
    s = Session()
    for i in range(1, 8):
        s.step(f"cat f{i}.py", "x = 1\n" * 40)
    s.step('begin_span "where is x set?"')  # 8
    s.step("grep -rn x .", "f1.py:1: x = 1")  # 9
    s.step('fold_span "x is set in f1.py:1 because it is the module default"')  # 10
    r = s.renderer()
    before = r.render(s.h, 9)
    after = r.render(s.h, 10)
    assert before.stats.boundary == after.stats.boundary == 6
    start = next(i for i, o in enumerate(after.origins) if o.part == "span")
    assert after.messages[:start] == before.messages[:start]  # the cached prefix before the span stays
    cost = r.fold_costs["S1"]
    assert cost.kept_messages == start and cost.recomputed_messages == 1
    assert cost.recomputed_chars == len(after.messages[start]["content"])


def test_span_straddling_the_boundary_and_later_moves_keep_one_block() -> None:
    s = Session()
    s.step('begin_span "what does the suite say?"')  # 1
    for i in range(2, 9):
        s.step(f"cat f{i}.py", f"line {i}\n" * 30)
    s.step('fold_span "the suite passes since f2.py..f8.py are consistent"')  # 9
    for i in range(10, 16):
        s.step(f"echo {i}", str(i))
    r = s.renderer()
    for t in range(9, 16):
        p = r.render(s.h, t)
        assert [c for _, c in blocks(p)] == [tuple(range(1, 10))]
        assert not any(o.step is not None and 1 <= o.step <= 9 and o.part != "span" for o in p.origins)


def test_unclosed_spans_remind_and_stay_unfolded() -> None:
    s = Session(spans=SpanPolicy(remind_after=3))
    s.step('begin_span "outer question"')  # 1
    s.step('begin_span "inner question"')  # 2: nests
    texts = [s.step(f"echo {i}", str(i)) for i in range(3, 9)]
    p = s.renderer().render(s.h)
    assert not blocks(p)
    shown = [content_text(m.get("content")) for m in p.messages]
    assert sum("Span S2" in x and "open for 3 steps" in x for x in shown) == 1  # step 5
    assert sum("open for 6 steps" in x for x in shown) == 1  # step 8
    assert "inside span S1" in s.answers[1]
    assert not any("open for" in x for x in texts)  # the history is not edited


def test_refusal_rules_are_configurable_and_recorded_results_win() -> None:
    lax = SpanPolicy(min_chars=2, require_rationale=False)
    s = Session(spans=lax)
    s.step('begin_span "q"')
    assert "folded" in s.step('fold_span "ok"')
    assert s.h.step(2).outcomes == (Outcome("fold_span", True, "S1"),)
    # replayed under the strict default policy, the recorded outcome still decides
    assert blocks(Renderer(seed_config()).render(s.h))
    s2 = Session()
    s2.step('fold_span "nothing is open, so this is refused"')
    assert "no span is open" in s2.answers[0]
    assert CM in s2.step('begin_span ""') and "needs a question" in s2.answers[-1]


def test_tool_call_mode_spans() -> None:
    s = Session(tools=True)
    investigation(s)
    p = s.renderer().render(s.h)
    (_, covers), = blocks(p)
    assert covers == tuple(range(2, 14))
    roles = [m["role"] for m in p.messages]
    for i, m in enumerate(p.messages):  # every tool message still follows its call
        if m["role"] == "tool":
            assert roles[i - 1] in ("assistant", "tool")


# ---- invariants with spans and ledger operations ------------------------------------------------

FILE = [f"line_{n} = value({n}, 'padding to make the lines long enough')" for n in range(1, 60)]


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    budget = draw(st.sampled_from([None, 2000]))
    policy = draw(st.sampled_from([Policy(), Policy(k=1), Policy(chunk=False), Policy(k=2, dedup_min_chars=40)]))
    s = Session(tools=draw(st.booleans()), policy=policy, ledger=LedgerPolicy(budget_tokens=budget), spans=SpanPolicy(remind_after=2))
    for i in range(1, draw(st.integers(1, 18)) + 1):
        kind = draw(st.sampled_from(["read", "read", "run", "begin", "fold_span", "fold_span", "fold", "drop", "expand", "search", "restore"]))
        stale = draw(st.sampled_from(["-", str(max(1, i - 1)), f"{max(1, i - 2)}, {max(1, i - 1)}"]))
        if kind == "read":
            lo = draw(st.integers(1, 40))
            s.step(f"nl -ba a.py | sed -n '{lo},{lo + 15}p'", numbered(FILE[lo - 1 : lo + 15], lo), stale=stale)
        elif kind == "run":
            s.step("python run.py", draw(st.sampled_from(["ok", "FAILED x\n" * 12])), stale=stale)
        elif kind == "begin":
            s.step(f'begin_span "question {i}"', stale=stale)
        elif kind == "fold_span":
            s.step(draw(st.sampled_from(['fold_span "short"', f'fold_span "{GOOD}"'])), stale=stale)
        elif kind in ("fold", "drop", "expand", "restore") and i > 1:
            s.step(f"{kind} {draw(st.integers(1, i - 1))}", stale=stale)
        else:
            s.step('search_ledger "value padding"', stale=stale)
    return s


def check(s: Session, config: Config | None = None) -> None:
    h = s.h
    before = h.messages()  # a deep copy
    inc = Renderer(config) if config else s.renderer()
    plain = Renderer(recorded_config(inc.config)) if plain_first(inc.config) else None
    prev, prev_b = "", -1
    seen = Seen(s)
    for t in range(len(h) + 1):
        p = inc.render(h, t)
        fresh = Renderer(config).render(h, t) if config else s.renderer().render(h, t)
        assert p.messages == fresh.messages and p.origins == fresh.origins
        serial = p.serialized()
        if plain is not None and p.messages == plain.render(h, t).messages:  # the history as is, until the protocol pays
            prev, prev_b = serial, -2  # the first prompt of the protocol is a move
            continue
        folded_now = any(c.step == t for c in inc.fold_costs.values())  # a fold shown first at this call
        if p.stats.boundary == prev_b and not folded_now:
            assert serial.startswith(prev), f"prefix changed at t={t} without a boundary move or a fold"
        prev, prev_b = serial, p.stats.boundary
        nothing_lost(seen, p, t)
    assert h.messages() == before


class Seen:
    """What step i was first shown as and what ``restore i`` returns, read once per step for every
    call checked (the history does not change while it is checked)."""

    def __init__(self, s: Session) -> None:
        self.s, self.renderer = s, s.renderer()
        self._received: dict[int, list[Message]] = {}
        self._restored: dict[int, str] = {}

    def received(self, i: int) -> list[Message]:
        if i not in self._received:
            self._received[i] = self.renderer.received(self.s.h, i)
        return self._received[i]

    def restored(self, i: int) -> str:
        if i not in self._restored:
            self._restored[i] = restore_text(self.s.h, [i], self.s.policy, spans=self.s.spans)
        return self._restored[i]


def nothing_lost(seen: Seen, p: Rendered, t: int) -> None:
    pairs = list(zip(p.messages, p.origins, strict=True))
    in_span = {c: m for m, o in pairs if o.part == "span" for c in o.covers}
    in_note = {c: m for m, o in pairs if o.part == "note" for c in o.covers}
    hidden = {o.step for _, o in pairs if o.part == "output" and o.shown is Shown.NOTE}
    for i in range(1, t + 1):
        received = seen.received(i)
        text = seen.restored(i)
        for m in received:
            assert content_text(m.get("content")) in text  # restore returns the exact bytes
        if i in in_span:
            assert f"steps {min(c for c in in_span if in_span[c] is in_span[i])}-" in in_span[i]["content"]
            continue
        if i in in_note:
            assert f"[step {i}]" in in_note[i]["content"]
            continue
        outs = [(m, o) for m, o in pairs if o.step == i and o.part == "output"]
        assert len(outs) == len(received) - 1
        for (m, o), orig in zip(outs, received[1:], strict=True):
            shown = content_text(m.get("content"))
            if o.shown in (Shown.RECEIVED, Shown.RESTORED):
                assert shown.startswith(content_text(orig.get("content")))  # plus a budget line
                continue
            assert CM in shown and f"restore {i}" in shown
            for src in o.covers[1:]:
                assert src < i and src not in in_span and src not in in_note and src not in hidden


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=sessions())
def test_invariants_with_spans_and_ledger(s: Session) -> None:
    check(s)


def test_invariants_scripted() -> None:
    for tools in (False, True):
        s = Session(tools=tools, ledger=LedgerPolicy(budget_tokens=4000))
        investigation(s)
        s.step("fold 1")
        s.step("drop 3")
        s.step("expand S1")
        for i in range(5):
            s.step(f"echo {i}", str(i))
        check(s)


# ---- when an agent's fold shows: at once, or with the next boundary move (rule "cost") ----------

# the seed's position: a fold waits for the seed's next move (``window`` moves more often, taking it along)
COST = Config.parse(reminders=False, boundary={"position": "seed"})
FIXED = COST.override(["boundary.rule=fixed"])
PAD = "x = 1  # padding the file so that its output is long enough to matter\n"


def covered(p: Rendered) -> set[int]:
    return {c for o in p.origins if o.part == "span" for c in o.covers}


def long_run(s: Session, n: int, lines: int = 30) -> None:
    for i in range(len(s.h) + 1, len(s.h) + n + 1):
        s.step(f"cat f{i}.py", PAD * lines)


def test_a_fold_far_back_waits_for_the_next_boundary_move() -> None:
    s = Session(config=COST)
    long_run(s, 12)
    said = s.step(f'fold_steps 2-3 "{GOOD}"')  # 13: everything after step 2 is cached
    assert "at the next cache-boundary move (within 5 calls)" in said and "folding now would recompute ~" in said
    long_run(s, 2)
    r, fixed = Renderer(COST), Renderer(FIXED)
    before = r.render(s.h, 12).serialized()
    at = r.render(s.h, 13)
    assert not covered(at) and covered(fixed.render(s.h, 13)) == {2, 3}  # the fixed rule folds at once
    assert at.serialized().startswith(before)  # the cached prefix stays: only the new step is added
    assert covered(r.render(s.h, 14)) == set()
    moved = r.render(s.h, 15)  # the next boundary move, one the rule makes anyway, shows it
    assert covered(moved) == {2, 3} and moved.stats.boundary == 12
    assert r.fold_costs["S1"].step == 15
    for i in (2, 3):  # still restorable byte for byte
        for m in r.received(s.h, i):
            assert content_text(m.get("content")) in restore_text(s.h, [i])


def test_a_fold_that_pays_shows_at_once_and_the_answer_says_so() -> None:
    s = Session(config=COST)
    long_run(s, 9, lines=2)
    long_run(s, 3, lines=200)  # 10-12: long outputs at the end of the prompt
    said = s.step('fold_steps 10-12 "f10.py:1 sets x = 1 because it is the default, so nothing else does"')
    assert "are now shown as one block" in said and "tokens after it are recomputed once" in said
    p = Renderer(COST).render(s.h, 13)
    assert covered(p) == set(range(10, 13))


def test_a_fold_with_a_move_the_rule_makes_anyway_shows_with_it() -> None:
    s = Session(config=COST)
    long_run(s, 14)
    s.step(f'fold_steps 2-3 "{GOOD}"')  # 15: the boundary moves to 12 at this call anyway
    r = Renderer(COST)
    r.render(s.h, 14)
    p = r.render(s.h, 15)
    assert p.stats.boundary == 12 and covered(p) == {2, 3}


def test_fold_span_waits_too_and_the_fixed_rule_keeps_folding_at_once() -> None:
    s = Session(config=COST)
    s.step('begin_span "where is x set?"')  # 1
    long_run(s, 11)
    said = s.step('fold_span "x is set in f2.py:1 because it is the module default"')  # 13: it pays
    assert "Span S1 folded: steps 1-13 are now shown as one block" in said and "tokens after it are recomputed" in said
    assert covered(Renderer(COST).render(s.h, 13)) == set(range(1, 14))
    s = Session(config=COST)
    long_run(s, 9)
    s.step('begin_span "where is x set?"')  # 10
    s.step("echo 1", "1")
    s.step("echo 2", "2")
    said = s.step('fold_span "x is set in f2.py:1 because it is the module default"')  # 13: short steps, a long block
    assert "Span S1 folded: steps 10-13 become one block" in said and "(within 5 calls)" in said
    f = Session(config=FIXED)
    f.h = s.h
    assert covered(Renderer(FIXED).render(f.h, 13)) == set(range(10, 14))  # the fixed rule folds at once
    long_run(s, 2)
    r = Renderer(COST)
    assert not covered(r.render(s.h, 13))  # as the answer said; from the next call on it may pay on its own
    assert covered(r.render(s.h, 15)) == set(range(10, 14))


def draw_agent_fold(draw: st.DrawFn, s: Session, i: int, kind: str) -> bool:
    """Step i as the agent fold ``kind`` names (a fold after the fact needs two earlier steps);
    False when ``kind`` is not one."""
    if kind == "fold_steps" and i > 2:
        hi = draw(st.integers(1, i - 1))
        lo = draw(st.integers(max(1, hi - 6), hi))
        s.step(f'fold_steps {lo}-{hi} "{GOOD}"')
    elif kind == "begin":
        s.step(f'begin_span "question {i}"')
    elif kind == "fold_span":
        s.step(f'fold_span "{GOOD}"')
    else:
        return False
    return True


@st.composite
def fold_sessions(draw: st.DrawFn) -> Session:
    k = draw(st.sampled_from([2, 3]))
    wait = draw(st.sampled_from([1, 2, 3]))
    config = COST.override([f"policy.k={k}", f"boundary.min_remaining={draw(st.sampled_from([1, 5]))}", f"boundary.fold_wait={wait}"])
    s = Session(tools=draw(st.booleans()), config=config)
    for i in range(1, draw(st.integers(4, 22)) + 1):
        kind = draw(st.sampled_from(["read", "read", "read", "fold_steps", "fold_steps", "begin", "fold_span"]))
        if not draw_agent_fold(draw, s, i, kind):
            s.step(f"cat f{i}.py", PAD * draw(st.sampled_from([1, 10, 60, 300])))
    return s


def fold_answers(s: Session) -> dict[int, str]:
    """Step -> the answer to the fold it issued (the last one when it issued several)."""
    out: dict[int, str] = {}
    for step in s.h.steps:
        for o in step.outcomes:
            if o.name in ("fold_span", "fold_steps") and o.ok:
                out[step.index] = content_text(step.observations[-1].get("content"))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=fold_sessions())
def test_a_deferred_fold_never_hides_more_than_the_fixed_rule_and_shows_by_its_deadline(s: Session) -> None:
    h, config = s.h, s.config
    k = config.policy.k * config.boundary.fold_wait  # the longest a fold may wait
    cost, fixed = Renderer(config), Renderer(config.override(["boundary.rule=fixed"]))
    prompts = [cost.render(h, t) for t in range(len(h) + 1)]
    shown_cost = [covered(p) for p in prompts]
    shown_fixed = [covered(fixed.render(h, t)) for t in range(len(h) + 1)]
    assert cost.render(h).messages == Renderer(config).render(h).messages  # the memo is the pure function
    for t in range(len(h) + 1):
        assert shown_cost[t] <= shown_fixed[t], f"call {t}"
        if t >= k:
            assert shown_fixed[t - k] <= shown_cost[t], f"a fold waited more than {k} calls at call {t}"
    for step, said in fold_answers(s).items():
        if "are now shown" in said:  # the answer and the rendering agree
            assert shown_fixed[step] <= shown_cost[step], f"step {step} said folded now"
        else:
            within = int(said.split("(within ")[1].split(" call")[0])
            moved = prompts[step].stats.boundary != prompts[step - 1].stats.boundary
            new = shown_fixed[step] - shown_fixed[step - 1]
            assert moved or not new or not new <= shown_cost[step], f"step {step} said not now"
            assert within <= k and (step + within > len(h) or shown_fixed[step] <= shown_cost[step + within])
    check(s, config)


def test_a_fold_shows_at_once_when_the_cache_is_cold() -> None:
    config = COST.override(["cache=openai"])  # a 5-minute cache
    s = Session(config=config)
    long_run(s, 12)
    assert "cache-boundary move" in s.step(f'fold_steps 2-3 "{GOOD}"')  # 13: the answer cannot know the gap

    def timed(gap: float) -> History:
        h = History(s.h.prefix)
        for x in s.h.steps:  # call 14 (after step 13) comes `gap` seconds after call 13
            at = 10.0 * x.index + (gap if x.index == 13 else 0)
            h.append(x.reply, x.observations, facts=Facts(x.actions, x.outcomes, x.restore_of), meta={"time": at})
        return h

    assert not covered(Renderer(config).render(timed(0), 13))
    assert covered(Renderer(config).render(timed(600), 13)) == {2, 3}  # nothing is cached: folding costs nothing extra


def test_a_fold_after_the_fact_of_steps_behind_the_boundary_keeps_their_forms_on_both_paths() -> None:
    """The stage behind the boundary sees the spans closed by the call at which the boundary
    crossed a step (as a call-by-call run does), not the spans of the call rendered: a fold of
    steps already behind it neither unmasks them nor re-derives their stubs."""
    config = FIXED  # masking on (mask_after=2), k=3
    s = Session(config=config)
    s.step("cat a.py", PAD * 30)  # 1
    s.step("cat a.py", PAD * 30)  # 2: a stub citing step 1
    for i in range(3, 8):
        s.step(f"cat f{i}.py", PAD)
    s.step(f'fold_steps 1-1 "{GOOD}"')  # 8: step 1 crossed the boundary at call 6
    memo = Renderer(config)
    for t in range(len(s.h) + 1):
        got, fresh = memo.render(s.h, t), Renderer(config).render(s.h, t)
        assert got.messages == fresh.messages and got.origins == fresh.origins, f"call {t}"

    def output_of_2(t: int) -> Shown:
        return next(o.shown for o in Renderer(config).render(s.h, t).origins if o.step == 2 and o.part == "output")

    assert output_of_2(7) is Shown.NOTE and output_of_2(8) is Shown.NOTE  # masked with its source, for good
    assert covered(Renderer(config).render(s.h, 8)) == {1}


@st.composite
def agent_fold_runs(draw: st.DrawFn) -> tuple[Session, list[int]]:
    """Reads (repeated ones become stubs), spans and folds after the fact under either boundary
    rule, masking on or off, chunked or not; then calls in any order."""
    rule = draw(st.sampled_from(["fixed", "cost"]))
    mask = draw(st.sampled_from(["2", "null"]))
    k = draw(st.sampled_from([1, 2, 3]))
    chunk = draw(st.booleans())
    config = COST.override([f"boundary.rule={rule}", f"policy.mask_after={mask}", f"policy.k={k}", f"policy.chunk={chunk}".lower()])
    s = Session(tools=draw(st.booleans()), config=config)
    for i in range(1, draw(st.integers(4, 18)) + 1):
        kind = draw(st.sampled_from(["read", "same", "same", "fold_steps", "fold_steps", "begin", "fold_span"]))
        if draw_agent_fold(draw, s, i, kind):
            continue
        if kind == "same":
            s.step(f"cat {draw(st.sampled_from(['a.py', 'b.py']))}", PAD * 30)
        else:
            s.step(f"cat f{i}.py", PAD * draw(st.sampled_from([1, 10, 60])))
    calls = draw(st.lists(st.integers(0, len(s.h)), min_size=1, max_size=16))
    return s, calls


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=agent_fold_runs())
def test_the_memo_equals_the_pure_function_with_agent_folds_in_any_call_order(run: tuple[Session, list[int]]) -> None:
    s, calls = run
    memo = Renderer(s.config)
    for t in calls:
        got, fresh = memo.render(s.h, t), Renderer(s.config).render(s.h, t)
        assert got.messages == fresh.messages, f"call {t} of {calls}"
        assert got.origins == fresh.origins and got.stats.boundary == fresh.stats.boundary


def test_a_fold_that_ends_the_plain_history_shows_at_once_as_its_answer_says() -> None:
    """While the plain history is sent (``prompt.deferred``), the first span command switches to
    the protocol's prompt, which changes everything after the prefix anyway: a fold issued then
    is shown at that very call, and its answer says so (hypothesis found the two disagreeing)."""
    config = COST.override(["policy.k=2", "boundary.min_remaining=1", "boundary.fold_wait=1"])
    s = Session(config=config)
    s.step("cat f1.py", PAD * 10)
    s.step("cat f2.py", PAD * 10)
    s.step(f'fold_span "{GOOD}"')  # refused: no span is open
    s.step("cat f4.py", PAD)
    r = Renderer(config)
    r.render(s.h, 4)
    assert r.sent_plain  # small outputs: hiding does not pay yet
    said = s.step(f'fold_steps 1-2 "{GOOD}"')
    assert "are now shown" in said
    r = Renderer(config)
    p = r.render(s.h, 5)
    assert covered(p) == {1, 2} and not r.sent_plain
