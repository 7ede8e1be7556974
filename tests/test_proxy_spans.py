"""Spans and the ledger through the proxy: the openai SDK as client, a scripted fake upstream.

The upstream is scripted to issue context commands (function tools the proxy offers, or shell
commands); the proxy answers them in internal rounds the client never sees, and the next prompt
it renders shows their effect (a collapsed span block, folded and dropped outputs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from refold.config import Config
from refold.history import History
from refold.mechanisms.ledger import LedgerPolicy
from refold.mechanisms.spans import SpanPolicy
from refold.policy import Policy
from refold.proxy import ProxyConfig, create_app
from refold.render import Renderer
from test_proxy_clients import SYSTEM, TOOLS

from builders import seed_config
from fake_upstream import FakeUpstream, ServerThread, collect_stream

AUTH = {"Authorization": "Bearer sk-s"}
CONTEXT = {"restore", "begin_span", "fold_span", "fold", "drop", "expand", "search_ledger"}
GOOD_INNER = "the tokenizer drops unicode at tok.py:40 because its regex is ASCII-only"
GOOD_OUTER = "the parser bug comes from the tokenizer, so fixing tok.py:40 fixes parsing"


class Agent:
    """A tool-calling client that keeps its own message list and runs every call it gets."""

    def __init__(self, url: str, session: str, task: str = "fix the parser") -> None:
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-s", max_retries=0, timeout=60)
        self.session = session
        self.messages: list[Any] = [SYSTEM, {"role": "user", "content": task}]
        self.seen: list[dict[str, Any]] = []  # every assistant message the client received
        self.pad = ""  # appended to every tool output (a note typed in would be a user message: never hidden)

    def turn(self, note: str = "", *, stream: bool = False) -> dict[str, Any]:
        if note:
            self.messages.append({"role": "user", "content": note})
        headers = {"X-Refold-Session": self.session}
        if stream:
            msg = collect_stream(
                self.client.chat.completions.create(
                    model="m", messages=self.messages, tools=TOOLS, stream=True, extra_headers=headers
                )
            )
        else:
            resp = self.client.chat.completions.create(
                model="m", messages=self.messages, tools=TOOLS, extra_headers=headers
            )
            msg = resp.choices[0].message.model_dump(exclude_none=True)
        self.seen.append(msg)
        self.messages.append(msg)
        for c in msg.get("tool_calls") or []:
            command = json.loads(c["function"]["arguments"])["command"]
            out = f"output of {command}\n" + "".join(f"{command} detail {i}\n" for i in range(4)) + self.pad
            self.messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
        return msg


class Env:
    def __init__(self, fake: FakeUpstream, url: str, cfg: ProxyConfig) -> None:
        self.fake, self.url, self.cfg = fake, url, cfg

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.fake.requests]

    def session(self, name: str) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/sessions/{name}", headers=AUTH)
        r.raise_for_status()
        data: dict[str, Any] = r.json()
        return data


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", config=seed_config(Policy(k=2)))
        with ServerThread(create_app(cfg)) as px:
            yield Env(fake, px.url, cfg)


def texts(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body["messages"])


def rebuilt(view: dict[str, Any]) -> History:
    """The session's history as the store holds it (observation ``extra`` read back as step meta)."""
    return History.from_messages(
        [*view["prefix"], *(m for s in view["steps"] for m in (s["reply"], *s["observations"]))]
    )


