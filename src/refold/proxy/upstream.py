"""The upstream OpenAI-compatible server: calls, SSE aggregation and error mapping."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..errors import ProxyError, StaleConnection
from .custom_calls import as_function, outbound
from .stream import Accumulator, sse_lines
from .validate import bad_upstream, check_upstream_reply, parse_chunk, parse_upstream_json

_HOP_HEADERS = {
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "accept-encoding",
    "authorization",
}


INFORMATIVE = (
    "x-request-id",
    "request-id",
    "x-ratelimit-",
    "ratelimit-",
    "retry-after",  # and retry-after-ms
    "x-should-retry",
    "openai-",
    "anthropic-ratelimit-",
    "x-amzn-requestid",
    "x-amzn-bedrock-",
    "apim-request-id",
)
"""Prefixes of the upstream response headers a client is sent as the upstream sent them: request
ids (what a provider's support asks for), rate limits and retry hints (what a client's back-off
reads), processing time. An allow-list: framing (content-length, transfer-encoding,
content-encoding, connection), cookies and anything else the proxy answers for itself stay out."""


def informative(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an upstream answer that are relayed to the client (``INFORMATIVE``)."""
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith(INFORMATIVE)}


def retry_hint(headers: Mapping[str, str]) -> str:
    """`` (retry-after: 7)`` for an error told in an event stream, where no header can carry it."""
    hints = [f"{k}: {headers[k]}" for k in ("retry-after", "retry-after-ms") if k in headers]
    return f" ({', '.join(hints)})" if hints else ""


@dataclass
class Result:
    """One upstream completion: the JSON body (synthesized for streams) and, for streams, the raw events."""

    body: dict[str, Any]
    events: list[str] = field(default_factory=list)  # SSE ``data:`` payloads, in order, without [DONE]
    elapsed_ms: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)  # ``informative`` headers of the answer

    @property
    def message(self) -> dict[str, Any]:
        choices = self.body.get("choices") or [{}]
        first = choices[0] if isinstance(choices[0], dict) else {}
        msg = first.get("message") or {}
        return as_function(msg) if isinstance(msg, dict) else {}

    @property
    def usage(self) -> dict[str, Any]:
        u = self.body.get("usage")
        return u if isinstance(u, dict) else {}


