"""Pure pieces of the proxy: message mapping, command detection, SSE aggregation, metrics text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.config import Config
from refold.errors import ProxyError
from refold.history import History
from refold.mechanisms.ledger import LedgerPolicy
from refold.mechanisms.spans import SpanPolicy
from refold.policy import Policy
from refold.proxy.commands import context_calls, observations, plan
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
        context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": "restore 3"})]})[
            0
        ].command.argument
        == "3"
    )  # type: ignore[index,union-attr]
    fn = context_calls({"role": "assistant", "tool_calls": [call("restore", {"steps": [3, 4]})]})
    assert fn is not None and fn[0].command is not None and fn[0].command.argument == "3 4"
    assert context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": "ls"})]}) is None
    mixed = context_calls(
        {
            "role": "assistant",
            "tool_calls": [call("bash", {"command": "ls"}, "a"), call("restore", {"steps": "1"}, "b")],
        }
    )
    assert mixed is not None and [c.command is None for c in mixed] == [True, False]
    assert context_calls({"role": "assistant", "content": "x\n```bash\nrestore 2\n```"}) is not None
    assert context_calls({"role": "assistant", "content": "```bash\nrestore_db.sh\n```"}) is None


def test_observations_answer_every_call() -> None:
    h = History([{"role": "user", "content": "task"}])
    h.append(
        {"role": "assistant", "content": "r1"}, [{"role": "tool", "tool_call_id": "x", "content": "out-1"}]
    )
    reply = {
        "role": "assistant",
        "tool_calls": [call("bash", {"command": "ls"}, "a"), call("restore", {"steps": "1"}, "b")],
    }
    calls = context_calls(reply)
    assert calls is not None
    stored, obs, meta = observations(h, reply, calls, Policy(), SpanPolicy(), LedgerPolicy())
    assert meta["restore_of"] == [1] and [o["tool_call_id"] for o in obs] == ["a", "b"]
    assert "Not run" in obs[0]["content"] and "out-1" in obs[1]["content"]
    assert obs[1]["extra"]["restore_of"] == [1] and meta["refold_result"][0]["ok"] is True
    # the stored reply records its actions as answered (History reads them back)
    assert [a["tool"] for a in stored["extra"]["refold"]["actions"]] == ["bash", "restore"]
    bad = context_calls({"role": "assistant", "tool_calls": [call("restore", {"steps": "9"})]})
    assert bad is not None
    _, obs, meta = observations(h, reply, bad, Policy(), SpanPolicy(), LedgerPolicy())
    assert "restore_of" not in meta and "no step 9" in obs[0]["content"]


def test_plan_offers_context_tools_the_client_lacks() -> None:
    bash = {"type": "function", "function": {"name": "bash"}}
    mine = {"type": "function", "function": {"name": "expand"}}
    added, rec = plan([bash, mine], Policy(), SpanPolicy(), LedgerPolicy(), offer=True)
    names = [t["function"]["name"] for t in added]
    assert names == ["restore", "begin_span", "fold_span", "fold", "drop", "search_ledger"]
    assert rec.possible and "expand" not in rec.functions  # the client's own tool stays the client's
    reply = {"role": "assistant", "tool_calls": [call("expand", {"x": "3"})]}
    assert context_calls(reply, rec) is None
    added, rec = plan([bash], Policy(), SpanPolicy(enabled=False), LedgerPolicy(enabled=False), offer=True)
    assert [t["function"]["name"] for t in added] == ["restore", "expand"]
    shell_span = {"role": "assistant", "tool_calls": [call("bash", {"command": 'begin_span "q"'})]}
    assert context_calls(shell_span, rec) is None  # spans off: an ordinary shell command
    # coreutils fold/expand with file arguments run in the shell
    for cmd in ("fold -w 80 notes.txt", "expand -t 4 a.py"):
        assert context_calls({"role": "assistant", "tool_calls": [call("bash", {"command": cmd})]}) is None
    # no shell tool and no context tools offered: no reply can be internal (streams relay live)
    _, rec = plan(
        [{"type": "function", "function": {"name": "edit"}}],
        Policy(),
        SpanPolicy(),
        LedgerPolicy(),
        offer=False,
    )
    assert not rec.possible
    _, rec = plan(None, Policy(), SpanPolicy(), LedgerPolicy(), offer=True)
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
    text = m.render()
    assert 'refold_requests_total{status="200"} 1' in text
    assert 'refold_render_ms_bucket{le="5"} 1' in text and 'refold_render_ms_bucket{le="2"} 0' in text
    assert "# TYPE refold_tokens_saved_total counter" in text and "refold_tokens_saved_total 0" in text


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
    from refold.proxy.store import SQLiteStore, open_store

    base = Path(str(tmp_path))
    assert isinstance(open_store(str(base / "a.db")), SQLiteStore)
    assert isinstance(open_store(f"sqlite:///{base / 'b.db'}?sync=full"), SQLiteStore)
    with pytest.raises(ConfigError, match="unknown option"):
        open_store(f"sqlite:///{base / 'c.db'}?fast=1")
    with pytest.raises(ConfigError, match="names no file"):
        open_store("sqlite:///")


def test_serve_flags_build_span_and_ledger_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    import refold.proxy.app
    from refold.cli.serve import serve

    seen: list[Any] = []
    monkeypatch.setattr(refold.proxy.app, "create_app", lambda cfg: seen.append(cfg) or object())
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    common = {"upstream": "http://127.0.0.1:9/v1", "token": None, "upstream_key": None}
    serve(**common)  # type: ignore[arg-type]
    serve(**common, spans=False, ledger_prompt=False, budget_tokens=16000, advertise_restore=False)  # type: ignore[arg-type]
    default, custom = seen
    assert default.config == Config()  # serve's defaults are the library's
    assert default.ledger.budget_tokens is None and default.context_tools
    assert not custom.spans.enabled and not custom.spans.prompt
    assert custom.ledger.enabled and not custom.ledger.prompt and custom.ledger.budget_tokens == 16000
    assert not custom.context_tools


def test_proxy_config_accepts_tokenizer_aliases() -> None:
    from refold.errors import ConfigError
    from refold.proxy import ProxyConfig

    for name in ("qwen3.6", "o200k_base", "QWEN", "chars4", "off"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer=name)
    with pytest.raises(ConfigError, match="tokenizer"):
        ProxyConfig(upstream="http://127.0.0.1:9/v1", tokenizer="nope")