def test_nested_span_fold_refused_then_accepted(env: Env) -> None:
    a = Agent(env.url, "spans")
    a.turn()
    env.fake.script(("begin_span", {"question": "why does parsing fail on unicode"}))
    a.turn()  # step 2 opens S1 (internal), step 3 is the client's
    env.fake.script(("begin_span", {"question": "which tokenizer path drops it"}))
    a.turn()
    a.turn()
    env.fake.script(
        ("fold_span", {"conclusion": "found it"}),  # refused: too short, no why
        ("fold_span", {"conclusion": GOOD_INNER}),
    )
    a.turn()
    env.fake.script(("fold_span", {"conclusion": GOOD_OUTER}))
    a.turn()
    a.turn()
    assert env.fake.scripted_left() == 0
    # the client only ever saw its own tool
    assert all(c["function"]["name"] == "bash" for m in a.seen for c in m["tool_calls"])
    assert not any(
        c["function"]["name"] in CONTEXT
        for m in a.messages
        if isinstance(m, dict)
        for c in m.get("tool_calls") or []
    )
    bodies = env.bodies()
    assert {t["function"]["name"] for t in bodies[0]["tools"]} == {"bash"} | CONTEXT
    refused = next(b for b in bodies if "fold_span refused" in texts(b))
    assert 'span S2 ("which tokenizer path drops it") stays open' in texts(refused)
    # after the inner fold the upstream received S2's collapsed block, then S1's with S2 inside
    inner = next(b for b in bodies if "Span S2 folded: steps" in texts(b))
    assert f"Conclusion: {GOOD_INNER}" in texts(inner)
    last = texts(bodies[-1])
    assert "Span S1 folded: steps 2-" in last and f"Conclusion: {GOOD_OUTER}" in last
    assert f"Inner span S2 (steps 4-8): which tokenizer path drops it -> {GOOD_INNER}" in last
    assert "output of echo turn-3" not in last  # a step inside the span is folded away
    # the session records the internal rounds and their outcomes
    view = env.session("spans")
    internal = [s for s in view["steps"] if s["internal"]]
    results = [o["extra"]["refold_result"] for s in internal for o in s["observations"]]
    assert [(r["name"], r["ok"]) for r in results] == [
        ("begin_span", True),
        ("begin_span", True),
        ("fold_span", False),
        ("fold_span", True),
        ("fold_span", True),
    ]
    # the stored history renders exactly what the upstream received last
    h = rebuilt(view)
    rendered = Renderer(env.cfg.config).render(h)
    assert rendered.messages == bodies[-1]["messages"][: len(rendered.messages)]


def test_ledger_commands_through_the_proxy(env: Env) -> None:
    a = Agent(env.url, "ledger")
    for _ in range(3):
        a.turn()
    env.fake.script(("fold", {"id": "1"}), ("drop", {"id": "2"}))
    a.turn()
    env.fake.script(("expand", {"id": "1"}), ("search_ledger", {"query": "turn-3 detail"}))
    a.turn()
    # coreutils fold with a file argument goes to the client's shell, untouched
    env.fake.script(("bash", {"command": "fold -w 80 notes.txt"}))
    msg = a.turn()
    assert json.loads(msg["tool_calls"][0]["function"]["arguments"])["command"] == "fold -w 80 notes.txt"
    for _ in range(3):
        a.turn()
    bodies = env.bodies()
    answers = [m for b in bodies for m in b["messages"] if m.get("role") == "tool"]
    fold_ok = next(m["content"] for m in answers if "[context-manager] 1: replaced" in m["content"])
    assert "`expand <id>` shows it again" in fold_ok
    assert any("[context-manager] 2: removed" in m["content"] for m in answers)
    expanded = next(m["content"] for m in answers if "Step 1 restored from history" in m["content"])
    assert "output of echo turn-1" in expanded
    found = next(
        m["content"] for m in answers if '[context-manager] search_ledger "turn-3 detail"' in m["content"]
    )
    assert "\n3 [shown]" in found
    last = bodies[-1]["messages"]
    assert any("Output 1 folded:" in str(m.get("content")) for m in last)
    assert any("Output 2 dropped." in str(m.get("content")) for m in last)
    assert not any(
        str(m.get("content")).startswith(("[step 1]\noutput of", "[step 2]\noutput of")) for m in last
    )
    # every client-visible reply is the client's own tool
    assert all(c["function"]["name"] == "bash" for m in a.seen for c in m["tool_calls"])
    view = env.session("ledger")
    assert [s["internal"] for s in view["steps"]].count(True) == 4
    assert 'refold_context_commands_total{command="fold"} 1' in httpx.get(f"{env.url}/metrics").text


def test_streamed_internal_rounds_stay_invisible(env: Env) -> None:
    a = Agent(env.url, "stream")
    a.turn(stream=True)
    env.fake.script(("begin_span", {"question": "where is the bug"}), ("search_ledger", {"query": "turn-1"}))
    msg = a.turn(stream=True)
    # the internal rounds' text was relayed live; their tool calls never reach the client
    assert msg["content"].startswith("PROGRESS: begin_span") and "\n\nPROGRESS: step" in msg["content"]
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["bash"]
    env.fake.script(
        ("fold_span", {"conclusion": "the bug is in parse.py:12 because the loop skips the last token"})
    )
    a.turn(stream=True)
    a.turn(stream=True)
    assert "Span S1 folded: steps 2-" in texts(env.bodies()[-1])
    # the replies the client echoed back (with the relayed text) matched: one branch, no fork
    assert len(env.session("stream")["branches"]) == 1


