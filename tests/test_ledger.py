"""The object ledger (seed 002): typed objects, fold/drop at the next boundary move, expand, search, budget."""

from __future__ import annotations

import json
import re

import pytest

from refold.config import Config
from refold.context.answers import answer
from refold.history import History
from refold.mechanisms.ledger import LedgerPolicy, bm25, objects_of, parse_ids, summary
from refold.policy import Policy
from refold.protocol import CM, ContextCommand
from refold.render import Renderer
from refold.types import Shown, content_text
from test_spans import Session, out

from builders import SYSTEM, TASK, file_lines, numbered, seed_config


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


# ---- search_ledger says what the prompt it was issued from shows --------------------------------


def _shown_in(prompt: list[str], step: int) -> str:
    """How ``prompt`` (message texts) shows the output of ``step``, read off the texts alone."""
    out = next((t for t in prompt if t.startswith(f"[step {step}]\n") and not t.startswith(f"[step {step}]\nPROGRESS")), None)
    if out is None and not any(t.startswith("[step ") for t in prompt):
        return "shown"  # the plain history (a deferred protocol): nothing is hidden
    if out is None:
        folded = any(f"Step {step} folded" in t or _within(t, step) for t in prompt)
        return "folded into a note" if folded else "absent"
    body = out.split("\n", 1)[1]
    if body.startswith(f"{CM} Output of `") and " hidden (" in body:
        return "masked"
    if body.startswith(f"{CM} Output omitted ("):
        return "stubbed"
    if body.startswith(f"{CM} Output {step} folded:"):
        return "folded"
    if body.startswith(f"{CM} Output {step} dropped."):
        return "dropped"
    return "shown"


def _within(text: str, step: int) -> bool:
    m = re.search(r"Steps (\d+)-(\d+) folded", text)
    return bool(m) and int(m.group(1)) <= step <= int(m.group(2))


def _scripted(s: Session) -> None:
    for i in range(1, 6):
        s.step(f"cat src/m{i}.py", "\n".join(file_lines(60, f"m{i}")))  # 1-5
    s.step("cat src/m2.py", "\n".join(file_lines(60, "m2")))  # 6: repeats step 2
    s.step("python -m pytest -q", "FAILED t.py::test_x\n1 failed in 0.1s", stale="5")  # 7
    s.step("fold 4")  # 8
    s.step("drop 3")  # 9
    for i in range(10, 19):
        s.step(f"cat src/n{i}.py", "\n".join(file_lines(60, f"n{i}")))


@pytest.mark.parametrize("masking", [False, True])
def test_search_ledger_status_is_what_the_prompt_of_that_call_shows(masking: bool) -> None:
    """At every call of a scripted session, each output's [status] in the ledger view (and in a
    search) is how the prompt the command is issued from shows that output."""
    config = Config() if masking else seed_config(Policy(k=3))
    s = Session(config=config)
    _scripted(s)
    seen: set[str] = set()
    for t in range(1, len(s.h) + 1):
        prompt = [content_text(m.get("content")) for m in Renderer(config).render(s.h, t).messages]
        view = answer(s.h, ContextCommand("search_ledger", "*"), config, t=t).text
        status = dict(re.findall(r"^(\d+) \[([^\]]+)\]", view, re.M))
        for i in range(1, t + 1):
            if s.h.step(i).actions[0].context is not None:
                continue  # context commands are no objects
            want = _shown_in(prompt, i)
            assert status[str(i)].split(",")[0] == want, (t, i, status[str(i)], want)
            seen.add(want)
        hit = answer(s.h, ContextCommand("search_ledger", "m2_func_0"), config, t=t).text
        for i, state in re.findall(r"^(\d+) \[([^\]]+)\]", hit, re.M):
            assert state == status[i], (t, i)
    assert seen >= ({"shown", "masked"} if masking else {"shown", "stubbed", "folded", "dropped", "folded into a note"})


def test_a_fold_issued_but_not_yet_in_effect_is_pending() -> None:
    config = seed_config(Policy(k=3))
    s = Session(config=config)
    _scripted(s)
    view = answer(s.h, ContextCommand("search_ledger", "*"), config, t=8).text  # 'fold 4' issued at step 8
    assert "\n4 [shown, fold pending] " in view


def test_ledger_lines_name_a_function_tools_command_as_notes_do() -> None:
    h = History([SYSTEM, TASK])
    for i in (1, 2):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/m{i}.py"})}}
        body = f"# src/m{i}.py\n" + "\n".join(f"def f{j}(): return {j}" for j in range(30))
        h.append({"role": "assistant", "content": "PROGRESS: read\n", "tool_calls": [call]}, [{"role": "tool", "tool_call_id": f"c{i}", "content": body}])
    obj = objects_of(h.step(2))[0]
    line = summary(obj)
    assert "$ read_file src/m2.py" in line and '{"path"' not in line
    assert line.startswith("file src/m2.py:1-31 — ")
    wrapped = Session()
    wrapped.step("cat a.py", "x = 1\ny = 2\n")
    assert objects_of(wrapped.h.step(1))[0].lines == (1, 2)  # the file's lines, not mini's wrapper lines
