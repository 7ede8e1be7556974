"""One request through a non-chat API surface (Anthropic Messages, OpenAI Responses).

A surface converts its request into OpenAI-style messages for the session (each message keeps its
native form under ``extra[<surface>]``, which no rendering reads), lets the session manager record
and render them exactly as for chat completions, converts the rendered prompt back into its own
wire format (native blocks and items kept as received wherever the rendering left them as they
were) and calls the upstream. Context commands the model issues are answered here with the one
module ``refold.context`` (``commands.context_calls`` / ``commands.observations``), stored as
internal steps, and the upstream is called again, up to ``max_rounds`` times. One that comes
after calls the client was already streamed is left out and answered before the next upstream
call (``deferred``, stored with the session). A round the proxy will not answer (rounds used up,
``max_rounds`` 0, a prefill) is rendered offering no context command (``plain``) and reaches the
client as the model wrote it; the client's replies are recorded with no context command
answered, so nothing its shell ran or refused is applied (as on chat completions).

Streaming: ``surface_stream``. Upstream calls and errors: ``surface_upstream`` (an upstream error
keeps its status; its body is returned as it came when it is in the surface's error shape, else
the surface's error shape with a one-line cause).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from ..context.recognize import Recognizer
from ..context.tools import clashes, offer
from ..errors import ProxyError
from ..history import History
from ..types import Message, Rendered
from .commands import context_calls, observations
from .config import ProxyConfig
from .deferred import Deferred
from .mapping import INTERNAL, SETTLES, SHOWN
from .metrics import Metrics
from .plain import PlainRenderers
from .saved import SavedTokens
from .sent_calls import call_lines
from .sessions import Session, SessionManager, View, session_name
from .shown import ShownReplies, unanswered
from .sse import Event, is_sse
from .surface_calls import recognizable, split_calls
from .surface_stream import Plan, Splicer, relay, spliced
from .surface_upstream import Failed, bad_stream, cause, open_stream, post, upstream_answer
from .upstream import Upstream, informative
from .usage import add, count

_DROP_RESPONSE_HEADERS = {
    "content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "proxy-connection",
    "upgrade", "te", "trailer", "set-cookie", "alt-svc",  # an upstream's cookies and endpoints are its own
}


@dataclass
class Parsed:
    """A request as the session sees it."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    """The client's tools as OpenAI function tools (names only matter: what ``offer`` reads)."""
    state: dict[str, Any] = field(default_factory=dict)
    """Whatever the surface needs again when it builds the upstream request."""


class Adapter(Protocol):
    key: str
    """The ``extra`` key holding native forms, and the metrics label."""
    path: str
    """The upstream path, after the upstream base URL (``/messages``)."""

    def parse(self, body: dict[str, Any]) -> Parsed: ...

    def build(
        self,
        body: dict[str, Any],
        parsed: Parsed,
        rendered: Rendered,
        history: History,
        tail: Message | None,
        added: list[dict[str, Any]],
    ) -> dict[str, Any]: ...

    def reply(self, data: Any) -> Message | None:
        """The upstream answer as an assistant message (native form under ``extra``), or None."""
        ...

    def check(self, data: Any) -> Any:
        """The upstream answer when it has the shape ``reply`` reads, else a 502 naming the field."""
        ...

    def without(self, data: Any, ids: Sequence[str]) -> Any:
        """A non-streamed answer without the calls ``ids`` (context commands answered later)."""
        ...

    def aggregate(self, events: Sequence[Event]) -> Any:
        """A streamed answer as the body the non-streaming call would have returned."""
        ...

    def headers(self, client_key: str | None, headers: Mapping[str, str]) -> dict[str, str]: ...

    def error(self, exc: ProxyError) -> tuple[int, dict[str, Any]]: ...

    def own_error(self, data: Any) -> bool:
        """Whether an upstream error body is in this surface's error shape (returned as it came)."""
        ...

    def stream_error(self, message: str) -> bytes: ...

    def closing(self, ev: Event) -> bool:
        """Whether ``ev`` closes the answer: ``done`` runs before the client is sent it."""
        ...

    def splicer(self, rec: Recognizer) -> Splicer: ...

    async def done(self, parsed: Parsed, data: Any) -> None:
        """The client's final answer is known (a non-streamed body or an aggregated stream)."""
        ...


