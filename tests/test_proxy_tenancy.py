"""Tenancy: owners from any credential header, Host/Origin/content-type checks, no CORS.

The proxy runs in-process (ASGI transport, lifespan started by hand); the upstream is the scripted
fake on a loopback thread, so what reaches it (and with which credential) is visible.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.errors import ConfigError, ProxyError
from refold.proxy import ProxyConfig
from refold.proxy.tenancy import credential, host_name

from fake_upstream import FakeUpstream, asgi_proxy

GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}





def cfg_for(upstream: tuple[FakeUpstream, str], tmp_path: Path, **kw: Any) -> ProxyConfig:
    return ProxyConfig(upstream=upstream[1], store=str(tmp_path / "s.db"), tokenizer="off", **kw)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_each_credential_header_is_its_own_owner(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    async def go() -> None:
        async with asgi_proxy(cfg_for(upstream, tmp_path)) as c:
            heads = {
                "bearer": {"Authorization": "Bearer k1"},
                "azure": {"api-key": "k2"},
                "anthropic": {"x-api-key": "k3"},
                "anonymous": {},
            }
            for who, h in heads.items():
                r = await c.post(
                    "/v1/chat/completions", json=GOOD, headers={**h, "X-Refold-Session": f"s-{who}"}
                )
                assert r.status_code == 200, r.text
            for who, h in heads.items():
                listed = (await c.get("/sessions", headers=h)).json()["sessions"]
                assert [s["id"] for s in listed] == [f"s-{who}"]  # each sees only its own
                for other in heads:
                    status = (await c.get(f"/sessions/s-{other}", headers=h)).status_code
                    assert status == (200 if other == who else 404)
            # the same key through another header is the same owner
            r = await c.get("/sessions/s-azure", headers={"x-api-key": "k2"})
            assert r.status_code == 200
            r = await c.get("/sessions/s-azure", headers={"Authorization": "Bearer k2"})
            assert r.status_code == 200

    run(go())


def test_the_id_sessions_list_prints_names_the_session_for_its_owner_only(
    upstream: tuple[FakeUpstream, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from refold.cli import main

    async def go() -> None:
        async with asgi_proxy(cfg_for(upstream, tmp_path)) as c:
            for key in ("k1", "k2"):
                h = {"Authorization": f"Bearer {key}", "X-Refold-Session": "run"}
                first = await c.post("/v1/chat/completions", json=GOOD, headers=h)
                assert first.status_code == 200, first.text
                turn = [*GOOD["messages"], first.json()["choices"][0]["message"], {"role": "user", "content": "go on"}]
                r = await c.post("/v1/chat/completions", json={**GOOD, "messages": turn}, headers=h)
                assert r.status_code == 200, r.text
            listing = ["sessions", "list", "--store", str(tmp_path / "s.db"), "--json"]
            assert await asyncio.to_thread(main, listing) == 0  # the CLI runs a loop of its own
            listed = json.loads(capsys.readouterr().out)["sessions"]
            assert len({r["id"] for r in listed}) == 2 and {r["name"] for r in listed} == {"run"}
            mine = {"Authorization": "Bearer k1"}
            by_name = await c.get("/sessions/run", headers=mine)
            assert by_name.status_code == 200
            ids = [r["id"] for r in listed]
            answers = [await c.get(f"/sessions/{sid}", headers=mine) for sid in ids]
            assert sorted(r.status_code for r in answers) == [200, 404]  # k1's id, and k2's looks missing
            assert next(r for r in answers if r.status_code == 200).json() == by_name.json()
            missing = next(r for r in answers if r.status_code == 404).json()["error"]
            assert missing["code"] == "session_not_found"
            own = next(sid for sid, r in zip(ids, answers, strict=True) if r.status_code == 200)
            view = await c.get(f"/sessions/{own}/view", headers=mine)
            assert view.status_code == 200 and "text/html" in view.headers["content-type"], view.text

    run(go())


def test_a_session_without_a_step_yet_says_when_its_page_opens(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    async def go() -> None:
        async with asgi_proxy(cfg_for(upstream, tmp_path)) as c:
            h = {"Authorization": "Bearer k1", "X-Refold-Session": "new"}
            assert (await c.post("/v1/chat/completions", json=GOOD, headers=h)).status_code == 200
            r = await c.get("/sessions/new/view", headers=h)
            assert r.status_code == 409 and r.json()["error"]["code"] == "session_not_viewable"
            said = r.json()["error"]["message"]
            assert said == "cannot show refold session new: it has no step yet: its page opens with the agent's second request"

    run(go())


def test_conflicting_keys_and_required_keys_are_refused(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake = upstream[0]

    async def go() -> None:
        async with asgi_proxy(cfg_for(upstream, tmp_path, require_key=True)) as c:
            n = len(fake.requests)
            r = await c.post("/v1/chat/completions", json=GOOD)
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
            r = await c.post(
                "/v1/chat/completions", json=GOOD, headers={"Authorization": "Bearer a", "x-api-key": "b"}
            )
            assert r.status_code == 401 and "conflicting" in r.json()["error"]["message"]
            assert len(fake.requests) == n  # refused before anything went upstream
            r = await c.post("/v1/chat/completions", json=GOOD, headers={"api-key": "a"})
            assert r.status_code == 200
            assert (await c.get("/healthz")).status_code == 200  # probes need no key

    run(go())


def test_proxy_tokens_in_any_header_are_never_forwarded(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake = upstream[0]

    async def go() -> None:
        cfg = cfg_for(upstream, tmp_path, tokens=("t1",), upstream_key="up")
        async with asgi_proxy(cfg) as c:
            for h in ({"x-api-key": "t1"}, {"api-key": "t1"}, {"Authorization": "Bearer t1"}):
                r = await c.post("/v1/chat/completions", json=GOOD, headers=h)
                assert r.status_code == 200, r.text
                assert fake.requests[-1]["auth"] == "Bearer up"
            assert (await c.post("/v1/chat/completions", json=GOOD, headers={"x-api-key": "t2"})).status_code == 401

    run(go())


def test_refusals_on_the_messages_api_are_in_anthropics_shape(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    """A wrong key, a wrong content type or a foreign Host on /v1/messages was answered in OpenAI's
    shape, which Anthropic clients (Claude Code, the SDK) do not read as an error body."""
    anthropic = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}

    async def go() -> None:
        cfg = cfg_for(upstream, tmp_path, tokens=("t1",))
        async with asgi_proxy(cfg) as c:
            r = await c.post("/v1/messages", json=anthropic, headers={"x-api-key": "wrong"})
            assert r.status_code == 401
            assert r.json() == {
                "type": "error",
                "error": {"type": "authentication_error", "message": "missing or invalid API key for this proxy"},
            }
            r = await c.post("/v1/messages/count_tokens", content=b"{}", headers={"x-api-key": "t1", "content-type": "text/plain"})
            assert r.status_code == 415 and r.json()["type"] == "error" and "Content-Type" in r.json()["error"]["message"]
            r = await c.post("/v1/chat/completions", json=GOOD, headers={"x-api-key": "wrong"})
            assert r.json()["error"]["code"] == "invalid_api_key"  # OpenAI's shape elsewhere

    run(go())


def test_client_credential_headers_pass_through_without_proxy_keys(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    seen: list[dict[str, str]] = []
    fake = upstream[0]

    async def go() -> None:
        async with asgi_proxy(cfg_for(upstream, tmp_path)) as c:
            r = await c.post("/v1/chat/completions", json=GOOD, headers={"Authorization": "Bearer mine"})
            assert r.status_code == 200
            seen.append({"auth": fake.requests[-1]["auth"]})

    run(go())
    assert seen == [{"auth": "Bearer mine"}]


def test_foreign_host_names_are_refused(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    async def go() -> None:
        cfg = cfg_for(upstream, tmp_path)
        async with asgi_proxy(cfg, base="http://attacker.example:8077") as c:  # a DNS-rebound page
            for path in ("/sessions", "/metrics", "/v1/models"):
                r = await c.get(path)
                assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", path
            assert (await c.post("/v1/chat/completions", json=GOOD)).status_code == 403
        for base in ("http://localhost:8077", "http://[::1]:8077", "http://127.0.0.1"):
            async with asgi_proxy(cfg, base=base) as c:
                assert (await c.get("/sessions")).status_code == 200, base
        async with asgi_proxy(replace(cfg, allow_hosts=("proxy.internal",)), base="http://proxy.internal:8077") as c:
            assert (await c.get("/sessions")).status_code == 200
        wildcard = replace(cfg, host="0.0.0.0", tokens=("t",))
        async with asgi_proxy(wildcard, base="http://10.1.2.3:8077") as c:
            assert (await c.get("/sessions", headers={"Authorization": "Bearer t"})).status_code == 200

    run(go())


def test_cross_site_requests_are_refused_and_no_cors_is_sent(
    upstream: tuple[FakeUpstream, str], tmp_path: Path
) -> None:
    fake = upstream[0]

    async def go() -> None:
        cfg = cfg_for(upstream, tmp_path, upstream_key="operator-key")
        async with asgi_proxy(cfg) as c:
            n = len(fake.requests)
            # the classic CSRF: a form-like text/plain POST from a web page
            r = await c.post(
                "/v1/chat/completions",
                content=b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}',
                headers={"content-type": "text/plain", "origin": "https://evil.example"},
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
            r = await c.post("/v1/chat/completions", content=b"{}", headers={"content-type": "text/plain"})
            assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
            r = await c.post("/v1/chat/completions", content=b"{}")
            assert r.status_code == 415
            r = await c.get("/sessions", headers={"origin": "https://evil.example"})
            assert r.status_code == 403
            pre = await c.options(
                "/v1/chat/completions",
                headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
            )
            assert pre.status_code == 403
            assert len(fake.requests) == n  # the operator's key was never spent
            ok = await c.post(
                "/v1/chat/completions", json=GOOD, headers={"content-type": "application/json; charset=utf-8"}
            )
            assert ok.status_code == 200
            for resp in (r, pre, ok):
                assert not any(k.lower().startswith("access-control-") for k in resp.headers)
        async with asgi_proxy(replace(cfg, allow_origins=("https://app.example",))) as c:
            r = await c.post("/v1/chat/completions", json=GOOD, headers={"origin": "https://app.example"})
            assert r.status_code == 200
            assert not any(k.lower().startswith("access-control-") for k in r.headers)

    run(go())


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match="--allow-origin"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", allow_origins=("app.example",))
    assert ProxyConfig(upstream="http://127.0.0.1:1/v1").allowed_host_names() == {"localhost", "127.0.0.1", "::1"}
    assert ProxyConfig(upstream="http://127.0.0.1:1/v1", allow_hosts=("*",)).allowed_host_names() is None
    named = ProxyConfig(upstream="http://127.0.0.1:1/v1", host="10.0.0.5", tokens=("t",))
    assert named.allowed_host_names() == {"localhost", "127.0.0.1", "::1", "10.0.0.5"}


def test_host_name_parsing() -> None:
    assert host_name("[::1]:8077") == "::1" and host_name("LocalHost.:80") == "localhost"
    assert host_name("127.0.0.1") == "127.0.0.1" and host_name("") == ""


keys = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(key=keys, header=st.sampled_from(["authorization", "api-key", "x-api-key"]), other=keys)
def test_credential_is_the_key_whatever_header_carries_it(key: str, header: str, other: str) -> None:
    value = f"Bearer {key}" if header == "authorization" else key
    assert credential({header: value}) == (header, key)
    both = {header: value, ("x-api-key" if header != "x-api-key" else "api-key"): other}
    if other == key:
        assert credential(both)[1] == key
    else:
        with pytest.raises(ProxyError):
            credential(both)
