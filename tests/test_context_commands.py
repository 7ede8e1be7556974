"""refold.context: every context command recognized by one set of rules and answered from the history."""

from __future__ import annotations

import json

import pytest

from refold.config import Config
from refold.context import ANY, TOOL_SCHEMAS, Recognizer, from_shell, from_tool_call, offer
from refold.context.answers import Answerer, answer
from refold.context.tools import TAUGHT, TAUGHT_SCHEMAS
from refold.history import History
from refold.mechanisms.spans import SpanPolicy
from refold.policy import Policy
from refold.protocol import CM, COMMAND_NAMES, ContextCommand
from refold.types import Answer, Outcome
from refold.wire import answer_record
from test_spans import Session

from builders import SYSTEM, TASK


def three_steps() -> Session:
    s = Session()
    s.step("ls", "a.py")
    s.step('begin_span "where is the bug?"')
    s.step("cat a.py", "x = 1")
    return s


def test_tool_schemas_cover_every_command() -> None:
    names = [t["function"]["name"] for t in (*TOOL_SCHEMAS, *TAUGHT_SCHEMAS)]
    assert sorted(names) == sorted(COMMAND_NAMES)
    for t in (*TOOL_SCHEMAS, *TAUGHT_SCHEMAS):
        params = t["function"]["parameters"]
        assert params["type"] == "object" and set(params["required"]) == set(params["properties"])
    json.dumps(TOOL_SCHEMAS)
    assert from_tool_call("fold_steps", '{"steps": "3-5", "conclusion": "x because y"}') == ContextCommand("fold_steps", "3-5 x because y")
    assert from_tool_call("fold_span", '{"conclusion": "x because y"}') == ContextCommand("fold_span", "x because y")
    assert from_tool_call("restore", '{"steps": [3, 4]}') == ContextCommand("restore", "3 4")
    assert ANY.command("bash", '{"command": "ls"}') is None


def test_shell_form_leaves_coreutils_alone() -> None:
    assert from_shell("restore 3") == ContextCommand("restore", "3")
    assert from_shell('begin_span "q"') == ContextCommand("begin_span", "q")
    assert from_shell("fold 7.2") == ContextCommand("fold", "7.2")
    assert from_shell("expand S1") == ContextCommand("expand", "S1")
    assert from_shell("fold -w 80 notes.txt") is None and from_shell("expand -t 4 a.py") is None
    assert from_shell("ls") is None


def test_offer_follows_the_config() -> None:
    tools = [{"type": "function", "function": {"name": "bash"}}]
    added, rec = offer(Config(), tools)
    assert [t["function"]["name"] for t in added] == [c for c in COMMAND_NAMES if c not in TAUGHT]
    assert rec.functions == frozenset(COMMAND_NAMES) - set(TAUGHT) and rec.shell == frozenset(COMMAND_NAMES)
    assert rec.shell_tool and not rec.text
    taught = Config.parse(spans={"fold_steps": True}, ledger={"objects": True})
    assert [t["function"]["name"] for t in offer(taught, tools)[0]][-3:] == ["fold_steps", "pin", "unpin"]
    added, rec = offer(Config(spans=SpanPolicy(enabled=False)), tools)
    assert "begin_span" not in rec.shell and "begin_span" not in {t["function"]["name"] for t in added}
    assert rec.command("bash", 'begin_span "q"') is None  # span folding off: an ordinary command
    added, rec = offer(Config(policy=Policy(reversible=False)), tools)
    assert "restore" not in rec.functions and rec.command("bash", "restore 2") == ContextCommand("restore", "2")
    own = [*tools, {"type": "function", "function": {"name": "restore"}}]
    added, rec = offer(Config(), own)  # the client's own tool named restore is its own
    assert "restore" not in {t["function"]["name"] for t in added} and rec.command("restore", "{}") is None
    assert not Recognizer(frozenset(), frozenset(), text=False, shell_tool=False).possible


def test_restore_answer_and_record() -> None:
    s = three_steps()
    a = answer(s.h, ContextCommand("restore", "1"))
    assert isinstance(a, Answer) and a.ok and a.restore_of == (1,)
    assert answer_record("restore", a) == {
        "refold_command": "restore",
        "refold_result": {"name": "restore", "ok": True, "target": "1"},
        "restore_of": [1],
    }
    assert "a.py" in a.text and "nothing was run again" in a.text
    bad = answer(s.h, ContextCommand("restore", "9"))
    assert not bad.ok and "no step 9" in bad.text and bad.restore_of == ()
    off = answer(s.h, ContextCommand("restore", "1"), Config(policy=Policy(reversible=False)))
    assert "switched off" in off.text and off.restore_of == ()