class Upstream:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.client = httpx.AsyncClient(  # one pool and one timeout for every surface
            timeout=httpx.Timeout(timeout, connect=min(timeout, 30.0)),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
        )

    def headers(self, client_key: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = {
            k: v
            for k, v in (extra or {}).items()
            if k.lower() not in _HOP_HEADERS and not k.lower().startswith("x-refold")
        }
        key = self.api_key or client_key
        if key:
            h["authorization"] = f"Bearer {key}"
        return h

    def _timed_out(self) -> ProxyError:
        return timed_out(self.timeout)

    async def models(self, headers: dict[str, str]) -> tuple[int, Any]:
        try:
            r = await self.client.get(f"{self.base_url}/models", headers=headers)
        except httpx.TimeoutException:
            raise self._timed_out() from None
        except httpx.HTTPError as e:
            raise _unreachable(e, "unreachable") from None
        if r.status_code >= 400:
            raise _error_from(r.status_code, r.content, r.headers)
        return r.status_code, _json(r.content)

    async def chat(self, body: dict[str, Any], headers: dict[str, str]) -> Result:
        """One completion (a stream is read to its end and added up); a pooled connection the
        server closed before answering is retried once."""
        body = outbound(body)
        if body.get("stream"):
            live = await self.open_stream(body, headers)
            try:
                async for _ in live.chunks():
                    pass
            finally:
                await live.aclose()
            if live.error is not None:
                raise live.error
            return live.result()
        try:
            return await self._chat(body, headers)
        except StaleConnection:
            return await self._chat(body, headers, retry=False)

    async def _chat(self, body: dict[str, Any], headers: dict[str, str], retry: bool = True) -> Result:
        try:
            r = await self.client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException:
            raise self._timed_out() from None
        except (httpx.RemoteProtocolError, httpx.ConnectError) as e:
            if retry:
                raise StaleConnection from e
            raise _unreachable(e, "request failed") from None
        except httpx.HTTPError as e:
            raise _unreachable(e, "request failed") from None
        if r.status_code >= 400:
            raise _error_from(r.status_code, r.content, r.headers)
        return Result(
            check_upstream_reply(_json(r.content)),
            elapsed_ms=r.elapsed.total_seconds() * 1000,
            headers=informative(r.headers),
        )

    async def open_stream(self, body: dict[str, Any], headers: dict[str, str]) -> Live:
        """A streamed completion whose status is checked (errors raise here, before any event is
        relayed) and whose chunks are read as they arrive (``Live.chunks``)."""
        body = outbound(body)
        url, client = f"{self.base_url}/chat/completions", self.client
        r = await send_retrying(
            lambda: client.send(client.build_request("POST", url, json=body, headers=headers), stream=True),
            self.timeout,
        )
        if r.status_code >= 400:
            try:
                raw = await r.aread()
            finally:
                await r.aclose()
            raise _error_from(r.status_code, raw, r.headers)
        return Live(r, self.timeout)

    async def close(self) -> None:
        await self.client.aclose()


async def _payloads(r: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any] | None]]:
    """A chat stream's ``data:`` payloads, checked (None: ``[DONE]``): one per line, as servers
    send them, and an event whose JSON spans several data lines (SSE joins them with a newline,
    e.g. pretty-printed chunks) as one, its payload on one line (a chunk relayed as read is one
    ``data:`` line to the client)."""
    pending: list[str] = []
    async for line in sse_lines(r):
        if line.startswith("data:") and not pending:
            piece = line[5:].strip()
            if piece == "[DONE]":
                yield piece, None
                continue
            try:
                chunk = parse_chunk(piece)
            except ProxyError:
                if not piece.startswith("{"):
                    raise
                pending = [piece]  # maybe the first line of a longer event: its blank line decides
                continue
            yield piece, chunk
        elif line.startswith("data:"):
            pending.append(line[5:].removeprefix(" "))
        elif not line and pending:
            yield _joined(pending)
            pending = []
    if pending:
        yield _joined(pending)


def _joined(lines: list[str]) -> tuple[str, dict[str, Any]]:
    """A chunk spread over several ``data:`` lines, checked, and its payload on one line."""
    chunk = parse_chunk("\n".join(lines))
    return json.dumps(chunk, ensure_ascii=False), chunk


