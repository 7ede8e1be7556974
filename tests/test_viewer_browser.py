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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.history import History
from refold.lab.replay.projectors import refold_policy
from refold.lab.viewer import build_report
from refold.lab.viewer.encode import decode
from refold.render import Renderer
from test_viewer import HOSTILE, MARKER, synthetic_run, toolcall_trajectory

from builders import seed_config
from fake_upstream import CHROMIUM

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
def toolcall_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from refold.loaders import load

    folder = tmp_path_factory.mktemp("toolcall")
    traj = folder / "toolcall.traj.json"
    traj.write_text(json.dumps(toolcall_trajectory()), encoding="utf-8")
    path = folder / "report.html"
    path.write_text(
        build_report(load(traj), variants=["refold"], tokenizer="chars4", mechanisms=False), encoding="utf-8"
    )
    return path


class Tabs:
    """One tab per JavaScript setting for the whole file, each Page a fresh load in it. A new tab
    per test cost Chromium about 0.3 s more than a reload (a new context twice that again). The
    viewer keeps no storage or cookies (its state is in the address), and each load starts from
    about:blank, so no test sees another's page."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.contexts: dict[bool, Any] = {}
        self.tabs: dict[bool, Any] = {}
        self.current: Page | None = None

    def open(self, page: Page, javascript: bool) -> Any:
        """The tab for ``javascript``, now reporting its requests and errors to ``page``."""
        self.current = page
        if javascript not in self.tabs:
            context = self.browser.new_context(viewport={"width": 1440, "height": 900}, java_script_enabled=javascript)
            self.contexts[javascript] = context
            tab = self.tabs[javascript] = context.new_page()
            tab.route("**/*", lambda route: self.current._route(route) if self.current else route.abort())
            tab.on("request", lambda r: self.current.requests.append(r.url) if self.current else None)
            tab.on("pageerror", lambda e: self.current.errors.append(str(e)) if self.current else None)
            tab.on(
                "console",
                lambda m: self.current.errors.append(m.text) if self.current and m.type == "error" else None,
            )
        return self.tabs[javascript]


@pytest.fixture(scope="module")
def tabs(browser: Any) -> Iterator[Tabs]:
    t = Tabs(browser)
    yield t
    for context in t.contexts.values():
        context.close()


class Page:
    """One open report, with every request and error it caused."""

    def __init__(self, tabs: Tabs, url: str, *, javascript: bool = True) -> None:
        self.url = url
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.tabs = tabs
        self.page = tabs.open(self, javascript)
        self.page.goto("about:blank")  # a full load even when only the address's fragment differs
        self.page.goto(url)
        if javascript:
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

    def close(self) -> None:
        """Stop recording into this Page; the tab stays for the next one."""
        if self.tabs.current is self:
            self.tabs.current = None

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def rows(self, pane: str, shown: str | None = None) -> Any:
        return self.page.locator(f"#{pane} .row" + (f"[data-shown='{shown}']" if shown else ""))


@pytest.fixture
def page(tabs: Tabs, report: Path) -> Iterator[Page]:
    p = Page(tabs, report.as_uri())
    yield p
    assert p.errors == []
    assert {u.split("#")[0] for u in p.requests} == {report.as_uri()}, "the page made a request"
    p.close()


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
    rendered = Renderer(seed_config(refold_policy())).render(
        run, CALL - 1
    )  # the viewer's refold variant is the seed
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


def test_keys_still_scrub_after_ticking_a_checkbox(page: Page) -> None:
    """A ticked checkbox or mechanism switch keeps the focus; the arrow keys still move between
    calls (they were swallowed as if typed into a text field). A text field still keeps them."""
    page.page.locator("#link-scroll").click()
    page.page.keyboard.press("ArrowRight")
    assert page.text("#call-label").startswith("call 2 /")
    page.page.locator("#switches input").first.click()
    page.page.keyboard.press("ArrowRight")
    assert page.text("#call-label").startswith("call 3 /")
    page.page.keyboard.press(" ")  # space ticks the checkbox, it does not start playing
    assert page.text("#play") == "Play"
    page.page.locator("#search").click()
    page.page.keyboard.press("ArrowLeft")
    assert page.text("#call-label").startswith("call 3 /")


def test_a_pane_of_a_quarter_million_rows_still_draws(page: Page) -> None:
    """The widest row sets the token bars' scale; with ~200k rows, Math.max(...rows) threw a
    RangeError (too many arguments) and the panes stayed empty."""
    drawn = page.page.evaluate(
        """() => { const one = historyRows;
          historyRows = (c) => { const r = one(c); return Array.from({ length: 250000 }, (_, i) => r[i % r.length]); };
          try { renderPanes(); return document.querySelectorAll('#history .row').length; }
          catch (e) { return String(e); } finally { historyRows = one; renderPanes(); } }"""
    )
    assert drawn == 250000


def test_calls_whose_reply_was_not_stored_are_named(tabs: Tabs, tmp_path: Path) -> None:
    """A mini 2.x run with format errors: the page said '3 model calls' and its totals left the
    unstored calls out without a word, while refold replay counts them (the figures disagreed)."""
    from refold.loaders import load

    traj = Path(__file__).parent / "data" / "bill" / "mini2_formaterror.traj.json"
    history = load(traj)
    lost = len(history.meta["unreplied"])
    assert lost
    path = tmp_path / "report.html"
    path.write_text(build_report(history, variants=["refold"], tokenizer="chars4", mechanisms=False), encoding="utf-8")
    page = Page(tabs, path.as_uri())
    sub = page.text("#subtitle")
    assert f"{len(history)} model calls shown" in sub
    assert f"{lost} more whose reply was not stored" in sub and "not in any figure here" in sub
    assert page.errors == []
    page.close()


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


def test_state_is_in_the_address(tabs: Tabs, report: Path) -> None:
    p = Page(tabs, report.as_uri() + "#call=9&policy=m0111")
    try:
        assert p.text("#call-label").startswith("call 9 /")
        assert not p.page.is_checked("[data-testid=switch-dedup]")
        assert p.page.is_checked("[data-testid=switch-fold]")
        assert p.errors == []
    finally:
        p.close()


# ---- issue 15: previews, side panel, omissions, search, filter, diff, figures, arguments, linked
# scrolling, two policies side by side, the loading banner (all at 1440x900)


def _in_viewport(page: Page, selector: str) -> dict[str, float]:
    box = page.page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not shown"
    assert (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= 1440 + 0.5
        and box["y"] + box["height"] <= 900 + 0.5
    ), box
    return dict(box)


def test_previews_show_the_command_and_the_output_summary(page: Page) -> None:
    page.jump(6)
    reply = page.page.locator("#history .row[data-step='2'][data-part='reply'] .pre").inner_text()
    output = page.page.locator("#history .row[data-step='2'][data-part='output'] .pre").inner_text()
    assert reply == "$ nl -ba src/calc.py"
    assert output.startswith("src/calc.py lines 1-60: def operation_1 L1")
    assert page.page.locator("#prompt .row[data-step='2'][data-part='output'] .pre").inner_text() == output
    assert not any(
        t.strip() in ("{", "<returncode>0</returncode>")
        for t in page.page.locator("#history .row .pre").all_inner_texts()
    )


def test_the_detail_opens_beside_the_panes_in_the_viewport(page: Page, run: History) -> None:
    page.jump(len(run))
    assert page.page.locator("#detail-panel").is_hidden()
    row = page.rows("history").nth(page.rows("history").count() - 3)
    row.click()
    panel = _in_viewport(page, "#detail-panel")
    assert panel["width"] >= 400
    assert "In the history, as recorded" in page.text("#detail")
    prompt = page.page.locator("#prompt").bounding_box()
    assert prompt is not None and prompt["x"] + prompt["width"] <= panel["x"]  # the panes shrink beside it
    assert page.page.evaluate("window.scrollY") == 0  # the page did not scroll away to show it
    page.page.keyboard.press("Escape")
    assert page.page.locator("#detail-panel").is_hidden()


def test_the_stats_count_masking_and_every_other_omission(page: Page) -> None:
    page.page.select_option("#policy", "masking")
    page.jump(20)
    masked = page.page.locator("#prompt .row[data-part='output'][data-shown='note']").count()
    assert masked > 0
    assert f"{masked} masked outputs" in page.text("#boundary")
    page.page.select_option("#policy", "refold")
    page.jump(CALL)
    stats = page.text("#boundary")
    assert "3 folded steps in 2 notes" in stats  # steps 1, 3 and 4 (test_jump_to_a_call...)
    stubs = page.rows("prompt", "stub").count()
    assert f"{stubs} stub" in stats


def test_search_finds_the_steps_and_jumps_to_them(page: Page) -> None:
    page.page.fill("#search", "call site 0 of divide")
    page.page.press("#search", "Enter")
    assert page.text("#call-label").startswith("call 4 /")  # step 3 is first in the history at call 4
    assert "in 2 steps (3, 23)" in page.text("#search-info")  # step 23 restores step 3
    assert page.page.locator("#detail mark").first.inner_text() == "call site 0 of divide"
    _in_viewport(page, "#detail mark >> nth=0")  # the side panel scrolled to the match
    assert page.page.locator("#history .row.hit").count() == 1
    page.page.press("#search", "Enter")
    assert page.text("#call-label").startswith("call 24 /")
    page.page.select_option("#filter", "match")
    visible = page.page.locator("#history .row:not(.filtered), #prompt .row:not(.filtered)")
    assert visible.count() >= 2
    assert all("hit" in (c or "") for c in visible.evaluate_all("rs => rs.map(r => r.className)"))
    page.page.fill("#search", "no such text anywhere")
    page.page.press("#search", "Enter")
    assert page.text("#search-info") == "no match in the run"


def test_filter_shows_one_kind_of_row(page: Page) -> None:
    page.jump(CALL)
    page.page.select_option("#filter", "reply")
    parts = page.page.locator("#history .row:not(.filtered)").evaluate_all(
        "rs => rs.map(r => r.dataset.part)"
    )
    assert parts and set(parts) == {"reply"}
    page.page.select_option("#filter", "condensed")
    shown = page.page.locator("#prompt .row:not(.filtered)").evaluate_all(
        "rs => rs.map(r => r.dataset.shown)"
    )
    assert shown and not {"received", "prefix"} & set(shown)
    page.page.select_option("#filter", "all")
    assert page.page.locator(".row.filtered").count() == 0


FIND_SHIFTED_CALL = """() => { const v = VARIANTS.get("masking");
  for (let c = 2; c <= N; c++) { const keep = v.calls[c - 1][0], before = promptOf(v, c - 1), prev = new Set(before);
    const again = promptOf(v, c).slice(keep).filter((pid) => prev.has(pid));
    if (keep < before.length && again.length) return c; }
  return 0; }"""


def test_new_marks_only_messages_the_previous_prompt_lacked(page: Page) -> None:
    """Masking changes an old output: every message after it is recomputed (the cache breaks),
    but a reply sent unchanged at the previous call is not 'new at this call'."""
    page.page.select_option("#policy", "masking")
    call = page.page.evaluate(FIND_SHIFTED_CALL)
    assert call, "the fixture has a call where masking changes an earlier message"
    page.jump(call)
    prev = set(page.page.evaluate(f"promptOf(VARIANTS.get('masking'), {call - 1})"))
    rows = page.page.locator("#prompt .row").evaluate_all(
        "rs => rs.map((r, i) => [i, r.classList.contains('new')])"
    )
    cur = page.page.evaluate(f"promptOf(VARIANTS.get('masking'), {call})")
    assert [n for i, n in rows] == [pid not in prev for pid in cur]
    assert page.page.locator("#prompt .row.rc:not(.new)").count() > 0  # recomputed, yet sent before
    page.page.select_option("#filter", "new")
    assert page.page.locator("#prompt .row:not(.filtered)").count() == sum(pid not in prev for pid in cur)


def test_diff_against_the_previous_call(page: Page, report: Path) -> None:
    data = _data(report)
    stats = next(v for v in data["variants"] if v["id"] == "refold")["stats"]
    moved = next(
        c
        for c in range(2, len(stats) + 1)
        if stats[c - 1][0] != stats[c - 2][0] and stats[c - 1][1] > stats[c - 2][1]
    )
    page.jump(moved)
    page.page.click("#diff")
    _in_viewport(page, "#detail-panel")
    text = page.text("#detail")
    keep = next(v for v in data["variants"] if v["id"] == "refold")["calls"][moved - 1][0]
    assert f"messages 1–{keep} are identical to call {moved - 1}'s" in text
    assert f"The boundary moved from b = {stats[moved - 2][0]} to b = {stats[moved - 1][0]}" in text
    assert "The cached prefix (simulated) holds" in text
    assert page.page.locator("#detail .diff-row.add").count() >= 1
    assert page.page.locator("#detail .diff-row.del").count() >= 1
    assert "received → stub" in text  # an output became a stub at this call: its text diff
    assert page.page.locator("#detail details.pair[open] .diff-line.add").count() >= 1
    # the diff follows the scrubber; call 1 has nothing before it
    page.page.locator("h1").click()
    page.page.keyboard.press("Home")
    assert "Call 1 is the first" in page.text("#detail")
    # where the cache ended is marked in the prompt pane
    page.jump(moved)
    assert page.page.locator("#prompt .row.cut").count() == 1
    prev, cur = page.page.evaluate(f"[promptOf(VARIANTS.get('refold'), {moved - 1}), promptOf(VARIANTS.get('refold'), {moved})]")
    assert page.page.locator("#prompt .row.rc").count() >= page.rows("prompt").count() - keep  # recomputed
    assert page.page.locator("#prompt .row.new").count() == sum(pid not in set(prev) for pid in cur[keep:])


def test_per_call_figures_are_labeled_simulated_and_recorded(tabs: Tabs, toolcall_report: Path) -> None:
    p = Page(tabs, toolcall_report.as_uri() + "#call=2")
    try:
        sim = p.text("[data-testid=figures-sim]")
        data = _data(toolcall_report)
        v = next(x for x in data["variants"] if x["id"] == "refold")
        assert (
            f"{v['tokens'][1]:,} prompt tokens = {v['cached'][1]:,} cached + {v['tokens'][1] - v['cached'][1]:,} recomputed"
            in sim
        )
        assert "$" in sim and "(simulated: vLLM prefix cache" in sim
        assert (
            p.text("[data-testid=figures-recorded]")
            == "recorded in the run: 1,500 prompt tokens, 640 cached, $0.0020, latency 1.3 s"
        )
        assert "cost, simulated" in p.text("#summary")
        assert p.errors == []
    finally:
        p.close()


def test_tool_call_arguments_are_pretty_printed(tabs: Tabs, toolcall_report: Path) -> None:
    p = Page(tabs, toolcall_report.as_uri() + "#call=4")
    try:
        row = p.page.locator("#history .row[data-step='3'][data-part='reply']")
        assert row.locator(".pre").inner_text() == "$ cat <<'EOF' > fix.py …"
        row.click()
        detail = p.text("#detail")
        assert "→ bash\n  command:\n      cat <<'EOF' > fix.py\n      def divide(a, b):" in detail
        assert '{"command"' not in detail
        assert "≈ 4.8 s (recorded)" in detail  # after the format error: from the provider's created second
        assert p.errors == []
    finally:
        p.close()


def _top_anchor(page: Page, pane: str) -> int:
    return int(page.page.evaluate(f"topRow(document.getElementById('{pane}')).dataset.anchor"))


FRAMES = "() => new Promise((ok) => requestAnimationFrame(() => requestAnimationFrame(() => ok(true))))"
LINKED = """() => {
  const h = topRow(document.getElementById('history')), p = topRow(document.getElementById('prompt'));
  return h && p && Number(h.dataset.anchor) > 1 && Math.abs(Number(h.dataset.anchor) - Number(p.dataset.anchor)) <= 2;
}"""


def test_history_and_prompt_scroll_together(page: Page, run: History) -> None:
    page.jump(len(run))
    assert page.page.is_checked("#link-scroll")
    page.page.locator("#history").hover()
    page.page.mouse.wheel(0, -100_000)  # to the top of the history
    page.page.wait_for_function("() => document.getElementById('history').scrollTop === 0")
    page.page.wait_for_function("() => document.getElementById('prompt').scrollTop === 0")
    page.page.mouse.wheel(0, 300)
    page.page.wait_for_function(LINKED)  # the same step at the top of both panes
    page.page.evaluate(FRAMES)
    page.page.uncheck("#link-scroll")
    before = page.page.evaluate(
        "[document.getElementById('history').scrollTop, document.getElementById('prompt').scrollTop]"
    )
    page.page.locator("#history").hover()
    page.page.mouse.wheel(0, -150)
    page.page.wait_for_function(f"() => document.getElementById('history').scrollTop < {before[0]}")
    page.page.evaluate(FRAMES)  # scroll events are handled before the next frames
    assert page.page.evaluate("document.getElementById('prompt').scrollTop") == before[1]


def test_two_policies_side_by_side(page: Page, report: Path) -> None:
    page.jump(20)
    assert page.page.locator("#compare-legend").is_hidden()
    assert page.page.locator("#chart-total polyline").count() == 2
    page.page.select_option("#compare", "masking")
    assert page.page.locator("#pane-history").is_hidden()
    assert page.page.locator("#pane-compare").is_visible()
    data = _data(report)
    masking = next(v for v in data["variants"] if v["id"] == "masking")
    prompt: list[int] = []
    for keep, add in masking["calls"][:20]:
        prompt = prompt[:keep] + add
    assert page.page.locator("#compare-rows .row").count() == len(prompt)
    assert page.text("#compare-name") == "masking"
    assert f"{masking['tokens'][19]:,} tokens" in page.text("#compare-tokens")
    assert "vs masking" in page.text("#summary")
    assert "masking:" in page.text("#figures")
    page.page.locator("#compare-rows .row[data-step='18'][data-part='reply']").click()
    assert page.page.locator("#prompt .row.linked[data-step='18'][data-part='reply']").count() == 1
    assert "compare=masking" in page.page.url
    assert page.page.locator("#chart-total polyline").count() == 3  # base, refold and masking
    assert page.page.locator("#compare-legend").is_visible()
    page.page.select_option("#compare", "")
    assert page.page.locator("#pane-history").is_visible()


def test_a_banner_shows_while_the_report_builds(tabs: Tabs, report: Path) -> None:
    p = Page(tabs, report.as_uri(), javascript=False)  # what shows before any script has run
    try:
        assert p.page.locator("#loading").is_visible()
        assert "Building the view" in p.text("#loading")
    finally:
        p.close()
    q = Page(tabs, report.as_uri())
    try:
        assert q.page.locator("#loading").is_hidden()
        assert q.errors == []
    finally:
        q.close()


def _data(report: Path) -> dict[str, Any]:
    raw = re.search(
        r'<script type="application/json" id="refold-data">(.*?)</script>', report.read_text("utf-8"), re.S
    )
    assert raw is not None
    return dict(json.loads(raw.group(1)))


_lines = st.lists(st.sampled_from(["a", "b", "c", "", "def f():", "  return 1", "x = 2"]), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=_lines, b=_lines)
def test_line_diff_rebuilds_both_texts(page: Page, a: list[str], b: list[str]) -> None:
    x, y = "\n".join(a), "\n".join(b)
    ops = page.page.evaluate("([x, y]) => lineDiff(x, y)", [x, y])
    assert [line for k, line in ops if k != "add"] == x.split("\n")
    assert [line for k, line in ops if k != "del"] == y.split("\n")
    same = sum(1 for k, _ in ops if k == "same")
    if x == y:
        assert same == len(x.split("\n"))


PANE_ROWS = """() => ["prompt", "history", "compare-rows"].map((id) => [...document.getElementById(id).children].map(
  (r) => [r.className, JSON.stringify(r.dataset), r.textContent, r.querySelector(".bar").style.width]))"""
REDRAW = """() => { for (const id of ["prompt", "history", "compare-rows"]) document.getElementById(id).replaceChildren();
  renderPanes(); }"""


@pytest.mark.parametrize(
    ("policy", "compare", "query", "filter_"),
    [("refold", "", "", "all"), ("masking", "", "", "new"), ("refold", "masking", "def", "condensed")],
)
def test_panes_redrawn_in_place_equal_a_fresh_draw(
    page: Page, policy: str, compare: str, query: str, filter_: str
) -> None:
    """Rows are kept from one call to the next when drawn alike: whatever the path to a call, its
    panes are exactly those drawn from scratch."""
    page.page.select_option("#policy", policy)
    if compare:
        page.page.select_option("#compare", compare)
    page.page.select_option("#filter", filter_)
    if query:
        page.page.evaluate(f"setQuery({query!r})")
    n = page.page.evaluate("N")
    for call in [*range(1, min(n, 10) + 1), n, n - 1, 3, n // 2, 2]:
        page.page.evaluate(f"setCall({call})")
        stepped = page.page.evaluate(PANE_ROWS)
        assert any(stepped), "the panes have rows"
        page.page.evaluate(REDRAW)
        assert page.page.evaluate(PANE_ROWS) == stepped, f"call {call}"
