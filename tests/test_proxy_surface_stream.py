"""Live streaming on ``/v1/messages`` and ``/v1/responses`` for rounds that may be internal: text
and thinking reach the client at once, a tool call as soon as its command's first word shows it
is no context command; an internal round's text is kept and the next round continues the same
message (one ``message_start``, blocks numbered on; one response id, items numbered on)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.context.tools import offer
from refold.proxy import ProxyConfig, anthropic_wire, create_app
from refold.proxy.anthropic import AnthropicSplicer
from refold.proxy.commands import call_action, context_calls
from refold.proxy.sse import Event
from refold.proxy.surface_calls import recognizable
from refold.proxy.surface_stream import context_ids
from refold.shell_tools import tool_name
from test_proxy_anthropic import BASH
from test_proxy_anthropic import sse as anthropic_events
from test_proxy_responses import events as responses_events
from test_proxy_responses import fcall, message, response_object

from fake_upstream import ServerThread

EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}


class Paused:
    """An upstream streaming scripted answers (Messages or Responses), one per request, that waits
    for ``release`` after the event at ``pause`` (its position in the answer's events)."""

    def __init__(self) -> None:
        self.script: list[tuple[Any, int | None]] = []
        self.requests: list[dict[str, Any]] = []
        self.sent: list[list[str]] = []
        self.release = threading.Event()
        self.url = ""  # its base URL (``/v1``), once it serves
        self.app = FastAPI()

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            content, pause = self.script.pop(0)
            if isinstance(content, tuple):  # ("RAW", status, body): an error answer as given
                return Response(content[2], status_code=content[1], media_type="text/html")
            if content == "FAIL":
                return JSONResponse({"type": "error", "error": {"type": "api_error", "message": "down"}}, status_code=500)
            msg = {"id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant", "model": body["model"],
                   "content": content, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5},
                   "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"}
            if not body.get("stream"):
                return JSONResponse(msg)
            return StreamingResponse(self._paced(list(anthropic_events(msg)), pause), media_type="text/event-stream")

        @self.app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            output, pause = self.script.pop(0)
            if isinstance(output, tuple):  # ("RAW", status, body): an error answer as given
                return Response(output[2], status_code=output[1], media_type="text/html")
            if output == "FAIL":
                return JSONResponse({"error": {"message": "down", "type": "server_error"}}, status_code=500)
            resp = response_object(len(self.requests), body["model"], output)
            if not body.get("stream"):
                return JSONResponse(resp)
            return StreamingResponse(self._paced(list(responses_events(resp)), pause), media_type="text/event-stream")

    async def _paced(self, evs: list[str], pause: int | None) -> Any:
        self.sent.append(evs)
        for n, e in enumerate(evs):
            yield e
            if n == pause:
                await asyncio.to_thread(self.release.wait, 30)


