"""The FastAPI application: OpenAI-compatible routes, session views, metrics."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse

from ..errors import ProxyError, RefoldError
from ..history import History
from ..tokens import tokenizer_name
from .chat import ChatService
from .config import ProxyConfig
from .mapping import INTERNAL
from .metrics import Metrics
from .records import Store
from .sessions import Session, SessionManager, owner_of
from .store import open_store
from .upstream import Upstream
from .validate import parse_json_body

SESSION_HEADER = "X-Refold-Session"


def create_app(cfg: ProxyConfig, *, store: Store | None = None) -> FastAPI:
    """The proxy app; ``store`` overrides ``cfg.store`` (tests)."""
    metrics = Metrics()
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = store or open_store(cfg.store)
        upstream = Upstream(cfg.upstream, api_key=cfg.upstream_key, timeout=cfg.timeout)
        manager = SessionManager(st, cfg.renderer)
        state.update(
            store=st, upstream=upstream, manager=manager, chat=ChatService(cfg, manager, upstream, metrics)
        )
        try:
            yield
        finally:
            await state["chat"].drain()
            await upstream.close()
            await st.close()

    app = FastAPI(title="refold proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.refold = state

    @app.exception_handler(ProxyError)
    async def _proxy_error(request: Request, exc: ProxyError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            ProxyError(500, f"internal proxy error: {type(exc).__name__}: {exc}", type="server_error").body(),
            status_code=500,
        )

    def auth(request: Request) -> tuple[str, str | None]:
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header[:7].lower() == "bearer " else None
        if cfg.tokens:
            if not key or not any(hmac.compare_digest(key.encode(), t.encode()) for t in cfg.tokens):
                raise ProxyError(
                    401,
                    "missing or invalid bearer token",
                    type="authentication_error",
                    code="invalid_api_key",
                )
            return owner_of(key), None  # the proxy token is never forwarded upstream
        return owner_of(key), key

    async def read_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > cfg.max_body:
            raise ProxyError(
                413, f"request body is larger than the {cfg.max_body} byte limit", code="request_too_large"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > cfg.max_body:
                raise ProxyError(
                    413,
                    f"request body is larger than the {cfg.max_body} byte limit",
                    code="request_too_large",
                )
            chunks.append(chunk)
        return parse_json_body(b"".join(chunks))

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        owner, key = auth(request)
        body = await read_json(request)
        chat: ChatService = state["chat"]
        try:
            out = await chat.complete(body, owner, key, request.headers)
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

    @app.get("/v1/models")
    @app.get("/models")
    async def models(request: Request) -> Response:
        _, key = auth(request)
        upstream: Upstream = state["upstream"]
        status, data = await upstream.models(upstream.headers(key, dict(request.headers)))
        return JSONResponse(data, status_code=status)

    @app.get("/metrics")
    async def metrics_text(request: Request) -> Response:
        auth(request)
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    async def find(request: Request, name: str) -> Session:
        owner, _ = auth(request)
        manager: SessionManager = state["manager"]
        s = await manager.find(owner, name)
        if s is None:  # another key's session looks exactly like a missing one
            raise ProxyError(404, f"no session '{name}' for this API key", code="session_not_found")
        return s

    @app.get("/sessions")
    async def sessions(request: Request) -> dict[str, Any]:
        owner, _ = auth(request)
        records = await state["store"].sessions(owner)
        return {
            "sessions": [
                {"id": r.name, "head": r.head, "created": r.created, "updated": r.updated} for r in records
            ]
        }

    @app.get("/sessions/{name}")
    async def session(request: Request, name: str) -> dict[str, Any]:
        s = await find(request, name)
        async with s.lock:
            return describe(s, cfg)

    @app.get("/sessions/{name}/view")
    async def session_view(request: Request, name: str) -> Response:
        s = await find(request, name)
        try:
            from ..lab.viewer import build_report
        except ImportError:
            raise ProxyError(
                404, "the HTML viewer (refold.lab.viewer) is not installed in this build", code="viewer_missing"
            ) from None
        async with s.lock:
            current = s.view(s.head or "", cfg.renderer).history
            snapshot = History(current.prefix, source=current.source)
            for st in current.steps:
                snapshot.append(st.reply, st.observations, meta=st.meta)
        tokenizer = tokenizer_name(cfg.tokenizer) or "chars4"
        try:
            page = await asyncio.to_thread(
                build_report, snapshot, title=f"refold session {name}", tokenizer=tokenizer
            )
        except RefoldError as e:
            raise ProxyError(409, f"cannot show session '{name}': {e}", code="session_not_viewable") from None
        return HTMLResponse(page)

    return app


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