def test_disabled_spans_are_ordinary_shell_commands(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", config=Config(spans=SpanPolicy(enabled=False), ledger=LedgerPolicy(prompt=True, budget_tokens=8000)))
        with ServerThread(create_app(cfg)) as px:
            a = Agent(px.url, "off")
            a.turn()
            fake.script(("bash", {"command": 'begin_span "q"'}))
            msg = a.turn()
            assert json.loads(msg["tool_calls"][0]["function"]["arguments"])["command"] == 'begin_span "q"'
            a.turn()
            body = fake.requests[-1]["body"]
            assert {t["function"]["name"] for t in body["tools"]} == {"bash"} | CONTEXT - {
                "begin_span",
                "fold_span",
            }
            system = body["messages"][0]["content"]
            assert "## Folding an investigation" not in system and "of 8k tokens" in system
            assert "[context-manager] context: " in texts(body)


def test_live_stream_relays_deltas_before_the_round_ends(tmp_path: Path) -> None:
    """A round that cannot be internal (no shell tool, no context tools offered) is relayed as it arrives."""
    fake = FakeUpstream()
    edit = {
        "type": "function",
        "function": {"name": "edit", "parameters": {"type": "object", "properties": {}}},
    }
    with ServerThread(fake.app) as up:
        cfg = ProxyConfig(
            upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), context_tools=False, tokenizer="off"
        )
        with ServerThread(create_app(cfg)) as px:
            client = openai.OpenAI(base_url=f"{px.url}/v1", api_key="k", max_retries=0, timeout=60)
            stream = client.chat.completions.create(
                model="m", messages=[SYSTEM, {"role": "user", "content": "HOLD"}], tools=[edit], stream=True
            )
            first = ""
            chunks = iter(stream)
            while not first:
                ch = next(chunks)
                first = (ch.choices[0].delta.content or "") if ch.choices else ""
            assert not fake.release.is_set()  # the upstream is still holding the rest of the round
            fake.release.set()
            rest = "".join((ch.choices[0].delta.content or "") for ch in chunks if ch.choices)
            assert (first + rest).startswith("PROGRESS: step 1")
            assert "edit" not in {t["function"]["name"] for t in fake.requests[-1]["body"]["tools"]} - {
                "edit"
            }
            metrics = httpx.get(f"{px.url}/metrics").text
            assert "refold_streams_relayed_live_total 1" in metrics
            assert "refold_upstream_prompt_tokens_total" in metrics  # usage is counted at the stream's end


FOLD_END = "steps 2-3 were a dead end: the error at line 1 is not raised there, so the cause lies elsewhere"


def test_a_fold_after_the_fact_waits_for_the_next_boundary_move(tmp_path: Path) -> None:
    """The cost rule through the proxy: the fold of steps 2-3, issued when everything after them is
    cached, is answered "at the next cache-boundary move" and shown with it, not at once."""
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        config = Config.parse(k=3)  # the library's defaults: rule cost, masking
        cfg = ProxyConfig(context_tools_beside_shell=True, upstream=f"{up.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off", config=config)
        with ServerThread(create_app(cfg)) as px:
            a = Agent(px.url, "defer")
            a.pad = "padding that makes every step long enough to matter. " * 40
            for _ in range(1, 13):
                a.turn()
            a.pad = ""
            fake.script(("bash", {"command": f'fold_steps 2-3 "{FOLD_END}"'}))
            a.turn()  # step 13 is the internal fold, 14 the client's
            after_fold = len(fake.requests)
            for _ in range(3):
                a.turn()
            bodies = [r["body"] for r in fake.requests]
            said = next(m["content"] for m in bodies[after_fold - 1]["messages"] if "Span S1 folded after the fact" in str(m.get("content")))
            assert "at the next cache-boundary move" in said and "folding now would recompute ~" in said
            shown = ["Span S1 folded: steps 2-3" in texts(b) for b in bodies[after_fold - 1 :]]
            assert shown[0] is False and True in shown[: 3 + 1] and shown[-1]  # not with the call after the fold; within k calls
            first, before = bodies[after_fold - 1]["messages"], bodies[after_fold - 2]["messages"]
            assert first[: len(before)] == before  # the fold's own round only adds at the end: the cache holds
            view = httpx.get(f"{px.url}/sessions/defer", headers=AUTH).json()
            h = rebuilt(view)
            rendered = Renderer(cfg.config).render(h)
            assert rendered.messages == bodies[-1]["messages"][: len(rendered.messages)]
