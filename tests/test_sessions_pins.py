"""Folds the user can open (issue 15, item 3): expand, pin and unpin a step or span of a proxy
session or a saved mini run, and the agent's next prompt shows a pinned item as first shown.

Through the proxy (a fake upstream records every prompt), through mini (the real agent loop with a
scripted litellm), and through ``refold sessions`` against both; without pins, prompts are the same.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.cli import main
from refold.config import Config
from refold.history import History
from refold.loaders import load
from refold.pinning import Item, expand_text, pin_record, pinned_items, resolve
from refold.proxy import ProxyConfig
from refold.proxy.records import SCHEMA_VERSION, Commit, StoredStep
from refold.proxy.redis_store import RedisStore
from refold.proxy.sqlite_store import SQLiteStore
from refold.render import render
from refold.types import Shown, content_text, message_digest

from fake_upstream import BASH_TOOLS, FakeUpstream, asgi_proxy, redis_server


def long_output(n: int) -> str:
    return "\n".join(f"line {i} of output {n}: " + "x" * 40 for i in range(30))



class Client:
    """A tool-calling agent through the proxy: keeps its messages, answers every call with a long output."""

    def __init__(self, c: httpx.AsyncClient, fake: FakeUpstream, name: str) -> None:
        self.c, self.fake, self.name = c, fake, name
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]

    async def turn(self) -> list[dict[str, Any]]:
        """One call; returns the prompt the upstream was sent for it."""
        r = await self.c.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": self.messages, "tools": BASH_TOOLS},
            headers={"X-Refold-Session": self.name},
        )
        assert r.status_code == 200, r.text
        sent = self.fake.requests[-1]["body"]["messages"]
        m = r.json()["choices"][0]["message"]
        self.messages.append(m)
        n = sum(1 for x in self.messages if x["role"] == "assistant")
        self.messages.append({"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": long_output(n)})
        return list(sent)


def output_of(prompt: list[dict[str, Any]], step: int) -> str:
    found = [content_text(m.get("content")) for m in prompt if m["role"] == "tool" and content_text(m.get("content")).startswith(f"[step {step}]\n")]
    assert len(found) == 1, found
    return found[0]


FIXED = Config().override(["boundary.rule=fixed"])  # the boundary moves every k calls: masking is due on time


def test_a_pin_through_the_proxy_shows_in_the_next_prompt_and_unpin_reverses(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake, url = upstream
    cfg = ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off", config=FIXED)

    async def go() -> None:
        async with asgi_proxy(cfg) as c:
            pinned, plain = Client(c, fake, "pinned"), Client(c, fake, "plain")
            for _ in range(12):
                a, b = await pinned.turn(), await plain.turn()
                assert a == b  # no pins: the two sessions' prompts are the same, call for call
            assert "hidden" in output_of(a, 3) and long_output(3) not in output_of(a, 3)  # masked by now
            r = await c.post("/sessions/pinned/pins", json={"item": "3"})
            assert r.status_code == 200 and r.json()["pins"] == ["3"], r.text
            a, b = await pinned.turn(), await plain.turn()
            assert output_of(a, 3) == f"[step 3]\n{long_output(3)}"  # as first shown
            assert output_of(b, 3) != output_of(a, 3) and "hidden" in output_of(b, 3)
            assert [m for m in a if "[step 3]" not in content_text(m.get("content"))] != []
            described = (await c.get("/sessions/pinned")).json()
            assert described["pins"] == ["3"]
            # the JSON expand is byte-exact from the history
            ex = (await c.get("/sessions/pinned/expand", params={"item": "3"})).json()
            assert ex["steps"] == [3] and f"[step 3]\n{long_output(3)}" in ex["text"]
            r = await c.post("/sessions/pinned/pins", json={"item": "3", "pin": False})
            assert r.status_code == 200 and r.json()["pins"] == []
            for _ in range(3):
                a, b = await pinned.turn(), await plain.turn()
            assert "hidden" in output_of(a, 3)  # shown shorter again
            # bad items: one line naming the session and the item, never a 500
            for bad, says in [("99", "no step 99"), ("3.4", "no 3.4"), ("S1", "no span S1"), ("zz", "not an item"), ("", "body must be")]:
                r = await c.post("/sessions/pinned/pins", json={"item": bad})
                assert r.status_code == 400 and says in r.json()["error"]["message"], r.text
                assert "\n" not in r.json()["error"]["message"]
            r = await c.post("/sessions/pinned/pins", json={"item": "4", "pin": False})
            assert r.status_code == 400 and r.json()["error"]["message"] == "session pinned: 4 is not pinned"
            assert (await c.post("/sessions/pinned/pins", json={"item": "3", "pin": "yes"})).status_code == 400
            assert (await c.post("/sessions/pinned/pins", content=b"[", headers={"Content-Type": "application/json"})).status_code == 400
            assert (await c.get("/sessions/pinned/expand", params={"item": "0"})).status_code == 400
            assert (await c.post("/sessions/nope/pins", json={"item": "3"})).status_code == 404

    asyncio.run(go())


def test_pins_survive_a_restart_and_a_pin_from_the_cli_reaches_the_running_proxy(upstream: tuple[FakeUpstream, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = upstream
    db = tmp_path / "s.db"
    cfg = ProxyConfig(upstream=url, store=str(db), tokenizer="off", config=FIXED)

    async def first() -> list[dict[str, Any]]:
        async with asgi_proxy(cfg) as c:
            agent = Client(c, fake, "s")
            for _ in range(12):
                await agent.turn()
            # the operator pins from the command line while the proxy runs
            assert await asyncio.to_thread(main, ["sessions", "pin", "s", "2", "--store", str(db)]) == 0
            sent = await agent.turn()
            assert output_of(sent, 2) == f"[step 2]\n{long_output(2)}"
            agent.messages.append({"role": "user", "content": "again"})
            return agent.messages

    messages = asyncio.run(first())
    assert "pinned 2" in capsys.readouterr().out

    async def second() -> None:
        async with asgi_proxy(cfg) as c:  # a new process on the same store
            r = await c.post("/v1/chat/completions", json={"model": "m", "messages": messages, "tools": BASH_TOOLS}, headers={"X-Refold-Session": "s"})
            assert r.status_code == 200
            sent = fake.requests[-1]["body"]["messages"]
            assert output_of(sent, 2) == f"[step 2]\n{long_output(2)}"
            assert (await c.get("/sessions/s")).json()["pins"] == ["2"]

    asyncio.run(second())


def test_the_session_routes_keep_the_guard(upstream: tuple[FakeUpstream, str], tmp_path: Path) -> None:
    fake, url = upstream
    cfg = ProxyConfig(upstream=url, store=str(tmp_path / "s.db"), tokenizer="off")

    async def go() -> None:
        async with asgi_proxy(cfg) as c:
            agent = Client(c, fake, "g")
            for _ in range(4):
                await agent.turn()
            evil = await c.post("/sessions/g/pins", json={"item": "1"}, headers={"Origin": "http://evil.example"})
            assert evil.status_code == 403 and evil.json()["error"]["code"] == "origin_not_allowed"
            form = await c.post("/sessions/g/pins", content=b"item=1", headers={"Content-Type": "application/x-www-form-urlencoded"})
            assert form.status_code == 415  # a cross-site form cannot post JSON
            other = await c.post("/sessions/g/pins", json={"item": "1"}, headers={"Authorization": "Bearer someone-else"})
            assert other.status_code == 404  # another key's session looks missing
            rebound = await c.post("/sessions/g/pins", json={"item": "1"}, headers={"Host": "evil.example", "Origin": "http://evil.example"})
            assert rebound.status_code == 403
            own = await c.post("/sessions/g/pins", json={"item": "1"}, headers={"Origin": "http://127.0.0.1:8077"})
            assert own.status_code == 200  # the proxy's own session page
            page = (await c.get("/sessions/g/view")).text
            assert "connect-src 'self'" in page and "live-item" in page

    asyncio.run(go())


# ---- refold.pinning ------------------------------------------------------------------------------


def span_history() -> History:
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}])
    h.append({"role": "assistant", "content": "PROGRESS: a\nSTALE: -\n```bash\nls\n```"}, [{"role": "user", "content": "f.py"}])
    h.append({"role": "assistant", "content": 'PROGRESS: b\nSTALE: -\n```bash\nbegin_span "why?"\n```'}, [{"role": "user", "content": "ok"}])
    h.append({"role": "assistant", "content": "PROGRESS: c\nSTALE: -\n```bash\ncat f.py\n```"}, [{"role": "user", "content": "x = 1"}])
    return h


def test_items_resolve_to_steps_and_spans() -> None:
    h = span_history()
    assert resolve(h, "S1").steps == (2, 3) and resolve(h, "S1").target == "r2 2 r3 3"
    assert resolve(h, " step 2 ").label == "2" and resolve(h, "r3") == Item("r3", (3,), -1)
    assert resolve(h, "1-2").steps == (1, 2) and resolve(h, "3.1").label == "3"
    text = expand_text(h, resolve(h, "S1"))
    assert text.startswith("== span S1: steps 2-3 ==") and "[step 3]\nx = 1" in text
    for bad, says in [("4", "no step 4 (the run has steps 1-3)"), ("S2", "no span S2 (spans: S1)"), ("3-1", "runs backwards"), ("1.2", "no 1.2")]:
        with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
            resolve(h, bad, where="run x")
    rec = pin_record(h, "S1", on=True)
    h.load_pins([rec])
    assert pinned_items(p.record() for p in h.pins) == ["r2 2 r3 3"] and pinned_items([rec]) == ["S1"]
    with pytest.raises(ValueError, match="2 is not pinned"):
        pin_record(h, "2", on=False)


# ---- stores --------------------------------------------------------------------------------------

V2 = [
    "CREATE TABLE sessions (sid TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL, head TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL)",
    "CREATE TABLE prefixes (sid TEXT NOT NULL, digest TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (sid, digest))",
    "CREATE TABLE steps (sid TEXT NOT NULL, digest TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (sid, digest))",
    "CREATE TABLE heads (sid TEXT NOT NULL, head TEXT NOT NULL, retired REAL NOT NULL, PRIMARY KEY (sid, head))",
    "CREATE TABLE migrations (name TEXT PRIMARY KEY, applied REAL NOT NULL)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
]


async def exercise(store: Any) -> None:
    """Pins append in order, count in ``state``, load with the session and go with a prune."""
    p = message_digest([{"role": "user", "content": "p"}])
    reply, obs = {"role": "assistant", "content": "r"}, ({"role": "tool", "content": "o"},)
    s1 = StoredStep(message_digest([reply, *obs], parent=p), p, reply, obs, {})
    assert not await store.add_pin("a", {"target": "1", "at": 1, "on": True})  # no such session
    await store.commit(Commit("a", "n", "o", None, s1.digest, (p, [{"role": "user", "content": "p"}]), (s1,)))
    assert await store.state("a") == (s1.digest, 0, "", 0)
    for on in (True, False, True):
        assert await store.add_pin("a", {"target": "1", "at": 1, "on": on})
    assert await store.state("a") == (s1.digest, 3, "", 0) and await store.state("b") is None
    data = await store.load("a")
    assert [r["on"] for r in data.pins] == [True, False, True]
    assert await store.prune(10**12) == 1 and await store.state("a") is None
    await store.commit(Commit("a", "n", "o", None, s1.digest, (p, [{"role": "user", "content": "p"}]), (s1,)))
    assert (await store.load("a")).pins == []  # a pruned session's pins went with it


def test_a_v2_sqlite_store_migrates_to_pins(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    db = sqlite3.connect(path)
    for sql in V2:
        db.execute(sql)
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()

    async def go() -> None:
        store = SQLiteStore(str(path))
        assert store.schema == SCHEMA_VERSION >= 3  # 004-responses came after the pins
        await exercise(store)
        await store.close()

    asyncio.run(go())
    names = [n for (n,) in sqlite3.connect(path).execute("SELECT name FROM migrations")]
    assert "003-pins" in names


def test_redis_store_keeps_pins() -> None:
    async def go(url: str) -> None:
        store = RedisStore(url)
        await exercise(store)
        await store.close()

    with redis_server() as url:
        asyncio.run(go(url))


# ---- saved mini runs -----------------------------------------------------------------------------


def saved_run(tmp_path: Path, steps: int = 12) -> Path:
    """A refold mini trajectory as RefoldModel saves it (config under info.config.refold)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for n in range(1, steps + 1):
        messages.append({"role": "assistant", "content": f"PROGRESS: step {n}\nSTALE: -\n\n```bash\ncat f{n}.txt\n```"})
        messages.append({"role": "user", "content": long_output(n)})
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"info": {"config": {"refold": {"format": "refold-mini-1"}}}, "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}))
    return path