@contextlib.contextmanager
def paused_proxy(tmp_path: Path) -> Iterator[tuple[Paused, str]]:
    """A ``Paused`` upstream and ``refold serve`` (default settings) in front of it."""
    fake = Paused()
    with ServerThread(fake.app) as u:
        fake.url = f"{u.url}/v1"
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{u.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px:
            yield fake, px.url
    fake.release.set()


@pytest.fixture()
def up(tmp_path: Path) -> Iterator[tuple[Paused, str]]:
    with paused_proxy(tmp_path) as got:
        yield got


def _pos(evs: list[str], pred: Any) -> int:
    return next(n for n, e in enumerate(evs) if pred(json.loads(e.split("data: ", 1)[1])))


class Events:
    """A streamed response read event by event: (name, data, raw) as they arrive."""

    def __init__(self, r: httpx.Response) -> None:
        self.lines = r.iter_lines()
        self.got: list[tuple[str | None, dict[str, Any]]] = []
        self.raw: list[str] = []
        self.done = False
        self._cur: list[str] = []

    def step(self) -> bool:
        for line in self.lines:
            if line == "":
                if self._cur:
                    name = next((x[7:] for x in self._cur if x.startswith("event: ")), None)
                    data = next(x[6:] for x in self._cur if x.startswith("data: "))
                    self.raw.append("\n".join(self._cur) + "\n\n")
                    self._cur = []
                    self.got.append((name, json.loads(data)))
                    return True
                continue
            self._cur.append(line)
        self.done = True
        return False

    def until(self, pred: Any) -> None:
        while not any(pred(d) for _, d in self.got) and self.step():
            pass

    def rest(self) -> None:
        while self.step():
            pass


# ---- Anthropic Messages ------------------------------------------------------------------------


def test_messages_relays_a_shell_call_while_it_is_generated(up: tuple[Paused, str]) -> None:
    fake, url = up
    content = [{"type": "text", "text": "Let me look at the sources first."},
               {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls -la src && cat setup.py"}}]
    msg = {"id": "x", "type": "message", "role": "assistant", "model": "m", "content": content, "stop_reason": "tool_use",
           "stop_sequence": None, "usage": {}}
    evs = list(anthropic_events(msg))
    pause = _pos(evs, lambda d: d.get("type") == "content_block_delta" and "partial_json" in d["delta"]
                 and "ls" in d["delta"]["partial_json"])
    fake.script.append((content, pause))
    body = {"model": "m", "max_tokens": 64, "stream": True, "tools": [BASH], "messages": [{"role": "user", "content": "go"}]}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/messages", json=body,
                                                   headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "content_block_delta" and "ls" in d["delta"].get("partial_json", ""))
        assert not fake.release.is_set() and not e.done  # the upstream is still inside the call
        fake.release.set()
        e.rest()
    assert e.raw == fake.sent[0]  # relayed byte for byte
    assert len(fake.requests) == 1


def test_messages_an_internal_round_streams_its_text_and_the_next_round_continues_it(up: tuple[Paused, str]) -> None:
    fake, url = up
    first = [{"type": "text", "text": "I need step 1 again."},
             {"type": "tool_use", "id": "toolu_r", "name": "restore", "input": {"steps": "1"}}]
    second = [{"type": "thinking", "thinking": "now I know", "signature": "sig-2"},
              {"type": "text", "text": "Now fixing it."},
              {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "echo 2"}}]
    fake.script += [([{"type": "tool_use", "id": "toolu_0", "name": "Bash", "input": {"command": "cat a.py"}}], None),
                    (first, 7), (second, None), ([{"type": "text", "text": "done"}], None)]
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    h = {"X-Refold-Session": "ant"}
    messages: list[Any] = [{"role": "user", "content": "fix it"}]
    r0 = client.messages.create(model="m", max_tokens=64, messages=messages, tools=[BASH], extra_headers=h)
    messages += [{"role": "assistant", "content": [b.model_dump() for b in r0.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "x = 1"}]}]
    body = {"model": "m", "max_tokens": 64, "stream": True, "tools": [BASH], "messages": messages}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/messages", json=body,
                                                   headers={**h, "x-api-key": "k"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "content_block_stop")
        assert not fake.release.is_set()  # the round's text arrived while it may still be internal
        assert "".join(d["delta"].get("text", "") for _, d in e.got if d.get("type") == "content_block_delta") == first[0]["text"]
        fake.release.set()
        e.rest()
    kinds = [d["type"] for _, d in e.got]
    assert kinds.count("message_start") == 1 and kinds.count("message_stop") == 1 and kinds[-1] == "message_stop"
    starts = [(d["index"], d["content_block"]["type"]) for _, d in e.got if d["type"] == "content_block_start"]
    assert starts == [(0, "text"), (1, "thinking"), (2, "text"), (3, "tool_use")]
    assert all(d["content_block"].get("name") != "restore" for _, d in e.got if d["type"] == "content_block_start")
    assert len(fake.requests) == 3
    # the client sends back what it was shown: the session does not fork, the model sees its rounds apart
    shown = [{"type": "text", "text": first[0]["text"]}, *second]
    messages += [{"role": "assistant", "content": shown},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "2"}]}]
    client.messages.create(model="m", max_tokens=64, messages=messages, tools=[BASH], extra_headers=h)
    sent = fake.requests[3]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert sent[3]["content"][-1]["name"] == "restore" and sent[5]["content"][0] == second[0]  # signed block as made
    with httpx.Client(timeout=30) as c:
        sess = c.get(f"{url}/sessions/ant", headers={"x-api-key": "k"}).json()
    assert len(sess["branches"]) == 1
    texts = [st["reply"]["content"] for st in sess["steps"]]
    assert texts[-2:] == [first[0]["text"], second[1]["text"]]


