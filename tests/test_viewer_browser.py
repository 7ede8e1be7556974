"""refold view in a real browser: headless Chromium driven by Playwright.

Skipped only when /usr/bin/chromium is missing (CI installs it with ``apt-get install chromium``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.history import History
from refold.lab.replay.policies import refold_policy
from refold.lab.viewer import build_report
from refold.lab.viewer.encode import decode
from refold.render import Renderer
from test_viewer import HOSTILE, MARKER, synthetic_run

from builders import seed_config

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing (apt-get install -y chromium)"
    ),
]
CALL = 12  # by call 12 the boundary (k=3) is at 6: step 5 is a stub of step 2, steps 1, 3, 4 folded


@pytest.fixture(scope="module")
def run() -> History:
    return synthetic_run(24)


@pytest.fixture(scope="module")
def report(run: History, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("view") / "report.html"
    page = build_report(run, variants=["refold", "masking", "compact"], tokenizer="chars4", budget=1024)
    path.write_text(page, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


class Page:
    """One open report, with every request and error it caused."""

    def __init__(self, browser: Any, url: str) -> None:
        self.url = url
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']")

    def _route(self, route: Any) -> None:
        if route.request.url.split("#")[0] == self.url.split("#")[0]:
            route.continue_()
        else:
            route.abort()

    def jump(self, call: int) -> None:
        self.page.fill("#jump", str(call))
        self.page.click("#jump-go")
        assert self.text("#call-label").startswith(f"call {call} /")

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def rows(self, pane: str, shown: str | None = None) -> Any:
        return self.page.locator(f"#{pane} .row" + (f"[data-shown='{shown}']" if shown else ""))


@pytest.fixture
def page(browser: Any, report: Path) -> Iterator[Page]:
    p = Page(browser, report.as_uri())
    yield p
    assert p.errors == []
    assert {u.split("#")[0] for u in p.requests} == {report.as_uri()}, "the page made a request"
    p.context.close()


def test_opens_offline_at_the_first_call(page: Page, run: History) -> None:
    assert page.text("#call-label") == f"call 1 / {len(run)}"
    assert page.rows("prompt").count() == 2  # system prompt and task
    assert page.page.eval_on_selector("#policy", "e => e.value") == "refold"


def test_every_piece_decodes_as_in_python(page: Page, report: Path) -> None:
    raw = re.search(
        r'<script type="application/json" id="refold-data">(.*?)</script>', report.read_text("utf-8"), re.S
    )
    assert raw is not None
    data = json.loads(raw.group(1))
    kinds = {
        seg[0] for p in data["pieces"] if isinstance(p[1], list) for seg in p[1] if isinstance(seg, list)
    }
    assert kinds == {"L", "R"}  # trimmed outputs and simulated summaries are references
    expected = [decode(data["strings"], p[1]) for p in data["pieces"]]
    assert page.page.evaluate("P.map((_, i) => pieceText(i))") == expected


def test_jump_to_a_call_shows_history_and_prompt(page: Page, run: History) -> None:
    page.jump(CALL)
    rendered = Renderer(seed_config(refold_policy())).render(run, CALL - 1)  # the viewer's refold variant is the seed
    assert page.rows("prompt").count() == len(rendered.messages)
    assert page.rows("history").count() == 2 + sum(1 + len(s.observations) for s in run.steps[: CALL - 1])
    assert page.rows("history", "note").count() == 6  # reply and output of steps 1, 3 and 4
    assert page.rows("prompt", "note").count() == 2  # steps 1 and 3-4 (step 2 is still shown between them)
    assert page.rows("prompt", "stub").count() >= 1


def test_toggling_dedup_changes_the_prompt(page: Page) -> None:
    page.jump(CALL)
    before = page.text("#prompt-tokens")
    page.page.uncheck("[data-testid=switch-dedup]")
    assert page.rows("prompt", "stub").count() == 0
    assert page.page.eval_on_selector("#policy", "e => e.value") == "custom"
    assert page.text("#prompt-tokens") != before
    assert page.text("#call-label").startswith(f"call {CALL} /")
    page.page.check("[data-testid=switch-dedup]")
    assert page.rows("prompt", "stub").count() >= 1
    assert page.page.eval_on_selector("#policy", "e => e.value") == "refold"


def test_clicking_a_stub_shows_the_original_and_its_step(page: Page) -> None:
    page.jump(CALL)
    stub = page.rows("prompt", "stub").first
    assert MARKER not in stub.inner_text()
    stub.click()
    detail = page.text("#detail")
    assert "Original output of step 5" in detail
    assert MARKER in detail
    assert "still shown at step 2" in detail
    assert page.page.locator("#history .row.linked").count() == 1


def test_clicking_a_note_shows_the_folded_steps(page: Page) -> None:
    page.jump(CALL)
    page.rows("prompt", "note").filter(has_text="steps 3–4").click()
    detail = page.text("#detail")
    assert "The 2 folded steps" in detail
    assert "call site 0 of divide" in detail  # step 3's output, as recorded
    assert page.page.locator("#history .row.linked").count() == 4


def test_a_restored_step_links_to_what_it_restores(page: Page, run: History) -> None:
    page.jump(len(run))
    page.rows("prompt", "restored").first.click()
    assert "Restores step 3" in page.text("#detail")


def test_clicking_a_bar_jumps_to_that_call(page: Page) -> None:
    page.page.locator("#chart-size g.bar[data-call='7'] rect.hit").click()
    assert page.text("#call-label").startswith("call 7 /")


def test_keyboard_scrubs(page: Page, run: History) -> None:
    page.page.locator("h1").click()
    page.page.keyboard.press("ArrowRight")
    assert page.text("#call-label").startswith("call 2 /")
    page.page.keyboard.press("End")
    assert page.text("#call-label").startswith(f"call {len(run)} /")
    page.page.keyboard.press("ArrowLeft")
    assert page.text("#call-label").startswith(f"call {len(run) - 1} /")


def test_reply_shows_progress_and_stale(page: Page) -> None:
    page.jump(5)
    marks = page.text("#marks")
    assert "PROGRESS: re-read calc.py" in marks
    assert "STALE: 3–4" in marks
    assert page.page.locator("#reply mark").count() == 2


def test_hostile_text_is_shown_as_text(page: Page) -> None:
    page.jump(6)
    page.page.locator("#history .row[data-step='4'][data-part='output']").click()
    assert HOSTILE in page.text("#detail")
    assert page.page.title() != "pwned"
    assert page.page.locator("#detail img, #detail script").count() == 0


def test_other_policies_and_honest_notices(page: Page) -> None:
    page.page.select_option("#policy", "masking")
    assert page.page.locator("[data-testid=switch-dedup]").is_disabled()
    assert "not one of its configurations" in page.text("#notice")
    page.jump(20)
    assert page.rows("prompt", "note").count() > 0


def test_state_is_in_the_address(browser: Any, report: Path) -> None:
    p = Page(browser, report.as_uri() + "#call=9&policy=m0111")
    try:
        assert p.text("#call-label").startswith("call 9 /")
        assert not p.page.is_checked("[data-testid=switch-dedup]")
        assert p.page.is_checked("[data-testid=switch-fold]")
        assert p.errors == []
    finally:
        p.context.close()
