"""Real agent binaries through ``refold serve`` against scripted fake upstreams (loopback only).

    python benchmarks/bench_harnesses.py --claude PATH/TO/claude --codex PATH/TO/codex

Each harness runs one short task in a scratch directory: the fake upstream makes the model run
shell commands for a few turns (and call refold's ``restore`` tool once when it is offered), then
answer. The script prints what the upstream received at each call (API, tools offered, whether
refold's protocol section and breakpoints were there, prompt size) and what the harness printed.
Nothing leaves 127.0.0.1; the binaries are whatever ``npm install @anthropic-ai/claude-code
@openai/codex`` put on disk. Results: benchmarks/results/harnesses.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from refold.proxy import ProxyConfig, create_app  # noqa: E402

from fake_upstream import ServerThread  # noqa: E402

TURNS = 3


def _anthropic_sse(message: dict[str, Any]) -> Iterator[str]:
    def ev(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n"

    yield ev("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})
    for i, b in enumerate(message["content"]):
        if b["type"] == "text":
            yield ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
            yield ev("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}})
        else:
            yield ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {**b, "input": {}}})
            yield ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                             "delta": {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
        yield ev("content_block_stop", {"type": "content_block_stop", "index": i})
    yield ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                               "usage": {"output_tokens": 5}})
    yield ev("message_stop", {"type": "message_stop"})


class Upstreams:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            body = await request.json()
            tools = [t.get("name") for t in body.get("tools") or []]
            shell = next((t for t in body.get("tools") or [] if str(t.get("name")).lower() in ("bash", "shell")), None)
            msgs = body["messages"]
            results = [b for m in msgs if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
            restored = any(b.get("tool_use_id", "").startswith("toolu_restore") for b in results)
            if shell is not None and len(results) < TURNS:
                content = [{"type": "text", "text": f"Step {len(results) + 1}."},
                           {"type": "tool_use", "id": f"toolu_{len(results)}", "name": shell["name"],
                            "input": _args(shell.get("input_schema") or {}, f"echo turn-{len(results)} && ls")}]
            elif "restore" in tools and not restored:
                content = [{"type": "tool_use", "id": "toolu_restore", "name": "restore", "input": {"steps": "1"}}]
            else:
                content = [{"type": "text", "text": "Done: I listed the files."}]
            self._note("messages", body, request, content)
            message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": content,
                       "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}
            if body.get("stream"):
                return StreamingResponse(_anthropic_sse(message), media_type="text/event-stream")
            return JSONResponse(message)

        @self.app.post("/v1/messages/count_tokens")
        async def count(request: Request) -> Response:
            body = await request.json()
            return JSONResponse({"input_tokens": len(json.dumps(body)) // 4})

        @self.app.post("/v1/responses")
        async def responses(request: Request) -> Response:
            body = await request.json()
            items = body.get("input") or []
            tools = {t.get("name"): t for t in body.get("tools") or [] if t.get("type") == "function"}
            shell = next((n for n in tools if n.lower() in ("bash", "shell", "shell_command", "exec_command")), None)
            outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
            restored = any(str(i.get("call_id", "")).startswith("call_restore") for i in outputs)
            if shell and len(outputs) < TURNS:
                call = _args(tools[shell].get("parameters") or {}, f"echo turn-{len(outputs)} && ls")
                output = [{"type": "function_call", "id": f"fc_{len(outputs)}", "call_id": f"call_{len(outputs)}",
                           "name": shell, "arguments": json.dumps(call), "status": "completed"}]
            elif "restore" in tools and not restored:
                output = [{"type": "function_call", "id": "fc_r", "call_id": "call_restore", "name": "restore",
                           "arguments": json.dumps({"steps": "1"}), "status": "completed"}]
            else:
                output = [{"type": "message", "id": "msg_f", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": "Done: I listed the files.", "annotations": []}]}]
            self._note("responses", body, request, output)
            resp = {"id": f"resp_{len(self.seen)}", "object": "response", "created_at": 1, "status": "completed",
                    "model": body.get("model"), "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                    "tools": [], "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                           "input_tokens_details": {"cached_tokens": 0},
                                           "output_tokens_details": {"reasoning_tokens": 0}}}
            if body.get("stream"):
                return StreamingResponse(_responses_sse(resp), media_type="text/event-stream")
            return JSONResponse(resp)

    def _note(self, api: str, body: dict[str, Any], request: Request, answer: list[dict[str, Any]]) -> None:
        system = body.get("system") or body.get("instructions") or ""
        text = system if isinstance(system, str) else "".join(b.get("text", "") for b in system)
        first = (body.get("input") or [{}])[0] if api == "responses" else {}
        if isinstance(first, dict) and first.get("role") in ("system", "developer"):  # Codex: a developer item
            c = first.get("content")
            text += c if isinstance(c, str) else "".join(p.get("text", "") for p in c or [])
        whole = json.dumps(body)
        billing = "none" if "x-anthropic-billing-header" not in whole else (
            "system" if "x-anthropic-billing-header" in json.dumps(body.get("system")) else "moved to the end")
        marks = json.dumps(body).count('"cache_control"')
        with self.lock:
            self.seen.append({
                "api": api, "path": request.url.path, "stream": bool(body.get("stream")),
                "tools": [t.get("name") or t.get("type") for t in body.get("tools") or []],
                "protocol": "[context-manager]" in text, "breakpoints": marks, "billing": billing,
                "chars": len(json.dumps(body)), "answer": [a.get("name") or a.get("type") for a in answer],
                "headers": sorted(k for k in request.headers if k.startswith(("anthropic-", "x-api-key", "authorization"))),
            })


def _args(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """A call of a harness's shell tool: the command, and a plain value for its other required fields."""
    props = schema.get("properties") or {}
    key = "cmd" if "cmd" in props and "command" not in props else "command"
    out: dict[str, Any] = {key: ["bash", "-lc", command] if (props.get(key) or {}).get("type") == "array" else command}
    for name in schema.get("required") or []:
        if name in out:
            continue
        p = props.get(name) or {}
        out[name] = p["enum"][0] if p.get("enum") else {"boolean": False, "integer": 30, "number": 30}.get(p.get("type"), "list files")
    return out


