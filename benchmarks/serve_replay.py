"""Does ``refold replay`` of a Claude Code log / Codex rollout measure what ``refold serve`` sends?

``requests(path)`` rebuilds, from the log's own lines (not from the loader's History), the API
requests the harness made: call k's request is every message of the live conversation before the
k-th reply, in the wire shape the harness sends (Anthropic Messages for Claude Code: replies with
their thinking/text/tool_use blocks as recorded, consecutive user lines merged into one message,
as Claude Code merges them; OpenAI Responses for Codex: the rollout's ``response_item`` payloads,
cut where a ``thread_rolled_back`` drops turns, as Codex cuts its history),
with a stand-in system prompt and tool schemas. ``through_proxy`` drives them through the real
proxy app against an upstream that answers each call with the log's recorded reply and keeps what
it received; ``compare`` sets that, call by call, beside what
``iter_prompts(load(path), "default")`` renders, after reading both into one neutral form
(role, text, tool calls, tool_call_id per message).

Settings so both should agree: the cache profile ``refold serve`` picks from its upstream
(``anthropic`` for ``/v1/messages``, ``openai`` for ``/v1/responses``) is given to the replay too,
and the proxy renders with replay's ``default`` policy's ``reminders=False``. The proxy's system
message is compared with the stand-in removed (replay has no system prompt: the log holds none).
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request

from refold.config import Config
from refold.formats import claude_code as cc
from refold.formats.claude_code_blocks import unix_time
from refold.formats.claude_code_tree import is_call, live_lines, read_log, response_key
from refold.formats.codex import part_names
from refold.formats.codex_items import is_context
from refold.json_file import read_json
from refold.lab.replay.runner import iter_prompts
from refold.loaders import load
from refold.proxy import ProxyConfig, create_app
from refold.proxy import sessions as sessions_module
from refold.proxy.anthropic_wire import parse as parse_messages
from refold.proxy.responses_wire import parse as parse_responses
from refold.shell_tools import canonical_call
from refold.tokens import get_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fake_upstream import ServerThread  # noqa: E402

SYSTEM = "You are a coding agent (stand-in system prompt)."
INPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output"})
SKIPPED = frozenset({"ghost_snapshot"})


@dataclass
class Calls:
    """A log's calls: ``surface`` (``messages``/``responses``), each request body and recorded reply."""

    surface: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)
    """When each call was made, as recorded (the last line before it)."""
    dropped: set[int] = field(default_factory=set)
    """Calls made in turns a Codex rollback dropped: sent, but no step of the context replay renders."""


# ---- the harness's requests, from the log's lines ------------------------------------------------


def _schema(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"{name} (stand-in)", "input_schema": {"type": "object", "properties": {}}}


def claude_calls(path: Path, session: str | None = None) -> Calls:
    """One session's calls (the only one when None) as Messages requests; which lines make the
    live conversation is the loader's choice (what is compared here is how they are read)."""
    log = read_log(read_json(path), str(path))
    tree = log.trees[cc._names(log).index(session)] if session else log.trees[0]
    lines = live_lines(log, tree)
    wire: list[dict[str, Any]] = []
    replies: list[int] = []  # where each reply is in wire
    where: dict[str, int] = {}
    names: set[str] = set()
    stamps: list[float | None] = []  # per wire message: its last line's time
    for i in lines:
        item = log.items[i]
        at = unix_time(item.get("timestamp"))
        content = item["message"].get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if item.get("type") == "assistant":
            if not is_call(item):
                continue  # synthetic notices were no call; Claude Code drops them from requests
            names |= {b["name"] for b in blocks if b.get("type") == "tool_use"}
            k = response_key(item)
            if k in where:
                wire[where[k]]["content"] += blocks
                continue
            where[k] = len(wire)
            replies.append(len(wire))
            wire.append({"role": "assistant", "content": blocks})
            stamps.append(at)
        elif wire and wire[-1]["role"] == "user":
            wire[-1]["content"] += blocks  # consecutive user lines are one API message
            stamps[-1] = at or stamps[-1]
        else:
            wire.append({"role": "user", "content": blocks})
            stamps.append(at)
    tools = [_schema(n) for n in sorted(names)]
    out = Calls("messages")
    for at in replies:
        if at == 0:
            continue  # a reply with no request before it: nothing to send
        out.bodies.append({"model": "claude-stand-in", "max_tokens": 4096, "system": [{"type": "text", "text": SYSTEM}],
                           "messages": wire[:at], "tools": tools})  # fmt: skip
        out.replies.append(wire[at]["content"])
        out.times.append(stamps[at - 1])
    return out


