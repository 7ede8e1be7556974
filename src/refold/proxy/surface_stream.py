"""A streamed request on a non-chat surface: its upstream rounds relayed to the client as one answer.

A round that cannot be internal is relayed event by event, byte for byte (``relay``). A round that
may be is relayed as it arrives too, up to its first tool call (``tool_use`` block,
``function_call`` item); that call is held until its name and its command's first word show
whether it can be a context command (``early.call_verdict``): if not, it and what follows go at
once (a later call that may be one held in turn, ``spliced.SplicedRound``); if so, the round's
end decides. An internal round's held part is dropped but its text, and the next round continues
the same answer (block and output indices, ids and sequence numbers rewritten so the client reads
one message); the text it was sent is kept with the internal step (``SHOWN``) so its echo next
turn matches the session. For an agent without tools (commands in a ```bash block) each text
event is relayed once the text up to its end holds no possible command block (``CommandGate``),
and all of it once the block's first word is no context command.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from ..context.recognize import Recognizer
from ..errors import ProxyError
from ..types import Message
from .commands import call_action, context_calls
from .spliced import visible_text
from .sse import Event, ended_properly, read_events
from .surface_calls import recognizable
from .surface_upstream import Failed, cause, upstream_answer
from .usage import add, count

if TYPE_CHECKING:
    from .metrics import Metrics
    from .sessions import Session
    from .surface import Adapter, Parsed, SurfaceService



class Splicer(Protocol):
    """One streamed answer made of several upstream rounds (context commands answered between
    them), relayed as it arrives: what of each round is sent at once and what is held."""

    released: bool
    """The round can no longer be internal: everything of it is relayed as it comes (but a later
    call that may be a context command, held until decided)."""
    @property
    def holding_later(self) -> bool:
        """A later call of a released round is held: the round's closing event is not sent yet."""
        ...

    left_out: list[str]
    """Ids of the round's calls left out for the client (context commands, answered later)."""

    prior_usage: dict[str, Any] | None
    """The usage of the answer's earlier (internal) rounds: the final round's closing event reports
    the sum with its own."""

    def begin(self, final: bool) -> None:
        """A round starts; ``final``: it cannot be internal."""
        ...

    def feed(self, ev: Event) -> list[bytes]:
        """What to send the client now for this upstream event."""
        ...

    def finish(self, internal: bool, visible: str = "", context_ids: Collection[str] = ()) -> list[bytes]:
        """The round ended: what is still held, sent (not internal: but the calls ``context_ids``)
        or dropped (internal: but the text of ``visible`` not sent yet)."""
        ...

    def shown(self) -> str:
        """The text of this round the client was sent (after ``finish``)."""
        ...

    def view(self, data: Any) -> Any:
        """The aggregated answer of the final round as the client holds the whole answer."""
        ...

    def fixed(self, data: Any) -> Any:
        """The aggregated answer of this round with its first call as the client was sent it."""
        ...

    def split_answer(self, data: Any) -> tuple[Any, str] | None:
        """``data`` with the call refold answers of a split first call (``ls; restore 3``), and its id."""
        ...


@dataclass
class Plan:
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
    clash: tuple[str, ...] = ()  # ``context.tools.clashes`` of the agent's tools


def context_ids(reply: Message, rec: Recognizer) -> set[str]:
    """Ids of the reply's calls that are context commands ``rec`` answers."""
    out = set()
    for c in recognizable(reply).get("tool_calls") or []:
        if isinstance(c, dict) and isinstance(c.get("id"), str) and call_action(c, rec).context is not None:
            out.add(c["id"])
    return out


async def spliced(service: SurfaceService, p: Plan, opened: httpx.Response) -> AsyncIterator[bytes]:
    """Every round of a streamed request that may be internal, as one answer. Once the answer
    has started, a failure (the store, the next round's upstream call) is an error event in the
    surface's shape, never a broken body."""
    try:
        async for out in _rounds(service, p, opened):
            yield out
    except ProxyError as e:
        yield p.adapter.stream_error(e.message)
    except Exception as e:  # noqa: BLE001 - a 200 stream must end with an event
        yield p.adapter.stream_error(f"internal proxy error: {type(e).__name__}: {e}")


