"""The object ledger (seed 002): typed objects, fold/drop at the next boundary move, expand, search, budget."""

from __future__ import annotations

from refold.mechanisms.ledger import LedgerPolicy, bm25, objects_of, parse_ids, summary
from refold.policy import Policy
from refold.protocol import CM
from refold.render import Renderer
from refold.types import Shown, content_text
from test_spans import Session, out

from builders import file_lines, numbered, seed_config


def session(**kw: object) -> Session:
    s = Session(**kw)  # type: ignore[arg-type]
    s.step("nl -ba calc.py | sed -n '1,40p'", numbered(file_lines(40, "calc")))  # 1
    s.step("grep -rn compute_calc .", "calc.py:2: value_1 = compute_calc(1)")  # 2
    s.step("python -m pytest -q", "FAILED test_calc.py::test_add\n1 failed in 0.02s")  # 3
    s.step("python run.py", "Traceback (most recent call last):\nValueError: bad input")  # 4
    s.step("sed -i 's/a - b/a + b/' calc.py")  # 5
    return s


def test_objects_are_typed_with_ids_and_summaries() -> None:
    s = session()
    kinds = [objects_of(step)[0] for step in s.h.steps]
    assert [o.kind for o in kinds] == ["file", "search", "test", "error", "edit"]
    f = kinds[0]
    assert f.id == "1" and f.path == "calc.py" and f.lines == (1, 40)
    line = summary(f)
    assert "\n" not in line and "file calc.py:1-40" in line and "calc_func_0" in line  # outline names
    assert "1 failed" in summary(kinds[2]) and "ValueError: bad input" in summary(kinds[3])


def test_sub_ids_for_steps_with_several_outputs() -> None:
    s = Session(tools=True)
    s.step("echo a", "a")
    step = s.h.step(1)
    assert [o.id for o in objects_of(step)] == ["1"]
    assert parse_ids("7 8.2 [step 9]") == [(7, None), (8, 1), (9, None)]
    assert parse_ids("-w 80 file.txt") == []


def test_fold_and_drop_apply_at_the_next_boundary_move() -> None:
    s = session()
    assert "from the next context refresh" in s.step("fold 1")  # 6
    s.step("drop 2")  # 7
    r = Renderer(seed_config(Policy()))
    p7 = r.render(s.h, 7)  # boundary 3, the fold was issued after the last move (t=6)... at 6 itself
    shown = {o.step: content_text(m.get("content")) for m, o in zip(p7.messages, p7.origins, strict=True) if o.part == "output"}
    assert "Output 1 folded: file calc.py:1-40" in shown[1] and "`expand 1`" in shown[1]
    assert shown[2].startswith("[step 2]\n<returncode>")  # the drop (step 7) waits for the next move
    for t in range(8, 10):
        s.step(f"echo {t}", str(t))
    p9 = r.render(s.h, 9)
    outs = {o.step: (content_text(m.get("content")), o) for m, o in zip(p9.messages, p9.origins, strict=True) if o.part == "output"}
    text, origin = outs[2]
    assert text == f"[step 2]\n{CM} Output 2 dropped. `expand 2` (or `restore 2`) shows it." and origin.shown is Shown.NOTE


def test_bad_ids_are_refused_and_change_nothing() -> None:
    s = session()
    assert "no earlier step 9" in s.step("fold 9")
    assert "no 1.3" in s.step("drop 1.3")
    assert intercept_passes("fold -w 80 notes.txt") and intercept_passes("expand notes.txt")
    r = Renderer(seed_config()).render(s.h)
    assert not any(o.shown is Shown.NOTE and o.part == "output" for o in r.origins)


def intercept_passes(command: str) -> bool:
    from refold.context.recognize import from_shell

    return from_shell(command) is None


def test_expand_object_and_search() -> None:
    s = session(tools=True)
    s.step("fold 1")
    text = s.step("expand 1")
    assert "Output" in text or "Step 1 restored" in text
    assert "calc_func_0" in text  # the body, as first shown
    found = s.step('search_ledger "ValueError bad input"')
    assert found.splitlines()[1].startswith("4 [shown] error")
    found = s.step('search_ledger "compute_calc"')
    assert "1 [masked, shown again at step 7]" in found  # as the prompt of that call shows step 1
    assert "no match" in s.step('search_ledger "zebra"')


def test_bm25_ranks_rarer_terms_higher() -> None:
    docs = ["apple banana", "apple apple cherry", "durian"]
    assert [i for _, i in bm25(docs, "cherry apple")] == [1, 0]
    assert bm25(docs, "") == []


def test_budget_line_is_computed_once_per_step() -> None:
    s = Session(ledger=LedgerPolicy(budget_tokens=1000))
    for i in range(1, 9):
        s.step(f"cat f{i}.py", "".join(f"x{i}_{j} = {j}\n" for j in range(50)))
    r = s.renderer()
    p = r.render(s.h)
    lines = [content_text(m.get("content")).splitlines()[-1] for m, o in zip(p.messages, p.origins, strict=True) if o.part == "output"]
    assert all(x.startswith(f"{CM} context: ") and x.endswith("% of 1k tokens") for x in lines)
    pcts = [int(x.split("context: ")[1].split("%")[0]) for x in lines]
    assert pcts == sorted(pcts) and pcts[-1] > pcts[0]
    assert Renderer(seed_config(s.policy, ledger=s.ledger)).render(s.h).messages == p.messages
    assert "context:" not in content_text(r.received(s.h, 3)[1].get("content"))
    assert out("x") in out("x")


def test_prompt_sections_are_opt_in() -> None:
    s = session()
    plain = Renderer(seed_config()).render(s.h).messages[0]["content"]
    assert "begin_span" not in plain and "search_ledger" not in plain
    from refold.mechanisms.spans import SpanPolicy

    full = Renderer(seed_config(None, spans=SpanPolicy(prompt=True), ledger=LedgerPolicy(prompt=True, budget_tokens=128000))).render(s.h)
    text = full.messages[0]["content"]
    assert "begin_span" in text and "fold_span" in text and "search_ledger" in text and "of 128k" in text
