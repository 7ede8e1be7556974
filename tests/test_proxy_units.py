"""Pure pieces of the proxy: message mapping, command detection, SSE aggregation, metrics text."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from refold.config import Config
from refold.context import ANY, offer
from refold.errors import ProxyError
from refold.history import History
from refold.mechanisms.ledger import LedgerPolicy
from refold.mechanisms.spans import SpanPolicy
from refold.proxy.commands import context_calls, observations
from refold.proxy.mapping import match, normalize, split
from refold.proxy.metrics import Metrics
from refold.proxy.records import StoredStep
from refold.proxy.sessions import session_name
from refold.proxy.upstream import aggregate
from refold.types import message_digest


def call(name: str, args: object, cid: str = "c1") -> dict[str, object]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_normalize_ignores_sdk_noise() -> None:
    a = {"role": "assistant", "content": None, "tool_calls": [call("bash", {"command": "ls", "x": 1})]}
    b = {
        "role": "assistant",
        "content": "",
        "refusal": None,
        "function_call": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"x":1,  "command":"ls"}'},
            }
        ],
    }
    assert normalize(a) == normalize(b)
    assert normalize(a) != normalize({**a, "tool_calls": [call("bash", {"command": "pwd"})]})


def test_match_extends_forks_and_skips_internal_steps() -> None:
    prefix = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    p = message_digest(prefix)
    steps = [
        ({"role": "assistant", "content": f"r{i}"}, [{"role": "user", "content": f"o{i}"}]) for i in range(3)
    ]
    chain, parent = [], p
    for i, (r, o) in enumerate(steps):
        if i == 1:  # an internal restore round before reply 1
            ir, io = {"role": "assistant", "content": "restore 1"}, ({"role": "user", "content": "restored"},)
            d = message_digest([ir, *io], parent=parent)
            chain.append(StoredStep(d, parent, ir, io, {"internal": True}))
            parent = d
        d = message_digest([r, *o], parent=parent)
        chain.append(StoredStep(d, parent, r, tuple(o), {}))
        parent = d

    def norm(s: StoredStep) -> tuple[object, tuple[object, ...]]:
        return normalize(s.reply), tuple(normalize(o) for o in s.observations)

    more = [*steps, ({"role": "assistant", "content": "r3"}, [{"role": "user", "content": "o3"}])]
    m = match(prefix, more, p, prefix, chain, norm)
    assert m is not None and m.full and m.matched == 3 and m.base == chain[-1].digest and len(m.new) == 1
    changed = [steps[0], (steps[1][0], [{"role": "user", "content": "other"}]), steps[2]]
    m = match(prefix, changed, p, prefix, chain, norm)
    assert m is not None and not m.full and m.base == chain[1].digest  # keeps the internal round
    m = match(prefix, steps[:1], p, prefix, chain, norm)
    assert m is not None and not m.full and m.base == chain[0].digest and m.new == []
    assert match([{"role": "user", "content": "x"}], steps, p, prefix, chain, norm) is None


def test_split_keeps_all_roles() -> None:
    msgs = [
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a"},
        {"role": "tool", "content": "t"},
        {"role": "user", "content": "more"},
    ]
    prefix, steps = split(msgs)
    assert [m["role"] for m in prefix] == ["developer", "user"] and len(steps) == 1 and len(steps[0][1]) == 2


def test_context_calls() -> None:
    assert (
        context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": "restore 3"})]}, ANY)[
            0
        ].context.argument
        == "3"
    )  # type: ignore[index,union-attr]
    fn = context_calls({"role": "assistant", "tool_calls": [call("restore", {"steps": [3, 4]})]}, ANY)
    assert fn is not None and fn[0].context is not None and fn[0].context.argument == "3 4"
    assert context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": "ls"})]}, ANY) is None
    mixed = context_calls(
        {
            "role": "assistant",
            "tool_calls": [call("bash", {"command": "ls"}, "a"), call("restore", {"steps": "1"}, "b")],
        },
        ANY,
    )
    assert mixed is not None and [c.context is None for c in mixed] == [True, False]
    assert context_calls({"role": "assistant", "content": "x\n```bash\nrestore 2\n```"}, ANY) is not None
    assert context_calls({"role": "assistant", "content": "```bash\nrestore_db.sh\n```"}, ANY) is None


def test_observations_answer_every_call() -> None:
    h = History([{"role": "user", "content": "task"}])
    h.append(
        {"role": "assistant", "content": "r1"}, [{"role": "tool", "tool_call_id": "x", "content": "out-1"}]
    )
    reply = {
        "role": "assistant",
        "tool_calls": [call("bash", {"command": "ls"}, "a"), call("restore", {"steps": "1"}, "b")],
    }
    calls = context_calls(reply, ANY)
    assert calls is not None
    stored, obs, answers = observations(h, reply, calls, Config())
    assert [a.restore_of for a in answers] == [(1,)] and [o["tool_call_id"] for o in obs] == ["a", "b"]
    assert "Not run" in obs[0]["content"] and "out-1" in obs[1]["content"]
    assert obs[1]["extra"]["restore_of"] == [1] and obs[1]["extra"]["refold_result"]["ok"] is True
    # the stored reply records its actions as answered (History reads them back)
    assert [a.get("tool", "bash") for a in stored["extra"]["refold"]["actions"]] == ["bash", "restore"]
    assert stored["extra"]["refold"]["context_actions"] == [{"index": 1, "name": "restore", "argument": "1"}]
    h.append(stored, obs)
    assert h.step(2).restore_of == (1,) and [a.context is not None for a in h.step(2).actions] == [False, True]
    bad = context_calls({"role": "assistant", "tool_calls": [call("restore", {"steps": "9"})]}, ANY)
    assert bad is not None
    _, obs, answers = observations(h, reply, bad, Config())
    assert answers[0].restore_of == () and "restore_of" not in obs[0]["extra"] and "no step 9" in obs[0]["content"]


def test_plan_offers_context_tools_the_client_lacks() -> None:
    bash = {"type": "function", "function": {"name": "bash"}}
    mine = {"type": "function", "function": {"name": "expand"}}
    added, rec = offer(Config(), [bash, {"type": "function", "function": {"name": "search_ledger"}}])
    names = [t["function"]["name"] for t in added]
    assert names == ["restore", "begin_span", "fold_span", "expand"]  # its own ledger command: no ledger
    added, rec = offer(Config(), [bash, mine])
    assert added == []  # its own expand: nothing restorable, no spans, no ledger (context.tools.clashes)
    assert rec.possible and "expand" not in rec.functions  # the client's own tool stays the client's
    reply = {"role": "assistant", "tool_calls": [call("expand", {"x": "3"})]}
    assert context_calls(reply, rec) is None
    added, rec = offer(Config(spans=SpanPolicy(enabled=False), ledger=LedgerPolicy(enabled=False)), [bash])
    assert [t["function"]["name"] for t in added] == ["restore", "expand"]
    shell_span = {"role": "assistant", "tool_calls": [call("bash", {"command": 'begin_span "q"'})]}
    assert context_calls(shell_span, rec) is None  # spans off: an ordinary shell command
    # coreutils fold/expand with file arguments run in the shell
    for cmd in ("fold -w 80 notes.txt", "expand -t 4 a.py"):
        assert context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": cmd})]}, ANY) is None
    # no shell tool and no context tools offered: no reply can be internal (streams relay live)
    _, rec = offer(Config(), [{"type": "function", "function": {"name": "edit"}}], offer=False)
    assert not rec.possible
    _, rec = offer(Config(), None)
    assert rec.possible and rec.text


def test_aggregate_stream() -> None:
    events = [
        json.dumps(
            {
                "id": "x",
                "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "he"}}],
            }
        ),
        json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "content": "llo",
                            "tool_calls": [
                                {"index": 0, "id": "c", "function": {"name": "ba", "arguments": '{"co'}}
                            ],
                        },
                    }
                ]
            }
        ),
        json.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"name": "sh", "arguments": 'mmand": "ls"}'}}
                            ]
                        },
                        "finish_reason": "tool_calls",
                    }
                ]
            }
        ),
        json.dumps({"choices": [], "usage": {"prompt_tokens": 5}}),
    ]
    body = aggregate(events)
    msg = body["choices"][0]["message"]
    assert msg["content"] == "hello" and msg["tool_calls"][0]["function"] == {
        "name": "bash",
        "arguments": '{"command": "ls"}',
    }
    assert body["usage"] == {"prompt_tokens": 5} and body["choices"][0]["finish_reason"] == "tool_calls"
    with pytest.raises(ProxyError):
        aggregate(["not json"])


def test_metrics_text() -> None:
    m = Metrics()
    m.inc("refold_requests_total", status="200")
    m.observe("refold_render_ms", 3.0)
    m.gauge("refold_sessions_loaded", 4)
    text = m.render()
    assert 'refold_requests_total{status="200"} 1.0' in text
    assert 'refold_render_ms_bucket{le="5.0"} 1.0' in text and 'refold_render_ms_bucket{le="2.0"} 0.0' in text
    assert "# TYPE refold_tokens_saved_total counter" in text and "refold_tokens_saved_total 0.0" in text
    assert "# TYPE refold_sessions_loaded gauge" in text and "_created" not in text
    with pytest.raises(ValueError, match="cannot go down"):
        m.inc("refold_tokens_saved_total", -445_300)
    with pytest.raises(ValueError, match="labels"):
        m.inc("refold_requests_total", kind="x")
    m.inc("refold_new_thing_total", 2)  # a name first used by a caller is created on the spot
    assert m.value("refold_new_thing_total") == 2 and m.value("refold_sessions_loaded") == 4


def test_session_names() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    assert session_name(None, msgs, "o1") != session_name(None, msgs, "o2")
    assert session_name(None, msgs, "o1") == session_name(
        None, [*msgs, {"role": "assistant", "content": "x"}], "o1"
    )
    assert session_name("my-run.1", msgs, "o1") == "my-run.1"
    with pytest.raises(ProxyError):
        session_name("../etc", msgs, "o1")


def test_store_urls(tmp_path: object) -> None:
    from pathlib import Path

    from refold.errors import ConfigError
    from refold.proxy.sqlite_store import SQLiteStore
    from refold.proxy.store import open_store

    base = Path(str(tmp_path))
    assert isinstance(open_store(str(base / "a.db")), SQLiteStore)
    assert isinstance(open_store(f"sqlite:///{base / 'b.db'}?sync=full"), SQLiteStore)
    with pytest.raises(ConfigError, match="unknown option"):
        open_store(f"sqlite:///{base / 'c.db'}?fast=1")
    with pytest.raises(ConfigError, match="names no file"):
        open_store("sqlite:///")
    # another database's URL was taken for a SQLite path: it made a folder 'mysql:' and served
    with pytest.raises(ConfigError, match=r"unknown kind 'mysql://' \(give a SQLite path"):
        open_store(f"mysql://{base}/x")
    assert not (Path.cwd() / "mysql:").exists()


def test_serve_flags_build_span_and_ledger_policies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uvicorn

    import refold.proxy.app
    from refold.cli.serve import serve

    seen: list[Any] = []
    monkeypatch.setattr(refold.proxy.app, "create_app", lambda cfg: seen.append(cfg) or object())
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: setattr(self, "started", True))
    common = {"upstream": "http://127.0.0.1:9/v1", "token": None, "upstream_key": None, "port": 0, "store": str(tmp_path / "s.db")}
    serve(**common)  # type: ignore[arg-type]
    serve(**common, spans=False, ledger_prompt=False, budget_tokens=16000, context_tools=False)  # type: ignore[arg-type]
    default, custom = seen
    assert default.config == Config()  # serve's defaults are the library's
    assert default.ledger.budget_tokens is None and default.context_tools
    assert not custom.spans.enabled and not custom.spans.prompt
    assert custom.ledger.enabled and not custom.ledger.prompt and custom.ledger.budget_tokens == 16000
    assert not custom.context_tools


def test_serve_startup_line_and_notes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --upstream http://host:8000 (no /v1): every request was an upstream 404 with no hint why
    import uvicorn

    import refold.proxy.app
    from refold.cli.serve import serve

    ports: list[int] = []

    def run(self: uvicorn.Server, sockets: list[Any] | None = None) -> None:
        assert sockets is not None
        ports.append(sockets[0].getsockname()[1])  # serves on the socket it bound (and named)
        self.started = True

    monkeypatch.setattr(refold.proxy.app, "create_app", lambda cfg: object())
    monkeypatch.setattr(uvicorn.Server, "run", run)
    common = {"token": None, "upstream_key": None, "port": 0, "store": str(tmp_path / "s.db")}
    serve(upstream="http://127.0.0.1:9", **common)  # type: ignore[arg-type]
    assert "note: --upstream has no path, so a client's /v1/chat/completions goes to http://127.0.0.1:9/chat/completions" in capsys.readouterr().err
    serve(upstream="http://127.0.0.1:9/v1", **common)  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "note:" not in err and f"refold serve: http://127.0.0.1:{ports[-1]}/v1 -> " in err and ports[-1] > 0
    serve(upstream="http://127.0.0.1:9/v1", host="::1", **common)  # type: ignore[arg-type]
    # it said http://::1:0/v1: an IPv6 host in brackets, and the port the system chose, not 0
    assert f"refold serve: http://[::1]:{ports[-1]}/v1 -> " in capsys.readouterr().err and ports[-1] > 0


def test_serve_on_port_0_names_the_port_it_serves_on(tmp_path: Path) -> None:
    """``refold serve --port 0`` printed port 0 in its start line: nothing told a client where to go."""
    from fake_upstream import ServeProcess, wait_http

    proc = ServeProcess(["--upstream", "http://127.0.0.1:9/v1", "--store", str(tmp_path / "s.db"),
                         "--tokenizer", "off", "--port", "0"])
    try:
        for _ in range(3000):  # the start line comes before the server answers
            m = re.search(r"refold serve: http://127\.0\.0\.1:(\d+)/v1 -> ", proc.stderr_tail())
            if m or proc.poll() is not None:
                break
            time.sleep(0.01)
        assert m is not None, proc.stderr_tail()
        port = int(m.group(1))
        assert port > 0
        wait_http(f"http://127.0.0.1:{port}/healthz", alive=lambda: proc.poll() is None)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_store_written_before_the_wire_codec_loads_and_verifies() -> None:
    """Old proxy records: a context command in function-tool form without ``context_actions``, and
    the outcomes repeated in the step's meta. The chained digests are unchanged."""
    from refold.protocol import ContextCommand
    from refold.proxy.mapping import INTERNAL
    from refold.proxy.sessions import Session
    from refold.render import Renderer
    from refold.types import Outcome

    prefix = [{"role": "user", "content": "task"}]
    p = message_digest(prefix)
    r1 = {"role": "assistant", "content": "r1", "tool_calls": [call("bash", {"command": "ls"}, "x")]}
    o1 = [{"role": "tool", "tool_call_id": "x", "content": "out-1"}]
    d1 = message_digest([r1, *o1], parent=p)
    r2 = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("restore", {"steps": "1"}, "b")],
        "extra": {"refold": {"actions": [{"command": json.dumps({"argument": "1"}), "tool": "restore", "tool_call_id": "b"}]}},
    }
    result = {"name": "restore", "ok": True, "target": "1"}
    o2 = [{"role": "tool", "tool_call_id": "b", "content": "[context-manager] Step 1 restored", "extra": {"refold_command": "restore", "refold_result": result, "restore_of": [1]}}]
    d2 = message_digest([r2, *o2], parent=d1)
    s = Session("sid", "old", "owner", head=d2, prefixes={p: prefix})
    s.steps = {
        d1: StoredStep(d1, p, r1, tuple(o1), {}),
        d2: StoredStep(d2, d1, r2, tuple(o2), {INTERNAL: True, "refold_result": [result], "restore_of": [1]}),
    }
    h = s.view(d2, Renderer).history  # raises if a digest fails verification
    assert h.digest == d2
    step = h.step(2)
    assert step.restore_of == (1,) and step.outcomes == (Outcome("restore", True, "1"),)
    assert step.actions[0].context == ContextCommand("restore", "1")
    assert step.meta == {INTERNAL: True}  # the repeated facts are not kept as meta


