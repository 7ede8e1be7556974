"""The answer to a request no route serves (an unknown path, or a method the path does not take):
the API's own error shape, naming the request and listing what is served, instead of FastAPI's
``{"detail": "Not Found"}`` that no OpenAI or Anthropic client reads."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ..errors import ProxyError
from .anthropic_wire import error_body
from .tenancy import ANTHROPIC_PATH

FORWARDED = "/v1/{path:path}"
"""The catch-all route: every other ``/v1/...`` path goes to the upstream unchanged (``apis``)."""


def _routes(routes: Iterable[object]) -> Iterator[tuple[str, frozenset[str], re.Pattern[str] | None]]:
    """(path, methods, path regex) of every route, also inside included routers (newer FastAPI
    keeps them as one entry holding the router; older ones copy the routes into the app)."""
    for r in routes:
        path, methods = getattr(r, "path", None), getattr(r, "methods", None)
        if isinstance(path, str) and methods:
            yield path, frozenset(methods) - {"HEAD"}, getattr(r, "path_regex", None)
        inner = getattr(r, "original_router", None)
        if inner is not None:
            yield from _routes(getattr(inner, "routes", ()))


def served(app: FastAPI) -> str:
    """The routes the proxy serves, one line: ``POST /v1/chat/completions, GET /v1/models, ...``."""
    routes = list(_routes(app.routes))
    listed = [f"{'/'.join(sorted(m))} {p}" for p, m, _ in routes if p != FORWARDED]
    forwarded = any(p == FORWARDED for p, _, _ in routes)
    return ", ".join(listed) + (", and any other /v1/... path (forwarded upstream)" if forwarded else "")


def _methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route takes at ``path`` (Starlette's Allow names only the first route's)."""
    return sorted({m for _, ms, rx in _routes(app.routes) if rx is not None and rx.match(path) for m in ms})


def unrouted(app: FastAPI, request: Request, exc: HTTPException) -> JSONResponse:
    where = f"{request.method} {request.url.path}"
    if exc.status_code == 405:
        allowed = ", ".join(_methods(app, request.url.path)) or (exc.headers or {}).get("Allow", "")
        message = f"{where} is not served: that path takes {allowed or 'other methods'}; served: {served(app)}"
        code = "method_not_allowed"
    elif exc.status_code == 404:
        message = f"no route {where}; served: {served(app)}"
        code = "not_found"
    else:  # no route raises others; keep the status, in the same shape
        message, code = f"{where}: {exc.detail}", None
    headers = dict(exc.headers or {})
    if request.url.path.startswith(ANTHROPIC_PATH):
        return JSONResponse(error_body(exc.status_code, message), status_code=exc.status_code, headers=headers)
    body = ProxyError(exc.status_code, message, code=code).body()
    return JSONResponse(body, status_code=exc.status_code, headers=headers)
