"""Review of the renderer: dedup claims that must be true, and invariants under random call orders."""

from __future__ import annotations

from refold.policy import Policy
from refold.render import Renderer
from refold.types import Shown, content_text

from builders import reply, seed_config, text_history

LOG = "\n".join(f"tests/test_mod.py::test_case_{i} PASSED                                   [{i * 10:3d}%]" for i in range(1, 9))


def test_a_rerun_with_a_new_result_line_is_not_stubbed_as_a_repeat() -> None:
    before = LOG + "\nFAILED tests/test_mod.py::test_add - assert 3 == 4\n==== 1 failed, 8 passed in 0.31s ===="
    after = LOG + "\n==== 9 passed in 0.30s ===="
    steps = [(reply("run", "-", "pytest -q"), before), (reply("fix", "-", "sed -i 's/-/+/' calc.py"), ""), (reply("rerun", "-", "pytest -q"), after)]
    steps += [(reply(f"echo {i}", "-", f"echo {i}"), str(i)) for i in range(4)]
    p = Renderer(seed_config(Policy(k=1))).render(text_history(steps))
    (shown, origin), = [(m, o) for m, o in zip(p.messages, p.origins, strict=True) if o.step == 3 and o.part == "output"]
    text = content_text(shown.get("content"))
    assert "9 passed" in text and "it repeats" not in text  # the new result stays; no false claim
    assert origin.shown is Shown.TRIMMED


def test_an_output_whose_extra_lines_are_shown_by_the_source_is_still_one_stub() -> None:
    steps = [(reply("run", "-", "pytest -q"), LOG + "\n\n"), (reply("rerun", "-", "pytest -q"), "\n" + LOG)]
    steps += [(reply(f"echo {i}", "-", f"echo {i}"), str(i)) for i in range(4)]
    p = Renderer(seed_config(Policy(k=1))).render(text_history(steps))
    (origin,) = [o for o in p.origins if o.step == 2 and o.part == "output"]
    assert origin.shown is Shown.STUB