def test_answers_depend_only_on_steps_before_t() -> None:
    s = three_steps()
    fold = ContextCommand("fold_span", "x = 1 at a.py:1 is the bug because it is never reset")
    assert answer(s.h, fold).ok
    assert "no span is open" in answer(s.h, fold, t=1).text
    assert answer(s.h, ContextCommand("fold", "3")).ok
    assert not answer(s.h, ContextCommand("fold", "3"), t=2).ok
    with pytest.raises(ValueError, match="outside"):
        Answerer(s.h, t=9)


def test_commands_of_one_reply_are_answered_in_order() -> None:
    s = three_steps()
    a = Answerer(s.h)
    first, second = a.answer(ContextCommand("begin_span", "q1")), a.answer(ContextCommand("begin_span", "q2"))
    assert "Span S2 opened" in first.text and "Span S3 opened at step 4, inside span S2" in second.text
    fold = a.answer(ContextCommand("fold", "1"))
    search = a.answer(ContextCommand("search_ledger", "*"))
    assert fold.ok and "1 [shown, fold pending]" in search.text  # the prompt it was issued from shows it


def test_every_answer_is_a_context_manager_text() -> None:
    s = three_steps()
    for name, arg in [("expand", "1"), ("expand", "S1"), ("expand", ""), ("search_ledger", ""), ("search_ledger", "a.py"), ("drop", "x")]:
        a = answer(s.h, ContextCommand(name, arg))
        assert a.text.startswith(CM) and a.outcome is not None and a.outcome.name == name


def test_recorded_outcomes_are_step_facts() -> None:
    s = three_steps()
    s.step('fold_span "found it"')
    assert s.h.step(4).outcomes == (Outcome("fold_span", False, "S1"),)
    h2 = History.from_messages(s.h.messages())
    assert h2.step(4).outcomes == s.h.step(4).outcomes and h2.digest == s.h.digest


def test_ledger_view_lists_objects_and_spans() -> None:
    s = three_steps()
    s.step("fold 1")
    view = answer(s.h, ContextCommand("search_ledger", "*")).text
    assert view.startswith(CM)
    assert "1 [shown, fold pending] 1/4:" in view and "3 [shown] 3/3: file a.py" in view
    assert "S1 [open since step 2]: where is the bug?" in view


def test_search_ledger_star_is_the_ledger_view() -> None:
    from builders import reply, text_history

    h = text_history([(reply("read", "-", "cat calc.py"), "def add(a, b):\n    return a - b\n")])
    for arg in ("*", ""):
        text = answer(h, ContextCommand("search_ledger", arg)).text
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
    cmd = from_shell(command)
    assert (cmd is not None) == answered
    if cmd is not None:
        text = answer(h, cmd).text
        assert text.startswith("[context-manager] restore:") and "is not a step number" in text and len(text) < 400


@pytest.mark.parametrize(
    ("command", "others"),
    [("ls; restore 1", "ls"), ("ls && restore 1 && pwd", "ls; pwd"), ("ls\nrestore 1", "ls"),
     ("cd /x; ls | restore 1", "cd /x; ls"), ("restore 1 && ls", "ls")],
)
def test_a_restore_after_another_command_is_not_run_naming_both(command: str, others: str) -> None:
    """Answered as ``restore 3 && ls`` is: nothing runs, the answer names both parts."""
    assert (from_shell(command) is None) == (not command.startswith("restore"))  # streams: the first word decides
    cmd = from_shell(command, compound=True)  # where the whole call decides (not streamed)
    assert cmd is not None and cmd.name == "restore"
    a = answer(three_steps().h, cmd)
    assert not a.ok and "Not run" in a.text and "`restore 1` alone" in a.text and f"`{others}`" in a.text


@pytest.mark.parametrize("command", ['echo "a; restore 1"', "git restore a.py; ls", "cat <<EOF\nrestore 1\nEOF",
                                     "ls; restored 1", "ls; 'restore' 1"])
def test_restore_as_data_or_another_programs_word_is_a_shell_command(command: str) -> None:
    assert from_shell(command, compound=True) is None


@pytest.mark.parametrize(
    ("command", "rest"),
    [
        ("for f in a b; do restore 2; done", "`for f in a b; do \u2026; done`"),
        ("if true; then restore 1; fi", "`if true; then \u2026; fi`"),
        ("for f in a; do ls; restore 1; done", "`for f in a; do ls; done`"),
        ("ls; restore 2", "`ls`"),
    ],
)
def test_a_restore_inside_a_loop_names_a_rest_a_shell_can_read(command: str, rest: str) -> None:
    """The rest to run again was 'for f in a b; done' (its 'do' cut away with the restore)."""
    from refold.context.recognize import from_shell
    from refold.protocol import parse_restore_args

    cmd = from_shell(command, compound=True)
    assert cmd is not None and cmd.name == "restore"
    steps, said = parse_restore_args(cmd.argument, 5)
    assert steps == [] and said is not None and f"then {rest} in a command of its own." in said