def _responses_sse(resp: dict[str, Any]) -> Iterator[str]:
    seq = 0

    def ev(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **data})}\n\n"

    yield ev("response.created", response={**resp, "status": "in_progress", "output": []})
    for i, item in enumerate(resp["output"]):
        yield ev("response.output_item.added", output_index=i, item=item)
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield ev("response.output_text.delta", item_id=item["id"], output_index=i, content_index=0, delta=text, logprobs=[])
        yield ev("response.output_item.done", output_index=i, item=item)
    yield ev("response.completed", response=resp)


def run(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[int, str]:
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    return p.returncode, (p.stdout + p.stderr).strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claude")
    ap.add_argument("--codex")
    ap.add_argument("--copilot")
    args = ap.parse_args()
    ups = Upstreams()
    work = tempfile.mkdtemp(prefix="refold-harness-")
    Path(work, "a.py").write_text("x = 1\n")
    Path(work, "b.py").write_text("y = 2\n")
    with ServerThread(ups.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(Path(work, ".sessions.db")), tokenizer="off")
        with ServerThread(create_app(cfg)) as px:
            base_env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "OPENAI", "CLAUDE"))}
            if args.claude:
                home = tempfile.mkdtemp(prefix="claude-home-")
                env = {**base_env, "HOME": home, "ANTHROPIC_BASE_URL": px.url, "ANTHROPIC_API_KEY": "sk-ant-test",
                       "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
                start = len(ups.seen)
                code, out = run([args.claude, "-p", "List the files here.", "--allowedTools", "Bash",
                                 "--model", "claude-sonnet-4-5", "--output-format", "text"], env, work)
                version = run([args.claude, "--version"], env, work)[1]
                report(f"Claude Code {version}", code, out, ups.seen[start:])
            if args.codex:
                home = tempfile.mkdtemp(prefix="codex-home-")
                Path(home, "config.toml").write_text(
                    'model = "gpt-test"\nmodel_provider = "refold"\n\n[model_providers.refold]\nname = "refold"\n'
                    f'base_url = "{px.url}/v1"\nwire_api = "responses"\nenv_key = "REFOLD_KEY"\n'
                )
                env = {**base_env, "CODEX_HOME": home, "REFOLD_KEY": "sk-test", "HOME": home}
                start = len(ups.seen)
                code, out = run([args.codex, "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                                 "List the files here."], env, work)
                version = run([args.codex, "--version"], env, work)[1]
                report(version, code, out, ups.seen[start:])
            if args.copilot:
                for kind, url, extra in (("anthropic", px.url, {}),
                                         ("openai", f"{px.url}/v1", {"COPILOT_PROVIDER_WIRE_API": "responses"})):
                    home = tempfile.mkdtemp(prefix="copilot-home-")
                    env = {**base_env, "HOME": home, "COPILOT_PROVIDER_BASE_URL": url, "COPILOT_PROVIDER_TYPE": kind,
                           "COPILOT_PROVIDER_API_KEY": "sk-test", "COPILOT_MODEL": "claude-sonnet-4.5" if kind == "anthropic" else "gpt-5.4",
                           **extra}
                    start = len(ups.seen)
                    code, out = run([args.copilot, "-p", "List the files here.", "--allow-all-tools"], env, work)
                    version = run([args.copilot, "--version"], env, work)[1].splitlines()[0]
                    report(f"{version} BYOK type={kind}{' wire=responses' if extra else ''}", code, out, ups.seen[start:])


def report(name: str, code: int, out: str, seen: list[dict[str, Any]]) -> None:
    print(f"== {name}: exit {code}, {len(seen)} upstream calls")
    for s in seen:
        tools = s["tools"]
        shown = ", ".join(tools[:4]) + (f", ... ({len(tools)} tools)" if len(tools) > 4 else "")
        print(f"  {s['api']:<9} stream={s['stream']!s:<5} protocol={s['protocol']!s:<5} breakpoints={s['breakpoints']} "
              f"billing-line={s['billing']} chars={s['chars']:>7,} answered={s['answer']} tools=[{shown}] "
              f"{'restore offered' if 'restore' in tools else ''}")
    tail = out.splitlines()[-6:]
    print("  harness printed (last lines):")
    for line in tail:
        print(f"    {line[:160]}")


if __name__ == "__main__":
    main()
