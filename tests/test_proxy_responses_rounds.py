"""``/v1/responses`` rounds that turn internal or hold a context command after calls the client
was already streamed: the client never receives a context command, never loses text or a call
the model sent, and the session stays one branch that renders again (ASGI app, fake upstream,
the real ``openai`` SDK; streaming and not)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.context.tools import offer
from refold.proxy import ProxyConfig, create_app
from refold.proxy import responses_wire as wire
from refold.proxy.commands import context_calls
from refold.proxy.responses import ResponsesSplicer
from refold.proxy.spliced import visible_text
from refold.proxy.sse import Event
from refold.proxy.surface_calls import recognizable
from refold.proxy.surface_stream import context_ids
from test_proxy_responses import fcall, message, reasoning, response_object
from test_proxy_surface_stream import EXEC, Paused, paused_proxy

from fake_upstream import ServerThread

H = {"authorization": "Bearer k"}


@pytest.fixture()
def up(tmp_path: Path) -> Iterator[tuple[Paused, str]]:
    with paused_proxy(tmp_path) as got:
        yield got


def _done(text: str) -> dict[str, Any]:
    return json.loads(text.strip().split("\n\n")[-1].split("data: ", 1)[1])["response"]


def _all_text(raw: str) -> str:
    return "".join(
        json.loads(b.split("data: ", 1)[1]).get("delta", "")
        for b in raw.split("\n\n")
        if "response.output_text.delta" in b.split("\n", 1)[0]
    )


@pytest.mark.parametrize("stream", [True, False])
def test_without_tools_the_text_after_the_command_block_reaches_the_client(up: tuple[Paused, str], stream: bool) -> None:
    fake, url = up
    first = "I need step 1 again.\n```bash\nrestore 1\n```\nThen I will patch the parser."
    second = "Now I see.\n```bash\necho ok\n```"
    fake.script += [([message("m0", "Looking.\n```bash\ncat a.py\n```")], None), ([message("m1", first)], None),
                    ([message("m2", second)], None), ([message("m3", "done")], None)]
    h = {**H, "X-Refold-Session": "txt"}
    with httpx.Client(base_url=url, timeout=30) as c:
        items: list[Any] = [{"role": "user", "content": "fix it"}]
        r0 = c.post("/v1/responses", json={"model": "m", "input": items}, headers=h).json()
        items += [*r0["output"], {"role": "user", "content": "x = 1"}]
        r = c.post("/v1/responses", json={"model": "m", "input": items, "stream": stream}, headers=h)
        done = _done(r.text) if stream else r.json()
        texts = ["".join(p["text"] for p in o["content"]) for o in done["output"]]
        if stream:
            # everything the model wrote but the command block, in the order it wrote it
            assert texts == ["I need step 1 again.\n\nThen I will patch the parser.", second]
            assert _all_text(r.text) == "".join(texts) and "restore" not in r.text
        else:
            assert texts == [second]  # a non-streamed answer is the last round's (as chat completions)
        items += [*done["output"], {"role": "user", "content": "ok"}]
        assert c.post("/v1/responses", json={"model": "m", "input": items}, headers=h).status_code == 200
        sess = c.get("/sessions/txt", headers=h).json()
    assert len(sess["branches"]) == 1
    assert [st["reply"]["content"] for st in sess["steps"]][1:] == [first, second]  # as the model wrote them
    sent = fake.requests[3]["input"]  # the next turn: each round as written, none as the client joined them
    assert [o["content"][0]["text"] for o in sent if o.get("role") == "assistant"][1:] == [first, second]


def test_the_sdk_reads_the_text_around_a_command_block(up: tuple[Paused, str]) -> None:
    fake, url = up
    fake.script += [([message("m1", "Checking.\n```bash\nrestore 1\n```\nback soon")], None),
                    ([message("m2", "Done.")], None)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    with client.responses.stream(model="m", input="go") as s:
        final = s.get_final_response()
    assert final.output_text == "Checking.\n\nback soonDone."
    assert [o.id for o in final.output] == ["m1", "m2"]


def test_an_upstream_that_numbers_items_per_response_does_not_break_the_sdks_stream(up: tuple[Paused, str]) -> None:
    """Both rounds' message items are 'msg_1' (an upstream numbering per response): the spliced
    stream repeated the id and the openai SDK raised "conflicting output identities"."""
    fake, url = up
    fake.script += [([message("msg_1", "Checking.\n```bash\nrestore 1\n```\nback soon")], None),
                    ([message("msg_1", "Done.")], None)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    with client.responses.stream(model="m", input="go") as s:
        final = s.get_final_response()
    assert final.output_text == "Checking.\n\nback soonDone."
    ids = [o.id for o in final.output]
    assert ids[0] == "msg_1" and len(set(ids)) == len(ids) == 2


def test_a_reasoning_id_repeated_per_response_does_not_break_the_sdks_stream(up: tuple[Paused, str]) -> None:
    """The SDK tells reasoning items apart by id as it does messages: 'rs_1' in both rounds raised
    "conflicting output identities" too; the stored reply keeps the upstream's ids."""
    fake, url = up
    fake.script += [([reasoning(1), message("msg_1", "Checking.\n```bash\nrestore 1\n```\nback soon")], None),
                    ([reasoning(1), message("msg_1", "Done.")], None)]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers={"X-Refold-Session": "rs"})
    with client.responses.stream(model="m", input="go") as s:
        final = s.get_final_response()
    got = [(o.type, o.id) for o in final.output]
    assert got[:2] == [("reasoning", "rs_1"), ("message", "msg_1")] and len({i for _, i in got}) == len(got) == 4
    with httpx.Client(base_url=url, timeout=30) as c:
        steps = c.get("/sessions/rs", headers=H).json()["steps"]
    assert [i["id"] for i in steps[0]["reply"]["extra"]["responses"]] == ["rs_1", "msg_1"]  # the internal round


