"""One chat completion through the proxy: record, render, call upstream, answer context commands.

Streaming: a round that may turn out to be an internal context-command round is read to its end
before anything is relayed, because OpenAI-style streams send a reply's text before its tool calls,
so only the end of the round tells whether the text belongs to a round the client must never see
(relaying it would also make the client echo back an assistant message the session never stored,
forking the branch before the internal step and losing e.g. a span fold). A round that cannot be
internal is relayed event by event as it arrives: no context command is recognizable in the
request (tools without a shell tool while no context tools are offered), the request's rounds are
used up (``max_rounds``; 0 makes the proxy a plain streaming pass-through), the request ends with
an assistant message (prefill), or it asks for several choices.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..context.tools import offer
from ..errors import ProxyError
from ..messages import clean
from ..types import Message
from .commands import context_calls, observations
from .config import ProxyConfig
from .mapping import INTERNAL, validate
from .metrics import Metrics
from .sessions import Session, SessionManager, View, session_name
from .upstream import Live, Result, Upstream


@dataclass
class Outcome:
    result: Result
    session: Session
    steps: int
    stream: bool
    include_usage: bool
    added_ms: float
    live: Live | None = None
    """The final round, still streaming from upstream (``result`` is then filled in at its end)."""


class ChatService:
    def __init__(
        self, cfg: ProxyConfig, manager: SessionManager, upstream: Upstream, metrics: Metrics
    ) -> None:
        self.cfg = cfg
        self.manager = manager
        self.upstream = upstream
        self.metrics = metrics
        self._tok: Any = None
        self._background: set[asyncio.Task[None]] = set()

    async def complete(
        self, body: Any, owner: str, client_key: str | None, headers: Mapping[str, str]
    ) -> Outcome:
        start = time.perf_counter()
        if not isinstance(body, dict):
            raise ProxyError(400, "request body must be a JSON object", code="invalid_body")
        messages = validate(body.get("messages"))
        if not isinstance(body.get("model"), str) or not body["model"]:
            raise ProxyError(400, "'model' must be a non-empty string", code="invalid_model")
        tools = body.get("tools")
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise ProxyError(400, "'tools' must be an array of objects", code="invalid_tools")
        cfg = self.cfg
        s = await self.manager.get(owner, session_name(headers.get("x-refold-session"), messages, owner))
        async with s.lock:
            turn = await self.manager.turn(s, messages)
            base, steps, messages_out = self._render(turn.view, turn.tail)
        self.metrics.inc("refold_turns_recorded_total", turn.added)
        self.metrics.inc("refold_branches_total", int(turn.branched))
        stream = bool(body.get("stream"))
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        req = {k: v for k, v in body.items() if k != "messages"}
        if stream:
            req["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
        added, rec = offer(cfg.config, tools, offer=cfg.context_tools)
        if added:
            req["tools"] = [*(tools or []), *added]
        single = body.get("n") in (None, 1)
        up_headers = self.upstream.headers(client_key, dict(headers))
        upstream_ms = 0.0
        rounds = 0
        while True:
            final = not rec.possible or rounds >= cfg.max_rounds or turn.tail is not None or not single
            self._count_tokens(messages, messages_out)
            t0 = time.perf_counter()
            if stream and final:
                live = await self.upstream.open_stream({**req, "messages": messages_out}, up_headers)
                upstream_ms += (time.perf_counter() - t0) * 1000
                added_ms = (time.perf_counter() - start) * 1000 - upstream_ms
                self.metrics.observe("refold_added_latency_ms", added_ms)
                self.metrics.inc("refold_streams_relayed_live_total")
                return Outcome(Result({}), s, steps, stream, include_usage, added_ms, live)
            result = await self.upstream.chat({**req, "messages": messages_out}, up_headers)
            upstream_ms += (time.perf_counter() - t0) * 1000
            self._usage(result)
            n_choices = len(result.body.get("choices") or [])
            calls = context_calls(result.message, rec) if not final and n_choices == 1 else None
            if calls is None:
                break
            rounds += 1
            self.metrics.inc("refold_internal_rounds_total")
            reply = clean(result.message)
            if reply.get("content") is None:
                reply["content"] = ""
            async with s.lock:
                view = s.view(base, cfg.renderer)
                stored, obs, answers = observations(view.history, reply, calls, cfg.config)
                tip = await self.manager.commit(s, base, [(stored, obs, {INTERNAL: True})])
                base, steps, messages_out = self._render(s.view(tip, cfg.renderer), None)
            self.metrics.inc("refold_restores_total", len({i for a in answers for i in a.restore_of}))
            for c in calls:
                if c.context is not None:
                    self.metrics.inc("refold_context_commands_total", command=c.context.name)
            self.metrics.inc("refold_turns_recorded_total")
        added_ms = (time.perf_counter() - start) * 1000 - upstream_ms
        self.metrics.observe("refold_added_latency_ms", added_ms)
        return Outcome(result, s, steps, stream, include_usage, added_ms)

    def _render(self, view: View, tail: Message | None) -> tuple[str, int, list[Message]]:
        rendered = view.renderer.render(view.history)
        self.metrics.observe("refold_render_ms", rendered.stats.render_ms)
        out = list(rendered.messages)
        if tail is not None:
            out.append(clean(tail))
        return view.history.digest, len(view.history), out

    def _usage(self, result: Result) -> None:
        self.metrics.inc("refold_upstream_calls_total")
        u = result.usage
        details = u.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        for name, value in (
            ("prompt", u.get("prompt_tokens")),
            ("cached", cached),
            ("completion", u.get("completion_tokens")),
        ):
            if isinstance(value, int | float):
                self.metrics.inc(f"refold_upstream_{name}_tokens_total", float(value))

    def _count_tokens(self, full: list[Message], rendered: list[Message]) -> None:
        """Tokens-saved accounting runs off the request path (memoized per message)."""
        if not self.cfg.tokenizer or self.cfg.tokenizer == "off":
            return
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._count_sync, full, rendered))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _count_sync(self, full: list[Message], rendered: list[Message]) -> None:
        try:
            from ..chat_tokens import count_messages
            from ..tokens import get_tokenizer

            if self._tok is None:
                self._tok = get_tokenizer(self.cfg.tokenizer)
            a = count_messages([clean(m) for m in full], self._tok)
            b = count_messages(rendered, self._tok)
        except Exception:  # noqa: BLE001 - metrics must never fail a request
            return
        self.metrics.inc("refold_prompt_tokens_full_total", a)
        self.metrics.inc("refold_prompt_tokens_rendered_total", b)
        self.metrics.inc("refold_tokens_saved_total", max(0, a - b))  # counters only go up
        self.metrics.inc("refold_tokens_added_total", max(0, b - a))

    async def drain(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def sse(self, outcome: Outcome) -> AsyncIterator[bytes]:
        """The final round's events, as the upstream sent them (minus a usage chunk nobody asked
        for): replayed from the buffered round, or relayed as they arrive from a live one."""
        live = outcome.live
        try:
            events = live.iter() if live is not None else _replay(outcome.result.events)
            async for raw in events:
                if outcome.include_usage or not _usage_only(raw):
                    yield f"data: {raw}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            if live is not None:
                await live.aclose()
                outcome.result = live.result()
                self._usage(outcome.result)


async def _replay(events: list[str]) -> AsyncIterator[str]:
    for raw in events:
        yield raw


def _usage_only(raw: str) -> bool:
    try:
        chunk = json.loads(raw)
    except ValueError:
        return False
    return isinstance(chunk, dict) and not chunk.get("choices") and bool(chunk.get("usage"))