def test_a_clients_own_tool_is_never_a_context_command() -> None:
    reply = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "note", "arguments": "restore 3"}}]}
    assert context_calls(reply, ANY) is None
def test_proxy_config_accepts_tokenizer_aliases() -> None:
    from refold.errors import ConfigError
    from refold.proxy import ProxyConfig

    for name in ("qwen3.6", "o200k_base", "QWEN", "chars4", "off"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer=name)
    with pytest.raises(ConfigError, match="tokenizer"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer="nope")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://", "names no host"),
        ("http://:8000/v1", "names no host"),
        ("http://x y/v1", "contains a blank"),
        ("http://host:99999/v1", "is not a valid URL: Port out of range"),
        ("http://host:abc/v1", "is not a valid URL: Port could not be cast"),
    ],
)
def test_an_upstream_no_request_could_reach_is_refused_at_start(url: str, words: str) -> None:
    """It was accepted, and every request was a 502 saying the URL 'is missing an http:// protocol'."""
    from refold.errors import ConfigError
    from refold.proxy import ProxyConfig

    with pytest.raises(ConfigError, match=f"--upstream '{re.escape(url)}' {words}"):
        ProxyConfig(upstream=url)
    for good in ("https://api.openai.com/v1", "http://[::1]:8000/v1", "http://127.0.0.1:9/v1"):
        ProxyConfig(upstream=good)
