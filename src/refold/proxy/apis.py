"""The routes of the other API surfaces, mounted by ``create_app`` after its own:
``/v1/messages`` (+ ``/count_tokens``), ``/v1/responses``, and every other ``/v1/...`` path
forwarded to the upstream unchanged (docs/proxy-apis.md)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from ..errors import ProxyError
from . import anthropic, passthrough, responses
from .body import read_body
from .config import ProxyConfig
from .metrics import Metrics
from .sessions import owner_of
from .surface import SurfaceService
from .validate import check_tree, parse_json_body

Auth = Callable[[Request], tuple[str, str | None]]
Forward = Callable[[str, Any, Mapping[str, str], str], Coroutine[Any, Any, Response]]


CREDENTIALS = ("authorization", "api-key", "x-api-key")


def mount(app: FastAPI, cfg: ProxyConfig, state: dict[str, Any], metrics: Metrics, auth: Auth | None = None) -> None:
    anthropic_adapter = anthropic.AnthropicAdapter(cfg, metrics)
    conversations = responses.Conversations()

    def service() -> SurfaceService:
        s = state.get("surfaces")
        if s is None:  # built on first use: the manager and upstream exist once the app has started
            s = state["surfaces"] = SurfaceService(cfg, state["manager"], state["upstream"], metrics)
        assert isinstance(s, SurfaceService)
        return s

    async def read(request: Request) -> tuple[Any, Forward]:
        """The body as JSON, and how to send it upstream unchanged (its bytes, for a pass-through)."""
        raw = await read_body(request, cfg.max_body)

        async def forward(path: str, body: Any, headers: Mapping[str, str], query: str) -> Response:
            s = service()
            return await passthrough.forward(s.client, s.url(path, query), "POST", raw, headers)

        return parse_body(raw), forward

    def who(request: Request) -> tuple[str, str | None]:
        """(owner, the client's key to send upstream): the tenant a middleware resolved, else
        ``auth``, else the key in ``x-api-key`` or the bearer (checked against ``--token``)."""
        t = request.scope.get("state", {}).get("tenant")
        if t is not None and isinstance(getattr(t, "owner", None), str):
            return t.owner, getattr(t, "key", None)
        if auth is not None:
            return auth(request)
        key = anthropic.client_key(cfg, request.headers)
        return owner_of(key), None if cfg.tokens else key

    def client_headers(request: Request) -> dict[str, str]:
        # the client's own credential headers stay here when the proxy has tokens or its own key
        strip = CREDENTIALS if (cfg.tokens or cfg.upstream_key) else ()
        return {k: v for k, v in request.headers.items() if k.lower() not in strip}

    def counted(status: int) -> None:
        metrics.inc("refold_requests_total", status=str(status))

    @app.post("/v1/messages")
    async def messages(request: Request) -> Response:
        try:
            body, forward = await read(request)
            out = await anthropic.messages(
                service(), anthropic_adapter, body, request.headers, request.url.query, forward
            )
        except ProxyError as e:
            counted(e.status)
            return anthropic.anthropic_error(e)
        counted(out.status_code)
        return out

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(request: Request) -> Response:
        try:
            body, _ = await read(request)
            return await anthropic.count_tokens(
                service(), anthropic_adapter, body, request.headers, request.url.query
            )
        except ProxyError as e:
            return anthropic.anthropic_error(e)

    @app.post("/v1/responses")
    async def create_response(request: Request) -> Response:
        owner, key = who(request)
        body, forward = await read(request)
        s = service()
        adapter = state.get("responses_adapter")
        if adapter is None:
            adapter = state["responses_adapter"] = responses.ResponsesAdapter(s.upstream, conversations)
        try:
            out = await responses.responses(
                s, adapter, body, owner, key, client_headers(request), request.url.query, forward
            )
        except ProxyError as e:
            counted(e.status)
            raise
        counted(out.status_code)
        return out

    @app.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    async def forwarded(request: Request, path: str) -> Response:
        _, key = who(request)
        raw = await read_body(request, cfg.max_body)
        s = service()
        headers = s.upstream.headers(key, client_headers(request))
        metrics.inc("refold_passthrough_total", surface="path")
        return await passthrough.forward(
            s.client, s.url(passthrough.upstream_path(path), request.url.query), request.method, raw or None, headers
        )


def parse_body(raw: bytes) -> Any:
    """A surface's request body: JSON checked as chat completions checks it (a one-line 400 for
    NaN, a number too long, nesting too deep; lone surrogates become U+FFFD), so nothing that
    cannot be hashed, stored and sent again reaches a session. A pass-through sends ``raw``."""
    return check_tree(parse_json_body(raw), "")