def test_refold_sessions_on_a_saved_mini_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from refold.integrations.saved import renderer_for

    path = saved_run(tmp_path)
    before = renderer_for(json.loads(path.read_text())).render(load(path)).messages
    assert main(["sessions", "expand", str(path), "4"]) == 0
    out = capsys.readouterr().out
    assert out == f"== step 4 reply (assistant) ==\nPROGRESS: step 4\nSTALE: -\n\n```bash\ncat f4.txt\n```\n== step 4 output 1 (user) ==\n[step 4]\n{long_output(4)}\n"
    assert main(["sessions", "pin", str(path), "4"]) == 0
    assert "pinned 4" in capsys.readouterr().out
    data = json.loads(path.read_text())
    assert [(r["target"], r["at"], r["on"], r["item"]) for r in data["info"]["refold_pins"]] == [("r4 4", 12, True, "4")]
    h = load(path)
    after = renderer_for(data).render(h).messages
    shown = [content_text(m.get("content")) for m in after]
    assert f"[step 4]\n{long_output(4)}" in shown and f"[step 4]\n{long_output(4)}" not in [content_text(m.get("content")) for m in before]
    assert main(["sessions", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "[  4] output pinned, reply pinned" in out and "pinned by you: 4" in out
    assert main(["sessions", "unpin", str(path), "4"]) == 0
    capsys.readouterr()
    assert renderer_for(json.loads(path.read_text())).render(load(path)).messages == before
    for args, says in [
        (["sessions", "pin", str(path), "13"], f"{path}: no step 13 (the run has steps 1-12)"),
        (["sessions", "unpin", str(path), "4"], f"{path}: 4 is not pinned"),
        (["sessions", "expand", str(path), "S1"], f"{path}: no span S1 (spans: none)"),
        (["sessions", "expand", "no-such-session", "1", "--store", str(tmp_path / "none.db")], "no session store at"),
        (["sessions", "pin", str(tmp_path / "gone.traj.json"), "1"], f"no run file {tmp_path / 'gone.traj.json'}"),
    ]:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err


# ---- invariants ----------------------------------------------------------------------------------

def grown(n: int) -> History:
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}])
    for i in range(1, n + 1):
        h.append({"role": "assistant", "content": f"PROGRESS: {i}\nSTALE: -\n```bash\ncat f{i}.txt\n```"}, [{"role": "user", "content": long_output(i)}])
    return h