def test_messages_sdk_reads_a_spliced_stream(up: tuple[Paused, str]) -> None:
    fake, url = up
    fake.script += [([{"type": "text", "text": "Checking."},
                      {"type": "tool_use", "id": "toolu_r", "name": "restore", "input": {"steps": "1"}}], None),
                    ([{"type": "text", "text": "Done."}], None)]
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    with client.messages.stream(model="m", max_tokens=64, tools=[BASH],
                                messages=[{"role": "user", "content": "go"}]) as s:
        final = s.get_final_message()
    assert [(b.type, getattr(b, "text", None)) for b in final.content] == [("text", "Checking."), ("text", "Done.")]
    assert final.id == "msg_1" and final.stop_reason == "end_turn"


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_a_failing_next_round_ends_the_stream_with_an_error_event(up: tuple[Paused, str], path: str) -> None:
    fake, url = up
    if path == "/v1/messages":
        fake.script += [([{"type": "text", "text": "Checking."},
                          {"type": "tool_use", "id": "toolu_r", "name": "restore", "input": {"steps": "1"}}], None), ("FAIL", None)]
        body: dict[str, Any] = {"model": "m", "max_tokens": 64, "stream": True, "tools": [BASH],
                                "messages": [{"role": "user", "content": "go"}]}
    else:
        fake.script += [([message("msg_1", "Checking."), fcall("call_r", "restore", {"steps": "1"})], None), ("FAIL", None)]
        body = {"model": "m", "stream": True, "tools": [EXEC], "input": "go"}
    with httpx.Client(timeout=30) as c:
        r = c.post(f"{url}{path}", json=body, headers={"x-api-key": "k", "authorization": "Bearer k"})
    assert r.status_code == 200
    last = r.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error") and "upstream answered 500" in last, r.text[-400:]
    assert "Checkin" in r.text  # what the internal round sent before still reached the client


# ---- OpenAI Responses --------------------------------------------------------------------------


def test_responses_relays_a_shell_call_while_it_is_generated(up: tuple[Paused, str]) -> None:
    fake, url = up
    output = [message("msg_a", "Looking around."), fcall("call_1", "exec_command", {"cmd": "ls -la && cat x"})]
    evs = list(responses_events(response_object(1, "m", output)))
    args = [n for n, e in enumerate(evs) if "response.function_call_arguments.delta" in e.split("\n", 1)[0]]
    pause = args[1]  # '{"cmd' '": "l': the command's first letter says it is no context command
    fake.script.append((output, pause))
    body = {"model": "m", "stream": True, "tools": [EXEC], "input": "go"}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/responses", json=body,
                                                   headers={"authorization": "Bearer k"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "response.function_call_arguments.delta" and "l" in d["delta"])
        assert not fake.release.is_set() and not e.done
        fake.release.set()
        e.rest()
    assert e.raw == fake.sent[0]


def test_responses_an_internal_round_streams_its_text_and_the_next_round_continues_it(up: tuple[Paused, str]) -> None:
    fake, url = up
    first = [message("msg_1", "Need step 1."), fcall("call_r", "restore", {"steps": "1"})]
    second = [message("msg_2", " Fixed."), fcall("call_2", "exec_command", {"cmd": "echo 2"})]
    evs = list(responses_events(response_object(1, "m", first)))
    pause = _pos(evs, lambda d: d.get("type") == "response.output_item.done")
    fake.script += [(first, pause), (second, None)]
    body = {"model": "m", "stream": True, "tools": [EXEC], "input": "go"}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/responses", json=body,
                                                   headers={"authorization": "Bearer k"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "response.output_item.done")
        assert not fake.release.is_set()  # the message item arrived while the round may still be internal
        fake.release.set()
        e.rest()
    datas = [d for _, d in e.got]
    kinds = [d["type"] for d in datas]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    seqs = [d["sequence_number"] for d in datas]
    assert seqs == sorted(set(seqs))
    added = [(d["output_index"], d["item"]["type"]) for d in datas if d["type"] == "response.output_item.added"]
    assert added == [(0, "message"), (1, "message"), (2, "function_call")]
    done = datas[-1]["response"]
    assert done["id"] == "resp_1" and [o["id"] for o in done["output"]] == ["msg_1", "msg_2", "fc_call_2"]
    # the client continues by id and by resending the items: both are the same conversation
    fake.script += [([message("msg_3", "ok")], None), ([message("msg_4", "ok")], None)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    out = [{"type": "function_call_output", "call_id": "call_2", "output": "2"}]
    client.responses.create(model="m", previous_response_id=done["id"], tools=[EXEC], input=out)
    by_id = fake.requests[-1]["input"]
    client.responses.create(model="m", tools=[EXEC], input=[{"role": "user", "content": "go"}, *done["output"], *out])
    assert fake.requests[-1]["input"] == by_id
    calls = [i.get("name") for i in by_id if i.get("type") == "function_call"]
    assert calls == ["restore", "exec_command"]  # the internal round, then the reply the client holds
    with httpx.Client(timeout=30) as c:
        sessions = c.get(f"{url}/sessions", headers={"authorization": "Bearer k"}).json()
        assert len(sessions["sessions"]) == 1
        sess = c.get(f"{url}/sessions/{sessions['sessions'][0]['id']}", headers={"authorization": "Bearer k"}).json()
    assert len(sess["branches"]) == 1
    # the reply the client holds is recorded as the model wrote it: its text once, in its own round
    assert [st["reply"]["content"] for st in sess["steps"]] == ["Need step 1.", " Fixed."]


def test_responses_sdk_reads_a_spliced_stream(up: tuple[Paused, str]) -> None:
    fake, url = up
    fake.script += [([message("msg_1", "Checking."), fcall("call_r", "restore", {"steps": "1"})], None),
                    ([message("msg_2", "Done.")], None)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    with client.responses.stream(model="m", tools=[EXEC], input="go") as s:
        final = s.get_final_response()
    assert final.id == "resp_1" and [o.id for o in final.output] == ["msg_1", "msg_2"]
    assert final.output_text == "Checking.Done."


# ---- the splice on its own --------------------------------------------------------------------

COMMANDS = st.sampled_from(["ls -la", "restore 1", "fold_span \"x\"", "restored", "expand -t 4 f", "rest", "  restore 2", "pwd"])
BLOCKS = st.lists(
    st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, st.text("ab c\n", min_size=1, max_size=12)),
        st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "s"}, st.text("xy", min_size=1, max_size=6)),
        st.builds(lambda c: {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": c}}, COMMANDS),
        st.just({"type": "tool_use", "id": "r", "name": "restore", "input": {"steps": "1"}}),
        st.just({"type": "tool_use", "id": "e", "name": "Edit", "input": {"path": "a"}}),
    ),
    min_size=1,
    max_size=4,
)