def _later_restore(fake: Paused) -> None:
    first = [message("msg_1", "Two things."), fcall("call_ls", "exec_command", {"cmd": "ls -la"}),
             fcall("call_r", "exec_command", {"cmd": "restore 1"})]
    fake.script += [([message("m0", "Looking."), fcall("call_0", "exec_command", {"cmd": "cat a.py"})], None),
                    (first, None), ([message("msg_2", "Both seen."), fcall("call_2", "exec_command", {"cmd": "echo 2"})], None)]


def test_a_shell_context_command_after_a_released_call_is_answered_before_the_next_call(up: tuple[Paused, str]) -> None:
    """The round's first call is no context command, so it streams at once; its second call is
    `restore 1` typed into the shell tool: held, never sent, answered before the next upstream call."""
    fake, url = up
    _later_restore(fake)
    h = {**H, "X-Refold-Session": "later"}
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers=h)
    r0 = client.responses.create(model="m", tools=[EXEC], input="fix it")
    items: list[Any] = [{"role": "user", "content": "fix it"}, *[o.model_dump() for o in r0.output],
                        {"type": "function_call_output", "call_id": "call_0", "output": "x = 1"}]
    with client.responses.stream(model="m", tools=[EXEC], input=items) as s:
        final = s.get_final_response()
    got = [(o.type, getattr(o, "call_id", None)) for o in final.output]
    assert got == [("message", None), ("function_call", "call_ls")]
    assert len(fake.requests) == 2  # no internal round: the client runs ls
    items += [*[o.model_dump() for o in final.output], {"type": "function_call_output", "call_id": "call_ls", "output": "a.py"}]
    r2 = client.responses.create(model="m", tools=[EXEC], input=items)
    assert [o.call_id for o in r2.output if o.type == "function_call"] == ["call_2"]
    sent = fake.requests[2]["input"]
    calls = [i["call_id"] for i in sent if i.get("type") == "function_call"]
    outs = {i["call_id"]: i["output"] for i in sent if i.get("type") == "function_call_output"}
    assert calls == ["call_0", "call_ls", "call_r"] and sorted(outs) == sorted(calls)  # every call answered
    assert outs["call_ls"].endswith("a.py") or "a.py" in outs["call_ls"]
    assert "[context-manager] Step 1 restored" in outs["call_r"]
    with httpx.Client(base_url=url, timeout=30) as c:
        sess = c.get("/sessions/later", headers=h).json()
    assert len(sess["branches"]) == 1
    assert [st["internal"] for st in sess["steps"]] == [False, False, True]
    # the next turn resends the same items: it matches, and what goes upstream is the same again
    fake.script.append(([message("msg_3", "ok")], None))
    client.responses.create(model="m", tools=[EXEC], input=[*items, *[o.model_dump() for o in r2.output],
                                                              {"type": "function_call_output", "call_id": "call_2", "output": "2"}])
    assert fake.requests[3]["input"][: len(sent)] == sent