@settings(max_examples=25, deadline=None)
@given(st.integers(6, 14), st.lists(st.tuples(st.integers(0, 16), st.booleans()), max_size=8))
def test_pins_follow_a_set_model_and_pinned_steps_are_shown_as_received(n: int, ops: list[tuple[int, bool]]) -> None:
    h = grown(n)
    model: dict[str, None] = {}
    records = []
    for step, on in ops:
        item = str(step)
        ok = 1 <= step <= n and (on or item in model)
        try:
            rec = pin_record(h, item, on=on)
        except ValueError:
            assert not ok
            continue
        assert ok
        h.load_pins([rec])
        records.append(rec)
        if on:
            model.setdefault(item, None)
        else:
            model.pop(item, None)
    assert pinned_items(records) == list(model)
    p = render(h, FIXED)
    for item in model:
        shown = [(content_text(m.get("content")), o.shown) for m, o in zip(p.messages, p.origins, strict=True) if o.step == int(item) and o.part == "output"]
        assert shown == [(f"[step {item}]\n{long_output(int(item))}", shown[0][1])] and shown[0][1] in (Shown.PINNED, Shown.RECEIVED)
    for s in range(1, n + 1):  # expand is byte-exact whatever is pinned
        assert f"[step {s}]\n{long_output(s)}" in expand_text(h, resolve(h, str(s)))


