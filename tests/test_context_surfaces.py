"""One set of context-command rules: the same scripted replies through mini and through the proxy
give the same answers and the same next prompts (tool-call and text forms).

mini: refold's ``RefoldModel`` around mini's own LiteLLM model classes (``litellm.completion``
replaced by the script), driven the way mini's agents drive a model. The proxy: the real ASGI app
on a loopback port, a scripted upstream, and a client that runs its shell calls itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("minisweagent")
litellm = pytest.importorskip("litellm")

from refold.config import Config, PromptConfig  # noqa: E402
from refold.integrations.minisweagent import RefoldModel  # noqa: E402
from refold.policy import Policy  # noqa: E402
from refold.proxy import ProxyConfig, create_app  # noqa: E402
from refold.types import content_text  # noqa: E402

from fake_upstream import ServerThread  # noqa: E402

SYSTEM = {"role": "system", "content": "You are a careful engineer. Use the bash tool."}
TASK = {"role": "user", "content": "Fix add() in a.py."}
WEAK = "found it"
GOOD = "add() subtracts at a.py:2 because of a typo, so every caller gets a wrong sum"
ARG = {"restore": "steps", "begin_span": "question", "fold_span": "conclusion", "search_ledger": "query", "fold": "id", "drop": "id", "expand": "id",
       "pin": "id", "unpin": "id"}
QUOTED = ("begin_span", "fold_span", "search_ledger")
BASH_TOOL = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}

# each reply: the commands it issues, (name, argument); "bash" runs in the shell
SCRIPT: list[list[tuple[str, str]]] = [
    [("bash", "ls")],
    [("begin_span", "where is add() defined?"), ("begin_span", "what does add() return?")],
    [("bash", "cat a.py")],
    [("fold_span", WEAK)],
    [("fold_span", GOOD)],
    [("bash", "grep -n add a.py")],
    [("fold", "3")],
    [("drop", "1")],
    [("expand", "3")],
    [("search_ledger", "add")],
    [("restore", "6")],
    [("restore", "99")],
    [("bash", "echo done")],
]
TEXT_SCRIPT = [[c] for reply in SCRIPT for c in reply]  # text form: one command per reply


def output(command: str) -> str:
    return f"<returncode>0</returncode>\n<output>\nresult of {command}\n" + "".join(f"{command} line {i}\n" for i in range(3)) + "</output>"


def shell(name: str, arg: str) -> str:
    if name == "bash":
        return arg
    if name == "fold_steps":
        steps, _, conclusion = arg.partition(" ")
        return f'fold_steps {steps} "{conclusion}"'
    return f'{name} "{arg}"' if name in QUOTED else f"{name} {arg}"


def reply(i: int, commands: list[tuple[str, str]], form: str) -> dict[str, Any]:
    head = f"PROGRESS: reply {i}\nSTALE: -\n\nTHOUGHT: next."
    if form == "text":
        (name, arg), = commands
        return {"role": "assistant", "content": f"{head}\n\n```mswea_bash_command\n{shell(name, arg)}\n```"}
    calls = []
    for j, (name, arg) in enumerate(commands):
        if name == "fold_steps":
            steps, _, conclusion = arg.partition(" ")
            args = {"steps": steps, "conclusion": conclusion}
        else:
            args = {"command": arg} if name == "bash" else {ARG[name]: arg}
        calls.append({"id": f"call_{i}_{j}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}})
    return {"role": "assistant", "content": head, "tool_calls": calls}


def normal(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A prompt as the model reads it: roles, texts, tool calls and their ids."""
    out = []
    for m in messages:
        calls = tuple((c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or [])
        out.append((m["role"], content_text(m.get("content")), calls, m.get("tool_call_id")))
    return out


CONFIG = Config(policy=Policy(k=2), prompt=PromptConfig(format_in_system=True))


def run_mini(
    form: str, script: list[list[tuple[str, str]]], monkeypatch: pytest.MonkeyPatch, config: Config = CONFIG
) -> tuple[list[Any], list[str]]:
    prompts: list[list[dict[str, Any]]] = []

    def completion(*, model: str, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        prompts.append(json.loads(json.dumps(messages)))
        i = len(prompts)
        message = reply(i, script[i - 1], form) if i <= len(script) else reply(i, [("bash", "true")], form)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return litellm.ModelResponse(model=model, choices=[{"index": 0, "message": message, "finish_reason": finish}])

    monkeypatch.setattr(litellm, "completion", completion)
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")
    inner = "litellm" if form == "tool" else "litellm_textbased"
    kwargs: dict[str, Any] = {"model_name": "fake/scripted", "cost_tracking": "ignore_errors", "observation_template": "{{output.output}}"}
    if form == "text":
        kwargs["action_regex"] = r"```mswea_bash_command\s*\n(.*?)\n```"
        kwargs["format_error_template"] = "format error"
    model = RefoldModel(
        inner_model_class=inner, refold={"k": config.policy.k}, refold_tokenizer=None, refold_context_tools=form == "tool",
        refold_format_in_system=True, refold_spans=config.spans.model_dump(), refold_ledger=config.ledger.model_dump(), **kwargs,
    )
    messages: list[dict[str, Any]] = [dict(SYSTEM), dict(TASK)]
    answers: list[str] = []
    for _ in script:
        msg = model.query(messages)
        messages.append(msg)
        outputs = [{"output": output(a["command"]), "returncode": 0, "exception_info": ""} for a in msg["extra"]["actions"]]
        obs = model.format_observation_messages(msg, outputs)
        answers += [content_text(o["content"]) for o in obs if "refold_command" in (o.get("extra") or {})]
        messages.extend(obs)
    model.query(messages)  # the prompt after the last reply
    return [normal(p) for p in prompts], answers


@pytest.fixture(params=[CONFIG])
def proxy(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    script: list[dict[str, Any]] = []
    bodies: list[dict[str, Any]] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        bodies.append(body)
        message = script[len(bodies) - 1] if len(bodies) <= len(script) else {"role": "assistant", "content": "PROGRESS: end\nSTALE: -\n\ndone"}
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        return {"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    with ServerThread(app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", config=request.param, max_rounds=32)
        with ServerThread(create_app(cfg)) as px:
            yield px.url, script, bodies


def run_proxy(form: str, script: list[list[tuple[str, str]]], env: tuple[str, list[dict[str, Any]], list[dict[str, Any]]]) -> tuple[list[Any], list[str]]:
    url, queued, bodies = env
    queued.extend(reply(i + 1, cmds, form) for i, cmds in enumerate(script))
    messages: list[dict[str, Any]] = [dict(SYSTEM), dict(TASK)]
    headers = {"Authorization": "Bearer sk-x", "X-Refold-Session": f"same-{form}"}
    while len(bodies) <= len(script):
        body: dict[str, Any] = {"model": "m", "messages": messages}
        if form == "tool":
            body["tools"] = [BASH_TOOL]
        r = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
        r.raise_for_status()
        msg = {k: v for k, v in r.json()["choices"][0]["message"].items() if v is not None}
        messages.append(msg)
        if form == "tool":
            for c in msg.get("tool_calls") or []:
                command = json.loads(c["function"]["arguments"])["command"]
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": output(command)})
        elif "```mswea_bash_command" in msg.get("content", ""):
            command = msg["content"].split("```mswea_bash_command\n", 1)[1].split("\n```", 1)[0]
            messages.append({"role": "user", "content": output(command)})
    view = httpx.get(f"{url}/sessions/same-{form}", headers=headers, timeout=60).json()
    answers = [
        content_text(o["content"])
        for s in view["steps"]
        for o in s["observations"]
        if "refold_command" in (o.get("extra") or {})
    ]
    return [normal(b["messages"]) for b in bodies], answers


@pytest.mark.parametrize("form", ["tool", "text"])
def test_mini_and_the_proxy_answer_and_render_alike(
    form: str, proxy: tuple[str, list[dict[str, Any]], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = SCRIPT if form == "tool" else TEXT_SCRIPT
    mini_prompts, mini_answers = run_mini(form, script, monkeypatch)
    proxy_prompts, proxy_answers = run_proxy(form, script, proxy)
    assert len(mini_prompts) == len(proxy_prompts) == len(script) + 1
    assert mini_answers == proxy_answers
    for t, (a, b) in enumerate(zip(mini_prompts, proxy_prompts, strict=True)):
        assert a == b, f"prompt {t} differs"
    # the rules themselves: two begin_span in one reply open S1 and S2 inside it, a weak conclusion
    # is refused, a bad restore says so, and the fold shows in the last prompt
    joined = "\n".join(mini_answers)
    if form == "tool":
        assert "Span S1 opened" in mini_answers[0] and "Span S2 opened at step 2, inside span S1" in mini_answers[1]
    assert "fold_span refused" in joined and "Span S2 folded" in joined
    assert "there is no step 99" in joined
    last = "\n".join(str(m[1]) for m in mini_prompts[-1])
    assert "Output 3 folded" in last or "Span S" in last


# ---- self-gc (seed 002) through both surfaces ------------------------------------------------------

SELF_GC = Config.parse(preset="self-gc", k=2, prompt={"format_in_system": True})
SELF_GC_SCRIPT: list[list[tuple[str, str]]] = [
    [("bash", "ls")],
    [("bash", "cat a.py")],
    [("bash", "grep -n add a.py")],
    [("fold", "r2")],
    [("pin", "1")],
    [("fold_steps", "2-3 looked around and so on, nothing else to see here")],
    [("fold_steps", "2-3 add() subtracts at a.py:2 because of a typo, so callers get wrong sums")],
    [("expand", "r2")],
    [("unpin", "1")],
    [("bash", "echo done")],
    [("bash", "true")],
]


@pytest.mark.parametrize("form", ["tool", "text"])
@pytest.mark.parametrize("proxy", [SELF_GC], indirect=True)
def test_self_gc_through_mini_and_the_proxy(
    form: str, proxy: tuple[str, list[dict[str, Any]], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    mini_prompts, mini_answers = run_mini(form, SELF_GC_SCRIPT, monkeypatch, SELF_GC)
    proxy_prompts, proxy_answers = run_proxy(form, SELF_GC_SCRIPT, proxy)
    assert mini_answers == proxy_answers
    for t, (a, b) in enumerate(zip(mini_prompts, proxy_prompts, strict=True)):
        assert a == b, f"prompt {t} differs"
    joined = "\n".join(mini_answers)
    assert "r2: replaced by its one-line summary" in joined and "1 pinned" in joined and "1 unpinned" in joined
    assert "fold_steps 2-3 refused" in joined and "'and so on' is filler" in joined
    assert "Span S1 folded after the fact: steps 2-3" in joined
    assert "tokens after it are recomputed" in joined or "folding now would recompute" in joined  # the cost rule may defer it
    assert "Reply r2 restored from history, byte for byte" in joined
    last = mini_prompts[-1]
    assert last[-1][0] == "user" and str(last[-1][1]).startswith("[context-manager] Ledger after step")  # the view
    assert any("% of 128k tokens" in str(m[1]) for m in last)  # the budget line
    system = str(last[0][1])
    assert "`fold_steps 12-18" in system and "`r7` is the reply of step 7" in system
