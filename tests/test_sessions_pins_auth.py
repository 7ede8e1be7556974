"""The session page's buttons under ``--token`` (issue 13): the page was loaded with the token in a
header, which its ``fetch`` cannot send again; the view's grant cookie lets exactly its two calls
(expand, pin) through, for that owner and that session, and nothing else."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.proxy import ProxyConfig
from refold.proxy.views_access import COOKIE, MAX_AGE_S, PageGrants, cookies
from test_sessions_pins import FIXED, Client

from fake_upstream import BASH_TOOLS, FakeUpstream, asgi_proxy

ORIGIN = {"Origin": "http://127.0.0.1:8077"}


class TokenClient(Client):
    def __init__(self, c: httpx.AsyncClient, fake: FakeUpstream, name: str, token: str) -> None:
        super().__init__(c, fake, name)
        self.auth = {"Authorization": f"Bearer {token}"}

    async def turn(self) -> list[dict[str, object]]:
        r = await self.c.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": self.messages, "tools": BASH_TOOLS},
            headers={"X-Refold-Session": self.name, **self.auth},
        )
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        self.messages.append(m)
        self.messages.append({"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "out " * 60})
        return []


def grant_of(r: httpx.Response) -> tuple[str, str]:
    """(cookie value, its attributes) from a view's Set-Cookie."""
    header = r.headers["set-cookie"]
    first, _, attrs = header.partition(";")
    name, _, value = first.partition("=")
    assert name == COOKIE
    return value, attrs


def test_the_page_loaded_with_a_token_can_expand_and_pin_and_nothing_else(
    upstream: tuple[FakeUpstream, str], tmp_path: Path  # noqa: F811
) -> None:
    fake, url = upstream
    cfg = ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off", config=FIXED, tokens=("tok-a", "tok-b"))

    async def go() -> None:
        async with asgi_proxy(cfg) as c:
            c.cookies.clear()
            a = TokenClient(c, fake, "g", "tok-a")
            for _ in range(4):
                await a.turn()
            await TokenClient(c, fake, "h", "tok-a").turn()
            await TokenClient(c, fake, "g", "tok-b").turn()  # another tenant's session of the same name

            # before: the page's own calls (no header) are refused with --token
            assert (await c.post("/sessions/g/pins", json={"item": "1"}, headers=ORIGIN)).status_code == 401

            page = await c.get("/sessions/g/view", headers=a.auth)
            assert page.status_code == 200 and "live-item" in page.text
            value, attrs = grant_of(page)
            assert {"HttpOnly", "SameSite=Strict", "Path=/sessions/g", f"Max-Age={MAX_AGE_S}"} <= {x.strip() for x in attrs.split(";")}
            assert "tok-a" not in page.headers["set-cookie"] and "tok-a" not in page.text
            c.cookies.clear()  # the test sends the cookie itself, as the browser would for this path
            jar = {"Cookie": f"{COOKIE}={value}"}

            # the page's calls with only the cookie: expand (GET) and pin (POST from its own origin)
            ex = await c.get("/sessions/g/expand?item=2", headers=jar)
            assert ex.status_code == 200 and ex.json()["steps"] == [2]
            pin = await c.post("/sessions/g/pins", json={"item": "2"}, headers={**jar, **ORIGIN})
            assert pin.status_code == 200 and pin.json()["pins"] == ["2"]
            listed = (await c.get("/sessions/g", headers=a.auth)).json()
            assert listed["pins"] == ["2"]  # the owner's session (tok-a), not tok-b's of the same name
            assert (await c.get("/sessions/g", headers={"Authorization": "Bearer tok-b"})).json()["pins"] == []

            # a POST without its own Origin, or from another, is not the page
            assert (await c.post("/sessions/g/pins", json={"item": "3"}, headers=jar)).status_code == 401
            evil = await c.post("/sessions/g/pins", json={"item": "3"}, headers={**jar, "Origin": "http://evil.example"})
            assert evil.status_code == 403
            # only those two routes of that one session
            for method, path in [
                ("GET", "/sessions/h/expand?item=1"),
                ("GET", "/sessions/g"),
                ("GET", "/sessions"),
                ("GET", "/sessions/g/view"),
                ("GET", "/metrics"),
                ("POST", "/v1/chat/completions"),
                ("POST", "/sessions/h/pins"),
            ]:
                r = await c.request(method, path, headers={**jar, **ORIGIN}, json={"item": "1"} if method == "POST" else None)
                assert r.status_code == 401, (method, path, r.status_code)
            # a header credential is judged alone: tok-b's own request does not become tok-a's
            r = await c.get("/sessions/g/expand?item=2", headers={**jar, "Authorization": "Bearer tok-b"})
            assert r.status_code == 400  # tok-b's session "g" has one step: 2 is out of range
            # a page loaded anonymously (no header) gets no grant
            assert "set-cookie" not in (await c.get("/sessions/g/view", headers=jar)).headers

    asyncio.run(go())


def test_grants_name_one_owner_one_session_and_expire() -> None:
    g = PageGrants(("t1", "t2"))
    header = g.issue("owner-a", "s1", secure=True, now=1000.0)
    assert header.endswith("; Secure")
    value = cookies(header.split(";", 1)[0], COOKIE)[0]
    assert g.owner(value, "s1", now=1000.0) == "owner-a"
    assert g.owner(value, "s2", now=1000.0) is None
    assert g.owner(value, "s1", now=1000.0 + MAX_AGE_S + 1) is None  # expired
    assert PageGrants(("t1",)).owner(value, "s1", now=1000.0) is None  # another token set: another key
    assert PageGrants(("t2", "t1")).owner(value, "s1", now=1000.0) == "owner-a"  # replicas with the same tokens
    expires, owner, mac = value.split(".")
    assert g.owner(f"{expires}.owner-b.{mac}", "s1", now=1000.0) is None
    assert g.owner(f"{int(expires) + 9999}.{owner}.{mac}", "s1", now=1000.0) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.characters(codec="ascii"))
def test_any_edit_of_a_grant_is_refused(pos: int, ch: str) -> None:
    g = PageGrants(("t",))
    value = g.issue("o" * 20, "sess", secure=False, now=0.0).split(";", 1)[0].split("=", 1)[1]
    i = pos % len(value)
    edited = value[:i] + ch + value[i + 1 :]
    if edited != value:
        assert g.owner(edited, "sess", now=0.0) is None


@pytest.mark.parametrize("header", ["a=1; refold_view=x.y.z; b=2", 'refold_view="x.y.z"'])
def test_cookie_header_parsing(header: str) -> None:
    assert cookies(header, COOKIE) == ["x.y.z"]
