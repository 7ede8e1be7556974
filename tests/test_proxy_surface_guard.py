"""The duplicate-key guard on ``/v1/messages`` and ``/v1/responses``, as on chat completions: a
shell call relayed as soon as its command's first word showed it is no context command can
still become one through a later key of its arguments (``{"command": "ls", "command":
"restore 3"}``: JSON parsers keep the last). The client and refold must not read different
commands, so what follows the command's string waits until the arguments are whole; when the
whole call is a context command the client's call is closed right after the part it was sent,
and the session records that call (the one the client ran). A plain call goes out byte for byte."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.context.recognize import Recognizer
from refold.proxy import ProxyConfig, anthropic_wire, create_app
from refold.proxy import responses_wire as rwire
from refold.proxy.anthropic import AnthropicSplicer
from refold.proxy.commands import context_calls
from refold.proxy.responses import ResponsesSplicer
from refold.proxy.sse import Event
from refold.proxy.surface_calls import recognizable
from refold.proxy.surface_stream import context_ids
from refold.shell_tools import canonical_call
from test_proxy_stream_guard import CONTEXT, PLAIN, arguments

from builders import cuts
from fake_upstream import ServerThread

REC = Recognizer(text=False)


def _is_context(name: str, args: str) -> bool:
    n, a = canonical_call(name, args)
    reply = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": n, "arguments": a}}]}
    return context_calls(recognizable(reply), REC) is not None


def _ev(name: str, data: dict[str, Any]) -> Event:
    payload = json.dumps(data)
    return Event(f"event: {name}\ndata: {payload}\n\n".encode(), name, payload)


def anthropic_round(text: str, name: str, pieces: list[str]) -> list[Event]:
    """A Messages stream: optional text, then a ``tool_use`` whose input comes in ``pieces``."""
    out = [_ev("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}})]
    i = 0
    if text:
        out.append(_ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
        out.append(_ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}))
        out.append(_ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
        i = 1
    out.append(_ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": name, "input": {}}}))
    for p in pieces:
        out.append(_ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}))
    out.append(_ev("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                     "usage": {"output_tokens": 9}}))
    out.append(_ev("message_stop", {"type": "message_stop"}))
    return out


def responses_round(text: str, name: str, pieces: list[str]) -> list[Event]:
    """A Responses stream: optional message item, then a ``function_call`` in ``pieces``."""
    seq = iter(range(1, 10_000))
    items: list[dict[str, Any]] = []
    if text:
        items.append({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": name, "arguments": "".join(pieces), "status": "completed"}
    items.append(call)
    resp = {"id": "resp_1", "object": "response", "status": "completed", "model": "m", "output": items,
            "usage": {"input_tokens": 3, "output_tokens": 9, "total_tokens": 12}}

    def ev(kind: str, **data: Any) -> Event:
        return _ev(kind, {"type": kind, "sequence_number": next(seq), **data})

    out = [ev("response.created", response={**resp, "status": "in_progress", "output": []})]
    for i, item in enumerate(items):
        if item["type"] == "message":
            out.append(ev("response.output_item.added", output_index=i, item={**item, "content": [], "status": "in_progress"}))
            out.append(ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0, delta=text))
        else:
            out.append(ev("response.output_item.added", output_index=i, item={**item, "arguments": "", "status": "in_progress"}))
            for p in pieces:
                out.append(ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i, delta=p))
            out.append(ev("response.function_call_arguments.done", item_id=item["id"], output_index=i, arguments=item["arguments"]))
        out.append(ev("response.output_item.done", output_index=i, item=item))
    out.append(ev("response.completed", response=resp))
    return out


def _client_args(surface: str, sent: list[bytes]) -> list[str]:
    """The calls' arguments as a client adds up the events it was sent."""
    datas = [json.loads(b.split(b"data: ", 1)[1]) for b in sent]
    if surface == "messages":
        calls: dict[int, str] = {}
        for d in datas:
            if d["type"] == "content_block_start" and d["content_block"]["type"] == "tool_use":
                calls[d["index"]] = ""
            elif d["type"] == "content_block_delta" and d["delta"]["type"] == "input_json_delta":
                calls[d["index"]] += d["delta"]["partial_json"]
        return [calls[k] for k in sorted(calls)]
    deltas: dict[int, str] = {}
    for d in datas:
        if d["type"] == "response.output_item.added" and d["item"]["type"] == "function_call":
            deltas[d["output_index"]] = ""
        elif d["type"] == "response.function_call_arguments.delta":
            deltas[d["output_index"]] += d["delta"]
        elif d["type"] in ("response.function_call_arguments.done", "response.output_item.done", "response.completed"):
            # every event that repeats the whole arguments says what the deltas added up to
            repeated = d.get("arguments") or (d.get("item") or {}).get("arguments")
            if d["type"] == "response.completed":
                for o in d["response"]["output"]:
                    if o["type"] == "function_call":
                        assert o["arguments"] == deltas[max(deltas)]
            elif repeated is not None and d.get("output_index") in deltas:
                assert repeated == deltas[d["output_index"]]
    return [deltas[k] for k in sorted(deltas)]


