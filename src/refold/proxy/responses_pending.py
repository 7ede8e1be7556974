"""A Response answered in the background (``background: true``): the upstream answers at once
with ``status: "queued"`` and no output, and the client polls ``GET /v1/responses/{id}`` (forwarded)
for the rest. The proxy remembers such a response with a marker item in place of its output; a
request continuing it (``previous_response_id``) fetches the finished response from the upstream
and takes its output items, so the prompt holds the model's answer (it was left out: a
``function_call_output`` went upstream without its call). One not finished yet is a 400 saying so.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from ..errors import ProxyError

PENDING = {"type": "refold_pending"}
"""Stands for the output of a response that was still running when it was answered."""

_RUNNING = ("queued", "in_progress")


def running(data: Any) -> bool:
    """``data`` (a Response) has no output yet: it runs in the background."""
    return isinstance(data, dict) and data.get("status") in _RUNNING


def pending(items: list[dict[str, Any]]) -> bool:
    return bool(items) and items[-1] == PENDING


async def finished(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], timeout: float, response_id: str
) -> list[dict[str, Any]]:
    """The output items of the background response ``response_id`` once it is done, read from the
    upstream (``url``: its ``GET /responses/{id}``); a 400 naming its status when it is not."""
    try:
        r = await client.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as e:
        raise ProxyError(502, f"upstream unreachable while reading background response {response_id}: "
                         f"{type(e).__name__}", type="upstream_error", code="upstream_error") from None
    try:
        data = json.loads(r.content)
    except ValueError:
        data = None
    if r.status_code >= 400 or not isinstance(data, dict):
        raise ProxyError(502 if r.status_code < 400 else r.status_code,
                         f"upstream answered {r.status_code} reading background response {response_id}",
                         type="upstream_error", code="upstream_error")
    status = data.get("status")
    output = data.get("output")
    if status in _RUNNING or not isinstance(output, list):
        raise ProxyError(400, f"Previous response {response_id} is still {status}: wait until it has completed",
                         param="previous_response_id", code="previous_response_not_completed")
    return [o for o in output if isinstance(o, dict)]
