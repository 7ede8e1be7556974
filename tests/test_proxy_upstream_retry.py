"""``upstream.send_retrying``, the one send every upstream call goes through: a request that failed
on a pooled connection the upstream had closed is sent once more, and only once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from refold.errors import ProxyError
from refold.proxy.upstream import send_retrying

OK = httpx.Response(200, json={})


def _sender(*outcomes: Exception | httpx.Response) -> tuple[list[int], Callable[[], Awaitable[httpx.Response]]]:
    sent: list[int] = []

    async def send() -> httpx.Response:
        sent.append(1)
        outcome = outcomes[len(sent) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return sent, send


@pytest.mark.parametrize("stale", [httpx.RemoteProtocolError("closed"), httpx.ConnectError("refused")])
def test_a_stale_connection_is_sent_once_more(stale: httpx.HTTPError) -> None:
    sent, send = _sender(stale, OK)
    assert asyncio.run(send_retrying(send, 5.0)) is OK
    assert len(sent) == 2


def test_a_second_failure_is_a_502_naming_it() -> None:
    sent, send = _sender(httpx.RemoteProtocolError("closed"), httpx.ConnectError("refused"))
    with pytest.raises(ProxyError) as e:
        asyncio.run(send_retrying(send, 5.0))
    assert (e.value.status, len(sent)) == (502, 2)
    assert str(e.value).startswith("upstream request failed: ConnectError: refused")


@pytest.mark.parametrize(
    ("error", "status"), [(httpx.ReadTimeout("slow"), 504), (httpx.ReadError("reset"), 502)]
)
def test_a_timeout_or_another_failure_is_not_sent_again(error: httpx.HTTPError, status: int) -> None:
    sent, send = _sender(error, OK)
    with pytest.raises(ProxyError) as e:
        asyncio.run(send_retrying(send, 2.5))
    assert (e.value.status, len(sent)) == (status, 1)
    if status == 504:
        assert "timed out after 2.5s" in str(e.value)