def test_a_pin_set_on_one_replica_reaches_the_next_turn_on_another(upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream

    async def go(store: str) -> None:
        cfg = ProxyConfig(upstream=url, store=store, tokenizer="off", config=FIXED)
        async with asgi_proxy(cfg) as a, asgi_proxy(cfg) as b:
            agent = Client(a, fake, "r")
            for i in range(12):  # turns alternate: both replicas hold the session in memory
                agent.c = (a, b)[i % 2]
                sent = await agent.turn()
            assert "hidden" in output_of(sent, 4)
            assert (await a.post("/sessions/r/pins", json={"item": "4"})).status_code == 200
            agent.c = b  # the load balancer sends the next turn to the other replica
            sent = await agent.turn()
            assert output_of(sent, 4) == f"[step 4]\n{long_output(4)}"
            assert (await b.post("/sessions/r/pins", json={"item": "4", "pin": False})).status_code == 200
            agent.c = a
            for _ in range(3):
                sent = await agent.turn()
            assert "hidden" in output_of(sent, 4)

    with redis_server() as store:
        asyncio.run(go(store))


def test_only_the_proxys_page_may_call_its_origin() -> None:
    from refold.lab.viewer import build_report

    h = grown(6)
    offline = build_report(h, variants=["refold"], tokenizer="chars4", mechanisms=False)
    live = build_report(h, variants=["refold"], tokenizer="chars4", mechanisms=False, live={"session": "s", "base": "/sessions/s", "pins": ["3"]})
    assert "connect-src 'none'" in offline and "connect-src 'self'" not in offline and "initLive" not in offline
    assert "connect-src 'self'" in live and "connect-src 'none'" not in live and "initLive" in live


def test_expand_shows_non_text_parts_as_recorded() -> None:
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}])
    h.append({"role": "assistant", "content": [{"type": "text", "text": "hi"}, {"type": "refusal", "refusal": "no way"}]}, [{"role": "user", "content": "out"}])
    text = expand_text(h, resolve(h, "r1"))
    assert "hi" in text and '(part refusal: {"refusal": "no way", "type": "refusal"})' in text


