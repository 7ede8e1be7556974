"""Bad input, upstream failures and the bind/auth rules answer with OpenAI-style errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from refold.errors import ConfigError, RefoldError
from refold.proxy import ProxyConfig, create_app

from fake_upstream import FakeUpstream, ServerThread, free_port

GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture()
def urls(tmp_path: Path) -> Iterator[tuple[str, str]]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(
            upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), max_body=4096, timeout=1.0, tokenizer="off"
        )
        with ServerThread(create_app(cfg)) as px:
            yield px.url, up.url


def _error(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    return err  # type: ignore[no-any-return]


def test_malformed_json_is_a_clear_400(urls: tuple[str, str]) -> None:
    r = httpx.post(
        f"{urls[0]}/v1/chat/completions",
        content=b'{"model": "m", "messages": [',
        headers={"content-type": "application/json"},
    )
    err = _error(r, 400)
    assert err["code"] == "invalid_json" and "line 1 column" in err["message"]
    json_type = {"content-type": "application/json"}
    err = _error(httpx.post(f"{urls[0]}/v1/chat/completions", content=b"", headers=json_type), 400)
    assert "empty" in err["message"]
    err = _error(httpx.post(f"{urls[0]}/v1/chat/completions", content=b"\xff\xfe", headers=json_type), 400)
    assert err["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([1, 2], "JSON object"),
        ({"model": "m"}, "'messages'"),
        ({"model": "m", "messages": []}, "'messages'"),
        ({"model": "m", "messages": ["hi"]}, "messages[0] is not an object"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x"}]}, "'model'"),
        ({**GOOD, "tools": "bash"}, "'tools'"),
    ],
)
def test_invalid_requests(urls: tuple[str, str], body: object, needle: str) -> None:
    err = _error(httpx.post(f"{urls[0]}/v1/chat/completions", json=body), 400)
    assert needle in err["message"]


def test_request_size_limit(urls: tuple[str, str]) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 10_000}]}
    err = _error(httpx.post(f"{urls[0]}/v1/chat/completions", json=big), 413)
    assert err["code"] == "request_too_large"
    assert "byte limit (refold serve --max-body raises it)" in err["message"]  # the knob, named

    def chunks() -> Iterator[bytes]:  # no content-length: the limit holds while reading
        yield b'{"model": "m", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"y" * 1000
        yield b'"}]}'

    _error(
        httpx.post(
            f"{urls[0]}/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
        ),
        413,
    )


def test_upstream_error_status_and_message_pass_through(urls: tuple[str, str]) -> None:
    client = openai.OpenAI(base_url=f"{urls[0]}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.RateLimitError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "FAIL:429"}])
    assert "scripted failure" in str(e.value)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "FAIL:500"}])


def test_upstream_timeout_is_a_504(urls: tuple[str, str]) -> None:
    err = _error(
        httpx.post(
            f"{urls[0]}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "SLOW:3"}]},
            timeout=30,
        ),
        504,
    )
    assert err["code"] == "upstream_timeout" and err["type"] == "upstream_error"


def test_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    cfg = ProxyConfig(
        upstream=f"http://127.0.0.1:{free_port()}/v1", store=str(tmp_path / "s.db"), tokenizer="off"
    )
    with ServerThread(create_app(cfg)) as px:
        err = _error(httpx.post(f"{px.url}/v1/chat/completions", json=GOOD), 502)
        assert err["code"] == "upstream_unreachable"
        _error(httpx.get(f"{px.url}/v1/models"), 502)


def test_public_bind_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", host="0.0.0.0")
    assert isinstance(ConfigError("x"), RefoldError)
    ProxyConfig(upstream="http://127.0.0.1:1/v1", host="0.0.0.0", tokens=("t",))
    ProxyConfig(upstream="http://127.0.0.1:1/v1", host="::1")
    with pytest.raises(ConfigError):
        ProxyConfig(upstream="ftp://x")
    # an empty --host listens everywhere: the message named no address ("listen on  without")
    with pytest.raises(ConfigError, match=r"refusing to listen on '' \(every address\) without a bearer token"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", host="")
    # README's `--upstream-key "$OPENAI_API_KEY"` with the variable unset: it served, sending no key
    with pytest.raises(ConfigError, match=r"--upstream-key is empty \(an unset variable\?\)"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", upstream_key="")
    # each flag is named alone ("--view-workers and --max-views must be at least 1")
    with pytest.raises(ConfigError, match=r"^--max-views must be at least 1, got 0$"):
        ProxyConfig(upstream="http://127.0.0.1:1/v1", max_views=0)


def test_tokens_are_required_and_never_forwarded(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(
            upstream=f"{up.url}/v1",
            store=str(tmp_path / "s.db"),
            tokens=("t1", "t2"),
            upstream_key="up-key",
            tokenizer="off",
        )
        with ServerThread(create_app(cfg)) as px:
            err = _error(httpx.post(f"{px.url}/v1/chat/completions", json=GOOD), 401)
            assert err["type"] == "authentication_error"
            _error(
                httpx.post(
                    f"{px.url}/v1/chat/completions", json=GOOD, headers={"Authorization": "Bearer nope"}
                ),
                401,
            )
            _error(httpx.get(f"{px.url}/metrics"), 401)
            r = httpx.post(f"{px.url}/v1/chat/completions", json=GOOD, headers={"Authorization": "Bearer t1"})
            assert r.status_code == 200
            assert fake.requests[-1]["auth"] == "Bearer up-key"
            sid = r.headers["X-Refold-Session"]
            assert (
                httpx.get(f"{px.url}/sessions/{sid}", headers={"Authorization": "Bearer t1"}).status_code
                == 200
            )
            assert (
                httpx.get(f"{px.url}/sessions/{sid}", headers={"Authorization": "Bearer t2"}).status_code
                == 404
            )


def test_bad_session_header(urls: tuple[str, str]) -> None:
    err = _error(
        httpx.post(f"{urls[0]}/v1/chat/completions", json=GOOD, headers={"X-Refold-Session": "a b/c"}), 400
    )
    assert err["code"] == "invalid_session"


def test_an_unknown_route_answers_in_the_apis_shape_naming_what_is_served(urls: tuple[str, str]) -> None:
    """It answered FastAPI's {"detail": "Not Found"}, which no OpenAI or Anthropic client reads."""
    px = urls[0]
    for r, said in [
        (httpx.get(f"{px}/foo"), "no route GET /foo; served: "),
        (httpx.post(f"{px}/v2/chat/completions", json=GOOD), "no route POST /v2/chat/completions; served: "),
    ]:
        err = _error(r, 404)
        assert "detail" not in r.json() and err["type"] == "invalid_request_error" and err["code"] == "not_found"
        assert err["message"].startswith(said) and "\n" not in err["message"]
        for route in ("POST /v1/chat/completions", "GET /v1/models", "POST /v1/messages", "POST /v1/responses",
                      "GET /sessions/{name}", "any other /v1/... path (forwarded upstream)"):
            assert route in err["message"], route
    err = _error(httpx.get(f"{px}/chat/completions"), 405)
    assert err["message"].startswith("GET /chat/completions is not served: that path takes POST; served: ")
    assert err["code"] == "method_not_allowed"
    # under /v1/messages an Anthropic client reads Anthropic's shape
    r = httpx.request("TRACE", f"{px}/v1/messages")
    assert r.status_code == 405 and r.json()["type"] == "error" and "detail" not in r.json()
    assert r.json()["error"]["message"].startswith("TRACE /v1/messages is not served: that path takes DELETE, GET, PATCH, POST, PUT")
    # and the SDK shows the message
    client = openai.OpenAI(base_url=f"{px}/v2", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError, match=r"no route POST /v2/chat/completions"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
