"""Loading trajectories (refold.loaders): mutated real files load or fail with a one-line TrajectoryError naming the file."""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.errors import TrajectoryError
from refold.formats.mini import unreplied_calls
from refold.history import History
from refold.loaders import load
from refold.mechanisms.ledger import LedgerPolicy
from refold.policy import Policy
from refold.render import Renderer

from builders import seed_config
from conftest import real_trajectories

REAL = {p.name: json.loads(gzip.decompress(p.read_bytes()) if p.read_bytes()[:2] == b"\x1f\x8b" else p.read_bytes()) for p in real_trajectories()}

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.just("9" * 5000),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=5)), max_size=3),
    st.dictionaries(st.sampled_from(["role", "content", "text", "type", "function", "id", "extra"]), st.one_of(st.none(), st.integers(), st.text(max_size=5)), max_size=3),
    st.just({"role": "assistant", "content": None, "tool_calls": [{"id": 1, "function": {"name": 2, "arguments": {"command": 3}}}]}),
    st.just([{"type": "text", "text": "part"}, {"type": "image_url", "image_url": {"url": "data:,"}}]),
    st.just({"restore_of": ["x", {"a": 1}, 3]}),
)


def _paths(node: Any, path: tuple[Any, ...] = (), depth: int = 0) -> list[tuple[Any, ...]]:
    out = [path]
    if depth > 6:
        return out
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k), depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node[:40]):
            out += _paths(v, (*path, i), depth + 1)
    return out


PATHS = {name: _paths(data) for name, data in REAL.items()}


def _mutate(data: Any, path: tuple[Any, ...], op: str, junk: Any) -> Any:
    if not path:
        return junk
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if op == "delete":
        del parent[last]
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(last, json.loads(json.dumps(parent[last])))
    else:
        parent[last] = junk
    return data


def _check(path: Path) -> None:
    try:
        h = load(path)
    except TrajectoryError as e:
        text = str(e)
        assert "\n" not in text and str(path) in text and len(text) < 600, text
        return
    for policy in (Policy(), Policy(mask_after=2, k=2)):
        r = Renderer(seed_config(policy, ledger=LedgerPolicy(budget_tokens=50_000)))
        for t in range(len(h) + 1):
            r.render(h, t)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_real_files(tmp_path: Path, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(REAL)))
    doc = json.loads(json.dumps(REAL[name]))
    for _ in range(data.draw(st.integers(1, 3))):
        paths = _paths(doc) if _ else PATHS[name]
        where = data.draw(st.sampled_from(paths))
        op = data.draw(st.sampled_from(["replace", "replace", "delete", "duplicate"]))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            doc = _mutate(doc, where, op, copy.deepcopy(data.draw(JUNK)))  # st.just objects are shared
    raw = json.dumps(doc, allow_nan=True).encode()
    encoding = data.draw(st.sampled_from(["plain", "bom", "gzip", "jsonl", "truncated"]))
    if encoding == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif encoding == "gzip":
        raw = gzip.compress(raw)
    elif encoding == "jsonl" and isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        raw = "\n".join(json.dumps(m) for m in doc["messages"]).encode()
    elif encoding == "truncated":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    path = tmp_path / f"mutated-{encoding}.traj.json"
    path.write_bytes(raw)
    _check(path)


@pytest.mark.parametrize(
    ("raw", "steps"),
    [
        (b"\xef\xbb\xbf" + json.dumps([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]).encode(), 1),
        (("[" * 100_000 + "]" * 100_000).encode(), None),
        (('{"messages": [' + "[" * 5000 + "]" * 5000 + "]}").encode(), None),
        (json.dumps({"messages": [{"role": "assistant", "content": "a", "extra": "x"}]}).encode(), 1),
        (json.dumps({"messages": [{"role": "assistant", "content": "a", "tool_calls": "xx"}]}).encode(), None),
        (json.dumps({"messages": [{"role": "assistant", "content": "a", "tool_calls": ["xx", {"function": "f"}]}]}).encode(), None),
        (json.dumps({"messages": [{"role": "assistant", "content": "a", "extra": {"restore_of": 3}}]}).encode(), 1),
        (json.dumps({"messages": [{"role": "assistant", "content": "a", "extra": {"restore_of": ["a", {"b": 1}]}}]}).encode(), 1),
        (json.dumps({"history": [{"role": 1, "content": "x"}], "trajectory": []}).encode(), None),
        (json.dumps({"messages": [{"role": 10**2000, "content": "a", "tool_calls": "xx"}]}).encode(), None),
    ],
    ids=[
        "bom", "deep", "deep-inside", "extra-str", "tool-calls-str", "tool-calls-junk", "restore-of-int", "restore-of-junk",
        "role-int", "huge-role-bad-calls",
    ],
)
def test_malformed_files(tmp_path: Path, raw: bytes, steps: int | None) -> None:
    path = tmp_path / "run.traj.json"
    path.write_bytes(raw)
    if steps is None:
        with pytest.raises(TrajectoryError, match=str(path)) as e:
            load(path)
        assert len(str(e.value)) < 600  # one short line, whatever the file holds
        return
    h = load(path)
    assert len(h) == steps
    Renderer(seed_config()).render(h)


