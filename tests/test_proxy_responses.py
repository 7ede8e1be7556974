"""``/v1/responses`` through ``refold serve`` with the real ``openai`` SDK's Responses client
(streaming and not, tools) and the ``openai-agents`` default model, against a fake Responses
upstream that keeps every request it receives."""

from __future__ import annotations

import collections
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from refold.config import DEFAULT
from refold.proxy import ProxyConfig, create_app

from fake_upstream import ServerThread

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]},
}
ENCRYPTED = "gAAAAABo" + "Zm9vYmFy+/=" * 60


def item_text(item: dict[str, Any]) -> str:
    if item.get("type") in ("function_call_output", "custom_tool_call_output"):
        out = item.get("output")
        return out if isinstance(out, str) else "".join(p.get("text", "") for p in out or [])
    c = item.get("content")
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


def response_object(n: int, model: str, output: list[dict[str, Any]], status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"resp_{n}", "object": "response", "created_at": 1700000000, "status": status, "model": model,
        "output": output, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
        "incomplete_details": None, "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}},
    }


def events(resp: dict[str, Any]) -> Iterator[str]:
    seq = 0

    def ev(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **data})}\n\n"

    yield ev("response.created", response={**resp, "status": "in_progress", "output": []})
    yield ev("response.in_progress", response={**resp, "status": "in_progress", "output": []})
    for i, item in enumerate(resp["output"]):
        if item["type"] == "message":
            yield ev("response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []})
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            yield ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0, part=part)
            for j in range(0, len(text), 6):
                yield ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0, delta=text[j : j + 6], logprobs=[])
            yield ev("response.output_text.done", item_id=item["id"], output_index=i, content_index=0, text=text, logprobs=[])
            yield ev("response.content_part.done", item_id=item["id"], output_index=i, content_index=0, part={**part, "text": text})
        elif item["type"] == "function_call":
            yield ev("response.output_item.added", output_index=i, item={**item, "arguments": "", "status": "in_progress"})
            args = item["arguments"]
            for j in range(0, len(args), 5):
                yield ev("response.function_call_arguments.delta", item_id=item["id"], output_index=i, delta=args[j : j + 5])
            yield ev("response.function_call_arguments.done", item_id=item["id"], output_index=i, arguments=args)
        else:
            yield ev("response.output_item.added", output_index=i, item=item)
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev("response.completed", response=resp)