def _splice(surface: str, events: list[Event]) -> tuple[Any, list[bytes], Any]:
    sp: Any = AnthropicSplicer(REC) if surface == "messages" else ResponsesSplicer(REC)
    wire: Any = anthropic_wire if surface == "messages" else rwire
    sp.begin(final=False)
    sent = [b for e in events for b in sp.feed(e)]
    data = sp.fixed(wire.aggregate([(e.name, json.loads(e.data)) for e in events] if surface == "messages"
                                   else [json.loads(e.data) for e in events]))
    reply = wire.reply(data)
    calls = None if sp.released else context_calls(recognizable(reply), REC)
    if calls is None:
        sent += sp.finish(False, context_ids=context_ids(reply, REC))
    else:
        sent += sp.finish(True, str(reply.get("content") or ""))
    return sp, sent, (data, reply, calls)


@given(st.data(), st.sampled_from(["messages", "responses"]))
@settings(max_examples=400, deadline=None)
def test_the_client_never_runs_a_call_refold_reads_as_a_context_command(data: st.DataObject, surface: str) -> None:
    name, args = data.draw(arguments())
    if surface == "responses" and name == "bash":
        name = data.draw(st.sampled_from(["bash", "exec_command", "shell"]))
    text = data.draw(st.sampled_from(["", "Let me look."]))
    pieces = cuts(data.draw, args)
    events = anthropic_round(text, name, pieces) if surface == "messages" else responses_round(text, name, pieces)
    sp, sent, (agg, reply, calls) = _splice(surface, events)
    client = _client_args(surface, sent)
    if calls is not None:  # decided at the end: internal, the client gets no call
        assert client == []
        return
    assert len(client) == 1
    if _is_context(name, args):
        # relayed early, then a later key made it one: the client's call is closed where it was
        assert sp.guard is not None and sp.guard.shown == client[0]
        assert not _is_context(name, client[0])
        assert args.startswith(client[0].removesuffix(sp.guard.cmd.closing()))
        assert context_ids(reply, REC) == set()  # the round as the client holds it (``fixed``)
    else:
        assert client == [args]
        assert b"".join(sent) == b"".join(e.raw for e in events)  # byte for byte


# ---- through the proxy ----------------------------------------------------------------------------------


class RawStreams:
    """An upstream that streams scripted events (one list per request) on both surfaces."""

    def __init__(self) -> None:
        self.script: list[list[Event]] = []
        self.requests: list[dict[str, Any]] = []
        self.app = FastAPI()

        async def answer(request: Request) -> StreamingResponse:
            self.requests.append(await request.json())
            evs = self.script.pop(0)

            async def gen() -> Any:
                for e in evs:
                    yield e.raw

            return StreamingResponse(gen(), media_type="text/event-stream")

        self.app.post("/v1/messages")(answer)
        self.app.post("/v1/responses")(answer)


def _plain(surface: str, text: str) -> list[Event]:
    if surface == "messages":
        evs = anthropic_round(text, "x", ["{}"])
        return [e for e in evs if b"tool_use" not in e.raw and b"input_json" not in e.raw and b'"index": 1' not in e.raw]
    evs = responses_round(text, "x", ["{}"])
    resp = json.loads(evs[-1].data)
    resp["response"]["output"] = resp["response"]["output"][:1]
    return [e for e in evs[:-1] if b"function_call" not in e.raw and b"fc_1" not in e.raw] + [_ev("response.completed", resp)]


@dataclass
class Trip:
    """A call streamed to the client, then the client's next request with the call's output."""

    headers: dict[str, str]
    before: int  # upstream requests before the first
    sent: list[bytes]  # the events the client was sent for the call
    second: Any  # the response to the next request