class Live:
    """An upstream stream read as it arrives: every chunk is checked before it is handed on, and
    ``result()`` adds up what was read. A failure (transport, a malformed chunk, an error event)
    ends the iteration and is kept in ``error``; the caller decides how to tell the client."""

    def __init__(self, response: httpx.Response, timeout: float = 600.0) -> None:
        self._r = response
        self._timeout = timeout
        self.headers = informative(response.headers)
        self.events: list[str] = []
        self.acc = Accumulator()
        self.error: ProxyError | None = None
        self.done = False  # [DONE] (or the end of the body) was reached
        self._it: AsyncIterator[tuple[str, dict[str, Any]]] | None = None
        self._peeked: tuple[str, dict[str, Any]] | None = None

    async def peek(self) -> tuple[str, dict[str, Any]] | None:
        """Read the first chunk now (``chunks`` yields it again); None when the stream has none."""
        self._it = self._read()
        try:
            self._peeked = await self._it.__anext__()
        except StopAsyncIteration:
            self._peeked = None
        return self._peeked

    async def chunks(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(raw payload, checked chunk) until [DONE], or until a failure (kept in ``error``)."""
        if self._peeked is not None:
            first, self._peeked = self._peeked, None
            yield first
        it, self._it = self._it or self._read(), None
        async for item in it:
            yield item

    async def _read(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        try:
            if not _is_sse(self._r):  # the upstream ignored "stream": its whole answer, checked
                payload, chunk = _as_chunk(await self._r.aread())
                self.events.append(payload)
                self.acc.add(chunk)
                yield payload, chunk
                self.done = True
                return
            ended = False
            async for data, checked in _payloads(self._r):
                if checked is None:  # [DONE]
                    ended = True
                    break
                self.events.append(data)
                self.acc.add(checked)
                yield data, checked
            if not self.events:
                raise bad_upstream("stream", "ended without a single chunk")
            if not ended and self.acc.finish is None:  # cut off: a partial reply must not pass as whole
                raise bad_upstream("stream", "ended without a finish_reason or [DONE] (cut off)")
            self.done = True
        except ProxyError as e:
            self.error = e
        except httpx.TimeoutException:
            self.error = ProxyError(
                504, f"upstream stream stalled for {self._timeout:g}s", type="upstream_error", code="upstream_timeout"
            )
        except httpx.HTTPError as e:
            self.error = ProxyError(
                502, f"upstream stream failed: {type(e).__name__}: {e}", type="upstream_error", code="upstream_error"
            )
        finally:
            await self.aclose()

    def result(self) -> Result:
        return Result(self.acc.body(), self.events, headers=self.headers)

    async def aclose(self) -> None:
        await self._r.aclose()


def _is_sse(r: httpx.Response) -> bool:
    ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
    return ctype in ("text/event-stream", "")  # no content type: read it as the stream it should be


def _as_chunk(raw: bytes) -> tuple[str, dict[str, Any]]:
    """A whole chat.completion sent instead of a stream, as the one chunk it amounts to (a 502
    naming the field when it is not a completion)."""
    body = check_upstream_reply(parse_upstream_json(raw))
    choices = []
    for i, c in enumerate(body["choices"]):
        msg = c.get("message")
        delta = {k: v for k, v in msg.items() if v is not None} if isinstance(msg, dict) else {}
        if isinstance(delta.get("tool_calls"), list):  # a stream's calls carry their index
            delta["tool_calls"] = [{**tc, "index": j} for j, tc in enumerate(delta["tool_calls"])]
        choices.append({"index": c.get("index", i), "delta": delta, "finish_reason": c.get("finish_reason") or "stop"})
    if not choices:
        raise bad_upstream("choices", "is empty")
    chunk: dict[str, Any] = {k: body[k] for k in ("id", "created", "model", "system_fingerprint", "usage") if k in body}
    chunk["object"], chunk["choices"] = "chat.completion.chunk", choices
    payload = json.dumps(chunk, ensure_ascii=False)
    return payload, parse_chunk(payload)


def aggregate(events: list[str]) -> dict[str, Any]:
    """A chat.completion body equivalent to a stream of chat.completion.chunk events (each checked)."""
    acc = Accumulator()
    for raw in events:
        acc.add(parse_chunk(raw))
    return acc.body()


def timed_out(timeout: float) -> ProxyError:
    """An upstream call that took longer than ``timeout`` seconds, as a 504."""
    return ProxyError(504, f"upstream timed out after {timeout:g}s", type="upstream_error", code="upstream_timeout")


async def send_retrying(send: Callable[[], Awaitable[httpx.Response]], timeout: float) -> httpx.Response:
    """``send()``'s response, sent once more when it failed on a pooled connection the upstream
    closed meanwhile (the request never reached it); a timeout is a 504, another failure a 502."""
    for retry in (True, False):
        try:
            return await send()
        except httpx.TimeoutException:
            raise timed_out(timeout) from None
        except httpx.HTTPError as e:
            if retry and isinstance(e, httpx.RemoteProtocolError | httpx.ConnectError):
                continue
            raise _unreachable(e, "request failed") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _unreachable(e: Exception, what: str) -> ProxyError:
    """A transport failure talking to the upstream, as an OpenAI-style 502."""
    return ProxyError(
        502, f"upstream {what}: {type(e).__name__}: {e}", type="upstream_error", code="upstream_unreachable"
    )


def _json(raw: bytes) -> Any:
    return parse_upstream_json(raw)


def _error_from(status: int, raw: bytes, headers: Mapping[str, str]) -> ProxyError:
    kept = informative(headers)  # a 429's retry-after reaches the client's back-off
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return ProxyError(
            status,
            f"upstream: {err['message']}",
            type=str(err.get("type") or "upstream_error"),
            code=err.get("code"),
            headers=kept,
        )
    text = raw[:300].decode("utf-8", "replace").strip()
    return ProxyError(
        status,
        f"upstream returned HTTP {status}: {text or '(empty body)'}",
        type="upstream_error",
        code="upstream_error",
        headers=kept,
    )
