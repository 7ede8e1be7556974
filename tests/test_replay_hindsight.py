"""The hindsight STALE estimators (simulated agent marks): what counts as using an earlier step."""

from __future__ import annotations

import pytest

from refold.history import History
from refold.lab.replay import hindsight_marks, with_stale
from refold.lab.replay.stale import HINDSIGHT_VARIANTS

from builders import SYSTEM, reply, text_history


def with_task(steps: list[tuple[str, str]], task: str) -> History:
    h = History([SYSTEM, {"role": "user", "content": task}])
    for content, output in steps:
        h.append({"role": "assistant", "content": content}, [{"role": "user", "content": output}])
    return h


def marked(variant: str, steps: list[tuple[str, str]], task: str = "Fix it.") -> set[int]:
    h = with_task(steps, task)
    return {i for v in hindsight_marks(h, 3, variant).values() for i in v}


STEPS = [
    (reply(None, None, "cat src/render_core.py"), "def render_core(x):\n    return x"),  # only repeats the task's name
    (reply(None, None, "grep -rn helper src"), "src/util.py:10: def special_helper_fn(x):"),  # introduces a name
    (reply(None, None, "echo a"), "a"),
    (reply(None, None, "echo b", thought="Now special_helper_fn."), "b"),
    (reply(None, None, "echo c", thought="render_core is where it fails."), "c"),
    (reply(None, None, "echo d"), "d"),
]


def test_produced_counts_only_what_the_step_showed_first() -> None:
    task = "The function render_core in src/render_core.py crashes."
    produced = marked("produced", STEPS, task)
    conservative = marked("conservative", STEPS, task)
    assert 1 in produced  # step 5 names render_core, but the task already did: not a use of step 1's output
    assert 1 not in conservative  # counted as used at step 5, outside step 6's window: never marked
    assert 2 in produced  # used at step 4 (inside the window), so marked at step 5


def test_produced_keeps_a_step_whose_read_file_is_edited_later() -> None:
    steps = [
        (reply(None, None, "nl -ba src/app_mod.py | sed -n '1,40p'"), "     1\tx = 1\n     2\ty = 2"),
        (reply(None, None, "ls"), "a b"),
        (reply(None, None, "echo"), ""),
        (reply(None, None, "echo"), ""),
        (reply(None, None, "sed -i '2s/2/3/' src/app_mod.py"), ""),
        (reply(None, None, "echo"), ""),
    ]
    assert 1 not in marked("produced", steps)  # its line numbers were used by the edit at step 5 (outside the window)


@pytest.mark.parametrize("variant", HINDSIGHT_VARIANTS)
def test_every_estimator_marks_inside_the_window_only(variant: str) -> None:
    h = text_history(STEPS)
    for m, stale in hindsight_marks(h, 3, variant).items():
        assert all(m - 3 <= i < m for i in stale)
    assert with_stale(h, f"hindsight-{variant}").meta["stale_source"] == f"hindsight-{variant}"


def test_an_unknown_estimator_names_the_choices() -> None:
    with pytest.raises(ValueError, match="produced, conservative, aggressive"):
        hindsight_marks(text_history(STEPS), 3, "psychic")


def test_latest_counts_a_use_only_while_the_step_is_the_newest_source() -> None:
    steps = [
        (reply(None, None, "grep -rn helper src"), "src/util.py:10: def special_helper_fn(x):"),  # introduces a name
        (reply(None, None, "grep -rn special src"), "src/util.py:10: def special_helper_fn(x):"),  # shows it again
        (reply(None, None, "echo a"), "a"),
        (reply(None, None, "echo b"), "b"),
        (reply(None, None, "echo c", thought="Now special_helper_fn."), "c"),  # uses it, from step 2 now
        (reply(None, None, "echo d"), "d"),
    ]
    assert 1 not in marked("produced", steps)  # used at step 5, outside any window that could mark it
    assert 1 in marked("latest", steps)  # step 2 showed the name again: step 1 was free from then on


def test_latest_keeps_a_read_file_until_it_is_read_again() -> None:
    read = "nl -ba src/app_mod.py | sed -n '1,40p'"
    steps = [
        (reply(None, None, read), "     1\tx = 1\n     2\ty = 2"),
        (reply(None, None, "ls"), "a b"),
        (reply(None, None, "echo"), ""),
        (reply(None, None, "echo"), ""),
        (reply(None, None, "sed -i '2s/2/3/' src/app_mod.py"), ""),
        (reply(None, None, "echo"), ""),
    ]
    assert 1 not in marked("latest", steps)  # the edit at step 5 used its line numbers
    again = [*steps[:1], (reply(None, None, read), "     1\tx = 1\n     2\ty = 2"), *steps[2:]]
    assert 1 in marked("latest", again)  # read again at step 2: the edit works from that read
