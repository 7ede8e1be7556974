"""One request through a non-chat API surface (Anthropic Messages, OpenAI Responses).

A surface converts its request into OpenAI-style messages for the session (each message keeps its
native form under ``extra[<surface>]``, which no rendering reads), lets the session manager record
and render them exactly as for chat completions, converts the rendered prompt back into its own
wire format (native blocks and items kept as received wherever the rendering left them as they
were) and calls the upstream. Context commands the model issues are answered here with the one
module ``refold.context`` (``commands.context_calls`` / ``commands.observations``), stored as
internal steps, and the upstream is called again, up to ``max_rounds`` times.

Streaming follows chat.py: a round that cannot be internal is relayed event by event, byte for
byte. A round that may be is relayed as it arrives too, up to its first tool call (``tool_use``
block, ``function_call`` item); that call is held until its name and its command's first word show
whether it can be a context command (``early.call_verdict``): if not, it and all that follows go
at once; if so, the round's end decides. An internal round's held part is dropped and the next
round continues the same answer (block and output indices, ids and sequence numbers rewritten
so the client reads one message); the text it was sent is kept with the internal step (``SHOWN``)
so its echo next turn matches the session. For an agent without tools (commands in a ```bash
block) each text event is relayed once the text up to its end holds no possible command block
(``CommandGate``), and all of it once the block's first word is no context command. Upstream
errors are returned with the upstream's own status and body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..context.recognize import SHELL_TOOLS, Recognizer
from ..context.tools import offer
from ..errors import ProxyError
from ..history import History
from ..types import Message, Rendered
from .commands import context_calls, observations
from .config import ProxyConfig
from .mapping import INTERNAL, SHOWN
from .metrics import Metrics
from .sessions import Session, SessionManager, View, session_name
from .shown import ShownReplies
from .sse import Event, ended_properly, is_sse, read_events
from .upstream import Upstream

_DROP_RESPONSE_HEADERS = {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}


@dataclass
class Parsed:
    """A request as the session sees it."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    """The client's tools as OpenAI function tools (names only matter: what ``offer`` reads)."""
    state: dict[str, Any] = field(default_factory=dict)
    """Whatever the surface needs again when it builds the upstream request."""


@dataclass
class Failed:
    """An upstream answer with an error status, returned to the client as it came."""

    status: int
    body: bytes
    content_type: str


@dataclass
class _Rounds:
    """What a streamed request needs to run its later rounds inside the response."""

    adapter: Adapter
    parsed: Parsed
    body: dict[str, Any]
    s: Session
    base: str
    tail: Message | None
    added: list[dict[str, Any]]
    rec: Recognizer
    headers: dict[str, str]
    query: str


class Splicer(Protocol):
    """One streamed answer made of several upstream rounds (context commands answered between
    them), relayed as it arrives: what of each round is sent at once and what is held."""

    released: bool
    """The round can no longer be internal: everything of it is relayed as it comes."""

    def begin(self, final: bool) -> None:
        """A round starts; ``final``: it cannot be internal."""
        ...

    def feed(self, ev: Event) -> list[bytes]:
        """What to send the client now for this upstream event."""
        ...

    def finish(self, internal: bool) -> list[bytes]:
        """The round ended: what is still held, sent (not internal) or dropped (internal)."""
        ...

    def shown(self) -> str:
        """The text of this round the client was sent (after ``finish``)."""
        ...

    def view(self, data: Any) -> Any:
        """The aggregated answer of the final round as the client holds the whole answer."""
        ...


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

    def aggregate(self, events: Sequence[Event]) -> Any:
        """A streamed answer as the body the non-streaming call would have returned."""
        ...

    def headers(self, client_key: str | None, headers: Mapping[str, str]) -> dict[str, str]: ...

    def error(self, exc: ProxyError) -> tuple[int, dict[str, Any]]: ...

    def stream_error(self, message: str) -> bytes: ...

    def closing(self, ev: Event) -> bool:
        """Whether ``ev`` closes the answer: ``done`` runs before the client is sent it."""
        ...

    def splicer(self, rec: Recognizer) -> Splicer: ...

    async def done(self, parsed: Parsed, data: Any) -> None:
        """The client's final answer is known (a non-streamed body or an aggregated stream)."""
        ...


SHELL_NAMES = frozenset({"bash", "shell", "exec_command", "shell_command", "local_shell"})
"""A harness's shell tool under its own name: Claude Code's ``Bash``, Copilot's ``bash``, Codex's
``shell`` (an argv list) and ``exec_command`` (``cmd``)."""


