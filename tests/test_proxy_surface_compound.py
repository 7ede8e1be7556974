"""``ls; restore 3`` in a streamed shell call on ``/v1/messages`` (Claude Code's ``Bash``) and
``/v1/responses`` (Codex's ``shell`` argv, ``exec_command``), as on chat completions: the call
goes out as it streams but not from a separator that may lead to ``restore``; the client's call
is closed after the part before it (which it runs) and refold answers the rest before the next
upstream call. Events go out whole, in order; a plain compound command passes byte for byte."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.context.recognize import Recognizer, split_restore
from refold.proxy import ProxyConfig, anthropic_wire, create_app
from refold.proxy import responses_wire as rwire
from refold.proxy.anthropic import AnthropicSplicer
from refold.proxy.commands import context_calls
from refold.proxy.compound import derived_id
from refold.proxy.responses import ResponsesSplicer
from refold.proxy.surface_calls import recognizable
from refold.proxy.surface_stream import context_ids
from refold.shell_tools import canonical_call
from test_proxy_surface_guard import (
    RawStreams,
    _client_args,
    anthropic_round,
    call_round_trip,
    responses_round,
)

from fake_upstream import ServerThread

REC = Recognizer(text=False, compound=True)


def _splice(surface: str, name: str, args: str, pieces: list[str]) -> tuple[Any, list[bytes], Any]:
    events = anthropic_round("Checking.", name, pieces) if surface == "messages" else responses_round("Checking.", name, pieces)
    sp: Any = AnthropicSplicer(REC) if surface == "messages" else ResponsesSplicer(REC)
    wire: Any = anthropic_wire if surface == "messages" else rwire
    sp.begin(final=False)
    sent = [b for e in events for b in sp.feed(e)]
    data = sp.fixed(wire.aggregate([(e.name, json.loads(e.data)) for e in events] if surface == "messages"
                                   else [json.loads(e.data) for e in events]))
    reply = wire.reply(data)
    assert sp.released  # decided by its first word
    sent += sp.finish(False, context_ids=context_ids(reply, REC))
    assert b"".join(sent) == b"".join(e.raw for e in events) or sp.guard.shown is not None
    return sp, sent, data


def _command(name: str, args: str) -> str:
    return str(json.loads(canonical_call(name, args)[1])["command"])


FORMS = [("messages", "Bash", lambda c: {"command": c}), ("responses", "exec_command", lambda c: {"cmd": c}),
         ("responses", "shell", lambda c: {"command": ["bash", "-lc", c]})]


@given(st.sampled_from(FORMS), st.sampled_from(["ls; restore 3", "ls -la && restore 2 4", "cd /x && ls\nrestore 1",
                                               "ls; restore 3; cat f", "cd /x && python y.py", "ls; restored.sh",
                                               "grep -n 'a; restore 3' f | head", "for f in a; do restore 3; done"]),
       st.lists(st.integers(1, 7), min_size=1, max_size=20))
@settings(max_examples=150, deadline=None)
def test_the_client_runs_the_part_before_the_restore(form: Any, command: str, sizes: list[int]) -> None:
    surface, name, make = form
    args = json.dumps(make(command))
    pieces, pos, k = [], 0, 0
    while pos < len(args):
        n = sizes[k % len(sizes)]
        pieces.append(args[pos : pos + n])
        pos, k = pos + n, k + 1
    sp, sent, data = _splice(surface, name, args, pieces)
    client = _client_args(surface, sent)
    assert len(client) == 1
    found = split_restore(command)
    if found is None:
        assert client == [args]
        note = sp.split_answer(data)
        whole = REC.command("bash", command)
        if whole is None:
            assert note is None
            return
        # its shell runs it anyway: refold adds a restore answered "Not run", saying how to issue it
        reply = (anthropic_wire if surface == "messages" else rwire).reply(note[0])
        assert reply is not None
        calls = {c["id"]: _command(name, c["function"]["arguments"]) for c in reply["tool_calls"]}
        assert calls[note[1]] == f"restore {whole.argument}"
        return
    assert _command(name, client[0]) == found[0]  # closed after the part before the restore
    recognized = context_calls(recognizable({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": found[0]})}}]}), REC)
    assert recognized is None  # the client runs no context command
    split = sp.split_answer(data)
    assert split is not None
    reply = (anthropic_wire if surface == "messages" else rwire).reply(split[0])
    assert reply is not None
    calls = {c["id"]: _command(name, c["function"]["arguments"]) for c in reply["tool_calls"]}
    assert calls[split[1]] == found[1]


def test_a_split_call_is_answered_before_the_next_upstream_call_on_both_surfaces(tmp_path: Any) -> None:
    """Claude Code's ``Bash`` with ``ls && restore 1`` and Codex's ``shell`` with ``["bash",
    "-lc", "ls; restore 1"]``: the client gets ``ls`` (in every event that carries the
    arguments); its next request's upstream call holds that call and its output, then the
    restore and refold's answer, recorded as an internal step."""
    up = RawStreams()
    cases = [
        ("messages", "Bash", {"command": "ls && restore 1"}, {"command": "ls "}),
        ("responses", "shell", {"command": ["bash", "-lc", "ls; restore 1"]}, {"command": ["bash", "-lc", "ls"]}),
    ]
    with ServerThread(up.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            for surface, name, args_obj, want in cases:
                args = json.dumps(args_obj)
                pieces = [args[j : j + 4] for j in range(0, len(args), 4)]
                trip = call_round_trip(c, up, surface, name, pieces, session=f"split-{surface}", ran=want,
                                       parameters={"command": {"type": "array"}}, output="a.py")
                # the client is sent the part before the restore (the .done events and the final response too)
                assert [json.loads(a) for a in _client_args(surface, trip.sent)] == [want]
                assert trip.second.status_code == 200, trip.second.text
                if surface == "messages":
                    msgs = up.requests[-1]["messages"]
                    uses = [(b["id"], b["input"]) for m in msgs if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
                    results = [(b["tool_use_id"], str(b["content"])) for m in msgs if isinstance(m["content"], list)
                               for b in m["content"] if b["type"] == "tool_result"]
                    assert uses == [("toolu_1", want), (derived_id("toolu_1"), {"command": "restore 1"})]
                else:
                    inp = up.requests[-1]["input"]
                    uses = [(i["call_id"], json.loads(i["arguments"])) for i in inp if i.get("type") == "function_call"]
                    results = [(i["call_id"], str(i["output"])) for i in inp if i.get("type") == "function_call_output"]
                    assert uses == [("call_1", want), (derived_id("call_1"), {"command": ["bash", "-lc", "restore 1"]})]
                    # the item refold made has no id: the upstream never made it, and would not find one
                    assert [i.get("id") for i in inp if i.get("type") == "function_call"][1:] == [None]
                assert len(up.requests) == trip.before + 2  # nothing answered inside the first response
                assert [i for i, _ in results] == [uses[0][0], uses[1][0]]
                assert "a.py" in results[0][1] and "restored" in results[1][1]
                sess = c.get(f"/sessions/split-{surface}", headers=trip.headers).json()
                assert len(sess["branches"]) == 1 and [s["internal"] for s in sess["steps"]] == [False, True]
