"""Loading recorded runs of every supported format, and refusing bad files with one clear line."""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import TrajectoryError
from refold.history import History
from refold.loaders import load
from refold.render import Renderer

from builders import SYSTEM, TASK, seed_config
from conftest import DATA, real_trajectories


def test_mini_swe_agent_1_text_actions() -> None:
    h = load(DATA / "mswea-gemini3pro__django__django-16255.traj.json")
    assert h.meta["format"] == "mini-swe-agent-1"
    assert len(h) == h.meta["api_calls"] == 17
    assert len(h.prefix) == 2
    assert h.step(1).actions[0].command == "ls -R django/contrib/sitemaps"
    assert h.step(1).output_texts[0].startswith("<returncode>0</returncode>")
    assert h.step(2).meta["usage"]["prompt_tokens"] > 0


def test_sweagent_traj_gz_and_function_calls() -> None:
    h = load(DATA / "sweagent__marshmallow-code__marshmallow-1867.traj.gz")
    assert h.meta["format"] == "swe-agent"
    assert h.step(1).reply["tool_calls"][0]["function"]["name"] == "create"
    assert h.step(1).observations[0]["role"] == "tool"
    assert h.step(1).observations[0]["tool_call_id"] == h.step(1).actions[0].tool_call_id
    h2 = load(DATA / "sweagent__pydicom__pydicom-1458.traj.gz")
    assert h2.step(1).actions[0].command.startswith("create reproduce_bug.py")


def test_mini_swe_agent_1_1_tool_calls(tmp_path: Path) -> None:
    traj = {
        "trajectory_format": "mini-swe-agent-1.1",
        "info": {"model_stats": {"api_calls": 1}},
        "messages": [
            SYSTEM,
            TASK,
            {
                "role": "assistant",
                "content": "PROGRESS: look\nSTALE: -",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
                "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"}]},
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
            {"role": "exit", "content": "Submitted", "extra": {"exit_status": "Submitted"}},
        ],
    }
    p = tmp_path / "run.traj.json"
    p.write_text(json.dumps(traj))
    h = load(p)
    assert len(h) == 1 and h.step(1).actions[0].command == "ls" and h.step(1).has_protocol
    assert [m["role"] for m in h.step(1).observations] == ["tool"]  # the exit record is not a message


def test_plain_message_list_and_jsonl(tmp_path: Path) -> None:
    msgs = [SYSTEM, TASK, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "out"}]
    p = tmp_path / "m.json"
    p.write_text(json.dumps(msgs))
    assert len(load(p)) == 1
    q = tmp_path / "m.jsonl"
    q.write_text("\n".join(json.dumps(m) for m in msgs))
    assert len(load(q)) == 1


@pytest.mark.parametrize("path", real_trajectories(), ids=lambda p: p.name)
def test_all_real_runs_load(path: Path) -> None:
    h = load(path)
    assert len(h) > 0
    assert all(s.digest for s in h.steps)
    assert len({s.digest for s in h.steps}) == len(h)


def test_history_is_append_only_and_copies_input() -> None:
    reply = {"role": "assistant", "content": "x"}
    h = History([SYSTEM, TASK])
    step = h.append(reply, [{"role": "user", "content": "o"}])
    reply["content"] = "changed"
    assert h.step(1).reply["content"] == "x"
    assert step.index == 1
    with pytest.raises(AttributeError):
        h.steps = ()  # type: ignore[misc]
    before = h.digest
    h.append({"role": "assistant", "content": "y"})
    assert h.step(2).digest != before and h.step(1).digest == before


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(extra=_json, content=st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)}), max_size=3))
def test_append_copies_nested_values_deeply(extra: object, content: list[dict[str, str]]) -> None:
    """Nothing the caller keeps a reference to can change a step afterwards, at any depth."""
    reply = {"role": "assistant", "content": "x", "extra": {"v": extra, "l": [extra]}}
    obs = {"role": "user", "content": content}
    h = History([SYSTEM, TASK])
    h.append(reply, [obs])
    want = copy.deepcopy((reply, obs))
    digest = h.digest
    reply["extra"]["l"].append(1)
    reply["extra"]["v"] = "changed"
    for part in content:
        part["text"] = "changed"
    content.append({"type": "text", "text": "more"})
    step = h.step(1)
    assert (step.reply, step.observations[0]) == want
    assert step.reply["extra"]["l"] is not reply["extra"]["l"] and step.observations[0]["content"] is not content
    again = History([SYSTEM, TASK])
    again.append(*copy.deepcopy(want[:1]), [want[1]])
    assert again.digest == digest


