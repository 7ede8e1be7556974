"""``POST /v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API through refold.

In front of Anthropic or any Messages-compatible server (vLLM, LiteLLM, llama.cpp) at the same
``--upstream`` base URL (``https://api.anthropic.com/v1``). ``anthropic-version``,
``anthropic-beta`` and the client's ``x-api-key`` (or OAuth bearer) are forwarded; with
``--upstream-key`` that key is sent as ``x-api-key`` instead. With ``--token`` the proxy token may
come as ``x-api-key`` (what Claude Code's ``ANTHROPIC_API_KEY`` sends) or as a bearer; it is never
forwarded. Errors are in Anthropic's shape (``{"type": "error", "error": {...}}``); an upstream
error is returned as the upstream sent it.

Passed through untouched (not recorded, not rendered): a harness's own compaction request
(``passthrough.COMPACTION``) and any request with ``X-Refold-Passthrough: 1``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi.responses import JSONResponse, Response

from ..context.recognize import Recognizer
from ..errors import ProxyError
from ..history import History
from ..types import Message, Rendered
from . import anthropic_build
from . import anthropic_wire as wire
from .config import ProxyConfig
from .mapping import split
from .metrics import Metrics
from .sessions import owner_of
from .spliced import SplicedRound, unsent
from .sse import Event, parse_json, sse
from .surface import Parsed, SurfaceService, as_dict
from .upstream import informative
from .usage import add

_HOP = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}


class AnthropicAdapter:
    key = wire.KEY
    path = "/messages"

    def __init__(self, cfg: ProxyConfig, metrics: Metrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.first_party = (urlsplit(cfg.upstream).hostname or "").endswith("anthropic.com")
        self.proxy_token: str | None = None

    def parse(self, body: dict[str, Any]) -> Parsed:
        return wire.parse(body)

    def build(
        self,
        body: dict[str, Any],
        parsed: Parsed,
        rendered: Rendered,
        history: History,
        tail: Message | None,
        added: list[dict[str, Any]],
    ) -> dict[str, Any]:
        out, fixes = anthropic_build.build(body, parsed, rendered, history, tail, added, first_party=self.first_party)
        self.metrics.inc("refold_orphan_blocks_repaired_total", fixes, surface=self.key)
        return out

    def reply(self, data: Any) -> Message | None:
        return wire.reply(data)

    def check(self, data: Any) -> Any:
        return wire.check_reply(data)

    def aggregate(self, events: Sequence[Event]) -> Any:
        return wire.aggregate([(e.name, parse_json(e.data)) for e in events])

    def without(self, data: Any, ids: Sequence[str]) -> Any:
        content = [b for b in data["content"] if not (isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") in ids)]
        out = {**data, "content": content}
        if out.get("stop_reason") == "tool_use" and not any(b.get("type") == "tool_use" for b in content if isinstance(b, dict)):
            out["stop_reason"] = "end_turn"  # no call is left for the client to run
        return out

    def headers(self, client_key: str | None, headers: Mapping[str, str]) -> dict[str, str]:
        return upstream_headers(self.cfg, headers)

    def error(self, exc: ProxyError) -> tuple[int, dict[str, Any]]:
        return exc.status, wire.error_body(exc.status, exc.message)

    def own_error(self, data: Any) -> bool:
        return isinstance(data, dict) and data.get("type") == "error" and isinstance(data.get("error"), dict)

    def stream_error(self, message: str) -> bytes:
        return f"event: error\ndata: {json.dumps(wire.error_body(502, message))}\n\n".encode()

    def closing(self, ev: Event) -> bool:
        return False

    def splicer(self, rec: Recognizer) -> AnthropicSplicer:
        return AnthropicSplicer(rec)

    async def done(self, parsed: Parsed, data: Any) -> None:
        return None


_BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")


class AnthropicSplicer(SplicedRound):
    """The rounds of one streamed request as one Anthropic message: one ``message_start``, the
    content blocks of every round numbered on from the blocks already sent, and the final round's
    ``message_delta``/``message_stop``. A round is held from its first ``tool_use`` block until
    that call is decided (all of it, when the agent has no tools: its command is in its text)."""

    def __init__(self, rec: Recognizer) -> None:
        super().__init__(rec)
        self._started = False
        self._offset = 0  # the client's index of this round's first block
        self._count = 0
        self._open: dict[int, str] = {}  # the client's index of a block still open -> its type
        self._calls = 0  # tool_use blocks of this round sent
        self._text: list[str] = []
        self._usage: dict[str, Any] = {}  # this round's message_start usage

    def begin(self, final: bool) -> None:
        super().begin(final)
        self._count, self._map, self._text, self._calls = 0, {}, [], 0

    def step(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        kind = data.get("type")
        block = as_dict(data.get("content_block"))
        if not self.holding and kind == "content_block_start" and block.get("type") == "tool_use":
            self.hold_call(data.get("index", -1), str(block.get("name") or ""))
            self.hold(ev, data)
            return self.verdict()
        if self.holding or self.ends_round(data):
            self.hold(ev, data)
            delta = as_dict(data.get("delta"))
            if kind == "content_block_delta" and data.get("index") == self.call and delta.get("type") == "input_json_delta":
                self.call_args += str(delta.get("partial_json", ""))
                return self.verdict()
            return []
        return self.emit(ev, data)

    def call_start(self, data: dict[str, Any]) -> tuple[int, str, str] | None:
        block = as_dict(data.get("content_block"))
        if data.get("type") != "content_block_start" or block.get("type") != "tool_use":
            return None
        return int(data.get("index", -1)), str(block.get("name") or ""), str(block.get("id") or "")

    def call_delta(self, data: dict[str, Any]) -> tuple[int, str] | None:
        delta = as_dict(data.get("delta"))
        if data.get("type") != "content_block_delta" or delta.get("type") != "input_json_delta":
            return None
        return int(data.get("index", -1)), str(delta.get("partial_json", ""))

    def call_end(self, data: dict[str, Any]) -> int | None:
        return int(data["index"]) if data.get("type") == "content_block_stop" and isinstance(data.get("index"), int) else None

    def with_piece(self, data: dict[str, Any], piece: str) -> dict[str, Any]:
        return {**data, "delta": {**as_dict(data.get("delta")), "partial_json": piece}}

    def with_args(self, data: dict[str, Any], index: int, args: str) -> dict[str, Any] | None:
        return None  # no Messages event repeats a call's whole input

    def fixed(self, data: Any) -> Any:
        g, i = self.guard, self.call
        content = data.get("content") if isinstance(data, dict) else None
        if g is None or g.shown is None or i is None or not isinstance(content, list) or not 0 <= i < len(content):
            return data
        block = content[i]
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            return data
        try:
            sent = json.loads(g.shown)
        except ValueError:
            return data
        return {**data, "content": [*content[:i], {**block, "input": sent}, *content[i + 1 :]]}

    def text_of(self, data: dict[str, Any]) -> str | None:
        delta = as_dict(data.get("delta"))
        if data.get("type") == "content_block_delta" and delta.get("type") == "text_delta":
            return str(delta.get("text", ""))
        return None

    def ends_round(self, data: dict[str, Any]) -> bool:
        return data.get("type") in ("message_delta", "message_stop")

    def emit(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        kind = data.get("type")
        if kind == "message_start":
            self._usage = as_dict(as_dict(data.get("message")).get("usage"))
            if self._started:
                return []  # the answer's message is open already
            self._started = True
            return [ev.raw]
        if kind == "message_delta":
            changed: dict[str, Any] = {}
            if as_dict(data.get("delta")).get("stop_reason") == "tool_use" and not self._calls:
                changed["delta"] = {**data["delta"], "stop_reason": "end_turn"}  # no call left to run
            if self.prior_usage is not None:  # its counts are the whole answer's (Anthropic's are cumulative)
                changed["usage"] = add(self.prior_usage, {**self._usage, **as_dict(data.get("usage"))})
            return [sse(ev.name, {**data, **changed})] if changed else [ev.raw]
        if kind not in _BLOCK_EVENTS or not isinstance(data.get("index"), int):
            return [ev.raw]
        i = data["index"]
        if i not in self._map:
            self._map[i] = self._offset + self._count
            self._count += 1
        c = self._map[i]
        if c is None:
            return []
        if kind == "content_block_start":
            self._open[c] = str(as_dict(data.get("content_block")).get("type"))
            self._calls += self._open[c] == "tool_use"
        elif kind == "content_block_stop":
            self._open.pop(c, None)
        delta = as_dict(data.get("delta"))
        if kind == "content_block_delta" and delta.get("type") == "text_delta":
            self._text.append(str(delta.get("text", "")))
        return [ev.raw] if c == i else [sse(ev.name, {**data, "index": c})]

    def finish(self, internal: bool, visible: str = "", context_ids: Collection[str] = ()) -> list[bytes]:
        if not internal:
            return self.flush() + self.settle(context_ids)
        # the round's held part is dropped but its text; a block it left open is closed for the client
        out = self._rest(visible)
        out += [sse("content_block_stop", {"type": "content_block_stop", "index": c}) for c in sorted(self._open)]
        self._open.clear()
        self._offset += self._count
        self.held = []
        return out

    def _rest(self, visible: str) -> list[bytes]:
        """The round's text the client was not sent, into its open text block (or a new one)."""
        rest = unsent(visible, self.shown())
        if not rest:
            return []
        out: list[bytes] = []
        texts = [c for c, kind in sorted(self._open.items()) if kind == "text"]
        if texts:
            c = texts[-1]
        else:
            c = self._offset + self._count
            self._count += 1
            self._open[c] = "text"
            out.append(sse("content_block_start", {"type": "content_block_start", "index": c,
                                                   "content_block": {"type": "text", "text": ""}}))
        self._text.append(rest)
        out.append(sse("content_block_delta", {"type": "content_block_delta", "index": c,
                                               "delta": {"type": "text_delta", "text": rest}}))
        return out

    def shown(self) -> str:
        return "".join(self._text)

    def view(self, data: Any) -> Any:
        return self.fixed(data)


