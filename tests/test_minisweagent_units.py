"""Units of the mini integration: command matching, handlers, wrapper options, saved config."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("minisweagent")

from minisweagent.models.test_models import DeterministicModel  # noqa: E402

from refold.config import Config, PromptConfig
from refold.context.answers import answer  # noqa: E402
from refold.context.recognize import ANY  # noqa: E402
from refold.errors import PolicyError  # noqa: E402
from refold.history import History  # noqa: E402
from refold.integrations.context_tools import with_context_tools  # noqa: E402
from refold.integrations.minisweagent import RefoldModel, resolve_handlers  # noqa: E402
from refold.integrations.saved import renderer_for  # noqa: E402
from refold.mechanisms.spans import SpanPolicy  # noqa: E402
from refold.policy import Policy  # noqa: E402
from refold.prompts import response_format_lines, system_section  # noqa: E402
from refold.protocol import CM, ContextCommand  # noqa: E402
from refold.render import Renderer  # noqa: E402
from refold.types import content_text  # noqa: E402
from refold.wire import read_actions  # noqa: E402

from builders import seed_config


def test_refold_commands_switch_off_or_replace_answers() -> None:
    assert resolve_handlers({"fold_span": None}) == ({}, frozenset({"fold_span"}))
    handlers, off = resolve_handlers({"restore": "refold.context.answers.refused"})
    assert set(handlers) == {"restore"} and not off
    with pytest.raises(PolicyError, match="not a context command"):
        resolve_handlers({"bogus": None})
    with pytest.raises(PolicyError, match="cannot import"):
        resolve_handlers({"restore": "no.such.module.fn"})
    assert model(refold_commands={"fold_span": None}).recognizer.command("bash", 'fold_span "x"') is None


@pytest.mark.parametrize(
    ("command", "tool", "expected"),
    [
        ("fold -w 80 notes.txt", "bash", None),
        ("expand -t 4 f.py", "bash", None),
        ("fold 7", "bash", ("fold", "7")),
        ("drop 7.2", "bash", ("drop", "7.2")),
        ("expand S1", "bash", ("expand", "S1")),
        ('begin_span "why?"', "bash", ("begin_span", "why?")),
        ("restore 3-5", "bash", ("restore", "3-5")),
        ('{"conclusion": "x because y"}', "fold_span", ("fold_span", "x because y")),
        ('{"id": "S1"}', "expand", ("expand", "S1")),
        ("ls -la", "bash", None),
    ],
)
def test_match(command: str, tool: str, expected: tuple[str, str] | None) -> None:
    parsed = ANY.command(tool, command)
    assert (None if parsed is None else (parsed.name, parsed.argument)) == expected


def test_answers_use_the_configs_span_policy() -> None:
    h = History([{"role": "user", "content": "task"}])
    h.append({"role": "assistant", "content": "", "extra": {"actions": [{"command": 'begin_span "q"'}]}}, [])
    short = ContextCommand("fold_span", "done since x=1")
    strict = answer(h, short)
    lenient = answer(h, short, Config(spans=SpanPolicy(min_chars=5)))
    assert "refused" in strict.text and not strict.ok
    assert "Span S1 folded" in lenient.text and lenient.ok


def test_system_section_without_format_lines() -> None:
    assert response_format_lines(3) in system_section(3)
    without = system_section(3, include_format=False)
    assert response_format_lines(3) not in without and "## Context management" in without
    assert system_section(3).startswith(without)
    h = History([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}])
    prompt = Renderer(seed_config(Policy(), prompt=PromptConfig(format_in_system=False))).render(h).messages
    assert content_text(prompt[0]["content"]) == "sys" + system_section(3, include_format=False, masking=False)


def test_read_actions_prefers_the_wrappers_record() -> None:
    kept = [{"command": '{"question": "q"}', "tool_call_id": "c1", "tool": "begin_span"}, {"command": "ls"}]
    reply: dict[str, Any] = {
        "role": "assistant",
        "content": "```mswea_bash_command\nls\n```",
        "extra": {"actions": [{"command": "ls"}], "refold": {"actions": kept}},
    }
    actions = read_actions(reply)
    assert [(a.command, a.tool, a.tool_call_id) for a in actions] == [
        ('{"question": "q"}', "begin_span", "c1"),
        ("ls", "bash", None),
    ]
    assert [a.context for a in actions] == [ContextCommand("begin_span", "q"), None]
    reply["extra"]["refold"]["context_actions"] = []  # the wrapper's word on which were answered wins
    assert [a.context for a in read_actions(reply)] == [None, None]
    del reply["extra"]["refold"]
    assert [a.command for a in read_actions(reply)] == ["ls"]  # unchanged without the record


def test_context_tools_only_for_litellm_tool_call_models() -> None:
    # imported here: mini's LiteLLM classes load litellm (~6 s of CPU) in whichever worker collects
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    sub = with_context_tools(LitellmModel, [])
    assert sub is not None and issubclass(sub, LitellmModel)
    assert (sub.__module__, sub.__name__) == (LitellmModel.__module__, LitellmModel.__name__)
    assert (
        with_context_tools(LitellmTextbasedModel, []) is None and with_context_tools(DeterministicModel, []) is None
    )


def model(**options: Any) -> RefoldModel:
    return RefoldModel(
        inner_model_class="minisweagent.models.test_models.DeterministicModel",
        model_name="deterministic",
        outputs=[],
        **{"refold_tokenizer": None, **options},
    )


def test_a_config_error_is_one_line_on_minis_command_line_not_a_traceback() -> None:
    """mini builds the model inside its typer command: ``-c model.refold.k=abc`` printed a 45-line
    traceback before the one line; the error is now one typer prints as such (and still a
    PolicyError for callers that catch it)."""
    import typer
    from typer.testing import CliRunner

    with pytest.raises(PolicyError, match="invalid policy field 'k'"):
        model(refold={"k": "abc"})
    app = typer.Typer()

    @app.command()
    def run() -> None:  # what mini's main does with the config it built
        model(refold={"k": "abc"})

    result = CliRunner().invoke(app, [])
    assert result.exit_code == 1, result.output
    assert "invalid policy field 'k'" in result.output and "Traceback" not in result.output


def test_wrapper_options() -> None:
    m = model(
        refold_spans={"min_chars": 10}, refold_ledger={"budget_tokens": 1000}, refold_context_tools=True
    )
    assert m.spans.min_chars == 10 and m.ledger.budget_tokens == 1000
    assert m.context_tools is False  # DeterministicModel has no tools to add to: bash commands instead
    saved = m.serialize()["info"]["config"]["refold"]
    assert saved["spans"]["min_chars"] == 10 and saved["ledger"]["budget_tokens"] == 1000
    with pytest.raises(PolicyError, match="invalid refold_ledger field 'budget_tokens'"):
        model(refold_ledger={"budget_tokens": 0})
    with pytest.raises(PolicyError, match="invalid refold_spans field 'nope'"):
        model(refold_spans={"nope": 1})


@pytest.mark.parametrize(
    ("option", "task", "expected"), [(None, "x", True), (None, "FORMAT", False), (True, "FORMAT", True)]
)
def test_format_lines_appear_once(option: bool | None, task: str, expected: bool) -> None:
    m = model(refold_format_in_system=option, refold_boundary={"rule": "fixed"})  # the protocol from the first call
    lines = response_format_lines(3)
    prefix = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": task.replace("FORMAT", lines)},
    ]
    history = m._sync(prefix)
    assert m._renderer.config.prompt.format_in_system is expected
    assert renderer_for(m.serialize()).config.prompt.format_in_system is expected
    text = "".join(content_text(x.get("content")) for x in m._renderer.render(history).messages)
    assert text.count(lines) == int(expected) + int(task == "FORMAT")  # once unless forced


def test_a_context_tool_without_handler_is_answered_not_run() -> None:
    m = model(refold_commands={"search_ledger": None})
    extra: dict[str, Any] = {
        "actions": [
            {"command": '{"query": "x"}', "tool_call_id": "c1", "tool": "search_ledger"},
            {"command": "ls"},
        ]
    }
    info: dict[str, Any] = {}
    m._intercept(extra, info)
    assert extra["actions"] == [{"command": "ls"}] and info["context_actions"][0]["name"] == "search_ledger"
    from refold.context.answers import Answerer

    msg = m._answer(read_actions({"extra": {"refold": info}})[0], Answerer(History([])))
    assert msg["role"] == "tool" and msg["tool_call_id"] == "c1"
    assert msg["content"] == f"{CM} search_ledger is switched off in this run."


def test_each_call_records_its_wall_time_and_the_history_reads_it() -> None:
    import time

    from minisweagent.models.test_models import make_output

    m = RefoldModel(
        inner_model_class="minisweagent.models.test_models.DeterministicModel",
        model_name="deterministic",
        outputs=[make_output(f"THOUGHT: {c}", [{"command": f"echo {c}"}]) for c in "ab"],
        refold_tokenizer=None,
    )
    before = time.time()
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    first = m.query(msgs)
    assert before - 0.001 <= first["extra"]["refold"]["time"] <= time.time() + 1  # recorded to the millisecond
    msgs += [first, {"role": "user", "content": "a"}]  # mini 1 style: the output carries no timestamp
    second = m.query(msgs)
    h = m.history
    assert h is not None and len(h) == 1
    assert h.step(1).meta["time"] == first["extra"]["timestamp"]  # the reply's own time, until the next call
    h2 = History.from_messages([*msgs, second, {"role": "user", "content": "b"}])
    assert h2.step(1).meta["time"] == second["extra"]["refold"]["time"]  # step 1 was complete when call 2 began


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"refold": 5}, "refold must be a mapping of fields, not 5"),
        ({"refold_spans": 5}, "refold_spans must be a mapping of fields, not 5"),
        ({"refold_ledger": [1]}, r"refold_ledger must be a mapping of fields, not \[1\]"),
        ({"refold_boundary": "x"}, "refold_boundary must be a mapping of fields, not 'x'"),
        ({"refold_commands": 5}, "refold_commands must be a mapping of fields, not 5"),
        ({"refold_commands": {"restore": 5}}, "refold_commands.restore must be a handler's dotted path or null, not 5"),
        ({"refold_tokenizer": 5}, "refold_tokenizer must be a string or null, not 5"),
        ({"refold_tokenizer": "gpt2"}, "refold_tokenizer: unknown tokenizer 'gpt2'; valid choices: qwen3.6"),
        ({"refold_pins": 5}, "refold_pins must be a string or null, not 5"),
        ({"refold_cache": 5}, "refold_cache must be a string or null, not 5"),
        ({"refold_context_tools": "maybe"}, "refold_context_tools must be true or false, not 'maybe'"),
        ({"refold": {"enabled": "no"}}, "refold.enabled must be true or false, not 'no'"),
        ({"refold_cache": "azure"}, "refold_cache: Input should be 'vllm', 'sglang'"),
        ({"refold_spanz": {"prompt": True}}, "model.refold_spanz: not a refold setting; did you mean 'refold_spans'"),
        ({"refold_legder": {}}, "model.refold_legder: not a refold setting; did you mean 'refold_ledger'"),
        ({"refolds": {"k": 4}}, "model.refolds: not a refold setting; did you mean 'refold'"),
    ],
)
def test_wrapper_options_of_the_wrong_type_name_the_option(options: dict[str, Any], words: str) -> None:
    """A mini config value of the wrong type (-c model.refold=5) is a PolicyError naming the option
    when the model is built (were: "'int' object is not iterable", an AttributeError traceback
    from refold_commands or a tokenizer of 5, 'maybe' read as true, "no" as enabled)."""
    with pytest.raises(PolicyError, match=words):
        model(**options)
