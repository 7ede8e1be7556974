"""Reading a request body: bounded before it is read whole, then parsed as JSON."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ..errors import ProxyError
from .validate import parse_json_body


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with a 413 as soon as it is longer than ``limit`` bytes; a
    compressed one (``Content-Encoding``) with a 415 saying so (it was read as text that is not
    UTF-8)."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        raise ProxyError(
            415, f"Content-Encoding {encoding[:40]!r} is not supported: send the request body uncompressed",
            code="unsupported_content_encoding",
        )
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> ProxyError:
    # the operator's knob, named: a long agent run's body can pass the default 32 MiB
    return ProxyError(
        413, f"request body is larger than the {limit:,} byte limit (refold serve --max-body raises it)",
        code="request_too_large",
    )


async def read_json(request: Request, limit: int) -> Any:
    """The request body parsed as JSON (a 400 naming what is wrong)."""
    return parse_json_body(await read_body(request, limit))