def canonical_call(name: str, arguments: str) -> tuple[str, str]:
    """How the session records a call: a harness's shell tool as ``bash`` with ``{"command": str}``
    (what refold's shell analysis and context-command recognizer read); other tools as issued.
    Only the session sees this form; what goes upstream is the call's native block or item."""
    if name.lower() not in SHELL_NAMES:
        return name, arguments
    try:
        args = json.loads(arguments)
    except ValueError:
        return name, arguments
    cmd = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
    if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
        shell_c = len(cmd) == 3 and cmd[0] in ("bash", "sh", "zsh") and cmd[1] in ("-c", "-lc")
        cmd = cmd[2] if shell_c else shlex.join(cmd)
    if not isinstance(cmd, str):
        return name, arguments
    return "bash", json.dumps({"command": cmd}, ensure_ascii=False)


def tool_name(name: str) -> str:
    return "bash" if name.lower() in SHELL_NAMES else name


def recognizable(reply: Message) -> Message:
    """The reply as the recognizer reads it: shell tools matched case-insensitively (Claude Code's
    ``Bash``); the stored reply keeps the names as issued."""
    calls = reply.get("tool_calls") or []
    out = []
    for c in calls:
        fn = dict(c.get("function") or {})
        name = str(fn.get("name") or "")
        if name.lower() in SHELL_TOOLS:
            fn["name"] = name.lower()
        out.append({**c, "function": fn})
    return {**reply, "tool_calls": out} if out else reply


