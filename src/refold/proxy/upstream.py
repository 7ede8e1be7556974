"""The upstream OpenAI-compatible server: calls, SSE aggregation and error mapping."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..errors import ProxyError, StaleConnection

_HOP_HEADERS = {
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "accept-encoding",
    "authorization",
}


@dataclass
class Result:
    """One upstream completion: the JSON body (synthesized for streams) and, for streams, the raw events."""

    body: dict[str, Any]
    events: list[str] = field(default_factory=list)  # SSE ``data:`` payloads, in order, without [DONE]
    elapsed_ms: float = 0.0

    @property
    def message(self) -> dict[str, Any]:
        choices = self.body.get("choices") or [{}]
        msg = choices[0].get("message") or {}
        return msg if isinstance(msg, dict) else {}

    @property
    def usage(self) -> dict[str, Any]:
        u = self.body.get("usage")
        return u if isinstance(u, dict) else {}


class Upstream:
    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self._client = httpx.AsyncClient(
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
        return ProxyError(
            504, f"upstream timed out after {self.timeout:g}s", type="upstream_error", code="upstream_timeout"
        )

    async def models(self, headers: dict[str, str]) -> tuple[int, Any]:
        try:
            r = await self._client.get(f"{self.base_url}/models", headers=headers)
        except httpx.TimeoutException:
            raise self._timed_out() from None
        except httpx.HTTPError as e:
            raise _unreachable(e, "unreachable") from None
        if r.status_code >= 400:
            raise _error_from(r.status_code, r.content)
        return r.status_code, _json(r.content)

    async def chat(self, body: dict[str, Any], headers: dict[str, str]) -> Result:
        """One completion; a pooled connection the server closed before answering is retried once."""
        try:
            return await self._chat(body, headers)
        except StaleConnection:
            return await self._chat(body, headers, retry=False)

    async def _chat(self, body: dict[str, Any], headers: dict[str, str], retry: bool = True) -> Result:
        stream = bool(body.get("stream"))
        try:
            if not stream:
                r = await self._client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
                if r.status_code >= 400:
                    raise _error_from(r.status_code, r.content)
                data = _json(r.content)
                if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                    raise ProxyError(
                        502,
                        "upstream answered without a 'choices' list",
                        type="upstream_error",
                        code="bad_upstream_response",
                    )
                return Result(data, elapsed_ms=r.elapsed.total_seconds() * 1000)
            async with self._client.stream(
                "POST", f"{self.base_url}/chat/completions", json=body, headers=headers
            ) as r:
                if r.status_code >= 400:
                    raise _error_from(r.status_code, await r.aread())
                events = []
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            break
                        events.append(payload)
                return Result(aggregate(events), events)
        except httpx.TimeoutException:
            raise self._timed_out() from None
        except (httpx.RemoteProtocolError, httpx.ConnectError) as e:
            if retry:
                raise StaleConnection from e
            raise _unreachable(e, "request failed") from None
        except httpx.HTTPError as e:
            raise _unreachable(e, "request failed") from None

    async def open_stream(self, body: dict[str, Any], headers: dict[str, str]) -> Live:
        """A streamed completion whose status is checked (errors raise here, before any event is
        relayed) and whose events are read as they arrive (``Live.events``)."""
        for retry in (True, False):
            req = self._client.build_request(
                "POST", f"{self.base_url}/chat/completions", json=body, headers=headers
            )
            try:
                r = await self._client.send(req, stream=True)
            except httpx.TimeoutException:
                raise self._timed_out() from None
            except httpx.HTTPError as e:
                if retry and isinstance(e, httpx.RemoteProtocolError | httpx.ConnectError):
                    continue
                raise _unreachable(e, "request failed") from None
            if r.status_code >= 400:
                try:
                    raw = await r.aread()
                finally:
                    await r.aclose()
                raise _error_from(r.status_code, raw)
            return Live(r)
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        await self._client.aclose()


class Live:
    """An upstream stream relayed as it arrives; ``result()`` aggregates what was read."""

    def __init__(self, response: httpx.Response) -> None:
        self._r = response
        self.events: list[str] = []
        self.error: str | None = None

    async def iter(self) -> AsyncIterator[str]:
        """The ``data:`` payloads until [DONE]; a failure mid-stream ends it with an error event."""
        try:
            async for line in self._r.aiter_lines():
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    self.events.append(payload)
                    yield payload
        except httpx.HTTPError as e:
            self.error = f"upstream stream failed: {type(e).__name__}: {e}"
            yield json.dumps(
                {"error": {"message": self.error, "type": "upstream_error", "code": "upstream_error"}}
            )
        finally:
            await self.aclose()

    def result(self) -> Result:
        try:
            return Result(aggregate(self.events), self.events)
        except ProxyError:
            return Result({"choices": []}, self.events)

    async def aclose(self) -> None:
        await self._r.aclose()


def aggregate(events: list[str]) -> dict[str, Any]:
    """A chat.completion body equivalent to a stream of chat.completion.chunk events."""
    head: dict[str, Any] = {}
    msg: dict[str, Any] = {"role": "assistant", "content": None}
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    for raw in events:
        try:
            chunk = json.loads(raw)
        except ValueError:
            raise ProxyError(
                502,
                "upstream sent a stream event that is not JSON",
                type="upstream_error",
                code="bad_upstream_response",
            ) from None
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else str(err)
            raise ProxyError(
                502, f"upstream stream error: {message}", type="upstream_error", code="upstream_error"
            )
        head = head or {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint")}
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                msg["content"] = (msg["content"] or "") + delta["content"]
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    int(tc.get("index", 0)),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    body = {
        **head,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def _unreachable(e: Exception, what: str) -> ProxyError:
    """A transport failure talking to the upstream, as an OpenAI-style 502."""
    return ProxyError(
        502, f"upstream {what}: {type(e).__name__}: {e}", type="upstream_error", code="upstream_unreachable"
    )


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise ProxyError(
            502,
            "upstream answered with a body that is not JSON",
            type="upstream_error",
            code="bad_upstream_response",
        ) from None


def _error_from(status: int, raw: bytes) -> ProxyError:
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
        )
    text = raw[:300].decode("utf-8", "replace").strip()
    return ProxyError(
        status,
        f"upstream returned HTTP {status}: {text or '(empty body)'}",
        type="upstream_error",
        code="upstream_error",
    )