def _numbered(blocks: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    return [{**b, "id": f"{b['id']}{tag}{n}"} if b["type"] == "tool_use" else b for n, b in enumerate(blocks)]


def _started_ids(sent: list[bytes]) -> set[str]:
    datas = [json.loads(e.split(b"data: ", 1)[1]) for e in sent]
    return {d["content_block"].get("id") for d in datas if d["type"] == "content_block_start"}


def _events(content: list[dict[str, Any]]) -> list[Event]:
    msg = {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": content,
           "stop_reason": "end_turn", "stop_sequence": None, "usage": {}}
    out = []
    for raw in anthropic_events(msg):
        head, data = raw.split("\n", 1)
        out.append(Event(raw.encode(), head[7:], data[6:].strip()))
    return out


@given(BLOCKS, BLOCKS)
@settings(max_examples=200, deadline=None)
def test_a_spliced_message_is_what_the_rounds_add_up_to(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> None:
    """Round one through the splicer, decided as the proxy decides; if internal, round two follows.
    What the client gets is always one well-formed message; a round released early has a first call
    that is no context command, and a later call that is one never reaches the client; a round not
    internal reaches the client byte for byte (but such a call)."""
    rec = offer(Config(), [{"type": "function", "function": {"name": "bash"}}])[1]
    one, two = _numbered(one, "a"), _numbered(two, "b")
    sp = AnthropicSplicer(rec)
    sp.begin(final=False)
    evs = _events(one)
    sent = [b for ev in evs for b in sp.feed(ev)]
    reply = anthropic_wire.reply(anthropic_wire.aggregate([(e.name, json.loads(e.data)) for e in evs]))
    assert reply is not None
    calls = None if sp.released else context_calls(recognizable(reply), rec)
    if sp.released:
        first = next(b for b in one if b["type"] == "tool_use")
        cmd = json.dumps(first["input"])
        assert call_action({"id": "c", "function": {"name": tool_name(first["name"]), "arguments": cmd}}, rec).context is None
    left = context_ids(reply, rec) if calls is None else set()
    sent += sp.finish(calls is not None, context_ids=left)
    if calls is None:
        assert not left & _started_ids(sent)
        if None not in sp._map.values():  # nothing left out
            assert b"".join(sent) == b"".join(e.raw for e in evs)
        return
    sp.begin(final=True)
    reply_two = anthropic_wire.reply({"content": two})
    assert reply_two is not None
    # no round left: relayed as the model wrote it (its prompt offered no context command)
    sent += [b for ev in _events(two) for b in sp.feed(ev)] + sp.finish(False, context_ids=context_ids(reply_two, rec))
    assert {b["id"] for b in two if b["type"] == "tool_use"} <= _started_ids(sent)
    got = [(e.split(b"\n", 1)[0][7:].decode(), json.loads(e.split(b"data: ", 1)[1])) for e in sent]
    kinds = [d["type"] for _, d in got]
    assert kinds.count("message_start") == 1 and kinds[-1] == "message_stop" and kinds.count("message_stop") == 1
    starts = [d["index"] for _, d in got if d["type"] == "content_block_start"]
    stops = [d["index"] for _, d in got if d["type"] == "content_block_stop"]
    assert starts == list(range(len(starts))) and sorted(stops) == starts
    content = anthropic_wire.aggregate(got)["content"]
    shown_one = [b for b in one[: next(i for i, b in enumerate(one) if b["type"] == "tool_use")]]
    assert [b["type"] for b in content] == [b["type"] for b in shown_one + two]


# ---- agents without tools: commands in a ```bash block ----------------------------------------------


def test_messages_without_tools_relays_text_up_to_the_command_block(up: tuple[Paused, str]) -> None:
    fake, url = up
    content = [{"type": "text", "text": "Here is a long answer without any command in it at all."}]
    fake.script.append((content, 4))
    body = {"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=30) as c, c.stream("POST", f"{url}/v1/messages", json=body, headers={"x-api-key": "k"}) as r:
        e = Events(r)
        e.until(lambda d: d.get("type") == "content_block_delta")
        assert not fake.release.is_set() and not e.done
        fake.release.set()
        e.rest()
    assert e.raw == fake.sent[0]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_without_tools_an_internal_text_round_keeps_its_text_and_the_session_one_branch(
    up: tuple[Paused, str], path: str
) -> None:
    fake, url = up
    first, second = "I need step 1 again.\n```bash\nrestore 1\n```", "Now I see.\n```bash\necho ok\n```"
    h = {"x-api-key": "k", "authorization": "Bearer k", "X-Refold-Session": "txt"}
    with httpx.Client(base_url=url, timeout=30) as c:
        if path == "/v1/messages":
            fake.script += [([{"type": "text", "text": "Looking.\n```bash\ncat a.py\n```"}], None),
                            ([{"type": "text", "text": first}], None), ([{"type": "text", "text": second}], None),
                            ([{"type": "text", "text": "done"}], None)]
            msgs: list[Any] = [{"role": "user", "content": "fix it"}]
            r0 = c.post(path, json={"model": "m", "max_tokens": 64, "messages": msgs}, headers=h).json()
            msgs += [{"role": "assistant", "content": r0["content"]}, {"role": "user", "content": "x = 1"}]
            r = c.post(path, json={"model": "m", "max_tokens": 64, "messages": msgs, "stream": True}, headers=h)
            got = anthropic_wire.aggregate(
                [(None, json.loads(b.split("data: ", 1)[1])) for b in r.text.split("\n\n") if "data: " in b]
            )["content"]
            assert [b["type"] for b in got] == ["text", "text"]
            text = "".join(b["text"] for b in got)
            msgs += [{"role": "assistant", "content": got}, {"role": "user", "content": "ok"}]
            c.post(path, json={"model": "m", "max_tokens": 64, "messages": msgs}, headers=h)
        else:
            fake.script += [([message("m0", "Looking.\n```bash\ncat a.py\n```")], None), ([message("m1", first)], None),
                            ([message("m2", second)], None), ([message("m3", "done")], None)]
            items: list[Any] = [{"role": "user", "content": "fix it"}]
            r0 = c.post(path, json={"model": "m", "input": items}, headers=h).json()
            items += [*r0["output"], {"role": "user", "content": "x = 1"}]
            r = c.post(path, json={"model": "m", "input": items, "stream": True}, headers=h)
            done = json.loads(r.text.strip().split("\n\n")[-1].split("data: ", 1)[1])["response"]
            assert done["id"] == "resp_2" and [o["id"] for o in done["output"]] == ["m1", "m2"]
            text = "".join(o["content"][0]["text"] for o in done["output"])
            items += [*done["output"], {"role": "user", "content": "ok"}]
            c.post(path, json={"model": "m", "input": items}, headers=h)
        sess = c.get("/sessions/txt", headers=h).json()
    # the text before the command block (whole deltas), then the next round's reply
    assert text.startswith("I need step 1 agai") and "restore" not in text and text.endswith(second)
    assert len(fake.requests) == 4  # r0, the internal round, the round after it, the next turn
    assert len(sess["branches"]) == 1
    steps = [st["reply"]["content"] for st in sess["steps"]]
    assert steps[1:] == [first, second]  # each round as the model wrote it, the client's joined text nowhere
