"""``POST /v1/responses``: OpenAI's Responses API through refold (Codex, the openai-agents SDK).

``previous_response_id`` is mapped onto the session: the proxy keeps, per API key, each response
it answered in the session store (``--store``: SQLite or Redis; the items it adds to its parent's
conversation, the new input and the response's output), so a request that continues one of them,
also after a restart or on another replica, is expanded into the whole conversation, recorded and
rendered like any other, and sent upstream without ``previous_response_id`` (the upstream's
stored copy holds the unfolded history). A ``previous_response_id`` the proxy does not know (made
elsewhere, by another key, or pruned with ``refold sessions prune``) gets the error the OpenAI API
gives: 400 ``previous_response_not_found``. A response answered in the background (queued, no output
yet) takes its output from the upstream when a request continues it (``responses_pending``). Passed through unchanged: a request whose input holds
``item_reference`` items, a harness's own compaction request, any request with
``X-Refold-Passthrough: 1``; ``/v1/responses/compact`` and the other Responses paths are forwarded
unchanged (``passthrough``).
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from fastapi.responses import Response

from ..context.recognize import Recognizer
from ..errors import ProxyError, StoreUnavailable
from ..history import History
from ..responses_items import CALLS, item_kind, item_text
from ..types import Message, Rendered
from . import responses_wire as wire
from .records import Store
from .responses_ids import UniqueIds
from .responses_pending import PENDING, finished, pending, running
from .spliced import SplicedRound, unsent
from .sse import Event, parse_json, sse
from .surface import Parsed, SurfaceService, as_dict
from .upstream import Upstream
from .usage import add


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


_OPENING = ("response.created", "response.in_progress", "response.queued")


class ResponsesSplicer(SplicedRound):
    """The rounds of one streamed request as one response: the first round's ``response.created``
    (its id kept to the end), every round's output items numbered on from the items already sent,
    sequence numbers continued, and the final round's closing event carrying every item the client
    was sent. A round is held from its first call item until that call is decided (all of it when
    the agent has no tools; a call that is not a ``function_call`` is decided at the round's end)."""

    items_key = "output"

    def __init__(self, rec: Recognizer) -> None:
        super().__init__(rec)
        self._started = False
        self._id: str | None = None
        self._offset = 0
        self._count = 0
        self._sent: list[dict[str, Any]] = []  # items of earlier (internal) rounds the client holds
        self._round_items: list[dict[str, Any]] = []
        self._seq: int | None = None  # the last sequence number sent
        self._spliced = False  # a round was dropped: later events are renumbered
        self._open: dict[int, tuple[dict[str, Any], list[str]]] = {}  # client index -> item added, text sent
        self._ids = UniqueIds()

    def begin(self, final: bool) -> None:
        super().begin(final)
        self._count, self._map, self._round_items, self._open = 0, {}, [], {}
        self._ids.begin()

    def step(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        kind = data.get("type")
        item = as_dict(data.get("item"))
        if not self.holding and kind == "response.output_item.added" and item.get("type") in CALLS:
            function = item.get("type") == "function_call"
            self.hold_call(data.get("output_index", -1), str(item.get("name") or "") if function else "")
            self.hold(ev, data)
            return self.verdict() if function else []
        if self.holding or self.ends_round(data):
            self.hold(ev, data)
            if kind == "response.function_call_arguments.delta" and data.get("output_index") == self.call and self.call_name:
                self.call_args += str(data.get("delta", ""))
                return self.verdict()
            return []
        return self.emit(ev, data)

    def call_start(self, data: dict[str, Any]) -> tuple[int, str, str] | None:
        item = as_dict(data.get("item"))
        if data.get("type") != "response.output_item.added" or item.get("type") not in CALLS:
            return None
        name = str(item.get("name") or "") if item.get("type") == "function_call" else str(item.get("type"))
        return int(data.get("output_index", -1)), name, str(item.get("call_id") or item.get("id") or "")

    def call_delta(self, data: dict[str, Any]) -> tuple[int, str] | None:
        if data.get("type") != "response.function_call_arguments.delta":
            return None
        return int(data.get("output_index", -1)), str(data.get("delta", ""))

    def call_end(self, data: dict[str, Any]) -> int | None:
        i = data.get("output_index")
        return i if data.get("type") == "response.function_call_arguments.done" and isinstance(i, int) else None

    def with_piece(self, data: dict[str, Any], piece: str) -> dict[str, Any]:
        return {**data, "delta": piece}

    def with_args(self, data: dict[str, Any], index: int, args: str) -> dict[str, Any] | None:
        if data.get("output_index") != index:
            return None
        if data.get("type") == "response.function_call_arguments.done":
            return {**data, "arguments": args}
        item = data.get("item")
        if data.get("type") == "response.output_item.done" and isinstance(item, dict):
            return {**data, "item": {**item, "arguments": args}}
        return None

    def fixed(self, data: Any) -> Any:
        g, i = self.guard, self.call
        output = data.get("output") if isinstance(data, dict) else None
        if g is None or g.shown is None or i is None or not isinstance(output, list) or not 0 <= i < len(output):
            return data
        item = output[i]
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return data
        return {**data, "output": [*output[:i], {**item, "arguments": g.shown}, *output[i + 1 :]]}

    def text_of(self, data: dict[str, Any]) -> str | None:
        if data.get("type") == "response.output_text.delta":
            return str(data.get("delta", ""))
        return None

    def ends_round(self, data: dict[str, Any]) -> bool:
        return data.get("type") in wire.FINAL_EVENTS

    def emit(self, ev: Event, data: dict[str, Any]) -> list[bytes]:
        kind = data.get("type")
        unique = self._ids.event(data, self._offset + self._count)
        changed: dict[str, Any] = {k: v for k, v in unique.items() if data.get(k) is not v}
        data = unique
        if kind in _OPENING:
            if self._spliced and self._started:
                return []  # the answer's response is open already
            self._started = True
            resp = data.get("response")
            if kind == "response.created" and isinstance(resp, dict) and isinstance(resp.get("id"), str):
                self._id = resp["id"]
        i = data.get("output_index")
        if isinstance(i, int):
            if i not in self._map:
                self._map[i] = self._offset + self._count
                self._count += 1
            c = self._map[i]
            if c is None:
                return []
            if c != i:
                changed["output_index"] = c
            if kind == "response.output_item.added" and isinstance(data.get("item"), dict):
                self._open[c] = (data["item"], [])
            elif kind == "response.output_text.delta" and c in self._open:
                self._open[c][1].append(str(data.get("delta", "")))
            elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
                self._round_items.append(data["item"])
                self._open.pop(c, None)
        if kind in wire.FINAL_EVENTS and isinstance(data.get("response"), dict):
            resp = self.view(data["response"])
            if resp != data["response"]:
                changed["response"] = resp
        seq = data.get("sequence_number")
        if isinstance(seq, int):
            if self._spliced and self._seq is not None:
                seq = self._seq + 1
                changed["sequence_number"] = seq
            self._seq = seq
        return [sse(ev.name, {**data, **changed}) if changed else ev.raw]

    def finish(self, internal: bool, visible: str = "", context_ids: Collection[str] = ()) -> list[bytes]:
        if not internal:
            return self.flush() + self.settle(context_ids)
        out = self._rest(visible)
        # a message item sent in part (an agent without tools: its text up to the command block)
        # is closed with the text the client has, so the final response holds what it was shown
        for c, (item, texts) in sorted(self._open.items()):
            if item_kind(item) != "message":
                continue
            done = {**item, "status": "completed", "content": [{"type": "output_text", "text": "".join(texts), "annotations": []}]}
            self._round_items.append(done)
            data = self._next_seq({"type": "response.output_item.done", "output_index": c, "item": done})
            out.append(sse("response.output_item.done", data))
        self._open = {}
        self._ids.sent_round(self._round_items)
        self._sent += self._round_items
        self._offset += self._count
        self._spliced = True
        self.held = []
        return out

    def _next_seq(self, data: dict[str, Any]) -> dict[str, Any]:
        if self._seq is not None:
            self._seq += 1
            data["sequence_number"] = self._seq
        return data

    def _rest(self, visible: str) -> list[bytes]:
        """The round's text the client was not sent, into its open message item (or a new one)."""
        sent = self.shown() + "".join("".join(t) for c, (i, t) in sorted(self._open.items()) if item_kind(i) == "message")
        rest = unsent(visible, sent)
        if not rest:
            return []
        out: list[bytes] = []
        open_messages = [c for c, (i, _) in sorted(self._open.items()) if item_kind(i) == "message"]
        if open_messages:
            c = open_messages[-1]
        else:
            c = self._offset + self._count
            self._count += 1
            item = {"id": f"msg_refold_{c}", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            self._open[c] = (item, [])
            part = {"type": "output_text", "text": "", "annotations": []}
            out.append(sse("response.output_item.added", self._next_seq(
                {"type": "response.output_item.added", "output_index": c, "item": item})))
            out.append(sse("response.content_part.added", self._next_seq(
                {"type": "response.content_part.added", "item_id": item["id"], "output_index": c, "content_index": 0,
                 "part": part})))
        item, texts = self._open[c]
        texts.append(rest)
        out.append(sse("response.output_text.delta", self._next_seq(
            {"type": "response.output_text.delta", "item_id": item.get("id"), "output_index": c, "content_index": 0,
             "delta": rest, "logprobs": []})))
        return out

    def shown(self) -> str:
        return "".join(item_text(i) for i in self._round_items if item_kind(i) == "message")

    def view(self, data: Any) -> Any:
        data = self.fixed(data)
        if not isinstance(data, dict) or not isinstance(data.get("output"), list):
            return data
        if not self._sent and self._id in (None, data.get("id")) and None not in self._map.values() and self.prior_usage is None:
            return data
        output = self._ids.items([o for n, o in enumerate(data["output"]) if self._map.get(n, 0) is not None])
        usage = {"usage": add(self.prior_usage, data.get("usage"))} if self.prior_usage is not None else {}
        return {**data, "id": self._id or data.get("id"), "output": [*self._sent, *output], **usage}


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

    def check(self, data: Any) -> Any:
        return wire.check_reply(data)

    def aggregate(self, events: Sequence[Event]) -> Any:
        return wire.aggregate([parse_json(e.data) for e in events])

    def without(self, data: Any, ids: Sequence[str]) -> Any:
        output = [o for o in data["output"] if not (isinstance(o, dict) and o.get("type") in CALLS and o.get("call_id") in ids)]
        return {**data, "output": output}

    def headers(self, client_key: str | None, headers: Mapping[str, str]) -> dict[str, str]:
        return self.upstream.headers(client_key, dict(headers))

    def error(self, exc: ProxyError) -> tuple[int, dict[str, Any]]:
        return exc.status, exc.body()

    def own_error(self, data: Any) -> bool:
        err = data.get("error") if isinstance(data, dict) else None
        return isinstance(err, dict) and isinstance(err.get("message"), str)

    def stream_error(self, message: str) -> bytes:
        data = {"type": "error", "code": "upstream_error", "message": message, "param": None}
        return f"event: error\ndata: {json.dumps(data)}\n\n".encode()

    def closing(self, ev: Event) -> bool:
        return ev.name in FINAL_EVENTS

    def splicer(self, rec: Recognizer) -> ResponsesSplicer:
        return ResponsesSplicer(rec)

    async def done(self, parsed: Parsed, data: Any) -> None:
        owner = parsed.state.get("owner")
        if isinstance(data, dict) and isinstance(data.get("id"), str) and isinstance(data.get("output"), list) and owner:
            outputs = [i for i in data["output"] if isinstance(i, dict)] if not running(data) else [PENDING]
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
        if pending(prior):  # answered in the background: its output is read from the upstream now
            url = service.url(f"{adapter.path}/{previous}", "")
            output = await finished(service.client, url, adapter.headers(key, headers), service.cfg.timeout, previous)
            prior = [*prior[:-1], *output]
            await adapter.conversations.put(owner, previous, None, 0, prior)
    if passthrough:
        service.metrics.inc("refold_passthrough_total", surface=adapter.key)
        response: Response = await forward(adapter.path, body, adapter.headers(key, headers), query)
        return response
    parsed = wire.parse({k: v for k, v in body.items() if k != "previous_response_id"}, prior)
    parsed.state.update(owner=owner, previous=previous, prior=len(prior or []))
    return await service.handle(adapter, body, owner, key, headers, query, parsed=parsed)
