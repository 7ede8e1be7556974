"""The FastAPI application: OpenAI-compatible routes, session views, metrics, health.

Every request passes ``tenancy.Guard`` first (Host, Origin, content type, credential -> owner), so
a route only asks ``tenant(request)`` who is calling. Services (store, upstream, sessions, chat,
views) live in ``app.state.refold`` once the lifespan has started; routes are grouped on routers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException

from ..errors import ProxyError, StoreUnavailable
from ..history import History
from .apis import mount
from .body import read_json
from .chat import ChatService
from .config import ProxyConfig
from .metrics import CONTENT_TYPE, Metrics
from .records import Store
from .sessions import SessionManager
from .store import open_store
from .tenancy import Guard, forwarded_headers, tenant
from .unrouted import unrouted
from .upstream import Upstream
from .viewer_pool import ViewPool
from .views import session_routes

SESSION_HEADER = "X-Refold-Session"


def create_app(cfg: ProxyConfig, *, store: Store | None = None, views: ViewPool | None = None) -> FastAPI:
    """The proxy app; ``store`` overrides ``cfg.store`` and ``views`` the view workers (tests)."""
    metrics = Metrics()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = store or open_store(cfg.store)
        upstream = Upstream(cfg.upstream, api_key=cfg.upstream_key, timeout=cfg.timeout)
        manager = SessionManager(st, cfg.renderer)
        pool = views or ViewPool(metrics, workers=cfg.view_workers, max_pending=cfg.max_views)
        state.update(
            store=st,
            upstream=upstream,
            manager=manager,
            chat=ChatService(cfg, manager, upstream, metrics),
            views=pool,
        )
        await asyncio.to_thread(warm_up, cfg)
        try:
            yield
        finally:
            await state["chat"].drain()
            if "surfaces" in state:
                await state["surfaces"].saved.drain()
            pool.close()
            await upstream.close()
            await st.close()

    app = FastAPI(title="refold proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.refold = state
    app.state.config = cfg
    app.add_middleware(Guard, cfg=cfg)

    @app.exception_handler(ProxyError)
    async def _proxy_error(request: Request, exc: ProxyError) -> JSONResponse:
        if isinstance(exc, StoreUnavailable):
            metrics.inc("refold_store_errors_total")
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers or None)

    @app.exception_handler(HTTPException)
    async def _unrouted(request: Request, exc: HTTPException) -> JSONResponse:
        return unrouted(app, request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            ProxyError(500, f"internal proxy error: {type(exc).__name__}: {exc}", type="server_error").body(),
            status_code=500,
        )

    app.include_router(_openai_routes(cfg, state, metrics))
    app.include_router(session_routes(cfg, state))
    app.include_router(_ops_routes(state, metrics))
    mount(app, cfg, state, metrics)  # /v1/messages, /v1/responses, other /v1 paths
    return app


def warm_up(cfg: ProxyConfig) -> None:
    """Pay the first request's one-time costs before serving: the metric's tokenizer and the
    render path's lazy imports (otherwise the first clients wait seconds)."""
    if cfg.tokenizer and cfg.tokenizer != "off":
        from ..chat_tokens import count_messages
        from ..tokens import get_tokenizer

        count_messages([{"role": "user", "content": "warm up"}], get_tokenizer(cfg.tokenizer))
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], source="warm-up")
    for i in range(4):
        h.append(
            {"role": "assistant", "content": f"PROGRESS: warm up\nSTALE: -\n```bash\ncat f{i}.py\n```"},
            [{"role": "user", "content": "def f():\n    return 1\n" * 40}],
        )
    cfg.renderer().render(h)


def _openai_routes(cfg: ProxyConfig, state: dict[str, Any], metrics: Metrics) -> APIRouter:
    router = APIRouter()

    @router.post("/v1/chat/completions")
    @router.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        who = tenant(request)
        body = await read_json(request, cfg.max_body)
        chat: ChatService = state["chat"]
        try:
            out = await chat.complete(body, who.owner, who.key, forwarded_headers(cfg, request.headers))
        except ProxyError as e:
            metrics.inc("refold_requests_total", status=str(e.status))
            raise
        metrics.inc("refold_requests_total", status="200")
        metrics.gauge("refold_sessions_loaded", len(state["manager"]._sessions))
        headers = {
            SESSION_HEADER: out.session.name,
            "X-Refold-Steps": str(out.steps),
            "X-Refold-Added-Ms": f"{out.added_ms:.3f}",
            **out.headers,  # the upstream's request id, rate limits (of the round the client is answered with)
        }
        if out.stream:
            return StreamingResponse(chat.sse(out), media_type="text/event-stream", headers=headers)
        return JSONResponse(out.result.body, headers=headers, background=BackgroundTask(chat.delivered, out))

    @router.get("/v1/models")
    @router.get("/models")
    async def models(request: Request) -> Response:
        who = tenant(request)
        upstream: Upstream = state["upstream"]
        status, data = await upstream.models(upstream.headers(who.key, forwarded_headers(cfg, request.headers)))
        return JSONResponse(data, status_code=status)

    return router


def _ops_routes(state: dict[str, Any], metrics: Metrics) -> APIRouter:
    router = APIRouter()

    @router.get("/metrics")
    async def metrics_text(request: Request) -> Response:
        tenant(request)
        st: Store = state["store"]
        metrics.gauge("refold_store_up", 0.0 if st.known_fault() else 1.0)
        metrics.gauge("refold_sessions_loaded", len(state["manager"]._sessions))  # every surface's
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @router.get("/healthz")
    async def healthz() -> JSONResponse:
        """Alive, and whether the store is known to be failing (no round trip)."""
        fault = state["store"].known_fault()
        if fault:
            return JSONResponse({"status": "error", "store": fault}, status_code=503)
        return JSONResponse({"status": "ok"})

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready to take turns: a write and a read on the store just succeeded."""
        h = await state["store"].check()
        body = {"status": "ok" if h.ok else "error", "store": h.backend, "detail": h.detail, "schema": h.schema}
        if h.sessions is not None:
            body["sessions"] = h.sessions
        return JSONResponse(body, status_code=200 if h.ok else 503)

    return router
