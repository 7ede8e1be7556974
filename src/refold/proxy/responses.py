"""``POST /v1/responses``: OpenAI's Responses API through refold (Codex, the openai-agents SDK).

``previous_response_id`` is mapped onto the session: the proxy keeps, per API key, each response
it answered in the session store (``--store``: SQLite or Redis; the items it adds to its parent's
conversation, the new input and the response's output), so a request that continues one of them,
also after a restart or on another replica, is expanded into the whole conversation, recorded and
rendered like any other, and sent upstream without ``previous_response_id`` (the upstream's
stored copy holds the unfolded history). A ``previous_response_id`` the proxy does not know (made
elsewhere, by another key, or pruned with ``refold sessions prune``) gets the error the OpenAI API
gives: 400 ``previous_response_not_found``. Passed through unchanged: a request whose input holds
``item_reference`` items, a harness's own compaction request, any request with
``X-Refold-Passthrough: 1``; ``/v1/responses/compact`` and the other Responses paths are forwarded
unchanged (``passthrough``).
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.responses import Response

from ..errors import ProxyError, StoreUnavailable
from ..history import History
from ..types import Message, Rendered
from . import responses_wire as wire
from .records import Store
from .surface import Event, Parsed, SurfaceService, parse_json
from .upstream import Upstream


class Conversations:
    """Response id -> the conversation's items up to and including that response, per owner: in
    the store (durable, shared by replicas), with the latest ``size`` in memory in front of it."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self.store: Store | None = None
        self._items: OrderedDict[tuple[str, str], list[dict[str, Any]]] = OrderedDict()

    async def get(self, owner: str, response_id: str) -> list[dict[str, Any]] | None:
        key = (owner, response_id)  # another key's response looks like an unknown one
        found = self._items.get(key)
        if found is None and self.store is not None:
            found = await self.store.response_items(owner, response_id)
            if found is not None:
                self._remember(key, found)
        if found is None:
            return None
        self._items.move_to_end(key)
        return list(found)

    async def put(self, owner: str, response_id: str, parent: str | None, prior: int, items: list[dict[str, Any]]) -> None:
        """``items``: the whole conversation; its first ``prior`` are ``parent``'s."""
        self._remember((owner, response_id), items)
        if self.store is not None:
            # the answer is paid for: the client still gets it (the mapping lives in memory; the
            # fault shows on /readyz and the next turn)
            with contextlib.suppress(StoreUnavailable):
                await self.store.put_response(owner, response_id, parent, items[prior:])

    def _remember(self, key: tuple[str, str], items: list[dict[str, Any]]) -> None:
        self._items[key] = items
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


def not_found(response_id: str) -> ProxyError:
    """What the OpenAI API answers for a ``previous_response_id`` it does not have."""
    shown = response_id if len(response_id) <= 200 else response_id[:199] + "…"
    return ProxyError(
        400, f"Previous response with id '{shown}' not found.", param="previous_response_id",
        code="previous_response_not_found",
    )


FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""The event that closes a streamed response: its id is remembered before the client reads it."""


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

    def closing(self, ev: Event) -> bool:
        return ev.name in FINAL_EVENTS

    async def done(self, parsed: Parsed, data: Any) -> None:
        owner = parsed.state.get("owner")
        if isinstance(data, dict) and isinstance(data.get("id"), str) and isinstance(data.get("output"), list) and owner:
            outputs = [i for i in data["output"] if isinstance(i, dict)]
            await self.conversations.put(
                owner, data["id"], parsed.state.get("previous"), parsed.state.get("prior", 0),
                [*parsed.state["items"], *outputs],
            )


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
    if adapter.conversations.store is None:
        adapter.conversations.store = service.manager.store
    prior: list[dict[str, Any]] | None = None
    previous = body.get("previous_response_id")
    passthrough = (
        headers.get("x-refold-passthrough") == "1" or not wire.renderable(body) or wire.is_compaction_request(body)
    )
    if previous is not None and not passthrough:
        if not isinstance(previous, str) or not previous:
            raise ProxyError(400, "previous_response_id: must be a non-empty string", param="previous_response_id",
                             code="invalid_value")
        prior = await adapter.conversations.get(owner, previous)
        if prior is None:
            raise not_found(previous)
    if passthrough:
        service.metrics.inc("refold_passthrough_total", surface=adapter.key)
        response: Response = await forward(adapter.path, body, adapter.headers(key, headers), query)
        return response
    parsed = wire.parse({k: v for k, v in body.items() if k != "previous_response_id"}, prior)
    parsed.state.update(owner=owner, previous=previous, prior=len(prior or []))
    return await service.handle(adapter, body, owner, key, headers, query, parsed=parsed)