class SurfaceService:
    def __init__(self, cfg: ProxyConfig, manager: SessionManager, upstream: Upstream, metrics: Metrics) -> None:
        self.cfg = cfg
        self.manager = manager
        self.upstream = upstream
        self.metrics = metrics
        self._shown = ShownReplies()
        self._deferred = Deferred()
        self._plain = PlainRenderers(cfg.config)
        self.saved = SavedTokens(cfg.tokenizer, metrics)

    def _held_as_sent(self, s: Session, messages: list[Message]) -> list[Message]:
        out = self._deferred.as_sent(s, messages)
        return out if out is messages else [unanswered(m) if m.get("role") == "assistant" else m for m in out]

    @property
    def client(self) -> httpx.AsyncClient:
        # the upstream's pooled client: one pool and one timeout for every surface
        return self.upstream.client

    def url(self, path: str, query: str = "") -> str:
        return f"{self.upstream.base_url}{path}" + (f"?{query}" if query else "")

    async def open(
        self, adapter: Adapter, body: dict[str, Any], headers: dict[str, str], query: str
    ) -> httpx.Response | Failed:
        return await open_stream(self.client, self.url(adapter.path, query), body, headers, self.cfg.timeout)

    def render(self, view: View, plain: str | None = None, clash: tuple[str, ...] = ()) -> tuple[str, Rendered]:
        """The view's prompt; ``plain`` (a session id): one that offers no context command, or
        (``clash``, ``context.tools.clashes``) none the agent's own tools are named like."""
        renderer = view.renderer if plain is None else self._plain.get(plain, clash or None)
        rendered = renderer.render(view.history)
        self.metrics.observe("refold_render_ms", rendered.stats.render_ms)
        return view.history.digest, rendered

    async def handle(
        self,
        adapter: Adapter,
        body: dict[str, Any],
        owner: str,
        client_key: str | None,
        headers: Mapping[str, str],
        query: str = "",
        parsed: Parsed | None = None,
    ) -> Response:
        start = time.perf_counter()
        cfg = self.cfg
        parsed = parsed or adapter.parse(body)
        s = await self.manager.get(owner, session_name(headers.get("x-refold-session"), parsed.messages, owner))
        # a reply the client was streamed after an internal round's text is recorded as the model wrote it
        # the client's replies are recorded with no context command answered: its shell ran them
        parsed.messages = [unanswered(m) if m.get("role") == "assistant" else m
                           for m in self._shown.as_sent(s.sid, parsed.messages)]
        added, rec = offer(cfg.config, parsed.tools, offer=cfg.context_tools and cfg.max_rounds > 0,
                           beside_shell=cfg.context_tools_beside_shell, compound=True)
        clash = clashes(cfg.config, parsed.tools)  # the agent's own tool named like a context command
        async with s.lock:
            turn = await self.manager.turn(s, parsed.messages, lambda ms: self._held_as_sent(s, ms))
            view = turn.view
            answering = rec.possible and cfg.max_rounds > 0 and turn.tail is None
            # seconds for a long first request
            base, rendered = await asyncio.to_thread(self.render, view, s.sid if clash or not answering else None,
                                                     clash if answering else ())
            held = self._deferred.take(s, view.history) if answering else None
            calls = context_calls(recognizable(held), rec) if held is not None else None
            if held is not None and calls is None:
                await self.manager.hold(s, None)  # nothing left in it this request could answer
        self.metrics.inc("refold_turns_recorded_total", turn.added)
        self.metrics.inc("refold_branches_total", int(turn.branched))
        if held is not None and calls is not None:  # context commands left out of the reply the client holds
            base, view, rendered = await self.internal(adapter, s, base, held, calls, "", settle=True, clash=clash)
        # what the first upstream call is sent (after the held round), as on chat completions
        self.saved.count(parsed.messages, [*rendered.messages, *([turn.tail] if turn.tail else [])])
        stream = bool(body.get("stream"))
        up_headers = adapter.headers(client_key, headers)
        out_headers = {"X-Refold-Session": s.name, "X-Refold-Steps": str(len(view.history))}
        if not answering:
            added = []  # a round the proxy does not answer offers no context command
        rounds = 0
        upstream_ms = 0.0
        total: dict[str, Any] | None = None  # usage over the request's rounds
        while True:
            final = not answering or rounds >= cfg.max_rounds
            if final and answering:  # rounds used up: this round's prompt offers no command
                async with s.lock:
                    base, rendered = self.render(s.view(base, cfg.renderer), s.sid)
                added = []
            out = adapter.build(body, parsed, rendered, view.history, turn.tail, added)
            t0 = time.perf_counter()
            if stream:
                opened = await self.open(adapter, out, up_headers, query)
                if isinstance(opened, Failed):
                    return self._failed(adapter, opened, out_headers)
                if not is_sse(opened):  # the upstream ignored "stream": nothing to relay as one
                    await opened.aclose()
                    ctype = opened.headers.get("content-type") or "untyped"
                    status, err = adapter.error(bad_stream(f"is {ctype}, not an event stream"))
                    return JSONResponse(err, status_code=status, headers={**informative(opened.headers), **out_headers})
                upstream_ms += (time.perf_counter() - t0) * 1000
                self._added(start, upstream_ms)
                self.metrics.inc("refold_streams_relayed_live_total")
                count(self.metrics, adapter.key, None)  # the call, once open; its tokens when it ends
                if not answering:
                    gen = relay(adapter, parsed, opened, self.metrics)
                else:
                    plan = Plan(adapter, parsed, body, s, base, turn.tail, added, rec, up_headers, query, clash)
                    gen = spliced(self, plan, opened)
                # the first round's headers: the response starts before a later round is asked for
                headers = {**informative(opened.headers), **out_headers}
                return StreamingResponse(gen, media_type="text/event-stream", headers=headers)
            got = await post(self.client, self.url(adapter.path, query), out, up_headers, cfg.timeout)
            if isinstance(got, Failed):
                return self._failed(adapter, got, out_headers)
            data = upstream_answer(adapter, got.data)
            last = got.headers  # of the round whose answer the client gets
            upstream_ms += (time.perf_counter() - t0) * 1000
            count(self.metrics, adapter.key, as_dict(data).get("usage"))
            total = add(total, as_dict(data).get("usage"))
            reply = adapter.reply(data)
            # a round the proxy does not answer goes to the client as the model wrote it
            calls = context_calls(recognizable(reply), rec) if reply is not None and not final else None
            if calls is None or reply is None:
                break
            rounds += 1
            base, view, rendered = await self.internal(adapter, s, base, reply, calls, "", clash=clash)
        self._added(start, upstream_ms)
        if rounds and total is not None and isinstance(data, dict):  # the internal rounds' tokens too
            data = {**data, "usage": total}
        await adapter.done(parsed, data)
        out_headers["X-Refold-Steps"] = str(len(view.history))
        sent = BackgroundTask(self.manager.deliver, s, base, reply) if reply is not None else None
        return JSONResponse(data, headers={**last, **out_headers}, background=sent)

    async def internal(
        self, adapter: Adapter, s: Session, base: str, reply: Message, calls: Any, shown: str, *, settle: bool = False,
        clash: tuple[str, ...] = (),
    ) -> tuple[str, View, Rendered]:
        """Record an internal round (the reply, the proxy's answers) and render the next prompt."""
        cfg = self.cfg
        self.metrics.inc("refold_internal_rounds_total")
        native = (reply.get("extra") or {}).get(adapter.key)
        plain: Message = {k: reply[k] for k in ("role", "content", "tool_calls") if k in reply}
        if plain.get("content") is None:
            plain["content"] = ""
        meta: dict[str, Any] = {INTERNAL: True, **({SETTLES: True} if settle else {})}
        if shown:
            meta[SHOWN] = shown
        async with s.lock:
            view = s.view(base, cfg.renderer)
            config = self._plain.config_for(clash) if clash else cfg.config
            stored, obs, answers = observations(view.history, plain, calls, config, call_lines=call_lines(adapter.key))
            stored["extra"] = {**stored["extra"], adapter.key: native}
            tip = await self.manager.commit(s, base, [(stored, obs, meta)], settle=settle)
            view = s.view(tip, cfg.renderer)
            base, rendered = self.render(view, s.sid if clash else None, clash)
        self.metrics.inc("refold_restores_total", len({i for a in answers for i in a.restore_of}))
        for c in calls:
            if c.context is not None:
                self.metrics.inc("refold_context_commands_total", command=c.context.name)
        self.metrics.inc("refold_turns_recorded_total")
        return base, view, rendered

    async def kept(self, s: Session, key: str, reply: Message, left_out: Sequence[str], before: str) -> None:
        """The final reply of an answer: the calls ``left_out`` kept (stored with the session) to be
        answered before the next upstream call; a reply streamed after internal rounds' text
        (``before``) remembered in the form the client holds."""
        client = None
        if left_out:
            reply, own = split_calls(reply, left_out, key)
            self._deferred.put(s.sid, reply, own)
        if before:
            client = {**reply, "content": before + str(reply.get("content") or "")}
            self._shown.remember(s.sid, client, reply)
        if left_out:
            await self._deferred.save(self.manager, s, client)

    def _added(self, start: float, upstream_ms: float) -> None:
        self.metrics.observe("refold_added_latency_ms", (time.perf_counter() - start) * 1000 - upstream_ms)

    def _failed(self, adapter: Adapter, f: Failed, headers: dict[str, str]) -> Response:
        self.metrics.inc("refold_upstream_errors_total", status=str(f.status))
        headers = {**f.headers, **headers}
        try:
            data = json.loads(f.body)
        except ValueError:
            data = None
        if adapter.own_error(data):
            return Response(f.body, status_code=f.status, media_type=f.content_type, headers=headers)
        status, err = adapter.error(ProxyError(f.status, cause(f), type="upstream_error", code="upstream_error"))
        return JSONResponse(err, status_code=status, headers=headers)


def forwardable(headers: Mapping[str, str], drop: Sequence[str] = ()) -> dict[str, str]:
    """Response headers of an upstream answer that may be relayed to the client."""
    skip = _DROP_RESPONSE_HEADERS | {d.lower() for d in drop}
    return {k: v for k, v in headers.items() if k.lower() not in skip}


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