def call_round_trip(
    c: TestClient, up: RawStreams, surface: str, name: str, pieces: list[str], *,
    session: str, parameters: dict[str, Any], ran: Any, output: str,
) -> Trip:
    """The upstream streams a call of tool ``name`` (its arguments in ``pieces``) and then
    ``done``; the client (Claude Code on ``messages``, Codex on ``responses``) streams the call,
    then sends what it ran (``ran``, the arguments as it read them) and its ``output``."""
    first = anthropic_round("Checking.", name, pieces) if surface == "messages" else responses_round("Checking.", name, pieces)
    up.script += [first, _plain(surface, "done")]
    h = {"X-Refold-Session": session, "authorization": "Bearer k"}
    n = len(up.requests)
    if surface == "messages":
        tool = {"name": name, "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}
        body: dict[str, Any] = {"model": "m", "max_tokens": 64, "tools": [tool], "stream": True,
                                "messages": [{"role": "user", "content": "go"}]}
        r = c.post("/v1/messages", json=body, headers=h)
        assert r.status_code == 200
        sent = [e.encode() + b"\n\n" for e in r.text.split("\n\n") if e.strip()]
        blocks = [{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": name, "input": ran}]
        body = {**body, "messages": [*body["messages"], {"role": "assistant", "content": blocks},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": output}]}]}
        return Trip(h, n, sent, c.post("/v1/messages", json=body, headers=h))
    tool = {"type": "function", "name": name, "parameters": {"type": "object", "properties": parameters}}
    body = {"model": "m", "tools": [tool], "stream": True, "input": [{"role": "user", "content": "go"}]}
    r = c.post("/v1/responses", json=body, headers=h)
    assert r.status_code == 200
    sent = [e.encode() + b"\n\n" for e in r.text.split("\n\n") if e.strip()]
    final = json.loads(sent[-1].split(b"data: ", 1)[1])["response"]
    items = [*body["input"], *final["output"], {"type": "function_call_output", "call_id": "call_1", "output": output}]
    return Trip(h, n, sent, c.post("/v1/responses", json={**body, "input": items}, headers=h))


def test_a_relayed_call_a_later_key_makes_a_context_command_is_closed_on_both_surfaces(tmp_path: Any) -> None:
    """``{"command": "echo hi", "command": "restore 3"}`` on ``/v1/messages`` (Claude Code's
    ``Bash``) and ``{"cmd": "ls", "command": "restore 1"}`` on ``/v1/responses`` (Codex's
    ``exec_command``): the client gets the first command only, in every event that carries the
    arguments; no round is answered inside; the next prompt holds the call the client ran."""
    up = RawStreams()
    cases = [
        ("messages", "Bash", '{"command": "echo hi", "command": "restore 3"}', '{"command": "echo hi"}'),
        ("responses", "exec_command", '{"cmd": "ls", "command": "restore 1"}', '{"cmd": "ls"}'),
    ]
    with ServerThread(up.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            for surface, name, args, want in cases:
                pieces = [args[j : j + 5] for j in range(0, len(args), 5)]
                trip = call_round_trip(c, up, surface, name, pieces, session=f"dup-{surface}", ran=json.loads(want),
                                       parameters={"cmd": {"type": "string"}}, output="hi" if surface == "messages" else "a")
                assert _client_args(surface, trip.sent) == [want]  # also the .done events and the final response
                assert trip.second.status_code == 200, trip.second.text
                assert len(up.requests) == trip.before + 2  # nothing answered inside
                sess = c.get(f"/sessions/dup-{surface}", headers=trip.headers).json()
                assert len(sess["branches"]) == 1 and [s["internal"] for s in sess["steps"]] == [False]
                prompt = json.dumps(up.requests[-1])
                assert "restore" not in prompt.split('"tools"')[0] or "restore 1" not in prompt
                assert ("echo hi" if surface == "messages" else '\\"ls\\"') in prompt


def test_the_plain_forms_are_relayed_unchanged() -> None:
    """A sanity check of the round builders: plain calls of every form pass byte for byte."""
    for cmd in PLAIN[:4]:
        args = json.dumps({"command": cmd})
        for surface in ("messages", "responses"):
            events = anthropic_round("", "bash", [args]) if surface == "messages" else responses_round("", "bash", [args])
            _, sent, _ = _splice(surface, events)
            assert b"".join(sent) == b"".join(e.raw for e in events)
    assert CONTEXT  # the strategy's context commands are shared with the chat guard's tests