def codex_calls(path: Path, part: int = 1) -> Calls:
    """One context's calls as Responses requests (``part`` N: after the (N-1)-th compaction, its
    input starting from the compaction's ``replacement_history`` as Codex sends it): each response
    is a run of output items (reasoning, messages, calls) between inputs. A rollback
    (``thread_rolled_back``) cuts the input of later calls; the calls made in the turns it dropped
    are sent too (``Calls.dropped``)."""
    rows = read_json(path)
    rows = rows if isinstance(rows, list) else [rows]
    instructions = SYSTEM
    items: list[dict[str, Any]] = []
    every: list[dict[str, Any]] = []  # each item ever sent: the stand-in tools name every tool called
    stamps: list[float | None] = []
    starts: list[int] = []
    out = Calls("responses")
    made: list[int] = []  # per call sent so far: where its reply starts in ``items`` (-1: dropped)

    def send() -> None:  # every call so far, in order (a rollback or the file's end ends the last reply)
        for at in starts[len(made) :]:
            end = next((j for j in range(at, len(items)) if _is_input(items[j])), len(items))
            made.append(at)
            if at:
                out.bodies.append({"model": "gpt-stand-in", "instructions": instructions, "input": items[:at], "store": False})
                out.replies.append(items[at:end])
                out.times.append(stamps[at - 1])

    seen = 1
    for r in rows:
        if not isinstance(r, dict):
            continue
        kind, payload = r.get("type"), r.get("payload")
        if kind == "compacted":
            seen += 1
            if seen > part:
                break
            history = payload.get("replacement_history") if isinstance(payload, dict) else None
            kept = [copy.deepcopy(i) for i in history if isinstance(i, dict)] if isinstance(history, list) else []
            items, stamps, starts, made, out = kept, [unix_time(r.get("timestamp"))] * len(kept), [], [], Calls("responses")
            continue
        if kind == "session_meta" and isinstance(payload, dict):
            base = payload.get("base_instructions")
            if isinstance(base, dict) and isinstance(base.get("text"), str):
                instructions = base["text"]
        if kind == "event_msg" and isinstance(payload, dict) and payload.get("type") == "thread_rolled_back":
            cut = _rollback_cut(items, payload.get("num_turns"))
            if cut is not None:
                send()
                n = sum(1 for at in made if at)  # calls sent; those in the dropped turns are no step of this context
                out.dropped |= {n - k for k, at in enumerate(reversed([at for at in made if at]), 1) if at >= cut}
                del items[cut:], stamps[cut:]
                starts = [at for at in starts if at < cut]
                made = [at for at in made if at < cut]
            continue
        if kind != "response_item" or not isinstance(payload, dict) or payload.get("type") in SKIPPED:
            continue
        is_input = payload.get("type") in INPUTS or (payload.get("type") == "message" and payload.get("role") != "assistant")
        if not is_input and (not items or _is_input(items[-1])):
            starts.append(len(items))
        items.append(payload)
        every.append(payload)
        stamps.append(unix_time(r.get("timestamp")))
    send()
    tools = _tools(every)
    for body in out.bodies:
        body["tools"] = tools
    return out