def client_key(cfg: ProxyConfig, headers: Mapping[str, str]) -> str | None:
    """The key the client presented (``x-api-key`` or a bearer); with ``--token`` it must be one."""
    bearer = headers.get("authorization", "")
    key = headers.get("x-api-key") or (bearer[7:].strip() if bearer[:7].lower() == "bearer " else None)
    if cfg.tokens and (not key or not any(hmac.compare_digest(key.encode(), t.encode()) for t in cfg.tokens)):
        raise ProxyError(401, "missing or invalid API key (x-api-key or bearer token)", type="authentication_error")
    return key


def upstream_headers(cfg: ProxyConfig, headers: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP and not k.lower().startswith("x-refold")}
    if cfg.upstream_key:
        out = {k: v for k, v in out.items() if k.lower() not in ("x-api-key", "authorization")}
        out["x-api-key"] = cfg.upstream_key
    elif cfg.tokens:  # the proxy's own token never leaves it
        out = {k: v for k, v in out.items() if not _carries(k, v, cfg.tokens)}
    return out


def _carries(name: str, value: str, tokens: Sequence[str]) -> bool:
    n = name.lower()
    if n == "x-api-key":
        return value in tokens
    return n == "authorization" and value[7:].strip() in tokens


def anthropic_error(exc: ProxyError) -> JSONResponse:
    return JSONResponse(wire.error_body(exc.status, exc.message), status_code=exc.status, headers=exc.headers or None)