class FakeResponses:
    """Scripted output items first; else ``RESTORE:<n>`` in the last input item calls ``restore``
    once; else a message naming the turn."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: collections.deque[list[dict[str, Any]]] = collections.deque()
        self._lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/responses")
        async def create(request: Request) -> Response:
            body = await request.json()
            with self._lock:
                self.requests.append({"body": body, "headers": dict(request.headers)})
                n = len(self.requests)
                output = self.script.popleft() if self.script else None
            items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
            last = items[-1]
            if "FAIL:400" in item_text(last):
                return JSONResponse({"error": {"message": "bad input", "type": "invalid_request_error", "param": None, "code": None}}, status_code=400)
            if output is None:
                names = {t.get("name") for t in body.get("tools") or []}
                answered = str(last.get("call_id", "")).startswith("call_r")
                if "RESTORE:" in item_text(last) and "restore" in names and not answered:
                    step = item_text(last).split("RESTORE:")[1].split()[0]
                    output = [fcall(f"call_r{n}", "restore", {"steps": step})]
                else:
                    turn = sum(1 for i in items if i.get("type") in ("function_call",) or i.get("role") == "assistant") + 1
                    output = [message(f"msg_{n}", f"done turn {turn}")]
            resp = response_object(n, body["model"], output)
            if body.get("stream"):
                return StreamingResponse(events(resp), media_type="text/event-stream")
            return JSONResponse(resp)


def message(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def fcall(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": "fc_" + call_id, "type": "function_call", "call_id": call_id, "name": name,
            "arguments": json.dumps(args), "status": "completed"}


def reasoning(n: int) -> dict[str, Any]:
    return {"id": f"rs_{n}", "type": "reasoning", "summary": [{"type": "summary_text", "text": f"think {n}"}],
            "encrypted_content": ENCRYPTED + str(n)}


class Env:
    def __init__(self, fake: FakeResponses, url: str) -> None:
        self.fake = fake
        self.url = url

    def client(self, key: str = "sk-a") -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeResponses()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="chars4",
                          config=DEFAULT.override(["prompt.deferred=false"]))  # the protocol from the first call
        with ServerThread(create_app(cfg)) as px:
            yield Env(fake, px.url)


def as_input(items: list[Any]) -> list[dict[str, Any]]:
    return [i.model_dump(exclude_none=True) if hasattr(i, "model_dump") else i for i in items]


def run_codex_like(client: openai.OpenAI, fake: FakeResponses, turns: int, *, stream: bool = False) -> list[Any]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug"}]}]
    finals = []
    for t in range(turns):
        fake.script.append([reasoning(t), fcall(f"call_{t}", "shell", {"command": ["cat", f"f{t}.py"]})])
        kwargs: dict[str, Any] = {"model": "gpt-test", "instructions": "You are a coding agent.", "input": items,
                                  "tools": [SHELL], "store": False, "include": ["reasoning.encrypted_content"]}
        if stream:
            with client.responses.stream(**kwargs) as s:
                resp = s.get_final_response()
        else:
            resp = client.responses.create(**kwargs)
        finals.append(resp)
        items = [*items, *as_input(resp.output),
                 {"type": "function_call_output", "call_id": f"call_{t}", "output": f"line {t}\n" * 200}]
    return finals


def check_calls_answered(items: list[dict[str, Any]]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outs)


def test_tool_loop_keeps_reasoning_items_and_pairs(env: Env) -> None:
    finals = run_codex_like(env.client(), env.fake, 6)
    assert [o.type for o in finals[0].output] == ["reasoning", "function_call"]
    reqs = env.fake.requests
    assert len(reqs) == 6
    last = reqs[-1]["body"]
    assert last["instructions"].startswith("You are a coding agent.") and "[context-manager]" in last["instructions"]
    sent = [i for i in last["input"] if i.get("type") == "reasoning"]
    for t in range(5):
        assert reasoning(t) in sent  # every reasoning item as the upstream made it, encrypted_content intact
    for r in reqs:
        check_calls_answered(r["body"]["input"])
        assert "previous_response_id" not in r["body"]
        assert r["body"]["store"] is False and r["body"]["include"] == ["reasoning.encrypted_content"]
        assert r["headers"]["authorization"] == "Bearer sk-a"
    outputs = [item_text(i) for i in last["input"] if i.get("type") == "function_call_output"]
    assert [o.split("\n", 1)[0] for o in outputs] == [f"[step {t}]" for t in range(1, 6)]  # rendered, not relayed


def test_streaming_matches_non_streaming(env: Env) -> None:
    client = env.client()
    plain = run_codex_like(client, env.fake, 3)
    streamed = run_codex_like(client, env.fake, 3, stream=True)
    assert [as_input(p.output) for p in plain] == [as_input(s.output) for s in streamed]
    with httpx.Client(base_url=env.url, timeout=30) as h:
        r = h.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True}, headers={"authorization": "Bearer k"})
    kinds = [line[7:] for line in r.text.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds


def test_previous_response_id_is_mapped_onto_the_session(env: Env) -> None:
    client = env.client()
    env.fake.script.append([fcall("call_a", "shell", {"command": ["ls"]})])
    r1 = client.responses.create(model="m", input="List files", tools=[SHELL])
    r2 = client.responses.create(model="m", previous_response_id=r1.id, tools=[SHELL],
                                 input=[{"type": "function_call_output", "call_id": "call_a", "output": "a.py b.py"}])
    assert r2.output[0].type == "message"
    sent = env.fake.requests[-1]["body"]
    assert "previous_response_id" not in sent
    assert [i.get("type", "message") for i in sent["input"]] == ["message", "function_call", "function_call_output"]
    assert item_text(sent["input"][0]) == "List files"
    n = len(env.fake.requests)
    # a response the proxy never saw: the OpenAI API's own 400 (tests/test_proxy_responses_store.py)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="m", previous_response_id="resp_elsewhere", input="go on")
    assert e.value.code == "previous_response_not_found"
    # another key cannot continue this key's response: to it, the id is unknown
    with pytest.raises(openai.BadRequestError):
        env.client("sk-other").responses.create(model="m", previous_response_id=r2.id, input="hi")
    assert len(env.fake.requests) == n


def test_restore_is_answered_inside_the_proxy(env: Env) -> None:
    client = env.client()
    for stream in (False, True):
        env.fake.requests.clear()
        items: list[dict[str, Any]] = [{"role": "user", "content": f"Task {stream}"}]
        for t in range(3):
            env.fake.script.append([fcall(f"call_{stream}{t}", "shell", {"command": ["echo", str(t)]})])
            resp = client.responses.create(model="m", input=items, tools=[SHELL])
            items += [*as_input(resp.output), {"type": "function_call_output", "call_id": f"call_{stream}{t}", "output": f"out {t} RESTORE:1" if t == 2 else f"out {t}"}]
        if stream:
            with client.responses.stream(model="m", input=items, tools=[SHELL]) as s:
                final = s.get_final_response()
        else:
            final = client.responses.create(model="m", input=items, tools=[SHELL])
        assert [o.type for o in final.output] == ["message"]
        reqs = env.fake.requests
        assert len(reqs) == 5
        restore = next(t for t in reqs[-2]["body"]["tools"] if t["name"] == "restore")
        assert restore["type"] == "function" and "parameters" in restore  # the Responses tool format
        answer = reqs[-1]["body"]["input"][-1]
        assert answer["type"] == "function_call_output" and "[context-manager] Step 1" in item_text(answer)
        check_calls_answered(reqs[-1]["body"]["input"])


def test_errors_are_openai_shaped(env: Env) -> None:
    client = env.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="m", input="FAIL:400")
    assert "bad input" in str(e.value)
    with httpx.Client(base_url=env.url, timeout=30) as h:
        r = h.post("/v1/responses", json={"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]})
        assert r.status_code == 400 and "input.0.role" in r.json()["error"]["message"]
        assert r.json()["error"]["param"] == "input.0.role"  # was null: the field is named as on chat
        r = h.post("/v1/responses", json={"input": "x"})
        assert r.json()["error"]["param"] == "model"


def test_openai_agents_default_model_runs_a_tool_loop(env: Env) -> None:
    agents = pytest.importorskip("agents")
    read_calls: list[str] = []

    @agents.function_tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        read_calls.append(path)
        return f"contents of {path}\n" + "x = 1\n" * 50

    env.fake.script.extend([
        [fcall("call_1", "read_file", {"path": "a.py"})],
        [reasoning(1), fcall("call_2", "read_file", {"path": "b.py"})],
        [message("msg_f", "Both files set x = 1.")],
    ])
    # the README recipe: the SDK's default client pointed at the proxy, the default (Responses) model
    agents.set_default_openai_client(openai.AsyncOpenAI(base_url=f"{env.url}/v1", api_key="sk-agents", max_retries=0))
    agents.set_tracing_disabled(True)
    agent = agents.Agent(name="coder", instructions="You read code.", tools=[read_file])
    result = agents.Runner.run_sync(agent, "What do a.py and b.py set?")
    assert result.final_output == "Both files set x = 1."
    assert read_calls == ["a.py", "b.py"]
    reqs = env.fake.requests
    assert len(reqs) == 3
    for r in reqs:
        check_calls_answered(r["body"]["input"])
        assert "[context-manager]" in r["body"]["instructions"]
    assert reasoning(1) in reqs[-1]["body"]["input"]
    outs = [item_text(i) for i in reqs[-1]["body"]["input"] if i.get("type") == "function_call_output"]
    assert len(outs) == 2 and "a.py" in outs[0]


def test_restore_typed_into_codex_exec_command_is_answered(env: Env) -> None:
    exec_command = {"type": "function", "name": "exec_command", "description": "Run a command.",
                    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
    client = env.client()
    env.fake.script.append([fcall("call_x", "exec_command", {"cmd": "cat setup.py"})])
    r = client.responses.create(model="m", input="Look at setup.py", tools=[exec_command])
    items = [{"role": "user", "content": "Look at setup.py"}, *as_input(r.output),
             {"type": "function_call_output", "call_id": "call_x", "output": "from setuptools import setup\n" * 20}]
    env.fake.script.append([fcall("call_y", "exec_command", {"cmd": "restore 1"})])
    final = client.responses.create(model="m", input=items, tools=[exec_command], extra_headers={"x-refold-session": "codex"})
    assert [o.type for o in final.output] == ["message"]
    sent = env.fake.requests[-1]["body"]["input"]
    assert sent[-2]["name"] == "exec_command" and json.loads(sent[-2]["arguments"]) == {"cmd": "restore 1"}  # native call upstream
    assert "[context-manager] Step 1" in item_text(sent[-1])


def test_shell_tools_are_recorded_as_bash() -> None:
    from refold.shell_tools import canonical_call

    assert canonical_call("Bash", '{"command": "ls -la", "description": "list"}') == ("bash", '{"command": "ls -la"}')
    assert canonical_call("exec_command", '{"cmd": "cat a.py", "yield_time_ms": 10}') == ("bash", '{"command": "cat a.py"}')
    assert canonical_call("shell", '{"command": ["bash", "-lc", "grep -n x *.py"]}') == ("bash", '{"command": "grep -n x *.py"}')
    assert canonical_call("shell", '{"command": ["ls", "my dir"]}') == ("bash", '{"command": "ls \'my dir\'"}')
    assert canonical_call("read_file", '{"path": "a"}') == ("read_file", '{"path": "a"}')
    assert canonical_call("bash", "not json") == ("bash", "not json")