def test_sweagent_demonstrations_are_prefix_not_steps(tmp_path: Path) -> None:
    history = [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "demo task", "is_demo": True},
        {"role": "assistant", "content": "demo reply", "action": "ls", "is_demo": True},
        {"role": "user", "content": "demo output", "is_demo": True},
        {"role": "user", "content": "the real task"},
        {"role": "assistant", "content": "real reply", "action": "ls", "tool_call_ids": None},
        {"role": "user", "content": "real output"},
    ]
    path = tmp_path / "demo.traj"
    path.write_text(json.dumps({"history": history, "trajectory": [{"action": "ls"}]}))
    h = load(path)
    assert len(h) == 1 and h.step(1).reply_text == "real reply"
    assert [m["content"] for m in h.prefix] == ["You are SWE-agent.", "demo task", "demo reply", "demo output", "the real task"]
    assert all("is_demo" not in m for m in Renderer(seed_config()).render(h).messages)


def test_sweagent_trajectory_without_history(tmp_path: Path) -> None:
    query = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    trajectory = [
        {"thought": "look", "action": "ls", "observation": "a.py", "response": "look\n```\nls\n```", "query": query},
        {"thought": "read", "action": "cat a.py", "observation": "x = 1"},
    ]
    path = tmp_path / "t.traj"
    path.write_text(json.dumps({"trajectory": trajectory, "info": {"exit_status": "submitted"}}))
    h = load(path)
    assert [m["content"] for m in h.prefix] == ["sys", "task"]
    assert len(h) == 2 and [a.command for s in h.steps for a in s.actions] == ["ls", "cat a.py"]
    assert h.step(2).output_texts == ("x = 1",)


def test_mini2_format_error_and_exit_messages() -> None:
    """mini 2.x: a format error adds only a user message (no assistant), the run ends with role exit."""
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "user", "content": "No tool calls found.", "extra": {"interrupt_type": "FormatError"}},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "b", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pwd"}'}},
        ], "extra": {"actions": [{"command": "ls", "tool_call_id": "a"}, {"command": "pwd", "tool_call_id": "b"}]}},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "a.py"}]},
        {"role": "tool", "tool_call_id": "b", "content": "/repo"},
        {"role": "user", "content": "No tool calls found.", "extra": {"interrupt_type": "FormatError"}},
        {"role": "exit", "content": "Submitted", "extra": {"exit_status": "Submitted"}},
    ]
    h = History.from_messages(msgs)
    assert len(h) == 1 and len(h.prefix) == 3
    assert [a.command for a in h.step(1).actions] == ["ls", "pwd"]
    p = Renderer(seed_config()).render(h)
    assert [m["role"] for m in p.messages] == ["system", "user", "user", "assistant", "tool", "tool", "user"]


def test_mini2_a_persons_interruption_is_a_user_message_not_a_call() -> None:
    """mini 2.x interactive: Ctrl-C and a comment, a rejected command, a new task: typed by the
    person, so no unreplied model call, and a user message of the step it follows."""
    call = {"id": "a", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "a.py"},
        {"role": "user", "content": "Interrupted by user: use v2", "extra": {"interrupt_type": "UserInterruption"}},
        {"role": "user", "content": "No tool calls found.", "extra": {"interrupt_type": "FormatError"}},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "b"}]},
        {"role": "tool", "tool_call_id": "b", "content": "a.py"},
        {"role": "user", "content": "The user added a new task: docs", "extra": {"interrupt_type": "UserNewTask"}},
    ]
    assert unreplied_calls(msgs) == [{"step": 1, "observations": 2, "type": "FormatError"}]
    h = History.from_messages(msgs)
    assert [s.user_messages for s in h.steps] == [(1,), (1,)]