async def messages(
    service: SurfaceService, adapter: AnthropicAdapter, body: Any, headers: Mapping[str, str], query: str,
    forward: Any,
) -> Response:
    key = client_key(service.cfg, headers)
    if not isinstance(body, dict):
        raise wire.bad("request body must be a JSON object")
    if headers.get("x-refold-passthrough") == "1" or wire.is_compaction(body):
        service.metrics.inc("refold_passthrough_total", surface=adapter.key)
        response: Response = await forward(adapter.path, body, adapter.headers(key, headers), query)
        return response
    return await service.handle(adapter, body, owner_of(key), key, headers, query)


def stateless_history(parsed: Parsed) -> tuple[History, Message | None]:
    """The request's history on its own (count_tokens records nothing)."""
    prefix, steps = split(parsed.messages)
    tail = steps.pop()[0] if steps and not steps[-1][1] else None
    h = History(prefix, source="count_tokens")
    for r, o in steps:
        h.append(r, o)
    return h, tail


COUNT_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "mcp_servers")


async def count_tokens(
    service: SurfaceService, adapter: AnthropicAdapter, body: Any, headers: Mapping[str, str], query: str
) -> Response:
    """The size of the prompt refold would send: Anthropic's count of it when the upstream has
    ``/messages/count_tokens``, else the proxy's tokenizer over its text (``X-Refold-Count``)."""
    client_key(service.cfg, headers)
    if not isinstance(body, dict):
        raise wire.bad("request body must be a JSON object")
    body = {**body, "max_tokens": 1}
    parsed = adapter.parse(body)
    history, tail = stateless_history(parsed)
    rendered = service.cfg.renderer().render(history)
    added: list[dict[str, Any]] = []
    if parsed.tools and service.cfg.context_tools:
        from ..context.tools import offer

        added, _ = offer(service.cfg.config, parsed.tools, beside_shell=service.cfg.context_tools_beside_shell)
    out = adapter.build(body, parsed, rendered, history, tail, added)
    out = {k: v for k, v in out.items() if k in COUNT_FIELDS}
    try:
        r = await service.client.post(
            service.url("/messages/count_tokens", query), json=out, headers=adapter.headers(None, headers)
        )
    except httpx.HTTPError:
        r = None
    if r is not None and r.status_code < 400:
        try:
            data = r.json()
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("input_tokens"), int):
            return JSONResponse(data, headers={**informative(r.headers), "X-Refold-Count": "upstream"})
    if r is not None and r.status_code not in (404, 405, 501) and r.status_code >= 400:
        return Response(
            r.content, status_code=r.status_code, media_type=r.headers.get("content-type"),
            headers=informative(r.headers),
        )
    n, method = local_count(service.cfg.tokenizer, out)
    return JSONResponse({"input_tokens": n}, headers={"X-Refold-Count": method})


