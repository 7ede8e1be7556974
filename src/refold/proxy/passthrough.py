"""Requests forwarded to the upstream unchanged: paths refold does not fold (``/v1/embeddings``,
``/v1/completions``, ``/v1/responses/compact``, ``GET /v1/responses/{id}``, ...), a harness's own
compaction request, and a Responses request continuing a response the proxy does not know.

The body is sent byte for byte with the client's headers (less hop-by-hop ones and the proxy's own
token) and the answer is relayed as it arrives, status, content type and body unchanged.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
from fastapi.responses import Response, StreamingResponse

from ..errors import ProxyError
from .surface import forwardable

COMPACTION = (
    "Your task is to create a detailed summary of the conversation so far",
    "Your task is to create a detailed summary of the RECENT portion of the conversation",
    "CONTEXT CHECKPOINT COMPACTION",
)
"""Phrases of a harness's own summarization request (Claude Code's /compact, Codex's local
compaction): such a request is passed through as the harness wrote it."""

_HOP = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding", "keep-alive"}


def is_compaction(text: str) -> bool:
    return any(p in text for p in COMPACTION)


def upstream_path(path: str) -> str:
    """``/v1/embeddings`` -> ``/embeddings``: the upstream base URL already ends with its /v1."""
    path = "/" + path.lstrip("/")
    return path[3:] if path == "/v1" or path.startswith("/v1/") else path


def headers_for(headers: Mapping[str, str], drop_auth: bool, key: str | None) -> dict[str, str]:
    out = {k: v for k, v in headers.items() if k.lower() not in _HOP and not k.lower().startswith("x-refold")}
    if drop_auth:
        out = {k: v for k, v in out.items() if k.lower() != "authorization"}
        if key:
            out["authorization"] = f"Bearer {key}"
    return out


async def forward(
    client: httpx.AsyncClient,
    url: str,
    method: str,
    body: bytes | dict[str, Any] | None,
    headers: Mapping[str, str],
) -> Response:
    """One upstream call relayed to the client as it arrives."""
    content = json.dumps(body, ensure_ascii=False).encode() if isinstance(body, dict) else body
    h = dict(headers)
    if isinstance(body, dict):
        h = {k: v for k, v in h.items() if k.lower() != "content-type"} | {"content-type": "application/json"}
    req = client.build_request(method, url, content=content, headers=h)
    try:
        r = await client.send(req, stream=True)
    except httpx.TimeoutException:
        raise ProxyError(504, "upstream timed out", type="upstream_error", code="upstream_timeout") from None
    except httpx.HTTPError as e:
        raise ProxyError(
            502, f"upstream request failed: {type(e).__name__}: {e}", type="upstream_error", code="upstream_unreachable"
        ) from None

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in r.aiter_bytes():
                yield chunk
        finally:
            await r.aclose()

    return StreamingResponse(
        relay(),
        status_code=r.status_code,
        headers=forwardable(r.headers, ("content-type",)),
        media_type=r.headers.get("content-type"),
    )
