"""The upstream calls of a non-chat surface (Anthropic Messages, OpenAI Responses), and what the
client is told when they fail.

An upstream error keeps its status: a client's retry and back-off read it (429, 500, Anthropic's
529 ``overloaded_error``), and the upstream speaks the client's API, so a body already in the
surface's error shape is returned as it came. Any other error body (a load balancer's HTML page,
plain text, another API's JSON) becomes the surface's error shape with a one-line cause naming
the upstream status. Transport failures are 502 (504 on a timeout).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ..errors import ProxyError
from .upstream import informative, retry_hint, send_retrying
from .validate import MAX_DEPTH, check_tree


@dataclass
class Failed:
    """An upstream answer with an error status."""

    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)  # ``informative`` ones: a 429's retry-after


@dataclass
class Answer:
    """A non-streamed upstream answer: its JSON body and the headers relayed to the client."""

    data: Any
    headers: dict[str, str]


def cause(f: Failed) -> str:
    """The upstream's error as one line: its message when the body carries one, else its first line."""
    try:
        data = json.loads(f.body)
    except ValueError:
        data = None
    err = data.get("error") if isinstance(data, dict) else None
    message = err.get("message") if isinstance(err, dict) else None
    if not isinstance(message, str) or not message.strip():
        text = f.body.decode("utf-8", "replace").strip()
        message = text.splitlines()[0] if text else "(empty body)"
    message = " ".join(message.split())
    return f"upstream answered {f.status}: {message[:300]}{retry_hint(f.headers)}"


def bad_stream(what: str) -> ProxyError:
    return ProxyError(
        502, f"upstream stream {what}", type="upstream_error", code="bad_upstream_response", param="stream"
    )


class _Checks(Protocol):
    def check(self, data: Any) -> Any: ...


def upstream_answer(adapter: _Checks, data: Any) -> Any:
    """An upstream answer (a body, or a stream added up) as the session may store it: lone
    surrogates replaced, NaN as null, its shape checked (a 502 naming the field otherwise)."""
    return adapter.check(check_tree(data, "", max_depth=2 * MAX_DEPTH, upstream=True))


async def post(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], timeout: float
) -> Answer | Failed:
    """A non-streamed upstream call: its JSON body and headers, or what failed."""
    r = await send_retrying(lambda: client.post(url, json=body, headers=headers), timeout)
    if r.status_code >= 400:
        return _failed(r, r.content)
    try:
        return Answer(r.json(), informative(r.headers))
    except ValueError:
        raise ProxyError(
            502, "upstream answered with a body that is not JSON", type="upstream_error",
            code="bad_upstream_response",
        ) from None


async def open_stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], timeout: float
) -> httpx.Response | Failed:
    """A streamed upstream call, open (its status read), or what failed."""
    r = await send_retrying(
        lambda: client.send(client.build_request("POST", url, json=body, headers=headers), stream=True),
        timeout,
    )
    if r.status_code >= 400:
        try:
            raw = await r.aread()
        finally:
            await r.aclose()
        return _failed(r, raw)
    return r


def _failed(r: httpx.Response, raw: bytes) -> Failed:
    return Failed(r.status_code, raw, r.headers.get("content-type", "application/json"), informative(r.headers))