def prompt_text(req: dict[str, Any]) -> str:
    """What a tokenizer reads of a request: system and message texts, tool inputs, tool schemas."""
    parts: list[str] = []
    for b in req.get("system") or []:
        parts.append(str(b.get("text", "")) if isinstance(b, dict) else str(b))
    for m in req.get("messages") or []:
        for b in m.get("content") or []:
            parts.append(_block_text(b))
    if req.get("tools"):
        parts.append(json.dumps(req["tools"], ensure_ascii=False))
    return "\n".join(parts)


def _block_text(b: Any) -> str:
    if not isinstance(b, dict):
        return str(b)
    kind = b.get("type")
    if kind == "text":
        return str(b.get("text", ""))
    if kind == "thinking":
        return str(b.get("thinking", ""))
    if kind == "tool_use":
        return f"{b.get('name')} {json.dumps(b.get('input'), ensure_ascii=False)}"
    if kind == "tool_result":
        c = b.get("content")
        return c if isinstance(c, str) else "\n".join(_block_text(x) for x in c or [])
    return ""  # images, documents, redacted thinking: not text a tokenizer can count


def local_count(tokenizer: str, req: dict[str, Any]) -> tuple[int, str]:
    from ..tokens import get_tokenizer, tokenizer_name

    name = tokenizer_name(tokenizer) if tokenizer not in ("", "off") else None
    text = prompt_text(req)
    if name is None:
        return (len(text) + 3) // 4, "local:chars4"
    return get_tokenizer(name).count(text), f"local:{name}"
