"""Whatever way the upstream cuts a tool call into deltas: a call that is a context command never
reaches the client (it is answered inside), and a plain command always does, byte for byte as the
upstream sent it, its first piece going out as soon as its command's first word decides it; also
when a later key of its arguments (a second ``"command"``) would make it one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.context.recognize import Recognizer
from refold.proxy import ProxyConfig, create_app
from refold.proxy.commands import context_calls
from refold.proxy.early import call_verdict
from refold.proxy.held import decide
from refold.proxy.relay import ChatRelay
from refold.proxy.stream import Accumulator
from refold.proxy.surface_calls import recognizable
from refold.proxy.upstream import Result
from refold.shell_tools import canonical_call
from test_proxy_responses import events as responses_events
from test_proxy_responses import fcall, response_object
from test_proxy_stream_early import BASH, SYSTEM, Reader, _proxy
from test_proxy_surface_stream import Events, Paused, up

from builders import cuts
from fake_upstream import Scripted, ServerThread, call

__all__ = ["up"]  # the fixture, used by name

REC = Recognizer(text=False)  # an agent with a shell tool; every context command offered
BASE = {"id": "chatcmpl-u", "object": "chat.completion.chunk", "created": 7, "model": "m"}

CONTEXT = ["restore 3", " restore 2-4", "fold_span \"found the bug\"", "expand 7", "fold 3 4", "begin_span x",
           "search_ledger parser", "drop 2", "fold_steps 2-5 \"read\"", "restore\t5"]
PLAIN = ["echo hi", "ls -la", "restored", "fold -w 80 f", "expand -t 4 f", "rest", "e", "exit", "cat \"a\\\"b\"",
         "python -c 'print(1)'", "grep -n restore src", "sed -n 1,5p f \u00e9", ""]


@st.composite
def arguments(draw: st.DrawFn) -> tuple[str, str]:
    """(name, JSON arguments): a shell call in the forms models send, adversarial ones included."""
    cmd = draw(st.sampled_from(CONTEXT + PLAIN) | st.text(alphabet="restoflda_p 0123\"\\\n", max_size=14))
    form = draw(st.sampled_from(["string", "cmd", "argv", "extra", "twice", "cmd-then-command", "spaced"]))
    other = draw(st.sampled_from(CONTEXT + PLAIN))
    if form == "string":
        args = json.dumps({"command": cmd})
    elif form == "cmd":
        args = json.dumps({"cmd": cmd}, ensure_ascii=False)
    elif form == "argv":
        args = json.dumps({"command": cmd.split(" ")})
    elif form == "extra":
        args = json.dumps({"command": cmd, "timeout": 30})
    elif form == "twice":  # json.loads keeps the last one
        args = '{"command": ' + json.dumps(cmd) + ', "command": ' + json.dumps(other) + "}"
    elif form == "cmd-then-command":  # ``args.get("command", args.get("cmd"))``
        args = '{"cmd": ' + json.dumps(cmd) + ', "command": ' + json.dumps(other) + "}"
    else:
        args = '  {\n "command" :  ' + json.dumps(cmd) + " }"
    return draw(st.sampled_from(["bash", "bash", "str_replace_editor"])), args


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _read(events: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for e in events:
        payload = e.decode().removeprefix("data: ").strip()
        if payload != "[DONE]":
            out.append(json.loads(payload))
    return out


def _client_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    acc = Accumulator()
    for c in chunks:
        acc.add(c)
    return acc.message().get("tool_calls") or []


def _is_context(name: str, args: str) -> bool:
    call = {"id": "c", "type": "function", "function": {"name": name, "arguments": args}}
    return context_calls({"role": "assistant", "content": "", "tool_calls": [call]}, REC) is not None


def test_a_call_sent_whole_after_its_name_is_closed_after_the_part_sent() -> None:
    """The first call held (its name alone decides nothing), then all its arguments in one piece
    whose second key makes it a context command: the client gets the first key's command."""
    relay = ChatRelay(REC, strip=False, include_usage=False)
    relay.begin(final=False, spliced=False)
    args = '{"command": "", "command": "restore 3"}'
    stream = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "bash", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}),
        _chunk({}, "tool_calls"),
    ]
    acc, sent = Accumulator(), []
    for c in stream:
        acc.add(c)
        sent += relay.feed(json.dumps(c), c)
    out, found = relay.end(Result(acc.body()))
    assert found is None
    assert _client_calls(_read(sent + out))[0]["function"]["arguments"] == '{"command": ""}'


