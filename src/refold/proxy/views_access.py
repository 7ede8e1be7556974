"""The session page's own calls (expand, pin) when the proxy requires a key.

A browser loads ``/sessions/{id}/view`` with the key in a header (an extension, a front proxy), but
the page's ``fetch`` cannot send that header again: the page never sees it. So the view's response
sets a grant cookie, and that cookie alone is accepted for the page's two calls:

* it is issued only to a request that carried a credential header, and names the owner that
  credential resolved to and the one session (an HMAC over both and an expiry: it cannot be
  edited to name another owner or session, and it is not the key: nothing upstream accepts it);
* ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's request carries it),
  ``Path=/sessions/{id}`` (sent only for that session's routes), ``Secure`` over https;
* accepted only for ``GET /sessions/{id}/expand`` and ``POST /sessions/{id}/pins`` of the session
  it names, and a POST must also come from this proxy's own origin (``Origin`` = this Host, which
  passed the Host allowlist; with ``--allow-host '*'`` only an ``--allow-origin`` one): the Guard's
  Host, Origin and JSON content-type checks still run first. Never for chat, metrics or
  listing sessions; a request with a credential header is judged by that header alone.

The HMAC key is derived from every ``--token`` (forging a grant needs all of them), so replicas
with the same tokens accept each other's grants; without tokens it is random per process (a page
from before a restart asks for a reload).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from typing import Any
from urllib.parse import quote, unquote

COOKIE = "refold_view"
MAX_AGE_S = 12 * 3600
_ROUTES = {"expand": "GET", "pins": "POST"}
_PATH = re.compile(r"^/sessions/([^/]+)/(expand|pins)$")
_PROCESS_KEY = os.urandom(32)


class PageGrants:
    def __init__(self, tokens: tuple[str, ...]) -> None:
        if tokens:
            material = "\0".join(sorted(set(tokens))).encode()
            self.key = hashlib.sha256(b"refold-view-grant\0" + material).digest()
        else:
            self.key = _PROCESS_KEY

    def _mac(self, expires: int, owner: str, name: str) -> str:
        msg = f"{expires}\0{owner}\0{name}".encode()
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()[:40]

    def issue(self, owner: str, name: str, *, secure: bool, now: float | None = None) -> str:
        """The ``Set-Cookie`` value granting the page of session ``name`` (of ``owner``) its calls."""
        expires = int(now if now is not None else time.time()) + MAX_AGE_S
        value = f"{expires}.{owner}.{self._mac(expires, owner, name)}"
        path = "/sessions/" + quote(name, safe="")
        return (
            f"{COOKIE}={value}; Path={path}; Max-Age={MAX_AGE_S}; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else "")
        )

    def owner(self, value: str, name: str, now: float | None = None) -> str | None:
        """The owner a grant cookie value names for session ``name``, if it is genuine and current."""
        parts = value.split(".")
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        expires, owner, mac = int(parts[0]), parts[1], parts[2]
        if expires < (now if now is not None else time.time()):
            return None
        return owner if hmac.compare_digest(mac, self._mac(expires, owner, name)) else None

    def tenant_owner(self, scope: dict[str, Any] | Any, headers: dict[str, str], own_origin: bool) -> str | None:
        """The owner a request with no credential header may act as: a page call with its grant."""
        m = _PATH.match(scope.get("path") or "")
        if m is None or _ROUTES[m.group(2)] != scope.get("method", "GET"):
            return None
        if scope.get("method") == "POST" and not own_origin:
            return None  # a page call always says where it comes from
        name = unquote(m.group(1))
        for value in cookies(headers.get("cookie", ""), COOKIE):
            owner = self.owner(value, name)
            if owner is not None:
                return owner
        return None


def cookies(header: str, name: str) -> list[str]:
    """Every value of cookie ``name`` in a ``Cookie`` header."""
    out = []
    for part in header.split(";"):
        key, sep, value = part.strip().partition("=")
        if sep and key == name:
            out.append(value.strip().strip('"'))
    return out