def test_a_pin_keeps_a_gzip_run_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gzip

    plain = saved_run(tmp_path)
    path = tmp_path / "run.traj.json.gz"
    path.write_bytes(gzip.compress(plain.read_bytes()))
    assert main(["sessions", "pin", str(path), "4"]) == 0
    data = json.loads(gzip.decompress(path.read_bytes()))  # still gzip: zcat and mini read it
    assert [r["item"] for r in data["info"]["refold_pins"]] == ["4"]
    assert main(["sessions", "unpin", str(path), "4"]) == 0
    assert len(json.loads(gzip.decompress(path.read_bytes()))["info"]["refold_pins"]) == 2
    capsys.readouterr()


def test_one_agent_of_a_multi_agent_file_is_not_pinned_into_a_new_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'sessions pin run.traj#Programmer 2' wrote a copy of the whole run to a new file named
    'run.traj#Programmer' (the pin applied to nothing), after which 'sessions show run.traj#Programmer'
    read that name as a session and failed. Pins are kept per file: one line, nothing written."""
    path = tmp_path / "run.traj"
    path.write_bytes((Path(__file__).parent / "data" / "bill" / "coder_multiagent.traj").read_bytes())
    before = path.read_bytes()
    for command in ("pin", "unpin"):
        assert main(["sessions", command, f"{path}#Programmer", "2"]) == 2
        err = capsys.readouterr().err
        assert "holds several agents' runs, so 'Programmer' cannot be pinned alone" in err
        assert err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.traj"] and path.read_bytes() == before
    assert main(["sessions", "show", f"{path}#Programmer"]) == 0


def test_a_bad_saved_config_is_named_with_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'refold: error: saved refold config: ...' did not say which file holds it."""
    path = saved_run(tmp_path, steps=2)
    data = json.loads(path.read_text())
    data["info"]["config"]["refold"]["cache"] = "azure"
    path.write_text(json.dumps(data))
    for command in (["show", str(path)], ["expand", str(path), "1"], ["pin", str(path), "1"]):
        assert main(["sessions", *command]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"refold: error: {path}: saved refold config: invalid config field 'cache'"), err


def test_a_pin_leaves_the_rest_of_the_run_as_recorded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A lone surrogate in a recorded output (tool output decoded with surrogateescape) is read as
    U+FFFD, and a pin wrote that reading back: the recorded bytes were gone for good."""
    path = saved_run(tmp_path, steps=2)
    data = json.loads(path.read_text())
    data["messages"][3]["content"] = "out \udc80 ünï"
    path.write_text(json.dumps(data))
    assert main(["sessions", "pin", str(path), "1"]) == 0
    capsys.readouterr()
    text = path.read_text()
    assert "\\udc80" in text and "\ufffd" not in text and "\\ufffd" not in text
    assert json.loads(text)["info"]["refold_pins"][0]["item"] == "1"


def test_a_pin_through_a_symlink_writes_the_run_it_points_at(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The link was replaced by a copy holding the pin; the run it pointed at had none."""
    real = saved_run(tmp_path, steps=2)
    link = tmp_path / "link.traj.json"
    link.symlink_to(real)
    assert main(["sessions", "pin", str(link), "1"]) == 0
    capsys.readouterr()
    assert link.is_symlink()
    assert [r["item"] for r in json.loads(real.read_text())["info"]["refold_pins"]] == ["1"]


def test_an_age_past_the_clock_is_one_line() -> None:
    from refold.cli.sessions import parse_age
    from refold.errors import PolicyError

    with pytest.raises(PolicyError, match="at most 1000 years"):
        parse_age("99999999999999999999d")
    assert parse_age("2w") == 14 * 86400