async def _rounds(service: SurfaceService, p: Plan, opened: httpx.Response) -> AsyncIterator[bytes]:
    adapter, cfg = p.adapter, service.cfg
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
                    if not done and adapter.closing(ev) and (final or sp.released) and not sp.holding_later:
                        done = True
                        with contextlib.suppress(ProxyError):
                            await adapter.done(p.parsed, sp.view(upstream_answer(adapter, adapter.aggregate(events))))
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
            data = sp.fixed(upstream_answer(adapter, adapter.aggregate(events)))
            count(service.metrics, adapter.key, as_usage(data), call=False)  # counted when opened
            reply = adapter.reply(data)
            calls = None
            if not final and not sp.released and reply is not None:
                calls = context_calls(recognizable(reply), p.rec)
            if calls is None or reply is None:
                tail = sp.finish(False, context_ids=context_ids(reply, p.rec) if reply is not None else ())
                if not done:
                    with contextlib.suppress(ProxyError):
                        await adapter.done(p.parsed, sp.view(data))
                if reply is not None:  # held calls are stored before the client has the answer's end
                    kept, left_out = reply, sp.left_out
                    split = sp.split_answer(data)
                    if split is not None and (with_split := adapter.reply(split[0])) is not None:
                        kept, left_out = with_split, [split[1], *left_out]
                    await service.kept(p.s, adapter.key, kept, left_out, before)
                for out in tail:
                    yield out
                if reply is not None:  # the client has the whole answer
                    await service.manager.deliver(p.s, p.base, reply)
                return
            visible = visible_text(str(reply.get("content") or ""), not reply.get("tool_calls"))
            for out in sp.finish(True, visible):
                yield out
            shown = sp.shown()
            before += shown
            rounds += 1
            p.base, view, rendered = await service.internal(adapter, p.s, p.base, reply, calls, shown, clash=p.clash)
            sp.prior_usage = add(sp.prior_usage, as_usage(data))  # the final round reports the sum
            added = p.added
            if rounds >= cfg.max_rounds:  # the last round offers no context command
                async with p.s.lock:
                    p.base, rendered = service.render(p.s.view(p.base, cfg.renderer), p.s.sid)
                added = []
            request = adapter.build(p.body, p.parsed, rendered, view.history, p.tail, added)
            try:
                got = await service.open(adapter, request, p.headers, p.query)
            except ProxyError as e:
                yield adapter.stream_error(e.message)
                return
            if isinstance(got, Failed):
                service.metrics.inc("refold_upstream_errors_total", status=str(got.status))
                yield adapter.stream_error(cause(got))
                return
            r = got
            count(service.metrics, adapter.key, None)
    finally:
        if r is not None:
            await r.aclose()


def as_usage(data: Any) -> Any:
    return data.get("usage") if isinstance(data, dict) else None


async def relay(adapter: Adapter, parsed: Parsed, r: httpx.Response, metrics: Metrics) -> AsyncIterator[bytes]:
    """A round that cannot be internal, byte for byte."""
    events: list[Event] = []
    finished = False
    try:
        async for ev in read_events(r):
            events.append(ev)
            if not finished and adapter.closing(ev):
                finished = True
                with contextlib.suppress(ProxyError):
                    await adapter.done(parsed, upstream_answer(adapter, adapter.aggregate(events)))
            yield ev.raw
    except httpx.HTTPError as e:
        yield adapter.stream_error(f"upstream stream failed: {type(e).__name__}: {e}")
        return
    finally:
        await r.aclose()
    if not ended_properly(events):
        yield adapter.stream_error("upstream stream ended before its final event (cut off)")
        return
    try:
        answer = upstream_answer(adapter, adapter.aggregate(events))
    except ProxyError:  # relayed as the upstream sent it; nothing to count or remember
        return
    count(metrics, adapter.key, as_usage(answer), call=False)  # counted when opened
    if not finished:
        with contextlib.suppress(ProxyError):
            await adapter.done(parsed, answer)

