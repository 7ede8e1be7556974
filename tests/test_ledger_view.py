"""The incremental ledger view (``LedgerView``) and path index equal their from-scratch versions."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.mechanisms.ledger import LedgerBook, LedgerObject, objects_of, parse_ids
from refold.mechanisms.ledger_view import LedgerView
from refold.mechanisms.objects import ObjectIndex, reply_id, view_text
from refold.mechanisms.path_index import MAX_PARTS, PathIndex
from refold.mechanisms.spans import SpanBook
from refold.shell_paths import paths_overlap
from refold.types import Step
from test_spans import GOOD, Session

PATHS = ["a.py", "src/a.py", "pkg/src/a.py", "/work/pkg/src/a.py", "src", "b/c.txt", "c.txt", "src/b.py", "."]


def command(draw: st.DrawFn, i: int) -> str:
    earlier = st.integers(1, max(1, min(i - 1, 4)))  # a few targets: ops on one object pile up
    kind = draw(st.sampled_from(["cat", "sed", "grep", "ls", "fold", "drop", "pin", "unpin", "expand", "span", "close", "steps"]))
    path = draw(st.sampled_from(PATHS))
    n = draw(earlier)
    reply, sub = draw(st.sampled_from([("", ""), ("r", ""), ("", ".1")]))  # output(s) of step n, its reply, output 1
    if kind == "cat":
        return f"cat {path}"
    if kind == "sed":
        return f"sed -i 's/x/y/' {path}"
    if kind == "grep":
        return f"grep -n foo {path}"
    if kind == "ls":
        return f"ls {path}"
    if kind in ("fold", "drop", "pin", "unpin", "expand"):
        return f"{kind} {reply}{n}{sub}"
    if kind == "span":
        return f'begin_span "what does step {i} show?"'
    if kind == "close":
        return f'fold_span "{GOOD}"'
    m = draw(earlier)
    return f'fold_steps {min(n, m)}-{max(n, m)} "{GOOD}"'


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    s = Session(config=Config.parse(preset="self-gc", k=2, reminders=False))
    for i in range(1, draw(st.integers(1, 28)) + 1):
        s.step(command(draw, i), f"line one of {i}\nline two")
    return s


def scratch_touched(steps: list[Step]) -> dict[str, int]:
    """``ObjectIndex.touched`` as it was computed before the path index: every earlier path scanned."""
    touched: dict[str, int] = {}
    outputs: list[list[LedgerObject]] = []
    by_path: list[tuple[str, str]] = []
    for step in steps:
        objs = objects_of(step)
        for a in step.actions:
            if a.context is not None:
                for s, sub in parse_ids(a.context.argument):
                    if 1 <= s <= len(outputs):
                        if sub == -1:
                            touched[reply_id(s)] = step.index
                        else:
                            for o in outputs[s - 1]:
                                if sub is None or o.sub == sub:
                                    touched[o.id] = step.index
                continue
            named = (*a.effects.reads, *a.effects.writes)
            for path, oid in by_path:
                if any(paths_overlap(path, p) for p in named):
                    touched[oid] = step.index
        outputs.append(list(objs))
        by_path += [(o.path, o.id) for o in objs if o.path and o.path not in (".", "/") and o.kind != "context"]
    return touched


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.integers(1, 6), st.data())
def test_the_incremental_view_equals_the_view_from_scratch(s: Session, items: int, data: st.DataObject) -> None:
    ledger_policy = s.config.ledger.model_copy(update={"view_items": items})
    index, spans, ledger = ObjectIndex(), SpanBook(s.config.spans), LedgerBook(ledger_policy)
    view = LedgerView(index)
    steps = s.h.steps
    for step in steps:
        t = step.index
        index.observe(step)
        spans.observe(step)
        ledger.observe(step)
        parts = [(i, j) for i in range(1, t + 1) for j in range(-1, 2)]
        pinned = frozenset(data.draw(st.lists(st.sampled_from(parts), max_size=3)))
        assert view.text(t, spans, ledger, pinned) == view_text(index, t, spans, ledger, pinned)
        touched = scratch_touched(steps[:t])
        for s_ in steps[:t]:
            for part, oid in [((s_.index, -1), reply_id(s_.index)), *(((o.step, o.sub), o.id) for o in objects_of(s_))]:
                assert index.recency.last(part) == touched.get(oid, s_.index)
        listed = [o for o in index.all(t) if o.kind != "context"]
        assert index.recency.listed == {(o.step, o.sub) for o in listed}
        order = [(o.step, o.sub) for o in sorted(listed, key=lambda o: (o.last_touched_turn, o.step, o.sub), reverse=True)]
        for k in (1, items, len(order)):
            assert index.recency.recent(k, t) == order[:k]


def test_the_view_lists_the_most_recently_touched_and_counts_the_rest() -> None:
    s = Session(config=Config.parse(preset="self-gc", k=2, reminders=False))
    for i in range(1, 9):
        s.step(f"cat f{i}.py", f"body {i}")
    s.step("cat f2.py", "body 2 again")  # touches output 2
    s.step("fold 3")
    index, spans, ledger = ObjectIndex(), SpanBook(), LedgerBook(s.config.ledger.model_copy(update={"view_items": 4}))
    view = LedgerView(index)
    for step in s.h.steps:
        index.observe(step)
        spans.observe(step)
        ledger.observe(step)
    text = view.text(10, spans, ledger, frozenset({(1, -1)}))
    assert text == view_text(index, 10, spans, ledger, frozenset({(1, -1)}))
    lines = text.splitlines()
    # the 4 touched last (fold 3 touched output 3 at step 10; output 2, touched at 9, comes fifth),
    # and pinned r1, in step order
    assert [ln.split(" ")[0] for ln in lines[1:6]] == ["r1", "3", "r9", "9", "r10"]
    assert "\n3 file [folded] 3/10: " in text and "(+14 older objects not listed" in text


# ---- the path index ------------------------------------------------------------------------------

COMPONENTS = ["", ".", "..", "a", "b", "src", "a.py"]
path_text = st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=MAX_PARTS + 3).map("/".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(path_text, max_size=12), st.lists(path_text, min_size=1, max_size=6))
def test_the_path_index_finds_exactly_the_overlapping_paths(stored: list[str], queries: list[str]) -> None:
    index: PathIndex[int] = PathIndex()
    for i, p in enumerate(stored):
        index.add(p, i)
    for q in queries:
        expected = sorted(i for i, p in enumerate(stored) if paths_overlap(p, q))
        assert sorted(index.overlapping(q)) == expected


def test_the_last_op_on_an_output_decides_its_status() -> None:
    for ops, status in ((["fold 1", "drop 1.1"], "dropped"), (["drop 1.1", "fold 1"], "folded"), (["drop r1", "fold 1"], "folded")):
        s = Session(config=Config.parse(preset="self-gc", k=2, reminders=False))
        s.step("cat a.py", "body")
        for op in ops:
            s.step(op)
        index, spans, ledger = ObjectIndex(), SpanBook(), LedgerBook(s.config.ledger)
        view = LedgerView(index)
        for step in s.h.steps:
            index.observe(step)
            spans.observe(step)
            ledger.observe(step)
            assert view.text(step.index, spans, ledger, frozenset()) == view_text(index, step.index, spans, ledger, frozenset())
        assert f"\n1 file [{status}] 1/3: " in view.text(3, spans, ledger, frozenset())
