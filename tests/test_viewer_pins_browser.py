"""The proxy's session page in real Chromium: expand a step from the history, pin it so the agent's
next prompt shows it as first shown, unpin it, and a bad item says what is wrong (no 500)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest

from refold.config import Config
from refold.proxy import ProxyConfig, create_app
from refold.proxy.metrics import Metrics
from refold.proxy.viewer_pool import ViewPool
from refold.types import content_text
from test_sessions_pins import long_output, output_of
from test_viewer_browser import CHROMIUM

from fake_upstream import BASH_TOOLS, FakeUpstream, ServerThread

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"),
]


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[str, FakeUpstream]]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(
            upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off",
            config=Config().override(["boundary.rule=fixed"]),
        )
        views = ViewPool(Metrics(), executor=ThreadPoolExecutor(1))
        with ServerThread(create_app(cfg, views=views)) as px:
            yield px.url, fake


class Agent:
    def __init__(self, url: str, fake: FakeUpstream) -> None:
        self.url, self.fake = url, fake
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]

    def turn(self) -> list[dict[str, Any]]:
        r = httpx.post(f"{self.url}/v1/chat/completions", json={"model": "m", "messages": self.messages, "tools": BASH_TOOLS},
                       headers={"X-Refold-Session": "s"}, timeout=60)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]["message"]
        self.messages.append(m)
        n = sum(1 for x in self.messages if x["role"] == "assistant")
        self.messages.append({"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": long_output(n)})
        return list(self.fake.requests[-1]["body"]["messages"])


def test_expand_pin_and_unpin_from_the_session_page(served: tuple[str, FakeUpstream], browser: Any) -> None:
    from playwright.sync_api import expect

    url, fake = served
    agent = Agent(url, fake)
    for _ in range(12):
        sent = agent.turn()
    assert "hidden" in output_of(sent, 3)
    with closing(browser.new_page(viewport={"width": 1440, "height": 900})) as page:  # the session's Chromium
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{url}/sessions/s/view#call=12")  # the last call: every step is in the history pane
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("#live-pins").inner_text() == "nothing pinned"
        page.fill("#live-item", "3")
        page.click("#live-expand")
        expect(page.locator("#live-text")).to_contain_text("== step 3 output 1 (tool) ==")
        text = page.locator("#live-text").text_content() or ""
        assert f"[step 3]\n{long_output(3)}" in text and text.startswith("== step 3 reply (assistant) ==")
        page.click("#live-pin")
        expect(page.locator("#live-status")).to_contain_text("pinned")
        assert "3 pinned" in page.locator("#live-status").inner_text()
        assert page.locator("#live-pins button").all_inner_texts() == ["3 ✕"]
        sent = agent.turn()  # the agent's next prompt, through the proxy
        assert output_of(sent, 3) == f"[step 3]\n{long_output(3)}"
        # a bad item: the page says what is wrong, in one line
        page.fill("#live-item", "99")
        page.click("#live-pin")
        page.wait_for_selector("#live-status.bad")
        assert page.locator("#live-status").inner_text() == "session s: no step 99 (the run has steps 1-12)"
        # the side panel of a row offers the same for its step
        page.locator("#history .row[data-step='5'][data-part='output']").click()
        actions = page.locator("[data-testid='live-actions'] button").all_inner_texts()
        assert actions == ["Expand step 5", "Pin step 5", "Unpin step 5"]
        page.locator("#live-pins button").click()  # unpin 3 from its chip
        expect(page.locator("#live-pins")).to_have_text("nothing pinned")
        for _ in range(3):
            sent = agent.turn()
        assert "hidden" in output_of(sent, 3)
        assert errors == []
    assert not any("Pinned" in content_text(m.get("content")) for m in sent)


def test_the_page_loaded_with_a_token_can_pin(tmp_path: Path, browser: Any) -> None:
    """With --token the page is loaded with the token in a header (an extension or a front proxy
    adds it to that one request); its buttons then work by the grant cookie the view sets."""
    from playwright.sync_api import Route, expect

    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", tokens=("tok",),
                          config=Config().override(["boundary.rule=fixed"]))
        with ServerThread(create_app(cfg, views=ViewPool(Metrics(), executor=ThreadPoolExecutor(1)))) as px:
            url, auth = px.url, {"Authorization": "Bearer tok"}
            messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
            for n in range(1, 7):
                r = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": messages, "tools": BASH_TOOLS},
                               headers={"X-Refold-Session": "s", **auth}, timeout=60)
                m = r.json()["choices"][0]["message"]
                messages += [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": long_output(n)}]
            seen: list[tuple[str, bool]] = []

            def with_token(route: Route) -> None:  # only the page itself carries the token
                route.continue_(headers={**route.request.headers, **auth})

            with closing(browser.new_page()) as page:  # the file's Chromium (one Playwright per process)
                page.on("request", lambda rq: seen.append((rq.url, "authorization" in rq.headers)))
                page.route("**/sessions/s/view", with_token)
                page.goto(f"{url}/sessions/s/view")
                page.wait_for_selector("body[data-ready='1']")
                page.fill("#live-item", "2")
                page.click("#live-pin")
                expect(page.locator("#live-status")).to_contain_text("2 pinned")
                page.click("#live-expand")
                expect(page.locator("#live-text")).to_contain_text("== step 2 output 1 (tool) ==")
            pins = httpx.get(f"{url}/sessions/s", headers=auth, timeout=60).json()["pins"]
            assert pins == ["2"]
            calls = [u for u, _ in seen if "/pins" in u or "/expand" in u]
            assert calls and not any(has for u, has in seen if u in calls)  # the calls carried no token
