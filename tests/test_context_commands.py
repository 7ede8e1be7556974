"""The one dispatcher: every context command answered from the history, nothing run."""

from __future__ import annotations

import json

import pytest

from refold.context_commands import (
    TOOL_SCHEMAS,
    Answer,
    answer_command,
    command_from_tool_call,
    handle,
    intercept,
    ledger_view,
)
from refold.history import History
from refold.policy import Policy
from refold.protocol import CM, COMMAND_NAMES, ContextCommand
from test_spans import Session

from builders import SYSTEM, TASK


def three_steps() -> Session:
    s = Session()
    s.step("ls", "a.py")
    s.step('begin_span "where is the bug?"')
    s.step("cat a.py", "x = 1")
    return s


def test_tool_schemas_cover_every_command() -> None:
    names = [t["function"]["name"] for t in TOOL_SCHEMAS]
    assert sorted(names) == sorted(COMMAND_NAMES)
    for t in TOOL_SCHEMAS:
        params = t["function"]["parameters"]
        assert params["type"] == "object" and len(params["required"]) == 1
    json.dumps(TOOL_SCHEMAS)
    assert command_from_tool_call("fold_span", '{"conclusion": "x because y"}') == ContextCommand("fold_span", "x because y")
    assert command_from_tool_call("bash", '{"command": "ls"}') is None


def test_intercept_leaves_coreutils_alone() -> None:
    assert intercept("restore 3") == ContextCommand("restore", "3")
    assert intercept('begin_span "q"') == ContextCommand("begin_span", "q")
    assert intercept("fold 7.2") == ContextCommand("fold", "7.2")
    assert intercept("expand S1") == ContextCommand("expand", "S1")
    assert intercept("fold -w 80 notes.txt") is None and intercept("expand -t 4 a.py") is None
    assert intercept("ls") is None


def test_restore_answer_and_meta() -> None:
    s = three_steps()
    a = answer_command(s.h, ContextCommand("restore", "1"))
    assert isinstance(a, Answer) and a.ok and a.meta["restore_of"] == [1]
    assert "a.py" in a.text and "nothing was run again" in a.text
    bad = answer_command(s.h, ContextCommand("restore", "9"))
    assert not bad.ok and "no step 9" in bad.text
    off = answer_command(s.h, ContextCommand("restore", "1"), Policy(reversible=False))
    assert "switched off" in off.text and "restore_of" not in off.meta


def test_answers_depend_only_on_steps_before_t() -> None:
    s = three_steps()
    fold = ContextCommand("fold_span", "x = 1 at a.py:1 is the bug because it is never reset")
    assert answer_command(s.h, fold).ok
    assert "no span is open" in answer_command(s.h, fold, t=1).text
    assert answer_command(s.h, ContextCommand("fold", "3")).ok
    assert not answer_command(s.h, ContextCommand("fold", "3"), t=2).ok


def test_every_answer_is_a_context_manager_text() -> None:
    s = three_steps()
    for name, arg in [("expand", "1"), ("expand", "S1"), ("expand", ""), ("search_ledger", ""), ("search_ledger", "a.py"), ("drop", "x")]:
        a = answer_command(s.h, ContextCommand(name, arg))
        assert a.text.startswith(CM) and a.meta["refold_result"]["name"] == name


def test_handle_matches_the_integration_handler_protocol() -> None:
    from refold.integrations.commands import CommandContext

    s = three_steps()
    result = handle(ContextCommand("expand", "3"), CommandContext(history=s.h, policy=Policy(), step=4))
    assert "x = 1" in result.text and result.extra["restore_of"] == [3] and result.extra["refold_command"] == "expand"


def test_recorded_results_reach_the_step_meta() -> None:
    s = three_steps()
    s.step('fold_span "found it"')
    assert s.h.step(4).meta["refold_result"] == [{"name": "fold_span", "ok": False, "target": "S1"}]
    h2 = History.from_messages(s.h.messages())
    assert h2.step(4).meta["refold_result"] == s.h.step(4).meta["refold_result"]


def test_ledger_view_lists_objects_and_spans() -> None:
    s = three_steps()
    s.step("fold 1")
    view = ledger_view(s.h)
    assert view.startswith(CM)
    assert "1 [folded] 1/4:" in view and "3 [shown] 3/3: file a.py" in view
    assert "S1 [open since step 2]: where is the bug?" in view


def test_search_ledger_star_is_the_ledger_view() -> None:
    from refold.context_commands import answer_command
    from refold.protocol import ContextCommand

    from builders import reply, text_history

    h = text_history([(reply("read", "-", "cat calc.py"), "def add(a, b):\n    return a - b\n")])
    for arg in ("*", ""):
        text = answer_command(h, ContextCommand("search_ledger", arg)).text
        assert text.startswith("[context-manager] Ledger after step 1")
        assert "1 [" in text and "cat calc.py" in text


HUGE = "9" * 5000  # int() of more than 4300 digits raises ValueError


@pytest.mark.parametrize(
    ("command", "answered"),
    [
        (f"restore {HUGE}", True),
        (f"restore 1-{HUGE}", True),
        # not ids, so they pass through to the shell like ``fold -w 80 f`` / ``expand f`` (coreutils)
        (f"fold {HUGE}", False),
        (f"drop 1.{HUGE}", False),
        (f"expand {HUGE}", False),
        (f"expand S{HUGE}", False),
    ],
    ids=lambda c: c[:12] if isinstance(c, str) else None,
)
def test_context_commands_with_huge_numbers_answer_without_raising(command: str, answered: bool) -> None:
    h = History([SYSTEM, TASK])
    h.append({"role": "assistant", "content": "x"}, [{"role": "user", "content": "y"}])
    cmd = intercept(command)
    assert (cmd is not None) == answered
    if cmd is not None:
        text = answer_command(h, cmd).text
        assert text.startswith("[context-manager] restore:") and "is not a step number" in text and len(text) < 400