def test_continued_by_previous_response_id_the_left_out_call_is_answered_too(up: tuple[Paused, str]) -> None:
    fake, url = up
    _later_restore(fake)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers={"X-Refold-Session": "prev"})
    r0 = client.responses.create(model="m", tools=[EXEC], input="fix it")
    out0 = [{"type": "function_call_output", "call_id": "call_0", "output": "x = 1"}]
    with client.responses.stream(model="m", tools=[EXEC], previous_response_id=r0.id, input=out0) as s:
        final = s.get_final_response()
    assert [getattr(o, "call_id", None) for o in final.output if o.type == "function_call"] == ["call_ls"]
    out1 = [{"type": "function_call_output", "call_id": "call_ls", "output": "a.py"}]
    client.responses.create(model="m", tools=[EXEC], previous_response_id=final.id, input=out1)
    sent = fake.requests[2]["input"]
    calls = [i["call_id"] for i in sent if i.get("type") == "function_call"]
    answered = [i["call_id"] for i in sent if i.get("type") == "function_call_output"]
    assert calls == answered == ["call_0", "call_ls", "call_r"]


def test_not_streamed_the_same_round_is_internal(up: tuple[Paused, str]) -> None:
    fake, url = up
    _later_restore(fake)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers={"X-Refold-Session": "ns"})
    r0 = client.responses.create(model="m", tools=[EXEC], input="fix it")
    items: list[Any] = [{"role": "user", "content": "fix it"}, *[o.model_dump() for o in r0.output],
                        {"type": "function_call_output", "call_id": "call_0", "output": "x = 1"}]
    r1 = client.responses.create(model="m", tools=[EXEC], input=items)
    assert [o.call_id for o in r1.output if o.type == "function_call"] == ["call_2"]
    outs = {i["call_id"]: i["output"] for i in fake.requests[2]["input"] if i.get("type") == "function_call_output"}
    assert "Not run" in outs["call_ls"] and "restored" in outs["call_r"]  # the model is told ls did not run