def test_a_stored_step_read_twice_gets_the_same_facts() -> None:
    """A store's step is read for its facts and then appended with them: both reads agree, so the
    digest carries no facts record, and the second shell analysis is a cached one."""
    from refold import shell
    from refold.wire import read_stored

    reply = {"role": "assistant", "content": "THOUGHT\n```bash\nsed -n 1,40p src/a.py > /tmp/x && rm -f b.txt\n```"}
    obs = [{"role": "user", "content": "<returncode>0</returncode>"}]
    h = History([SYSTEM, TASK])
    h.append(reply, obs)
    shell._analyze.cache_clear()
    facts, meta = read_stored(reply, obs, {})
    again = History([SYSTEM, TASK])
    again.append(reply, obs, facts=facts, meta=meta)
    assert again.digest == h.digest
    assert again.step(1).actions == h.step(1).actions
    assert again.step(1).actions[0].effects.writes == ("/tmp/x", "b.txt")
    info = shell._analyze.cache_info()
    assert info.misses == 1 and info.hits >= 1


def test_extend_from_messages() -> None:
    msgs = [SYSTEM, TASK, {"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}]
    h = History.from_messages(msgs)
    more = [*copy.deepcopy(msgs), {"role": "assistant", "content": "b"}, {"role": "user", "content": "p"}]
    assert h.extend_from_messages(more) == 1
    assert h.step(2).reply_text == "b"
    assert h.extend_from_messages(more) == 0


def test_extend_from_messages_waits_for_a_replys_observations() -> None:
    """A loop syncing right after the model replied recorded the step without its observations;
    the next sync, with them, was "step 2 gained messages after it was recorded"."""
    msgs = [SYSTEM, TASK, {"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}]
    h = History.from_messages(msgs)
    msgs.append({"role": "assistant", "content": "b"})
    assert h.extend_from_messages(msgs) == 0 and len(h) == 1
    msgs.append({"role": "user", "content": "p"})
    assert h.extend_from_messages(msgs) == 1
    assert h.step(2).observations == ({"role": "user", "content": "p"},)
    assert h.digest == History.from_messages(msgs).digest


# ---- bad input: one line naming the file and the problem ------------------------------------


def _one_line(err: TrajectoryError, path: Path, words: str) -> None:
    text = str(err)
    assert "\n" not in text and str(path) in text and words in text


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "file is empty"),
        (b"   \n", "file is empty"),
        (b'{"messages": [{"role": "system", "content": "x"}', "invalid JSON"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        # `refold view report.html` said "invalid JSON at line 1 column 1", a PNG "not UTF-8 text"
        (b"<!DOCTYPE html>\n<html><body></body></html>", "an HTML page (refold view writes these), not a trajectory"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "a PNG image, not a trajectory"),
        (b'{"foo": 1}', "unknown trajectory format"),
        (b"[1, 2, 3]", "not a list of chat messages (objects with 'role'); item 0 is not an object: 1"),
        (b"[]", "not a list of chat messages (objects with 'role') (it is empty)"),
        # JSON Lines: the row that is no message is named (the whole file was refused unnamed)
        (b'{"role": "user", "content": "t"}\n{"role": "assistant", "content": "ls"}\n5\n', "item 2 is not an object: 5"),
        (b'{"role": "user", "content": "t"}\n{"content": "ls"}\n', "item 1 is an object without 'role'"),
        (b'"just a string"', "neither an object"),
        (b'{"trajectory_format": "mini-swe-agent-1", "messages": 5}', "'messages' is not a list"),
        (b'{"trajectory_format": "mini-swe-agent-1", "messages": []}', "no messages"),
        (b'{"trajectory_format": "mini-swe-agent-1", "messages": [{"role": "system", "content": "s"}]}', "no assistant replies"),
        (b'{"history": 3, "trajectory": []}', "'history' is not a list"),
        (b'{"trajectory_format": "mini-swe-agent-1", "messages": [7]}', "message 0 is not an object"),
    ],
)
def test_bad_files(tmp_path: Path, content: bytes, words: str) -> None:
    p = tmp_path / "bad.traj.json"
    p.write_bytes(content)
    with pytest.raises(TrajectoryError) as e:
        load(p)
    _one_line(e.value, p, words)


def test_truncated_gzip_and_missing_file(tmp_path: Path) -> None:
    good = gzip.compress(json.dumps([SYSTEM, {"role": "assistant", "content": "x"}]).encode())
    p = tmp_path / "t.json.gz"
    p.write_bytes(good[: len(good) // 2])
    with pytest.raises(TrajectoryError) as e:
        load(p)
    _one_line(e.value, p, "gzip")
    missing = tmp_path / "nope.json"
    with pytest.raises(TrajectoryError) as e2:
        load(missing)
    _one_line(e2.value, missing, "cannot read file")


def test_huge_output_is_handled(tmp_path: Path) -> None:
    from refold.render import Renderer

    big = "line of output\n" * 200_000  # ~3 MB in one observation
    msgs = [SYSTEM, TASK, {"role": "assistant", "content": "```bash\ncat big\n```"}, {"role": "user", "content": big}]
    p = tmp_path / "big.json"
    p.write_text(json.dumps(msgs))
    h = load(p)
    assert len(Renderer(seed_config()).render(h).messages) == 4


@pytest.mark.parametrize(
    ("content", "command"),
    [
        ("THOUGHT: x\n\n```bash\nls -la\n```", "ls -la"),
        ("THOUGHT: x\n\n```mswea_bash_command\ncat a.py\n```", "cat a.py"),
        ("THOUGHT: x <mswea_bash_command>grep -n foo b.py</mswea_bash_command>", "grep -n foo b.py"),
    ],
)
def test_text_actions_of_mini_1_and_2(content: str, command: str) -> None:
    from refold.wire import read_actions

    assert [a.command for a in read_actions({"role": "assistant", "content": content})] == [command]


def test_step_facts_are_typed_and_covered_by_the_digest() -> None:
    from refold.protocol import ContextCommand
    from refold.types import Facts
    from refold.wire import read_facts

    reply = {"role": "assistant", "content": "PROGRESS: x\nSTALE: -\n```bash\nrestore 1\n```"}
    obs = [{"role": "user", "content": "[context-manager] Step 1 restored", "extra": {"restore_of": [1]}}]
    first = ({"role": "assistant", "content": "```bash\ncat a.py\n```"}, [{"role": "user", "content": "x = 1"}])

    def history(facts: Facts | None = None) -> History:
        h = History([{"role": "user", "content": "task"}])
        h.append(*first)
        h.append(reply, obs, facts=facts)
        return h

    plain = history()
    step = plain.step(2)
    assert step.restore_of == (1,) and step.actions[0].context == ContextCommand("restore", "1")
    assert plain.step(1).actions[0].effects.reads == ("a.py",) and plain.step(1).actions[0].context is None
    assert history(read_facts(reply, obs)).digest == plain.digest  # the messages' own facts: same digest
    other = Facts(step.actions, (), ())  # the same messages, told they restored nothing
    h = history(other)
    assert h.step(2).restore_of == () and h.digest != plain.digest
    assert Renderer().render(h).origins != Renderer().render(plain).origins  # the restore is shown as one


_REPLIES = ("```bash\ncat a.py\n```", "```bash\nrestore 1\n```", '```bash\nbegin_span "why?"\n```')


def _built(choices: list[tuple[int, int]]) -> History:
    from refold.types import Facts, Outcome
    from refold.wire import read_facts

    h = History([{"role": "user", "content": "task"}])
    for text, variant in choices:
        reply = {"role": "assistant", "content": f"PROGRESS: p\nSTALE: -\n{_REPLIES[text]}"}
        obs = [{"role": "user", "content": "out"}]
        actions = read_facts(reply, obs).actions
        facts = (None, Facts(actions), Facts(actions, (Outcome("begin_span", False),), (1,)))[variant]
        h.append(reply, obs, facts=facts)
    return h


@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=3),
)
@settings(max_examples=60, deadline=None)
def test_equal_digests_render_equally(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    ha, hb = _built(a), _built(b)
    facts_a = [(s.reply, s.actions, s.outcomes, s.restore_of) for s in ha.steps]
    facts_b = [(s.reply, s.actions, s.outcomes, s.restore_of) for s in hb.steps]
    assert (ha.digest == hb.digest) == (facts_a == facts_b)
    if ha.digest == hb.digest:
        ra, rb = Renderer().render(ha), Renderer().render(hb)
        assert ra.serialized() == rb.serialized() and ra.origins == rb.origins


def test_a_reply_with_a_huge_number_can_be_appended() -> None:
    h = History([SYSTEM, TASK])
    huge = "9" * 5000  # int() of more than 4300 digits raises ValueError
    step = h.append({"role": "assistant", "content": f"PROGRESS: x\nSTALE: {huge}"}, [{"role": "user", "content": "ok"}])
    assert step.stale == ()


def test_developer_and_function_messages_are_kept() -> None:
    """OpenAI's newer models take the system prompt as 'developer'; a legacy function call is
    answered by role 'function'. Both are part of what the model was sent (they were dropped)."""
    msgs = [
        {"role": "developer", "content": "You are a coder."},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": None, "function_call": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"role": "function", "name": "bash", "content": "a.py"},
        {"role": "assistant", "content": "done"},
    ]
    h = History.from_messages(msgs)
    assert [m["role"] for m in h.prefix] == ["developer", "user"]
    assert h.step(1).observations[0]["content"] == "a.py"
    assert h.messages() == msgs
    prompt = Renderer(seed_config()).render(h)
    assert prompt.messages[0]["role"] == "developer"
    assert prompt.messages[0]["content"].startswith("You are a coder.")  # the protocol follows it


@pytest.mark.parametrize("role", [5, None, "weird", "Assistant"])
def test_a_message_of_no_chat_role_is_refused_by_index(role: object) -> None:
    msgs = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ls"}, {"role": role, "content": "out"}]
    with pytest.raises(TrajectoryError, match=r"run\.json: message 2: role .* is not one of system, developer"):
        History.from_messages(msgs, source="run.json")


@pytest.mark.parametrize("value", ["abc", -5, True, float("nan"), float("inf"), 12.5, [1], 10**30])
def test_a_mangled_usage_count_reads_as_not_reported(value: object) -> None:
    """A provider count that is no count (text, negative, a bool, NaN, 1e30) is None for every
    reader (the view showed "abc tokens" or failed on NaN; simulate made a list 1e30 long)."""
    usage = {"prompt_tokens": value, "completion_tokens": value, "prompt_tokens_details": {"cached_tokens": value}}
    reply = {"role": "assistant", "content": "ls", "extra": {"response": {"usage": usage}}}
    h = History.from_messages([{"role": "user", "content": "task"}, reply, {"role": "user", "content": "out"}])
    assert h.step(1).meta["usage"] == {"prompt_tokens": None, "cached_tokens": None, "completion_tokens": None}
    fine = {"prompt_tokens": 1200, "completion_tokens": 30.0, "prompt_tokens_details": {"cached_tokens": 0}}
    reply = {"role": "assistant", "content": "ls", "extra": {"response": {"usage": fine}}}
    h = History.from_messages([{"role": "user", "content": "task"}, reply])
    assert h.step(1).meta["usage"] == {"prompt_tokens": 1200, "cached_tokens": 0, "completion_tokens": 30}


def test_append_names_what_is_not_a_message() -> None:
    """An SDK's message object, or one observation not in a list, was an AttributeError ("'str'
    object has no attribute 'get'") from deep inside; now a TypeError saying what to pass."""
    from openai.types.chat import ChatCompletionMessage

    sdk = ChatCompletionMessage(role="assistant", content="ls")
    reply = {"role": "assistant", "content": "ls"}
    h = History([{"role": "user", "content": "t"}])
    for args, said in [
        ((sdk, []), "the reply must be a dict message, not ChatCompletionMessage; pass message.model_dump()"),
        ((reply, {"role": "user", "content": "x"}), "observations must be a list of dict messages, not dict"),
        ((reply, "x"), "observations must be a list of dict messages, not str"),
        ((reply, [sdk]), "observation 0 must be a dict message, not ChatCompletionMessage"),
    ]:
        with pytest.raises(TypeError, match=re.escape(said)):
            h.append(*args)
    assert len(h) == 0
    h.append(reply, (m for m in [{"role": "user", "content": "x"}]))  # any iterable of messages
    assert h.step(1).observations == ({"role": "user", "content": "x"},)



@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ({"role": "user", "content": "ls"}, "the reply has role 'user'; a reply is the model's message, role 'assistant'"),
        ({"role": "tool", "content": "ls"}, "the reply has role 'tool';"),
        ({"content": "ls"}, "the reply has no role;"),
    ],
)
def test_append_names_a_reply_that_is_not_the_models(reply: dict[str, str], said: str) -> None:
    """A reply with role user was stored as a step (and rendered as the model's turn); now a
    one-line ValueError naming the role, and nothing is appended."""
    h = History([{"role": "user", "content": "t"}])
    with pytest.raises(ValueError, match=re.escape(said)) as e:
        h.append(reply, [{"role": "user", "content": "x"}])
    assert "\n" not in str(e.value) and len(h) == 0
    h.append({"role": "assistant", "content": "ls"}, [{"role": "user", "content": "x"}])
    assert len(h) == 1

def test_lone_surrogates_become_replacement_characters() -> None:
    """Output decoded with ``surrogateescape`` ("\\udc80") was a UnicodeEncodeError from the digest
    when building a History from messages; now it is stored as U+FFFD, as the loaders and proxy do."""
    msgs = [
        {"role": "system", "content": "sys \udc80"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "```bash\ncat f\n```"},
        {"role": "user", "content": [{"type": "text", "text": "bytes \udcff\ud800 here"}]},
    ]
    h = History.from_messages(msgs)
    assert h.prefix[0]["content"] == "sys \ufffd"
    assert h.step(1).observations[0]["content"][0]["text"] == "bytes \ufffd\ufffd here"
    h.append({"role": "assistant", "content": "again \udc80"}, [{"role": "user", "content": "x"}])
    assert h.step(2).reply["content"] == "again \ufffd"
    rendered = Renderer(seed_config()).render(h)
    json.dumps(rendered.messages).encode()  # a prompt any client can send
    assert History.from_messages([{**m} for m in h.messages()]).digest == h.digest


@pytest.mark.parametrize("value", [{"role": "user", "content": "x"}, "hello", 5])
def test_from_messages_names_what_is_not_a_message_list(value: object) -> None:
    with pytest.raises(TrajectoryError, match=f"messages must be a list of dict messages, not {type(value).__name__}"):
        History.from_messages(value)  # type: ignore[arg-type]