@given(st.data())
@settings(max_examples=500, deadline=None)
def test_a_context_call_is_never_relayed_and_a_plain_one_always_is(data: st.DataObject) -> None:
    name, args = data.draw(arguments())
    text = data.draw(st.sampled_from(["", "Let me look.", "PROGRESS: x\nSTALE: -"]))
    pieces = cuts(data.draw, args)
    header_args = data.draw(st.booleans())  # some upstreams send the first piece with the name
    stream: list[dict[str, Any]] = [_chunk({"role": "assistant", "content": ""})]
    stream += [_chunk({"content": t}) for t in cuts(data.draw, text)] if text else []
    first = pieces.pop(0) if header_args else ""
    stream.append(_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                          "function": {"name": name, "arguments": first}}]}))
    stream += [_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces]
    stream.append(_chunk({}, "tool_calls"))
    stream.append({**BASE, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})

    relay = ChatRelay(REC, strip=False, include_usage=True)
    relay.begin(final=False, spliced=False)
    acc = Accumulator()
    sent: list[bytes] = []
    decided_at = None  # the first chunk after which the arguments so far decide the call
    released_at = None  # the first chunk after which the client holds a piece of the call
    so_far = ""
    for n, c in enumerate(stream):
        acc.add(c)
        sent += relay.feed(json.dumps(c), c)
        for tc in c["choices"][0]["delta"].get("tool_calls", []) if c["choices"] else []:
            so_far += tc["function"]["arguments"]
            if decided_at is None and so_far and call_verdict(name, so_far, REC) is False:
                decided_at = n
        if released_at is None and _client_calls(_read(sent)):
            released_at = n
    out, found = relay.end(Result(acc.body()))
    client = _client_calls(_read(sent + out))
    shown = "".join(json.loads(e.decode()[6:])["choices"][0]["delta"].get("content", "") for e in sent + out
                    if e.startswith(b"data: {") and json.loads(e.decode()[6:])["choices"])
    assert shown == (relay.text if found is not None else text) and shown.startswith(text)

    if _is_context(name, args):
        # answered inside, or (a later key made it one after it was decided) closed where it was
        assert found is not None or not _is_context(name, client[0]["function"]["arguments"])
        if found is not None:
            assert client == []
        else:
            closing = relay.guard.closing if relay.guard else None
            assert closing is not None
            assert args.startswith(client[0]["function"]["arguments"].removesuffix(closing))
            assert relay.shown["tool_calls"][0]["function"]["arguments"] == client[0]["function"]["arguments"]
    else:
        assert found is None
        assert client == [{"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]
        if decided_at is not None:  # relayed with the piece that decided it, not at the end
            assert released_at == decided_at


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_a_surface_decides_codexs_argv_call_from_its_prefix(data: st.DataObject) -> None:
    """``["bash", "-lc", cmd]`` (Codex's ``shell``) is read as ``cmd``, any other list as its
    ``shlex.join``: when a prefix of the arguments says no, the whole call is no context command;
    a plain ``bash -lc`` command is decided by its first letters."""
    words = st.sampled_from(["bash", "sh", "zsh", "-lc", "-c", "-x", "ls", "s", "", "3", *CONTEXT, *PLAIN])
    argv: list[Any] = data.draw(st.lists(words, min_size=1, max_size=4))
    if data.draw(st.booleans()):
        argv = ["bash", "-lc", data.draw(st.sampled_from(CONTEXT + PLAIN))]
    if data.draw(st.integers(0, 9)) == 0:
        argv.append(3)  # a word that is not a string: read as the words joined
    name = data.draw(st.sampled_from(["shell", "Bash", "exec_command", "local_shell"]))
    args = json.dumps({data.draw(st.sampled_from(["command", "cmd"])): argv}, separators=data.draw(
        st.sampled_from([(", ", ": "), (",", ":")])))
    n, a = canonical_call(name, args)
    reply = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": n, "arguments": a}}]}
    whole = context_calls(recognizable(reply), Recognizer()) is not None
    verdicts = [decide(name, args[:cut], Recognizer()) for cut in range(len(args) + 1)]
    if whole:
        assert False not in verdicts, args
    if argv[:2] == ["bash", "-lc"] and len(argv) == 3 and isinstance(argv[2], str) and argv[2][:2] in ("ec", "ls", "gr"):
        assert verdicts.index(False) < len(args) - 2  # before the command's last letters


def test_codexs_argv_shell_call_reaches_the_client_while_it_is_generated(up: tuple[Paused, str]) -> None:
    fake, url = up
    tool = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {
        "command": {"type": "array", "items": {"type": "string"}}}}}
    output = [fcall("call_1", "shell", {"command": ["bash", "-lc", "grep -rn TODO src | head"]})]
    evs = list(responses_events(response_object(1, "m", output)))
    deltas = [n for n, e in enumerate(evs) if "response.function_call_arguments.delta" in e.split("\n", 1)[0]]
    so_far, pause, piece = "", -1, ""
    for n in deltas:  # the delta whose arguments so far decide it: '", "g' (no command begins with g)
        piece = json.loads(evs[n].split("data: ", 1)[1])["delta"]
        so_far += piece
        if decide("shell", so_far, Recognizer()) is False:
            pause = n
            break
    assert so_far.endswith('"g') and pause < deltas[-1]
    fake.script.append((output, pause))
    body = {"model": "m", "stream": True, "tools": [tool], "input": "go"}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/responses", json=body,
                                                   headers={"authorization": "Bearer k"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "response.function_call_arguments.delta" and d["delta"] == piece)
        assert not fake.release.is_set() and not e.done  # the upstream is still generating the call
        fake.release.set()
        e.rest()
    assert e.raw == fake.sent[0]