@pytest.mark.parametrize("stream", [True, False])
def test_with_no_round_left_the_reply_goes_as_written_and_nothing_the_client_refused_is_applied(
    up: tuple[Paused, str], tmp_path: Path, stream: bool
) -> None:
    """``max_rounds=1``: the first round is internal; the second is the last, so its prompt offers
    no context command (no ``restore`` tool, no restore hint) and its reply reaches the client as
    the model wrote it (the agent loop goes on: the client answers every call); the ``restore``
    the client could not run is recorded unanswered, never applied (as on chat completions)."""
    fake, _ = up
    fake.script += [([fcall("call_x", "restore", {"steps": "1"})], None),
                    ([message("m0", "Looking."), fcall("call_0", "exec_command", {"cmd": "cat a.py"}),
                      fcall("call_r", "exec_command", {"cmd": "restore 1"})], None),
                    ([message("m1", "ok")], None)]
    cfg = ProxyConfig(context_tools_beside_shell=True, upstream=fake.url, store=str(tmp_path / "f.db"), tokenizer="off", max_rounds=1)
    with ServerThread(create_app(cfg)) as px:
        client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0, default_headers={"X-Refold-Session": "f"})
        items: list[Any] = [{"role": "user", "content": "fix it"}]
        if stream:
            with client.responses.stream(model="m", tools=[EXEC], input=items) as s:
                out = s.get_final_response().output
        else:
            out = client.responses.create(model="m", tools=[EXEC], input=items).output
        assert [getattr(o, "call_id", None) for o in out if o.type == "function_call"] == ["call_0", "call_r"]
        last = fake.requests[1]
        assert [t["name"] for t in last["tools"]] == ["exec_command"]
        assert "restore" in json.dumps(fake.requests[0]["tools"]) and "restore <step>" not in json.dumps(last)
        items += [*[o.model_dump() for o in out], {"type": "function_call_output", "call_id": "call_0", "output": "x"},
                  {"type": "function_call_output", "call_id": "call_r", "output": "bash: restore: command not found"}]
        client.responses.create(model="m", tools=[EXEC], input=items)
    sent = fake.requests[-1]["input"]
    calls = [i["call_id"] for i in sent if i.get("type") == "function_call"]
    answered = [i["call_id"] for i in sent if i.get("type") == "function_call_output"]
    assert calls == answered == ["call_x", "call_0", "call_r"]
    outputs = {i["call_id"]: i["output"] for i in sent if i.get("type") == "function_call_output"}
    assert "no earlier steps" in outputs["call_x"]  # answered by the proxy
    assert "command not found" in outputs["call_r"] and "[context-manager] Step" not in json.dumps(sent)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("body", "shaped"), [
    (b"<html><body>502 Bad Gateway</body></html>", False),
    (json.dumps({"error": {"message": "the model is overloaded", "type": "server_error"}}).encode(), True),
])
def test_upstream_errors_keep_their_status_in_the_openai_shape(up: tuple[Paused, str], stream: bool, body: bytes, shaped: bool) -> None:
    fake, url = up
    fake.script.append((("RAW", 500, body), None))
    r = httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "go", "stream": stream}, headers=H, timeout=30)
    assert r.status_code == 500
    if shaped:
        assert r.content == body
    else:
        err = r.json()["error"]
        assert err["message"] == "upstream answered 500: <html><body>502 Bad Gateway</body></html>"
        assert err["type"] == "upstream_error"
    with pytest.raises(openai.InternalServerError):
        fake.script.append((("RAW", 500, body), None))
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0).responses.create(model="m", input="go")


# ---- the splice over any delta split points ----------------------------------------------------

ITEMS = st.lists(
    st.one_of(
        st.builds(lambda t: ("text", t), st.sampled_from(["Checking the parser.", "ok", "Two things:\n", "a ``` b"])),
        st.builds(lambda c: ("exec", c), st.sampled_from(["ls -la", "restore 1", "  restore 2", "restored", "pwd", "fold_span \"x\""])),
        st.just(("restore", "1")),
    ),
    min_size=1,
    max_size=4,
)
TEXTS = st.sampled_from([
    "I need step 1.\n```bash\nrestore 1\n```\nThen the fix.",
    "Look:\n```python\nx = 1\n```\n```bash\nrestore 2\n```",
    "```bash\nls -la\n```\nafter",
    "plain words, no command at all",
    "Checking.\n<mswea_bash_command>restore 1</mswea_bash_command> and on",
])


def _split(s: str, cuts: list[int]) -> list[str]:
    at = sorted({c % (len(s) + 1) for c in cuts} | {0, len(s)})
    return [s[a:b] for a, b in zip(at, at[1:], strict=False) if b > a] or [""]


