"""One chat completion through the proxy: check, record, render, call upstream, answer context commands.

Streaming is live: a reply's text reaches the client as the upstream sends it. Only what may be
an internal context-command round is held, and only until it is decided (``relay.ChatRelay``,
round by round): its tool calls and finish reason until the first call's name and its command's
first word show it cannot be a context command, and, for agents without tools, the text from
where a command block may begin until the block's first word says the same. Otherwise the
round's end decides. When the round turns out to be a context command the held part is dropped,
the proxy answers it and streams the next round into the same response; the text already
relayed is kept with the internal step (``SHOWN``) so the reply the client echoes back next time
still matches the session; it loses only its command block (the text after it is streamed too).
In a round relayed early a later call that may be a context command is held until decided; one
that is (an offered context tool, or typed into the shell) never reaches the client and is
answered before the next upstream call (``deferred``).

Pass-through tells the truth: when the proxy will not answer context commands in a request (no
rounds left, ``max_rounds`` 0, a prefill, several choices, or no form a command could be
recognized in) that request's prompt is rendered without offering them (not reversible, no spans,
no ledger), and a command a client's own shell ran is never applied: client steps are recorded
with no context command answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..context.recognize import Recognizer
from ..context.tools import clashes, offer
from ..errors import ProxyError
from ..messages import clean
from ..render import Renderer
from ..types import Message
from .commands import context_calls, observations
from .config import ProxyConfig
from .custom_calls import as_function
from .deferred import Deferred
from .mapping import INTERNAL, SETTLES, SHOWN
from .metrics import Metrics
from .plain import PlainRenderers
from .relay import ChatRelay
from .saved import SavedTokens
from .sessions import Session, SessionManager, View, session_name
from .shown import ShownReplies, unanswered
from .stream import DONE, error_event
from .upstream import Live, Result, Upstream, retry_hint
from .usage import add, count
from .validate import check_chat_request


@dataclass
class _Plan:
    """What a streamed request needs to run its rounds inside the response."""

    s: Session
    rec: Recognizer
    req: dict[str, Any]
    added: list[dict[str, Any]]
    headers: dict[str, str]
    base: str
    live: Live
    final: bool
    answering: bool
    strip: bool
    clash: tuple[str, ...] = ()
    rounds: int = 0
    shown: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    result: Result
    session: Session
    steps: int
    stream: bool
    include_usage: bool
    added_ms: float
    live: Live | None = None
    """The first round, open at upstream (its first chunk already read)."""
    plan: _Plan | None = None
    headers: dict[str, str] = field(default_factory=dict)
    """The upstream's informative headers (``upstream.informative``) of the round the client is
    answered with; for a stream, of its first round (the response starts before a later one)."""
    answer: tuple[str, Message] | None = None
    """(the tip it followed, the reply): the non-streamed answer, recorded once it is sent."""


class ChatService:
    def __init__(
        self, cfg: ProxyConfig, manager: SessionManager, upstream: Upstream, metrics: Metrics
    ) -> None:
        self.cfg = cfg
        self.manager = manager
        self.upstream = upstream
        self.metrics = metrics
        self.strip = cfg.strip_protocol
        self.saved = SavedTokens(cfg.tokenizer, metrics)
        self._plain = PlainRenderers(cfg.config)
        self._shown = ShownReplies()
        self._deferred = Deferred()

    # ---- request --------------------------------------------------------------------------

    async def complete(
        self, body: Any, owner: str, client_key: str | None, headers: Mapping[str, str]
    ) -> Outcome:
        start = time.perf_counter()
        body = check_chat_request(body)
        body["messages"] = [as_function(m) if m.get("role") == "assistant" else m for m in body["messages"]]
        tools = body.get("tools")
        cfg = self.cfg
        s = await self.manager.get(owner, session_name(headers.get("x-refold-session"), body["messages"], owner))
        sent = self._shown.as_sent(s.sid, body["messages"])
        messages = [unanswered(m) if m.get("role") == "assistant" else m for m in sent]
        single = body.get("n") in (None, 1)
        added, rec = offer(cfg.config, tools, offer=cfg.context_tools and cfg.max_rounds > 0,
                           beside_shell=cfg.context_tools_beside_shell, compound=True)
        clash = clashes(cfg.config, tools)  # the agent's own tool named like a context command
        async with s.lock:
            turn = await self.manager.turn(s, messages, lambda ms: self._held_as_sent(s, ms))
            answering = rec.possible and cfg.max_rounds > 0 and turn.tail is None and single
            base, steps, messages_out = await self._render_off(s, turn.view, turn.tail, answering, clash)
            held = self._deferred.take(s, turn.view.history) if answering else None
            found = context_calls(held, rec) if held is not None else None
            if held is not None and found is None:
                await self.manager.hold(s, None)  # nothing left in it this request could answer
        if held is not None and found is not None:  # left out of the last reply
            base, steps, messages_out = await self._internal(s, base, held, found, "", settle=True, clash=clash)
        self.metrics.inc("refold_turns_recorded_total", turn.added)
        self.metrics.inc("refold_branches_total", int(turn.branched))
        stream = body.get("stream") is True
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
        req = {k: v for k, v in body.items() if k != "messages"}
        if stream:
            req["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        if added and answering:
            req["tools"] = [*(tools or []), *added]
        up_headers = self.upstream.headers(client_key, dict(headers))
        strip = self.strip and single
        self.saved.count(messages, messages_out)
        t0 = time.perf_counter()
        if stream:
            with self._counted():
                live = await self.upstream.open_stream({**req, "messages": messages_out}, up_headers)
                await _first(live)
            count(self.metrics, "chat", None)  # the call, once open; its tokens when it ends
            added_ms = (t0 - start) * 1000
            self.metrics.observe("refold_added_latency_ms", added_ms)
            plan = _Plan(s, rec, req, added, up_headers, base, live, not answering, answering, strip, clash)
            return Outcome(Result({}), s, steps, True, include_usage, added_ms, live, plan, live.headers)

        upstream_ms = 0.0
        rounds = 0
        total: dict[str, Any] | None = None  # usage over the request's rounds
        while True:
            final = not answering or rounds >= cfg.max_rounds
            if final and answering:  # rounds used up: this round's prompt offers no command
                async with s.lock:
                    _, _, messages_out = self._render(s, s.view(base, cfg.renderer), None, False)
                req = {**req, "tools": tools} if tools is not None else {k: v for k, v in req.items() if k != "tools"}
            t0 = time.perf_counter()
            with self._counted():
                result = await self.upstream.chat({**req, "messages": messages_out}, up_headers)
            upstream_ms += (time.perf_counter() - t0) * 1000
            self._usage(result)
            total = add(total, result.body.get("usage"))
            n_choices = len(result.body.get("choices") or [])
            calls = context_calls(result.message, rec) if not final and n_choices == 1 else None
            if calls is None:
                break
            rounds += 1
            base, steps, messages_out = await self._internal(s, base, result.message, calls, "", clash=clash)
        added_ms = (time.perf_counter() - start) * 1000 - upstream_ms
        self.metrics.observe("refold_added_latency_ms", added_ms)
        shown = Result(self._shown.body(s.sid, result.body, strip), result.events)
        if rounds and total is not None:  # the internal rounds' tokens were spent for this answer too
            shown.body = {**shown.body, "usage": total}
        answer = (base, result.message) if n_choices == 1 else None
        return Outcome(shown, s, steps, False, include_usage, added_ms, headers=result.headers, answer=answer)

    async def delivered(self, outcome: Outcome) -> None:
        """The non-streamed answer was sent: a resend of this request is a new attempt."""
        if outcome.answer is not None:
            await self.manager.deliver(outcome.session, *outcome.answer)

    def _held_as_sent(self, s: Session, messages: list[Message]) -> list[Message]:
        out = self._deferred.as_sent(s, messages)
        return out if out is messages else [unanswered(m) if m.get("role") == "assistant" else m for m in out]

    async def _internal(
        self, s: Session, base: str, message: Message, calls: Any, shown: str, *, settle: bool = False,
        clash: tuple[str, ...] = (),
    ) -> tuple[str, int, list[Message]]:
        """Record an internal round (the reply, the proxy's answers) and render the next prompt."""
        self.metrics.inc("refold_internal_rounds_total")
        reply = clean(message)
        if reply.get("content") is None:
            reply["content"] = ""
        meta: dict[str, Any] = {INTERNAL: True, **({SETTLES: True} if settle else {})}
        if shown:
            meta[SHOWN] = shown
        async with s.lock:
            view = s.view(base, self.cfg.renderer)
            config = self._plain.config_for(clash) if clash else self.cfg.config
            stored, obs, answers = observations(view.history, reply, calls, config)
            tip = await self.manager.commit(s, base, [(stored, obs, meta)], settle=settle)
            out = self._render(s, s.view(tip, self.cfg.renderer), None, True, clash)
        self.metrics.inc("refold_restores_total", len({i for a in answers for i in a.restore_of}))
        for c in calls:
            if c.context is not None:
                self.metrics.inc("refold_context_commands_total", command=c.context.name)
        self.metrics.inc("refold_turns_recorded_total")
        return out

    def _render(
        self, s: Session, view: View, tail: Message | None, offered: bool, clash: tuple[str, ...] = ()
    ) -> tuple[str, int, list[Message]]:
        return self._render_with(self._renderer(s, view, offered, clash), view, tail)

    def _renderer(self, s: Session, view: View, offered: bool, clash: tuple[str, ...]) -> Renderer:
        """The view's own renderer; ``plain`` when no command is offered; one under ``clash``
        (``context.tools.clashes``) when the agent's tools own some of the commands' names."""
        if not offered:
            return self._plain.get(s.sid)
        return self._plain.get(s.sid, clash) if clash else view.renderer

    async def _render_off(
        self, s: Session, view: View, tail: Message | None, offered: bool, clash: tuple[str, ...] = ()
    ) -> tuple[str, int, list[Message]]:
        """``_render`` in a worker thread: a first render of a long history takes seconds, and other
        sessions' requests must not wait for it. The caller holds ``s.lock`` (the renderer and
        history are this session's alone); the shared plain-renderer cache is read here, on the loop."""
        return await asyncio.to_thread(self._render_with, self._renderer(s, view, offered, clash), view, tail)

    def _render_with(self, renderer: Renderer, view: View, tail: Message | None) -> tuple[str, int, list[Message]]:
        rendered = renderer.render(view.history)
        self.metrics.observe("refold_render_ms", rendered.stats.render_ms)
        out = list(rendered.messages)
        if tail is not None:
            out.append(clean(tail))
        return view.history.digest, len(view.history), out

    # ---- streaming ---------------------------------------------------------------------------

    async def sse(self, outcome: Outcome) -> AsyncIterator[bytes]:
        """The response's events: every round of the request, relayed as it arrives. Once the
        response has started, a failure is an error event and the stream still ends properly."""
        try:
            async for data in self._rounds(outcome):
                yield data
        except ProxyError as e:
            yield error_event(e.message, e.code or "upstream_error")
            yield DONE
        except Exception as e:  # noqa: BLE001 - a 200 stream must end with an event, not a broken body
            yield error_event(f"internal proxy error: {type(e).__name__}: {e}", "server_error")
            yield DONE

    async def _rounds(self, outcome: Outcome) -> AsyncIterator[bytes]:
        p = outcome.plan
        assert p is not None
        live = p.live
        relay = ChatRelay(
            p.rec, strip=p.strip, include_usage=outcome.include_usage, deferred=self._deferred, sid=p.s.sid
        )
        self.metrics.inc("refold_streams_relayed_live_total")
        answer: Message | None = None
        try:
            while True:
                relay.begin(final=p.final or p.rounds >= self.cfg.max_rounds, spliced=bool(p.shown))
                async for raw, chunk in live.chunks():
                    for data in relay.feed(raw, chunk):
                        yield data
                if live.error is not None:
                    yield error_event(live.error.message, live.error.code or "upstream_error")
                    break
                result = live.result()
                count(self.metrics, "chat", result.usage, call=False)  # the call was counted when opened
                out, found = relay.end(result)  # a usage chunk held to the round's end goes out here
                relay.prior = add(relay.prior, result.body.get("usage"))  # the next round reports the sum
                if found is None:  # stored before the client has the whole answer
                    client = self._remember_stream(p, relay.shown, relay.text)
                    await self._deferred.save(self.manager, p.s, client)
                for data in out:
                    yield data
                if relay.early:
                    self.metrics.inc("refold_rounds_released_early_total")
                if found is None:
                    answer = result.message
                    break
                # an internal round: the client sees the next round in the same response
                p.shown.append(relay.text)
                p.rounds += 1
                p.base, _, messages_out = await self._internal(
                    p.s, p.base, result.message, found, relay.text, clash=p.clash
                )
                req = p.req
                if p.rounds >= self.cfg.max_rounds:  # the last round offers no command
                    async with p.s.lock:
                        _, _, messages_out = self._render(p.s, p.s.view(p.base, self.cfg.renderer), None, False)
                    own = [t for t in req.get("tools") or [] if t not in p.added]
                    req = {**req, "tools": own} if own else {k: v for k, v in req.items() if k != "tools"}
                try:
                    with self._counted():
                        live = await self.upstream.open_stream({**req, "messages": messages_out}, p.headers)
                    count(self.metrics, "chat", None)
                except ProxyError as e:  # the response has started: a retry-after goes in the message
                    yield error_event(e.message + retry_hint(e.headers), e.code or "upstream_error")
                    break
            yield DONE
            if answer is not None:  # the client has the whole answer
                await self.manager.deliver(p.s, p.base, answer)
        finally:
            await live.aclose()

    def _remember_stream(self, p: _Plan, real: Message, emitted: str) -> Message | None:
        """The reply as the client holds it when that differs from what the model wrote."""
        before = "".join(p.shown)
        if not before and not p.strip:
            return None
        client = {**real, "content": before + emitted}
        self._shown.remember(p.s.sid, client, real)
        return client

    # ---- accounting ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """An upstream call whose failure (an error status, unreachable, timed out, a malformed
        answer) is counted in ``refold_upstream_errors_total`` by the status the client gets."""
        try:
            yield
        except ProxyError as e:
            self.metrics.inc("refold_upstream_errors_total", status=str(e.status))
            raise

    def _usage(self, result: Result) -> None:
        count(self.metrics, "chat", result.usage)

    async def drain(self) -> None:
        await self.saved.drain()


async def _first(live: Live) -> None:
    """Read the stream's first chunk before the response starts: a failure before it is an
    ordinary HTTP error rather than an event in a 200 stream."""
    await live.peek()
    if live.error is not None:
        raise live.error
