"""Recorded runs replayed through ``refold serve`` (default flags) on each API surface.

    python benchmarks/bench_surfaces.py RUN_OR_FOLDER... [--out benchmarks/results/surfaces.txt]

Each run (any format ``refold.loaders`` reads) becomes a tool-calling client three ways: chat
completions (a ``bash`` function tool), Anthropic Messages (a ``Bash`` tool, ``tool_use`` /
``tool_result`` blocks) and OpenAI Responses (``function_call`` / ``function_call_output`` items).
Before call t+1 the client sends the history up to step t; a loopback upstream answers with the
reply recorded for that call. Reported per run and surface: tokens the client sent (the plain
history) and tokens the upstream received, in Qwen3.6 tokens summed per message (each message's
JSON counted once and memoized; tools counted per request), and whether every answer reached the
client unchanged. Only derived figures are printed (no trajectory text).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from refold.history import History  # noqa: E402
from refold.loaders import load_all  # noqa: E402
from refold.proxy import ProxyConfig, create_app  # noqa: E402
from refold.tokens import get_tokenizer  # noqa: E402

from fake_upstream import ServerThread  # noqa: E402

TOK = get_tokenizer("qwen3.6")
CHAT_TOOL = {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
BASH = {"name": "Bash", "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
SHELL = {"type": "function", "name": "shell", "description": "Run a shell command.",
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@lru_cache(maxsize=200_000)
def _count(text: str) -> int:
    return len(TOK.encode(text))


def tokens(parts: list[Any]) -> int:
    return sum(_count(json.dumps(p, ensure_ascii=False, sort_keys=True)) for p in parts)


def _steps(h: History) -> list[tuple[int, str, str, list[str]]]:
    out = []
    for s in h.steps:
        text = s.reply_text.split("```")[0].strip() or "Next."
        command = s.actions[0].command if s.actions else "true"
        outputs = [str(o.get("content") if isinstance(o.get("content"), str) else json.dumps(o.get("content"))) for o in s.observations]
        out.append((s.index, text, command, outputs[:1] or [""]))
    return out


def chat_form(h: History) -> tuple[list[dict[str, Any]], list[int]]:
    msgs: list[dict[str, Any]] = [{"role": m["role"], "content": m.get("content") or ""} for m in h.prefix]
    starts = []
    for i, text, command, outputs in _steps(h):
        starts.append(len(msgs))
        msgs.append({"role": "assistant", "content": text, "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
        msgs += [{"role": "tool", "tool_call_id": f"call_{i}", "content": o} for o in outputs]
    return msgs, starts


def anthropic_form(h: History) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    system = [{"type": "text", "text": str(m.get("content"))} for m in h.prefix if m["role"] == "system"]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": str(m.get("content"))} for m in h.prefix if m["role"] == "user"]
    starts = []
    for i, text, command, outputs in _steps(h):
        starts.append(len(msgs))
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": text},
                     {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": command}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": o} for o in outputs]})
    return system, msgs, starts


def responses_form(h: History) -> tuple[str, list[dict[str, Any]], list[int]]:
    instructions = "".join(str(m.get("content")) for m in h.prefix if m["role"] == "system")
    items: list[dict[str, Any]] = [{"role": "user", "content": str(m.get("content"))} for m in h.prefix if m["role"] == "user"]
    starts = []
    for i, text, command, outputs in _steps(h):
        starts.append(len(items))
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]})
        items.append({"type": "function_call", "call_id": f"call_{i}", "name": "shell", "arguments": json.dumps({"command": command})})
        items += [{"type": "function_call_output", "call_id": f"call_{i}", "output": o} for o in outputs]
    return instructions, items, starts


class Recorded:
    """Answers each request with the reply registered under its ``x-replay`` header."""

    def __init__(self) -> None:
        self.replies: dict[str, Any] = {}
        self.received: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request) -> dict[str, Any]:
            key, _ = await self._take(request)
            return {"id": "x", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": self.replies[key], "finish_reason": "tool_calls"}]}

        @self.app.post("/v1/messages")
        async def messages(request: Request) -> dict[str, Any]:
            key, _ = await self._take(request)
            return {"id": "msg", "type": "message", "role": "assistant", "model": "m", "content": self.replies[key],
                    "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}

        @self.app.post("/v1/responses")
        async def responses(request: Request) -> dict[str, Any]:
            key, _ = await self._take(request)
            return {"id": f"resp_{key}", "object": "response", "status": "completed", "model": "m",
                    "output": self.replies[key], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}

    async def _take(self, request: Request) -> tuple[str, dict[str, Any]]:
        body = await request.json()
        key = request.headers["x-replay"]
        with self.lock:
            self.received[key] = body
        return key, body


def replay(run: Path, h: History, up: Recorded, client: httpx.Client, n: int) -> dict[str, tuple[int, int, int, int]]:
    """surface -> (calls, plain tokens, sent tokens, answers that did not come back unchanged)."""
    out: dict[str, tuple[int, int, int, int]] = {}
    headers = {"authorization": f"Bearer run-{n}", "x-api-key": f"run-{n}"}
    msgs, starts = chat_form(h)
    plain = sent = bad = 0
    for j, at in enumerate(starts):
        key = f"{n}-chat-{j}"
        up.replies[key] = msgs[at]
        r = client.post("/v1/chat/completions", json={"model": "m", "messages": msgs[:at], "tools": [CHAT_TOOL]}, headers={**headers, "x-replay": key})
        bad += int(r.status_code != 200 or r.json()["choices"][0]["message"].get("tool_calls") != msgs[at]["tool_calls"])
        plain += tokens([*msgs[:at], CHAT_TOOL])
        sent += tokens([*up.received[key]["messages"], *up.received[key].get("tools", [])])
    out["chat"] = (len(starts), plain, sent, bad)
    system, amsgs, starts = anthropic_form(h)
    plain = sent = bad = 0
    for j, at in enumerate(starts):
        key = f"{n}-messages-{j}"
        up.replies[key] = amsgs[at]["content"]
        body = {"model": "m", "max_tokens": 4096, "system": system, "messages": amsgs[:at], "tools": [BASH]}
        r = client.post("/v1/messages", json=body, headers={**headers, "x-replay": key})
        bad += int(r.status_code != 200 or r.json()["content"] != amsgs[at]["content"])
        got = up.received[key]
        plain += tokens([*system, *amsgs[:at], BASH])
        sent += tokens([*got.get("system", []), *got["messages"], *got.get("tools", [])])
    out["messages"] = (len(starts), plain, sent, bad)
    instructions, items, starts = responses_form(h)
    plain = sent = bad = 0
    for j, at in enumerate(starts):
        key = f"{n}-responses-{j}"
        up.replies[key] = items[at : at + 2]
        body = {"model": "m", "instructions": instructions, "input": items[:at], "tools": [SHELL], "store": False}
        r = client.post("/v1/responses", json=body, headers={**headers, "x-replay": key})
        bad += int(r.status_code != 200 or r.json()["output"] != items[at : at + 2])
        got = up.received[key]
        plain += tokens([instructions, *items[:at], SHELL])
        sent += tokens([got.get("instructions", ""), *got["input"], *got.get("tools", [])])
    out["responses"] = (len(starts), plain, sent, bad)
    return out


def files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*") if f.is_file() and (".traj" in f.name))
        else:
            found.append(p)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out")
    args = ap.parse_args()
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    totals: dict[str, list[int]] = {k: [0, 0, 0, 0] for k in ("chat", "messages", "responses")}
    up = Recorded()
    repaired = 0.0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ServerThread(up.app) as u:
        cfg = ProxyConfig(upstream=f"{u.url}/v1", store=str(Path(tmp) / "s.db"), tokenizer="off")
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=120) as client:
            say(f"{'run':<52} {'calls':>5}  {'chat':>7} {'messages':>9} {'responses':>10}   (tokens sent / plain history)")
            n = 0
            for run in files(args.paths):
                try:
                    sessions = load_all(run)  # a multi-agent file: each agent is its own session
                except Exception as e:  # noqa: BLE001 - one unreadable run is reported, not fatal
                    say(f"{run.name[:52]:<52} unreadable: {type(e).__name__}")
                    continue
                for h in sessions:
                    n += 1
                    if len(h) < 2:
                        continue
                    got = replay(run, h, up, client, n)
                    for k, v in got.items():
                        totals[k] = [a + b for a, b in zip(totals[k], v, strict=True)]
                    ratios = "  ".join(f"{got[k][2] / got[k][1]:>8.3f}x" for k in ("chat", "messages", "responses"))
                    badness = sum(v[3] for v in got.values())
                    agent = h.source.rsplit("#", 1)[1] if "#" in h.source else ""
                    label = f"{run.parent.name}/{run.name[:36]}" + (f"#{agent}" if agent else "")
                    say(f"{label[:52]:<52} {got['chat'][0]:>5}  {ratios}" + (f"  ({badness} answers changed!)" if badness else ""))
            metrics = client.get("/metrics", headers={"authorization": "Bearer x"}).text
            repaired = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                           if line.startswith("refold_orphan_blocks_repaired_total"))
    say("")
    for k, (calls, plain, sent, bad) in totals.items():
        say(f"{k:<10} {calls:>5} calls  plain {plain:>12,}  sent {sent:>12,}  {sent / max(plain, 1):.3f}x  answers changed: {bad}")
    say(f"Anthropic blocks the orphan repair had to change: {repaired:g}")
    say(f"({time.perf_counter() - t0:.0f} s)")
    if args.out:
        Path(args.out).write_text("# bench_surfaces.py " + " ".join(args.paths) + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
