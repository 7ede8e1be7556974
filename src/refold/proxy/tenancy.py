"""Who is asking, and from where: one ASGI middleware in front of every route.

* **Owner** from whichever credential header the client uses: ``Authorization: Bearer K``,
  ``api-key: K`` (Azure style) or ``x-api-key: K`` (Anthropic style); the same key gives the same
  owner whatever header carries it. Two different keys in one request are refused. Without a
  credential the request is anonymous (one shared owner) unless ``require_key`` (or ``tokens``)
  says to refuse it.
* **Host**: only loopback names (and the bound address) unless configured, so a page that
  rebinds its DNS name to 127.0.0.1 cannot read sessions or metrics.
* **Origin**: a browser's cross-site request carries ``Origin``; it is refused unless listed
  (or it is this proxy's own origin: the session page's expand and pin calls).
  No CORS headers are ever sent, and preflights are refused.
* **Content type**: a body must be declared JSON (a cross-site ``text/plain`` form post is not).

Routes read the result with ``tenant(request)``; a route added later gets all of it for free.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from ..errors import ProxyError
from .anthropic_wire import error_body
from .config import ProxyConfig
from .sessions import owner_of
from .views_access import PageGrants

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")
PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})
"""Probes answer without a credential (they say nothing about any session)."""


@dataclass(frozen=True, slots=True)
class Tenant:
    owner: str
    key: str | None
    """The client's key to send upstream as a bearer (None: a proxy token, or no credential)."""
    header: str | None
    """The header the credential came in (None: anonymous)."""


def credential(headers: MutableMapping[str, str] | Any) -> tuple[str | None, str | None]:
    """(header name, key) of the request's credential; a ProxyError if two headers disagree."""
    found: list[tuple[str, str]] = []
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if value is None or not value.strip():
            continue
        value = value.strip()
        if name == "authorization" and value[:7].lower() == "bearer ":
            value = value[7:].strip()
        if value:
            found.append((name, value))
    if not found:
        return None, None
    if len({v for _, v in found}) > 1:
        raise ProxyError(
            401,
            f"conflicting credentials in {' and '.join(n for n, _ in found)}: send one key",
            type="authentication_error",
            code="invalid_api_key",
        )
    return found[0]


def resolve(cfg: ProxyConfig, headers: Any) -> Tenant:
    name, key = credential(headers)
    if cfg.tokens:
        if key is None or not any(hmac.compare_digest(key.encode(), t.encode()) for t in cfg.tokens):
            raise ProxyError(
                401, "missing or invalid API key for this proxy", type="authentication_error", code="invalid_api_key"
            )
        return Tenant(owner_of(key), None, name)  # a proxy token is never forwarded upstream
    if key is None and cfg.require_key:
        raise ProxyError(
            401,
            "this proxy requires an API key (Authorization: Bearer, api-key or x-api-key)",
            type="authentication_error",
            code="missing_api_key",
        )
    return Tenant(owner_of(key), key if name == "authorization" else None, name)


def tenant(request: Request) -> Tenant:
    """The tenant the middleware resolved for this request."""
    t = request.scope.get("state", {}).get("tenant")
    if not isinstance(t, Tenant):  # a public path, or an app built without the middleware
        raise ProxyError(401, "no credential was checked for this request", type="authentication_error")
    return t


def forwarded_headers(cfg: ProxyConfig, headers: Any) -> dict[str, str]:
    """The client's headers as the upstream may see them: when the proxy has its own tokens or
    upstream key, the client's credential headers stay here."""
    strip = set(CREDENTIAL_HEADERS) if (cfg.tokens or cfg.upstream_key) else set()
    return {k: v for k, v in headers.items() if k.lower() not in strip}


def host_name(value: str) -> str:
    """``Host`` without its port: ``[::1]:8077`` -> ``::1``, ``Localhost.`` -> ``localhost``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


class Guard:
    """The ASGI middleware: Host, Origin, content type and credential checks before any route."""

    def __init__(self, app: ASGIApp, cfg: ProxyConfig) -> None:
        self.app = app
        self.cfg = cfg
        self.hosts = cfg.allowed_host_names()
        self.origins = frozenset(o.rstrip("/").lower() for o in cfg.allow_origins)
        self.grants = PageGrants(cfg.tokens)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            tenant_ = self.check(scope)
        except ProxyError as e:
            await _answer(send, e, str(scope.get("path", "")))
            return
        if tenant_ is not None:
            scope.setdefault("state", {})["tenant"] = tenant_
        await self.app(scope, receive, send)

    def same_origin(self, origin: str, host: str) -> bool:
        """The proxy's own session page calling back (expand, pin): its Origin is this very Host,
        and that Host passed the allowlist, so a rebinding page cannot pose as it."""
        if self.hosts is None or not host:
            return False
        scheme, _, rest = origin.strip().lower().partition("://")
        return scheme in ("http", "https") and rest.rstrip("/") == host.strip().lower()

    def check(self, scope: Scope) -> Tenant | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        if self.hosts is not None and host_name(headers.get("host", "")) not in self.hosts:
            raise ProxyError(
                403,
                f"Host '{headers.get('host', '')}' is not served here (allowed: {', '.join(sorted(self.hosts))}; "
                "refold serve --allow-host adds names)",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if (
            origin is not None
            and "*" not in self.origins
            and origin.rstrip("/").lower() not in self.origins
            and not self.same_origin(origin, headers.get("host", ""))
        ):
            raise ProxyError(
                403,
                f"cross-origin request from '{origin}' refused (refold serve --allow-origin allows one)",
                code="origin_not_allowed",
            )
        method = scope.get("method", "GET")
        if method == "OPTIONS":
            raise ProxyError(403, "CORS preflight refused: this proxy sends no CORS headers", code="cors_refused")
        if method in ("POST", "PUT", "PATCH"):
            ctype = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if ctype != "application/json" and not ctype.endswith("+json"):
                raise ProxyError(
                    415,
                    f"Content-Type must be application/json, got '{ctype or 'none'}'",
                    code="unsupported_media_type",
                )
        if scope.get("path") in PUBLIC_PATHS:
            return None
        if credential(headers) == (None, None):  # the session page's own calls carry its grant cookie
            own = origin is not None and (origin.rstrip("/").lower() in self.origins or self.same_origin(origin, headers.get("host", "")))
            owner = self.grants.tenant_owner(scope, headers, own)
            if owner is not None:
                return Tenant(owner, None, "cookie")
        return resolve(self.cfg, headers)


ANTHROPIC_PATH = "/v1/messages"


async def _answer(send: Send, e: ProxyError, path: str) -> None:
    # an Anthropic client reads {"type": "error", "error": {type, message}}, as the route's own errors
    shaped = error_body(e.status, e.message) if path.startswith(ANTHROPIC_PATH) else e.body()
    body = json.dumps(shaped).encode()
    await send(
        {
            "type": "http.response.start",
            "status": e.status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
