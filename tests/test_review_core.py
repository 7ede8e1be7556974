"""Review of the core: protocol parsing as models really write it, and commands that must never crash."""

from __future__ import annotations

import pytest

from refold.context.answers import answer
from refold.context.recognize import from_shell
from refold.history import History
from refold.protocol import parse_head, parse_restore_args

from builders import SYSTEM, TASK

HUGE = "9" * 5000  # int() of more than 4300 digits raises ValueError


@pytest.mark.parametrize(
    ("reply", "stale"),
    [
        ("PROGRESS: x\nSTALE: steps 3 through 5", (3, 4, 5)),
        ("PROGRESS: x\nSTALE: 3\u20145", (3, 4, 5)),  # em dash
        ("PROGRESS: x\nSTALE: 3 \u2212 5", (3, 4, 5)),  # minus sign
        ("PROGRESS: x\nSTALE: 3\u20105", (3, 4, 5)),  # unicode hyphen
        ("PROGRESS: x\nSTALE: #3, #4", (3, 4)),
        ("PROGRESS: x\nSTALE: step-3", (3,)),
        ("PROGRESS: x\nSTALE: 4, but not 2", (4,)),  # a step the agent still needs is not folded
        ("PROGRESS: x\nSTALE: all except 2", ()),
        ("PROGRESS: x\nSTALE: 3, keep 5", (3,)),
        ("1. PROGRESS: x\n2. STALE: 4", (4,)),
        ("<think>\nfirst\nsecond\nthird\nfourth\nfifth\n</think>\nPROGRESS: x\nSTALE: 4", (4,)),
        (f"PROGRESS: x\nSTALE: {HUGE}, 4", (4,)),
        (f"PROGRESS: x\nSTALE: 1-{HUGE}", ()),  # a silly range is ignored, like 1-100000
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, str) else None,
)
def test_stale_lines_as_models_write_them(reply: str, stale: tuple[int, ...]) -> None:
    head = parse_head(reply)
    assert head.has_protocol and head.stale == stale


def test_a_reply_with_a_huge_number_can_be_appended() -> None:
    h = History([SYSTEM, TASK])
    step = h.append({"role": "assistant", "content": f"PROGRESS: x\nSTALE: {HUGE}"}, [{"role": "user", "content": "ok"}])
    assert step.stale == ()


@pytest.mark.parametrize(
    "command",
    [f"restore {HUGE}", f"restore 1-{HUGE}", f"fold {HUGE}", f"drop 1.{HUGE}", f"expand {HUGE}", f"expand S{HUGE}"],
    ids=lambda c: c[:12],
)
def test_context_commands_with_huge_numbers_answer_without_raising(command: str) -> None:
    h = History([SYSTEM, TASK])
    h.append({"role": "assistant", "content": "x"}, [{"role": "user", "content": "y"}])
    cmd = from_shell(command)
    if cmd is not None:  # fold/expand with a non-id argument pass through to the shell
        a = answer(h, cmd)
        assert a.text.startswith("[context-manager]") and len(a.text) < 400


@pytest.mark.parametrize("argument", ["3\u20135", "3..5", "#3 #4 #5", "3 - 5"])
def test_restore_accepts_dash_and_hash_variants(argument: str) -> None:
    steps, error = parse_restore_args(argument, 9)
    assert error is None and steps == [3, 4, 5]
