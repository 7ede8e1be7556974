"""``POST /v1/responses``: OpenAI's Responses API through refold (Codex, the openai-agents SDK).

``previous_response_id`` is mapped onto the session: the proxy remembers, per API key, the items
of each conversation it answered (the input it was given plus the response's output, the last
``Conversations.size`` responses, in memory), so a request that continues one of them is expanded
into the whole conversation, recorded and rendered like any other, and sent upstream without
``previous_response_id`` (the upstream's stored copy holds the unfolded history). A
``previous_response_id`` the proxy does not know (made before a restart, or elsewhere) is passed
through to the upstream unchanged, and so is a request whose input holds ``item_reference`` items
and a harness's own compaction request. ``/v1/responses/compact`` and the other Responses paths
are forwarded unchanged (``passthrough``).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.responses import Response

from ..errors import ProxyError
from ..history import History
from ..types import Message, Rendered
from . import responses_wire as wire
from .surface import Event, Parsed, SurfaceService, parse_json
from .upstream import Upstream


class Conversations:
    """Response id -> (owner, the conversation's items up to and including that response)."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()

    def get(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        found = self._items.get(response_id)
        if found is None or found[0] != owner:  # another key's response looks like an unknown one
            return None
        self._items.move_to_end(response_id)
        return list(found[1])

    def put(self, owner: str, response_id: str, items: list[dict[str, Any]]) -> None:
        self._items[response_id] = (owner, items)
        self._items.move_to_end(response_id)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class ResponsesAdapter:
    key = wire.KEY
    path = "/responses"

    def __init__(self, upstream: Upstream, conversations: Conversations) -> None:
        self.upstream = upstream
        self.conversations = conversations

    def parse(self, body: dict[str, Any]) -> Parsed:
        return wire.parse(body)

    def build(
        self,
        body: dict[str, Any],
        parsed: Parsed,
        rendered: Rendered,
        history: History,
        tail: Message | None,
        added: list[dict[str, Any]],
    ) -> dict[str, Any]:
        return wire.build(body, parsed, rendered, history, tail, added)

    def reply(self, data: Any) -> Message | None:
        return wire.reply(data)

    def aggregate(self, events: Sequence[Event]) -> Any:
        return wire.aggregate([parse_json(e.data) for e in events])

    def headers(self, client_key: str | None, headers: Mapping[str, str]) -> dict[str, str]:
        return self.upstream.headers(client_key, dict(headers))

    def error(self, exc: ProxyError) -> tuple[int, dict[str, Any]]:
        return exc.status, exc.body()

    def stream_error(self, message: str) -> bytes:
        data = {"type": "error", "code": "upstream_error", "message": message, "param": None}
        return f"event: error\ndata: {json.dumps(data)}\n\n".encode()

    def done(self, parsed: Parsed, data: Any) -> None:
        owner = parsed.state.get("owner")
        if isinstance(data, dict) and isinstance(data.get("id"), str) and isinstance(data.get("output"), list) and owner:
            outputs = [i for i in data["output"] if isinstance(i, dict)]
            self.conversations.put(owner, data["id"], [*parsed.state["items"], *outputs])


async def responses(
    service: SurfaceService,
    adapter: ResponsesAdapter,
    body: Any,
    owner: str,
    key: str | None,
    headers: Mapping[str, str],
    query: str,
    forward: Any,
) -> Response:
    if not isinstance(body, dict):
        raise ProxyError(400, "request body must be a JSON object", code="invalid_body")
    prior: list[dict[str, Any]] | None = None
    previous = body.get("previous_response_id")
    if previous is not None:
        prior = adapter.conversations.get(owner, previous) if isinstance(previous, str) else None
    passthrough = (
        headers.get("x-refold-passthrough") == "1"
        or (previous is not None and prior is None)
        or not wire.renderable(body)
        or wire.is_compaction_request(body)
    )
    if passthrough:
        service.metrics.inc("refold_passthrough_total", surface=adapter.key)
        response: Response = await forward(adapter.path, body, adapter.headers(key, headers), query)
        return response
    parsed = wire.parse({k: v for k, v in body.items() if k != "previous_response_id"}, prior)
    parsed.state["owner"] = owner
    return await service.handle(adapter, body, owner, key, headers, query, parsed=parsed)
