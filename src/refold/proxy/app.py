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
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from ..errors import ItemError, ProxyError, StoreUnavailable
from ..history import History
from ..pinning import expand_text, pinned_items, resolve
from ..tokens import tokenizer_name
from .apis import mount
from .chat import ChatService
from .config import ProxyConfig
from .mapping import INTERNAL
from .metrics import CONTENT_TYPE, Metrics
from .records import Store
from .sessions import Session, SessionManager
from .store import open_store
from .tenancy import Guard, forwarded_headers, tenant
from .upstream import Upstream
from .validate import parse_json_body
from .viewer_pool import ViewPool

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
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            ProxyError(500, f"internal proxy error: {type(exc).__name__}: {exc}", type="server_error").body(),
            status_code=500,
        )

    app.include_router(_openai_routes(cfg, state, metrics))
    app.include_router(_session_routes(cfg, state))
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


async def read_json(request: Request, max_body: int) -> Any:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_body:
        raise ProxyError(413, f"request body is larger than the {max_body} byte limit", code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise ProxyError(
                413, f"request body is larger than the {max_body} byte limit", code="request_too_large"
            )
        chunks.append(chunk)
    return parse_json_body(b"".join(chunks))


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
        }
        if out.stream:
            return StreamingResponse(chat.sse(out), media_type="text/event-stream", headers=headers)
        return JSONResponse(out.result.body, headers=headers)

    @router.get("/v1/models")
    @router.get("/models")
    async def models(request: Request) -> Response:
        who = tenant(request)
        upstream: Upstream = state["upstream"]
        status, data = await upstream.models(upstream.headers(who.key, forwarded_headers(cfg, request.headers)))
        return JSONResponse(data, status_code=status)

    return router


def _session_routes(cfg: ProxyConfig, state: dict[str, Any]) -> APIRouter:
    router = APIRouter()

    async def find(request: Request, name: str) -> Session:
        manager: SessionManager = state["manager"]
        s = await manager.find(tenant(request).owner, name)
        if s is None:  # another key's session looks exactly like a missing one
            raise ProxyError(404, f"no session '{name}' for this API key", code="session_not_found")
        return s

    @router.get("/sessions")
    async def sessions(request: Request) -> dict[str, Any]:
        records = await state["store"].sessions(tenant(request).owner)
        return {
            "sessions": [
                {"id": r.name, "head": r.head, "created": r.created, "updated": r.updated} for r in records
            ]
        }

    @router.get("/sessions/{name}")
    async def session(request: Request, name: str) -> dict[str, Any]:
        s = await find(request, name)
        async with s.lock:
            return describe(s, cfg)

    @router.get("/sessions/{name}/view")
    async def session_view(request: Request, name: str) -> Response:
        s = await find(request, name)
        head = s.head or ""
        tokenizer = tokenizer_name(cfg.tokenizer) or "chars4"

        def snapshot() -> History:  # synchronous: no other coroutine can append meanwhile
            current = s.view(head, cfg.renderer).history
            live = {"session": name, "base": f"/sessions/{quote(name, safe='')}", "pins": pinned_items(s.pins)}
            copy = History(current.prefix, source=current.source, meta={"live": live})
            for st in current.steps:
                copy.append(st.reply, st.observations, meta=st.meta)
            copy.load_pins(p.record() for p in current.pins)
            return copy

        pool: ViewPool = state["views"]
        key = (s.sid, head, str(len(s.pins)), tokenizer)  # a pin changes the prompts the page shows
        page = await pool.page(key, snapshot, f"refold session {name}", tokenizer)
        return HTMLResponse(page)

    @router.get("/sessions/{name}/expand")
    async def session_expand(request: Request, name: str, item: str = "") -> dict[str, Any]:
        """A step (7, 7.2, r7, 3-5) or span (S1) of the current branch, byte-exact as first shown."""
        s = await find(request, name)
        async with s.lock:
            assert s.head is not None
            view = s.view(s.head, cfg.renderer)
            try:
                it = resolve(view.history, item, view.renderer.config, where=f"session {name}")
            except ItemError as e:
                raise ProxyError(400, str(e), code="invalid_item") from None
            text = expand_text(view.history, it, view.renderer.config)
            return {"session": name, "item": it.label, "steps": list(it.steps), "text": text}

    @router.post("/sessions/{name}/pins")
    async def session_pin(request: Request, name: str) -> dict[str, Any]:
        """``{"item": "7", "pin": true}``: pin (or unpin) an item for the agent's next prompts."""
        s = await find(request, name)
        body = await read_json(request, 4096)
        item, on = body.get("item") if isinstance(body, dict) else None, body.get("pin", True) if isinstance(body, dict) else None
        if not isinstance(item, str) or not item.strip():
            raise ProxyError(400, "body must be {\"item\": \"7\" | \"7.2\" | \"r7\" | \"3-5\" | \"S1\", \"pin\": true|false}", param="item")
        if not isinstance(on, bool):
            raise ProxyError(400, "'pin' must be true or false", param="pin")
        manager: SessionManager = state["manager"]
        it, _ = await manager.pin(s, item, on=on)
        async with s.lock:
            assert s.head is not None
            pins = pinned_items(s.pins)
        return {"session": name, "item": it.label, "pinned": on, "pins": pins}

    return router


def _ops_routes(state: dict[str, Any], metrics: Metrics) -> APIRouter:
    router = APIRouter()

    @router.get("/metrics")
    async def metrics_text(request: Request) -> Response:
        tenant(request)
        st: Store = state["store"]
        metrics.gauge("refold_store_up", 0.0 if st.known_fault() else 1.0)
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


def describe(s: Session, cfg: ProxyConfig) -> dict[str, Any]:
    """A session as JSON: its current branch step by step, the rendered prompt's stats, other branches."""
    assert s.head is not None
    view = s.view(s.head, cfg.renderer)
    h = view.history
    stats = view.renderer.render(h).stats
    return {
        "id": s.name,
        "head": s.head,
        "branches": [{"head": tip, "steps": len(s.chain(tip)[1])} for tip in s.tips],
        "steps": [
            {
                "index": st.index,
                "digest": st.digest,
                "internal": bool(st.meta.get(INTERNAL)),
                "restore_of": list(st.restore_of),
                "progress": st.progress,
                "stale": list(st.stale),
                "actions": [a.command for a in st.actions],
                "reply": st.reply,
                "observations": list(st.observations),
            }
            for st in h.steps
        ],
        "prefix": list(h.prefix),
        "pins": pinned_items(s.pins),
        "render": {
            "t": stats.t,
            "boundary": stats.boundary,
            "stubs": stats.stubs,
            "trimmed": stats.trimmed,
            "folded_steps": stats.folded_steps,
            "notes": stats.notes,
            "restores": stats.restores,
        },
    }