def test_a_relayed_call_that_a_later_key_makes_a_context_command_is_closed_where_it_was(tmp_path: Path) -> None:
    """``{"command": "echo hi", "command": "restore 3"}``: relayed once ``ec`` showed it is no
    context command; its second key would make the client run ``restore 3``, so the client gets
    ``{"command": "echo hi"}`` and the session records what the client ran."""
    s = Scripted()
    args = '{"command": "echo hi", "command": "restore 3"}'
    s.replies.append(call(0, "bash", args, "call_1", pause_at=16))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo 2"}), "call_2"))
    with ServerThread(s.app) as srv, ServerThread(_proxy(f"{srv.url}/v1", tmp_path)) as px, httpx.Client(timeout=30) as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "dup"}) as r:
            rd = Reader(r)
            rd.until(lambda: rd.calls and rd.calls[0]["function"]["arguments"])
            assert not s.release.is_set()  # relayed while the upstream is inside the call
            s.release.set()
            rd.rest()
        msg = rd.message()
        assert msg["tool_calls"][0]["function"]["arguments"] == '{"command": "echo hi"}'
        assert len(s.requests) == 1
        msgs += [msg, {"role": "tool", "tool_call_id": "call_1", "content": "hi"}]
        r2 = c.post(f"{px.url}/v1/chat/completions", json={**body, "messages": msgs}, headers={"X-Refold-Session": "dup"})
        assert r2.status_code == 200 and r2.text.endswith("data: [DONE]\n\n")
        assert len(c.get(f"{px.url}/sessions/dup").json()["branches"]) == 1
        sent = s.requests[1]["messages"]
        assert any('"echo hi"' in (t["function"]["arguments"]) for m in sent for t in m.get("tool_calls") or [])


def test_the_last_round_after_an_internal_one_is_remembered_with_its_text(tmp_path: Path) -> None:
    """An internal round, then the request's last round (relayed as it comes): the reply the client
    echoes back holds both rounds' text and maps back onto what the model wrote (the last round's
    text was not counted as shown: the session recorded the client's form, the first round's text
    twice)."""
    s = Scripted()
    s.replies.append([{"content": "PROGRESS: look back\n"}, *call(0, "bash", json.dumps({"command": "restore 1"}), "call_r")])
    s.replies.append([{"content": "Now the fix."}, *call(0, "bash", json.dumps({"command": "echo fix"}), "call_2")])
    s.replies.append([{"content": "ok"}])
    with ServerThread(s.app) as srv:
        app = create_app(ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", max_rounds=1))
        with ServerThread(app) as px, httpx.Client(timeout=30) as c:
            msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
            body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
            with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "two"}) as r:
                rd = Reader(r)
                rd.rest()
            msg = rd.message()
            assert msg["content"] == "PROGRESS: look back\n\nNow the fix."
            assert [t["id"] for t in msg["tool_calls"]] == ["call_2"]
            msgs += [msg, {"role": "tool", "tool_call_id": "call_2", "content": "fixed"}]
            r2 = c.post(f"{px.url}/v1/chat/completions", json={**body, "messages": msgs}, headers={"X-Refold-Session": "two"})
            assert r2.status_code == 200
            assert len(c.get(f"{px.url}/sessions/two").json()["branches"]) == 1
    # the session holds what the model wrote: the internal round's text is its own step, not repeated
    replies = [m["content"] for m in s.requests[2]["messages"] if m["role"] == "assistant"]
    assert replies == ["PROGRESS: look back\n", "Now the fix."]