class SurfaceService:
    def __init__(self, cfg: ProxyConfig, manager: SessionManager, upstream: Upstream, metrics: Metrics) -> None:
        self.cfg = cfg
        self.manager = manager
        self.upstream = upstream
        self.metrics = metrics
        self._shown = ShownReplies()

    @property
    def client(self) -> httpx.AsyncClient:
        # the upstream's pooled client: one pool and one timeout for every surface
        return self.upstream._client

    def url(self, path: str, query: str = "") -> str:
        return f"{self.upstream.base_url}{path}" + (f"?{query}" if query else "")

    def _timeout(self) -> ProxyError:
        return ProxyError(
            504, f"upstream timed out after {self.cfg.timeout:g}s", type="upstream_error", code="upstream_timeout"
        )

    async def post(
        self, adapter: Adapter, body: dict[str, Any], headers: dict[str, str], query: str
    ) -> Any | Failed:
        for retry in (True, False):
            try:
                r = await self.client.post(self.url(adapter.path, query), json=body, headers=headers)
            except httpx.TimeoutException:
                raise self._timeout() from None
            except httpx.HTTPError as e:
                if retry and isinstance(e, httpx.RemoteProtocolError | httpx.ConnectError):
                    continue
                raise _unreachable(e) from None
            if r.status_code >= 400:
                return Failed(r.status_code, r.content, r.headers.get("content-type", "application/json"))
            try:
                return r.json()
            except ValueError:
                raise ProxyError(
                    502, "upstream answered with a body that is not JSON", type="upstream_error",
                    code="bad_upstream_response",
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def open(
        self, adapter: Adapter, body: dict[str, Any], headers: dict[str, str], query: str
    ) -> httpx.Response | Failed:
        for retry in (True, False):
            req = self.client.build_request("POST", self.url(adapter.path, query), json=body, headers=headers)
            try:
                r = await self.client.send(req, stream=True)
            except httpx.TimeoutException:
                raise self._timeout() from None
            except httpx.HTTPError as e:
                if retry and isinstance(e, httpx.RemoteProtocolError | httpx.ConnectError):
                    continue
                raise _unreachable(e) from None
            if r.status_code >= 400:
                try:
                    raw = await r.aread()
                finally:
                    await r.aclose()
                return Failed(r.status_code, raw, r.headers.get("content-type", "application/json"))
            return r
        raise AssertionError("unreachable")  # pragma: no cover

    def _render(self, view: View) -> tuple[str, Rendered]:
        rendered = view.renderer.render(view.history)
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
        parsed.messages = self._shown.as_sent(s.sid, parsed.messages)
        async with s.lock:
            turn = await self.manager.turn(s, parsed.messages)
            view = turn.view
            base, rendered = await asyncio.to_thread(self._render, view)  # seconds for a long first request
        self.metrics.inc("refold_turns_recorded_total", turn.added)
        self.metrics.inc("refold_branches_total", int(turn.branched))
        added, rec = offer(cfg.config, parsed.tools, offer=cfg.context_tools)
        stream = bool(body.get("stream"))
        up_headers = adapter.headers(client_key, headers)
        out_headers = {"X-Refold-Session": s.name, "X-Refold-Steps": str(len(view.history))}
        answering = rec.possible and cfg.max_rounds > 0 and turn.tail is None
        rounds = 0
        upstream_ms = 0.0
        while True:
            final = not answering or rounds >= cfg.max_rounds
            out = adapter.build(body, parsed, rendered, view.history, turn.tail, added)
            t0 = time.perf_counter()
            if stream:
                opened = await self.open(adapter, out, up_headers, query)
                if isinstance(opened, Failed):
                    return self._failed(opened, out_headers)
                if not is_sse(opened):  # the upstream ignored "stream": nothing to relay as one
                    await opened.aclose()
                    ctype = opened.headers.get("content-type") or "untyped"
                    status, err = adapter.error(_bad_stream(f"is {ctype}, not an event stream"))
                    return JSONResponse(err, status_code=status, headers=out_headers)
                upstream_ms += (time.perf_counter() - t0) * 1000
                self._added(start, upstream_ms, adapter)
                self.metrics.inc("refold_streams_relayed_live_total")
                if final:
                    gen = self._relay(adapter, parsed, opened)
                else:
                    plan = _Rounds(adapter, parsed, body, s, base, turn.tail, added, rec, up_headers, query)
                    gen = self._spliced(plan, opened)
                return StreamingResponse(gen, media_type="text/event-stream", headers=out_headers)
            got = await self.post(adapter, out, up_headers, query)
            if isinstance(got, Failed):
                return self._failed(got, out_headers)
            data = got
            upstream_ms += (time.perf_counter() - t0) * 1000
            self.metrics.inc("refold_upstream_calls_total")  # labelled as chat does: none
            reply = adapter.reply(data)
            calls = context_calls(recognizable(reply), rec) if reply is not None and not final else None
            if calls is None or reply is None:
                break
            rounds += 1
            base, view, rendered = await self._internal(adapter, s, base, reply, calls, "")
        self._added(start, upstream_ms, adapter)
        await adapter.done(parsed, data)
        out_headers["X-Refold-Steps"] = str(len(view.history))
        return JSONResponse(data, headers=out_headers)

    async def _internal(
        self, adapter: Adapter, s: Session, base: str, reply: Message, calls: Any, shown: str
    ) -> tuple[str, View, Rendered]:
        """Record an internal round (the reply, the proxy's answers) and render the next prompt."""
        cfg = self.cfg
        self.metrics.inc("refold_internal_rounds_total")
        native = (reply.get("extra") or {}).get(adapter.key)
        plain: Message = {k: reply[k] for k in ("role", "content", "tool_calls") if k in reply}
        if plain.get("content") is None:
            plain["content"] = ""
        meta: dict[str, Any] = {INTERNAL: True}
        if shown:
            meta[SHOWN] = shown
        async with s.lock:
            view = s.view(base, cfg.renderer)
            stored, obs, answers = observations(view.history, plain, calls, cfg.config)
            stored["extra"] = {**stored["extra"], adapter.key: native}
            tip = await self.manager.commit(s, base, [(stored, obs, meta)])
            view = s.view(tip, cfg.renderer)
            base, rendered = self._render(view)
        self.metrics.inc("refold_restores_total", len({i for a in answers for i in a.restore_of}))
        for c in calls:
            if c.context is not None:
                self.metrics.inc("refold_context_commands_total", command=c.context.name)
        self.metrics.inc("refold_turns_recorded_total")
        return base, view, rendered

    async def _spliced(self, p: _Rounds, opened: httpx.Response) -> AsyncIterator[bytes]:
        """Every round of a streamed request that may be internal, as one answer: each round is
        relayed as it arrives up to where it may turn out to be a context command (``Splicer``);
        an internal round's held part is dropped and the next round continues the same answer.
        Once the answer has started, a failure (the store, the next round's upstream call) is an
        error event in the surface's shape, never a broken body."""
        try:
            async for out in self._rounds(p, opened):
                yield out
        except ProxyError as e:
            yield p.adapter.stream_error(e.message)
        except Exception as e:  # noqa: BLE001 - a 200 stream must end with an event
            yield p.adapter.stream_error(f"internal proxy error: {type(e).__name__}: {e}")

    async def _rounds(self, p: _Rounds, opened: httpx.Response) -> AsyncIterator[bytes]:
        adapter, cfg = p.adapter, self.cfg
        sp = adapter.splicer(p.rec)
        r: httpx.Response | None = opened
        rounds = 0
        before = ""  # the text internal rounds of this answer sent the client
        try:
            while r is not None:
                final = rounds >= cfg.max_rounds
                sp.begin(final)
                events: list[Event] = []
                done = False
                try:
                    async for ev in read_events(r):
                        events.append(ev)
                        if not done and adapter.closing(ev) and (final or sp.released):
                            done = True
                            with contextlib.suppress(ProxyError):
                                await adapter.done(p.parsed, sp.view(adapter.aggregate(events)))
                        for out in sp.feed(ev):
                            yield out
                except httpx.HTTPError as e:
                    yield adapter.stream_error(f"upstream stream failed: {type(e).__name__}: {e}")
                    return
                finally:
                    await r.aclose()
                    r = None
                if not ended_properly(events):  # cut off: neither answered nor recorded as a round
                    yield adapter.stream_error("upstream stream ended before its final event (cut off)")
                    return
                self.metrics.inc("refold_upstream_calls_total")
                data = adapter.aggregate(events)
                reply = adapter.reply(data)
                calls = None
                if not final and not sp.released and reply is not None:
                    calls = context_calls(recognizable(reply), p.rec)
                if calls is None or reply is None:
                    if not done:
                        with contextlib.suppress(ProxyError):
                            await adapter.done(p.parsed, sp.view(data))
                    if before and reply is not None:
                        self._shown.remember(p.s.sid, {**reply, "content": before + str(reply.get("content") or "")}, reply)
                    for out in sp.finish(internal=False):
                        yield out
                    return
                for out in sp.finish(internal=True):
                    yield out
                shown = sp.shown()
                before += shown
                rounds += 1
                p.base, view, rendered = await self._internal(adapter, p.s, p.base, reply, calls, shown)
                request = adapter.build(p.body, p.parsed, rendered, view.history, p.tail, p.added)
                try:
                    got = await self.open(adapter, request, p.headers, p.query)
                except ProxyError as e:
                    yield adapter.stream_error(e.message)
                    return
                if isinstance(got, Failed):
                    self.metrics.inc("refold_upstream_errors_total", status=str(got.status))
                    yield adapter.stream_error(f"upstream answered {got.status}: {got.body[:500].decode(errors='replace')}")
                    return
                r = got
        finally:
            if r is not None:
                await r.aclose()

    def _added(self, start: float, upstream_ms: float, adapter: Adapter) -> None:
        self.metrics.observe("refold_added_latency_ms", (time.perf_counter() - start) * 1000 - upstream_ms)

    def _failed(self, f: Failed, headers: dict[str, str]) -> Response:
        self.metrics.inc("refold_upstream_errors_total", status=str(f.status))
        return Response(f.body, status_code=f.status, media_type=f.content_type, headers=headers)

    async def _relay(self, adapter: Adapter, parsed: Parsed, r: httpx.Response) -> AsyncIterator[bytes]:
        events: list[Event] = []
        finished = False
        try:
            async for ev in read_events(r):
                events.append(ev)
                if not finished and adapter.closing(ev):
                    finished = True
                    with contextlib.suppress(ProxyError):
                        await adapter.done(parsed, adapter.aggregate(events))
                yield ev.raw
        except httpx.HTTPError as e:
            yield adapter.stream_error(f"upstream stream failed: {type(e).__name__}: {e}")
            return
        finally:
            await r.aclose()
        if not ended_properly(events):
            yield adapter.stream_error("upstream stream ended before its final event (cut off)")
            return
        if not finished:
            with contextlib.suppress(ProxyError):
                await adapter.done(parsed, adapter.aggregate(events))


def _bad_stream(what: str) -> ProxyError:
    return ProxyError(
        502, f"upstream stream {what}", type="upstream_error", code="bad_upstream_response", param="stream"
    )


def _unreachable(e: Exception) -> ProxyError:
    return ProxyError(
        502, f"upstream request failed: {type(e).__name__}: {e}", type="upstream_error", code="upstream_unreachable"
    )


def forwardable(headers: Mapping[str, str], drop: Sequence[str] = ()) -> dict[str, str]:
    """Response headers of an upstream answer that may be relayed to the client."""
    skip = _DROP_RESPONSE_HEADERS | {d.lower() for d in drop}
    return {k: v for k, v in headers.items() if k.lower() not in skip}


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