def test_only_regular_files_are_read_and_gzip_stays_within_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from refold import json_file as loaders

    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for path, said in ((fifo, "not a regular file"), (Path("/dev/zero"), "not a regular file"), (tmp_path, "is a folder")):
        with pytest.raises(TrajectoryError) as e:
            loaders.read_json(path)
        assert said in str(e.value) and str(path) in str(e.value)
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(json.dumps([{"role": "user", "content": "x" * 5000}]).encode()))
    assert len(bomb.read_bytes()) < 200
    monkeypatch.setattr(loaders, "MAX_FILE_BYTES", 4096)  # the 5 KB it expands to is over this limit
    with pytest.raises(TrajectoryError, match="expands to more than the 4096 byte limit"):
        loaders.read_json(bomb)
    monkeypatch.setattr(loaders, "MAX_FILE_BYTES", 8192)
    assert loaders.read_json(bomb)[0]["content"] == "x" * 5000


def test_a_bad_json_lines_row_is_named_by_its_line(tmp_path: Path) -> None:
    from refold import json_file as loaders

    path = tmp_path / "run.jsonl"
    rows = [json.dumps({"role": r, "content": c}) for r, c in (("system", "s"), ("user", "u"), ("assistant", "a"), ("user", "o"))]
    path.write_text("\n".join([*rows, "", '{"role": bad}']) + "\n")
    with pytest.raises(TrajectoryError, match=r"invalid JSON Lines at line 6 column 10"):
        loaders.read_json(path)
    path.write_text("\n".join(rows) + "\n")
    assert [m["role"] for m in loaders.read_json(path)] == ["system", "user", "assistant", "user"]


def test_lone_surrogates_read_as_the_replacement_character(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task \udc80"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "out \udc80 \U0001f600"},  # a lone one (surrogateescape) and a real pair
    ]
    path.write_text(json.dumps(messages))  # ensure_ascii: the surrogates are \\u escapes, as Python writes them
    h = load(path)
    assert h.step(1).observations[0]["content"] == "out \ufffd \U0001f600"
    assert Renderer(seed_config(Policy())).render(h).messages  # it encodes, tokenizes and hashes


@pytest.mark.parametrize(
    ("calls", "said"),
    [
        ("notalist", "message 2 (assistant): 'tool_calls' is not a list"),
        ([{"function": "bash"}], "message 2 (assistant): tool_calls[0].function is not an object"),
        (["bash"], "tool_calls[0].function is not an object"),
        ([{"function": {"name": 3}}], "tool_calls[0].function.name is not a string"),
        ([{"function": {"name": "bash", "arguments": 7}}], "tool_calls[0].function.arguments is neither"),
    ],
)
def test_a_malformed_tool_call_names_its_message_and_field(tmp_path: Path, calls: Any, said: str) -> None:
    path = tmp_path / "run.traj.json"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "x", "tool_calls": calls}]
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": messages}))
    with pytest.raises(TrajectoryError) as e:
        load(path)
    assert said in str(e.value) and str(path) in str(e.value)


@pytest.mark.parametrize(
    ("part", "said"),
    [
        ({"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}, "an Anthropic Messages 'tool_use' block"),
        ({"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}, "an Anthropic Messages 'tool_result' block"),
        ({"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"}, "an OpenAI Responses 'function_call' block"),
    ],
)
def test_a_message_list_of_another_api_is_refused_naming_the_part(tmp_path: Path, part: dict[str, Any], said: str) -> None:
    """Anthropic-shaped messages were read as chat messages: their calls and results were left out
    of every prompt, token count and note (replay reported 10 tokens for the whole run)."""
    path = tmp_path / "run.json"
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "ok"}, part]}]
    path.write_text(json.dumps({"messages": messages}))
    with pytest.raises(TrajectoryError) as e:
        load(path)
    assert str(e.value) == (
        f"{path}: message 1: content[1] is {said}; refold reads chat-completions messages "
        "(tool_calls and role 'tool'), or serves that API live (refold serve)"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [(5, "message 1: content is int, not text or a list of parts"), ({"a": 1}, "content is dict, not text"),
     ([1, 2], "message 1: content[0] is int, not a content part")],
)
def test_content_that_is_no_text_nor_parts_is_refused(tmp_path: Path, content: Any, said: str) -> None:
    """It was counted and rendered as its Python text ('5', "{'a': 1}")."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}]}))
    with pytest.raises(TrajectoryError, match=re.escape(said)):
        load(path)


def test_a_lone_surrogate_inside_tool_call_arguments_is_replaced_too(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "cat f\udc80.py"})}}
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "x", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    path.write_text(json.dumps(messages))  # the arguments carry the escape as JSON text of their own
    h = load(path)
    assert json.loads(h.step(1).reply["tool_calls"][0]["function"]["arguments"]) == {"command": "cat f\ufffd.py"}
