"""The session routes: ``/sessions`` (list), ``/sessions/{id}`` (JSON), ``/sessions/{id}/view``
(the HTML viewer), ``/sessions/{id}/expand`` and ``/sessions/{id}/pins`` (the page's calls). A
session is named by the name its client gave it, or by the id ``refold sessions list`` prints.

None of them builds on the event loop: a history not yet replayed is replayed in a worker thread
(``Session.aview``), a render for the JSON in a thread too, and a page in the view worker process
(``viewer_pool``). A page reload within ``VIEW_FRESH_S`` of the last store check is answered from
the cache without a store round trip (or with a 304 when the browser already has it).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import ItemError, ProxyError
from ..pinning import expand_text, pinned_items, resolve
from ..tokens import tokenizer_name
from ..types import Shown
from .body import read_json
from .config import ProxyConfig
from .mapping import INTERNAL
from .sent_calls import any_call_lines
from .sessions import Session, SessionManager, View
from .tenancy import tenant
from .viewer_pool import Page, Snapshot, ViewPool
from .views_access import PageGrants

_SID = re.compile(r"[0-9a-f]{32}")  # sessions.session_id
VIEW_FRESH_S = 1.0
"""How stale a reloaded view may be: a turn, pin or prune by another process shows within this."""


def session_routes(cfg: ProxyConfig, state: dict[str, Any]) -> APIRouter:
    router = APIRouter()
    grants = PageGrants(cfg.tokens)
    tokenizer = tokenizer_name(cfg.tokenizer) or "chars4"

    async def find(request: Request, name: str, max_age: float = 0.0) -> Session:
        manager: SessionManager = state["manager"]
        owner = tenant(request).owner
        s = await manager.find(owner, name, max_age=max_age)
        if s is None and _SID.fullmatch(name):  # the id `refold sessions list` prints, of this owner only
            data = await state["store"].load(name)
            if data is not None and data.record.owner == owner:
                s = await manager.find(owner, data.record.name, max_age=max_age)
        if s is None:  # another key's session looks exactly like a missing one
            raise ProxyError(404, f"no session '{name}' for this API key", code="session_not_found")
        return s

    async def current(s: Session, name: str) -> View:
        """The session's current branch (caller holds ``s.lock``)."""
        if s.head is None:
            raise ProxyError(404, f"no session '{name}' for this API key", code="session_not_found")
        return await s.aview(s.head, cfg.renderer)

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
            view = await current(s, name)
            return await asyncio.to_thread(describe, s, view)

    @router.get("/sessions/{name}/view")
    async def session_view(request: Request, name: str) -> Response:
        who = tenant(request)
        pool: ViewPool = state["views"]
        await pool.lane.wait(pool.metrics)
        s = await find(request, name, max_age=VIEW_FRESH_S)
        name = s.name  # when named by its id: the page's calls and its grant go by the name
        head = s.head or ""
        key = (s.sid, head, str(len(s.pins)), tokenizer)  # a pin changes the prompts the page shows
        headers = {"Cache-Control": "private, no-cache", "Vary": "Accept-Encoding, Authorization"}
        if who.header not in (None, "cookie"):  # the page's own calls need a grant (views_access)
            headers["Set-Cookie"] = grants.issue(who.owner, name, secure=request.url.scheme == "https")
        etag = pool.etag(key)
        if etag in request.headers.get("if-none-match", "") and pool.cached(key) is not None:
            return Response(status_code=304, headers={**headers, "ETag": etag})

        def snapshot() -> Snapshot:  # synchronous: no other coroutine can append meanwhile
            p, steps = s.chain(head)
            live = {"session": name, "base": f"/sessions/{quote(name, safe='')}", "pins": pinned_items(s.pins)}
            manager: SessionManager = state["manager"]
            return Snapshot(
                s.prefixes[p], [(st.reply, st.observations, st.meta) for st in steps], list(s.pins), live,
                f"session:{name}", manager.renderer().config.model_dump(mode="json"),
            )

        page = await pool.page(key, snapshot, f"refold session {name}", tokenizer)
        return page_response(page, request, headers)

    @router.get("/sessions/{name}/expand")
    async def session_expand(request: Request, name: str, item: str = "") -> dict[str, Any]:
        """A step (7, 7.2, r7, 3-5) or span (S1) of the current branch, byte-exact as first shown."""
        s = await find(request, name)
        async with s.lock:
            view = await current(s, name)
            try:
                it = resolve(view.history, item, view.renderer.config, where=f"session {name}")
            except ItemError as e:
                raise ProxyError(400, str(e), code="invalid_item") from None
            text = expand_text(view.history, it, view.renderer.config, call_lines=any_call_lines)
            return {"session": name, "item": it.label, "steps": list(it.steps), "text": text}

    @router.post("/sessions/{name}/pins")
    async def session_pin(request: Request, name: str) -> dict[str, Any]:
        """``{"item": "7", "pin": true}``: pin (or unpin) an item for the agent's next prompts."""
        s = await find(request, name)
        body = await read_json(request, 4096)
        item = body.get("item") if isinstance(body, dict) else None
        on = body.get("pin", True) if isinstance(body, dict) else None
        if not isinstance(item, str) or not item.strip():
            raise ProxyError(
                400, 'body must be {"item": "7" | "7.2" | "r7" | "3-5" | "S1", "pin": true|false}', param="item"
            )
        if not isinstance(on, bool):
            raise ProxyError(400, "'pin' must be true or false", param="pin")
        manager: SessionManager = state["manager"]
        it, _ = await manager.pin(s, item, on=on)
        async with s.lock:
            pins = pinned_items(s.pins)
        return {"session": name, "item": it.label, "pinned": on, "pins": pins}

    return router


def page_response(page: Page, request: Request, headers: dict[str, str]) -> Response:
    """The page as the client takes it: gzip when it says it accepts it (built once, in the worker)."""
    accepts = request.headers.get("accept-encoding", "")
    gz = any(p.split(";", 1)[0].strip().lower() == "gzip" and "q=0" not in p.replace(" ", "") for p in accepts.split(","))
    out = {**headers, "ETag": page.etag}
    if gz:
        out["Content-Encoding"] = "gzip"
    return Response(page.gz if gz else page.html, media_type="text/html; charset=utf-8", headers=out)


def describe(s: Session, view: View) -> dict[str, Any]:
    """A session as JSON: its current branch step by step, the rendered prompt's stats, other
    branches (a render: run it off the event loop, holding ``s.lock``)."""
    h = view.history
    rendered = view.renderer.render(h)
    stats = rendered.stats
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
            # every note in the prompt (masked outputs, condensed replies, folds), as `sessions show`
            "notes": sum(1 for o in rendered.origins if o.shown is Shown.NOTE),
            "restores": stats.restores,
        },
    }