def _tools(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {str(i.get("name")) for i in items if i.get("type") == "function_call"}
    tools: list[dict[str, Any]] = [{"type": "function", "name": n, "description": "stand-in", "parameters": {"type": "object", "properties": {}}} for n in sorted(names)]
    if any(i.get("type") == "custom_tool_call" for i in items):
        tools.append({"type": "custom", "name": "apply_patch", "description": "stand-in"})
    return tools


def _rollback_cut(items: list[dict[str, Any]], turns: Any) -> int | None:
    """Where Codex cuts its history for ``thread_rolled_back``: at the ``turns``-th last user turn
    (at most the first), then back over the context updates just before it."""
    users = [i for i, x in enumerate(items) if x.get("type") == "message" and x.get("role") == "user" and not is_context(x)]
    if not isinstance(turns, int) or turns <= 0 or not users:
        return None
    cut = users[0] if turns >= len(users) else users[-turns]
    while cut > users[0] and items[cut - 1].get("type") == "message" and (
        items[cut - 1].get("role") == "developer" or (items[cut - 1].get("role") == "user" and is_context(items[cut - 1]))
    ):
        cut -= 1
    return cut


def _is_input(item: dict[str, Any]) -> bool:
    return item.get("type") in INPUTS or (item.get("type") == "message" and item.get("role") != "assistant")


def sessions(path: Path) -> list[tuple[str, Calls]]:
    """``(source for load, its calls)`` per session: every Claude Code session, every context of a
    rollout (one per compaction)."""
    data = read_json(path)
    if cc.is_claude_code(data):
        names = cc.session_names(data)
        return [(f"{path}#{n}", claude_calls(path, n)) for n in names] if names else [(str(path), claude_calls(path))]
    parts = part_names(data)
    return [(f"{path}#{name}", codex_calls(path, n)) for n, name in enumerate(parts, 1)] if parts else [(str(path), codex_calls(path))]


# ---- through the proxy ---------------------------------------------------------------------------


def _upstream(calls: Calls, received: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()
    lock = threading.Lock()

    def next_reply(body: dict[str, Any]) -> Any:
        with lock:
            received.append(body)
            n = len(received) - 1
        return calls.replies[n] if n < len(calls.replies) else []

    @app.post("/v1/messages")
    async def messages(request: Request) -> dict[str, Any]:
        content = next_reply(await request.json())
        return {"id": "msg_x", "type": "message", "role": "assistant", "model": "m", "content": content,
                "stop_reason": "end_turn", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip

    @app.post("/v1/responses")
    async def responses(request: Request) -> dict[str, Any]:
        output = next_reply(await request.json())
        return {"id": "resp_x", "object": "response", "status": "completed", "model": "m", "output": output,
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}  # fmt: skip

    return app


def serve_config(surface: str) -> Config:
    """``refold serve``'s defaults for this surface's upstream, with replay's reminders=False."""
    return Config.parse(cache=cache_of(surface), policy={"reminders": False})


def cache_of(surface: str) -> str:
    return "anthropic" if surface == "messages" else "openai"


class _Clock:
    """``time`` for the proxy's sessions module: ``time()`` is the recorded time of the call being
    made (the proxy stamps each step with it; idle gaps past the cache's TTL change where the
    boundary moves, and replay reads them from the log), the rest is the real module."""

    def __init__(self) -> None:
        self.now: float | None = None

    def time(self) -> float:
        return self.now if self.now is not None else time.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


@contextmanager
def recorded_clock() -> Iterator[_Clock]:
    clock = _Clock()
    names = vars(sessions_module)
    saved = names["time"]
    names["time"] = clock
    try:
        yield clock
    finally:
        names["time"] = saved


def through_proxy(calls: Calls, store: str) -> tuple[list[dict[str, Any]], list[str]]:
    """What the upstream received per call, and any call the proxy refused (status: text)."""
    received: list[dict[str, Any]] = []
    errors: list[str] = []
    with ServerThread(_upstream(calls, received)) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=store, tokenizer="off", config=serve_config(calls.surface))
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01", "authorization": "Bearer k"}
        with ServerThread(create_app(cfg)) as px, httpx.Client(base_url=px.url, timeout=120) as client, recorded_clock() as clock:
            for n, body in enumerate(calls.bodies):
                clock.now = calls.times[n]
                before = len(received)
                r = client.post(f"/v1/{calls.surface}", json=body, headers=headers)
                if r.status_code != 200:
                    errors.append(f"call {n + 1}: {r.status_code} {r.text[:200]}")
                if len(received) == before:
                    received.append({})  # keeps calls aligned: nothing reached the upstream
    return received, errors


# ---- the neutral form ------------------------------------------------------------------------------


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else json.dumps(content)


def _args(raw: Any) -> Any:
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def _call(f: dict[str, Any]) -> tuple[str, str]:
    """A call as the session records it: both sides' shell calls as ``bash {"command"}`` (the
    proxy's reading drops Claude Code's ``description``; it still sends the native block)."""
    name, args = canonical_call(str(f["name"]), str(f.get("arguments") or "{}"))
    return name, json.dumps(_args(args), sort_keys=True)


def neutral(messages: list[dict[str, Any]], system_prefix: str = "") -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for m in messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role == "system":
            text = text.removeprefix(system_prefix).lstrip("\n")
            if not text:
                continue
        calls = tuple(_call(c["function"]) for c in m.get("tool_calls") or [])
        if role == "user" and out and out[-1][0] == "user":
            out[-1] = ("user", out[-1][1] + text, (), None)  # the Messages API joins consecutive user turns
            continue
        out.append((role, text, calls, m.get("tool_call_id")))
    return out


def upstream_messages(surface: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    if not body:
        return []
    return (parse_messages(body) if surface == "messages" else parse_responses(body)).messages


@dataclass
class Result:
    compared: int = 0
    equal: int = 0
    reordered: int = 0
    """Calls equal but for the order of one reply's tool results (see ``by_call``)."""
    sizes: list[int] = field(default_factory=lambda: [0, 0])
    """Tokens (qwen3.6, text and calls) of the calls that differ: as served, as replayed."""
    skipped: str = ""
    first: dict[str, str] = field(default_factory=dict)
    """Kind of difference -> its first occurrence (call, what)."""


def by_call(messages: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Each run of tool results sorted by call id: the loader puts a reply's results in call order,
    the log in the order they were written (which one Claude Code sent is not in the log)."""
    out: list[tuple[Any, ...]] = []
    run: list[tuple[Any, ...]] = []
    for m in [*messages, ("end", "", (), None)]:
        if m[0] == "tool":
            run.append(m)
            continue
        out += sorted(run, key=lambda r: str(r[3]))
        run = []
        out.append(m)
    return out


def kind_of(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> str:
    if a is None or b is None:
        return "message count"
    if a[0] != b[0]:
        return f"role {a[0]} vs {b[0]}"
    if a[2] != b[2]:
        return f"{a[0]} tool calls"
    if a[3] != b[3]:
        return "tool_call_id"
    return f"{a[0]} text"


def compare(source: str, calls: Calls, store: str) -> Result:
    res = Result()
    h = load(source)
    prompts = list(iter_prompts(h, "default", cache=cache_of(calls.surface)))
    live = len(calls.bodies) - len(calls.dropped)
    if len(prompts) - live not in (0, 1):
        res.skipped = f"replay has {len(prompts)} calls, the log's requests {live}"
        return res
    offset = len(prompts) - live  # a reply at the log's very start has no request
    received, errors = through_proxy(calls, store)
    for e in errors:
        res.first.setdefault("proxy refused a call", e)
    step = offset - 1
    for n, body in enumerate(received):
        if n in calls.dropped:
            continue  # made in turns a rollback dropped: no step of the context replay renders
        step += 1
        sent = neutral(upstream_messages(calls.surface, body), SYSTEM)
        replayed = neutral(prompts[step].messages)
        res.compared += 1
        if sent == replayed:
            res.equal += 1
            continue
        if by_call(sent) == by_call(replayed):
            res.reordered += 1
            res.first.setdefault("tool result order", f"call {n + 1}")
            continue
        j = next(j for j in range(max(len(sent), len(replayed))) if (sent[j] if j < len(sent) else None) != (replayed[j] if j < len(replayed) else None))
        a = sent[j] if j < len(sent) else None
        b = replayed[j] if j < len(replayed) else None
        tok = get_tokenizer("qwen3.6")
        for k, side in enumerate((sent, replayed)):
            res.sizes[k] += sum(len(tok.encode(m[1] + json.dumps(m[2]))) for m in side)
        kind = kind_of(a, b)
        if kind not in res.first:
            res.first[kind] = f"call {n + 1}, message {j}: serve {_short(a)} | replay {_short(b)}"
    return res


def _short(m: tuple[Any, ...] | None) -> str:
    """A message's shape only (role, size, call names): no text of the log goes into a report."""
    if m is None:
        return "(none)"
    return json.dumps([m[0], f"{len(m[1])} chars", [c[0] for c in m[2]]])