def _stream(output: list[dict[str, Any]], cuts: list[int]) -> list[Event]:
    """The Responses events of ``output``, each delta cut at ``cuts``."""
    out: list[Event] = []
    seq = 0

    def ev(kind: str, **data: Any) -> None:
        nonlocal seq
        seq += 1
        payload = json.dumps({"type": kind, "sequence_number": seq, **data})
        out.append(Event(f"event: {kind}\ndata: {payload}\n\n".encode(), kind, payload))

    resp = response_object(1, "m", output)
    ev("response.created", response={**resp, "output": [], "status": "in_progress"})
    for i, item in enumerate(output):
        if item["type"] == "message":
            ev("response.output_item.added", output_index=i, item={**item, "content": [], "status": "in_progress"})
            ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0,
               part={"type": "output_text", "text": "", "annotations": []})
            for piece in _split(item["content"][0]["text"], cuts):
                ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0, delta=piece)
        else:
            ev("response.output_item.added", output_index=i, item={**item, "arguments": ""})
            for piece in _split(item["arguments"], cuts):
                ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i, delta=piece)
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=resp)
    return out


def _splice(events: list[Event], rec: Any) -> tuple[ResponsesSplicer, list[bytes], Any, Any]:
    """One round through the splicer, decided as ``surface_stream`` decides it."""
    sp = ResponsesSplicer(rec)
    sp.begin(final=False)
    sent = [b for e in events for b in sp.feed(e)]
    reply = wire.reply(wire.aggregate([json.loads(e.data) for e in events]))
    assert reply is not None
    calls = None if sp.released else context_calls(recognizable(reply), rec)
    if calls is None:
        sent += sp.finish(False, context_ids=context_ids(reply, rec))
    else:
        sent += sp.finish(True, visible_text(str(reply["content"]), not reply.get("tool_calls")))
    return sp, sent, reply, calls


def _client_items(sent: list[bytes]) -> tuple[list[dict[str, Any]], str]:
    datas = [json.loads(b.split(b"data: ", 1)[1]) for b in sent]
    items = [d["item"] for d in datas if d["type"] == "response.output_item.added"]
    return items, "".join(d.get("delta", "") for d in datas if d["type"] == "response.output_text.delta")


@given(ITEMS, st.lists(st.integers(0, 60), max_size=6))
@settings(max_examples=300, deadline=None)
def test_a_context_call_never_reaches_the_client_wherever_the_deltas_split(
    kinds: list[tuple[str, str]], cuts: list[int]
) -> None:
    rec = offer(Config(), [{"type": "function", "function": {"name": "bash"}}])[1]
    output = []
    for n, (kind, value) in enumerate(kinds):
        if kind == "text":
            output.append(message(f"msg_{n}", value))
        elif kind == "exec":
            output.append(fcall(f"c{n}", "exec_command", {"cmd": value}))
        else:
            output.append(fcall(f"c{n}", "restore", {"steps": value}))
    sp, sent, reply, calls = _splice(_stream(output, cuts), rec)
    items, shown_text = _client_items(sent)
    context = context_ids(reply, rec)
    assert not context & {i.get("call_id") for i in items}  # no context command reaches the client
    if calls is None:  # relayed: every other call, and all the text, in order
        want = [o["id"] for o in output if o.get("call_id") not in context]
        assert [i["id"] for i in items] == want and set(sp.left_out) == context
        assert shown_text == reply["content"]
    else:  # internal: nothing of it reaches the client but its text
        assert not any(i["type"] == "function_call" for i in items)
        assert shown_text == reply["content"] == sp.shown()


@given(TEXTS, st.lists(st.integers(0, 60), max_size=6))
@settings(max_examples=300, deadline=None)
def test_a_text_round_loses_nothing_but_its_command_block_wherever_the_deltas_split(text: str, cuts: list[int]) -> None:
    rec = offer(Config(), None)[1]
    sp, sent, reply, calls = _splice(_stream([message("m", text)], cuts), rec)
    _, shown_text = _client_items(sent)
    if calls is None:
        assert shown_text == text and b"".join(sent) == b"".join(e.raw for e in _stream([message("m", text)], cuts))
    else:
        assert shown_text == visible_text(text, True) == sp.shown() and "restore" not in shown_text
