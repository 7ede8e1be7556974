"""Fuzzing the proxy through its real ASGI app and a fake upstream (hypothesis).

* bad client requests: a valid conversation with one field replaced by junk is a 400 naming a
  field (or a 200 when the junk is still a valid request), never a 500, and stores nothing;
* accepted request sequences: every request of a growing conversation (odd text, context-command
  look-alikes, content parts, tool calls, lone surrogates, restarts) is answered, and the session
  then holds exactly the client's turns, none lost or duplicated;
* bad upstream replies: a 502 naming a field or, mid-stream, an error event and a proper end;
  never a 500, and the session goes on.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.proxy import ProxyConfig, create_app
from refold.proxy.mapping import normalize
from refold.scrub import scrub_arguments

from fake_upstream import FakeUpstream, ServerThread

BASH = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}
FUZZ = settings(max_examples=int(os.environ.get("REFOLD_FUZZ_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_ids = itertools.count()


class Env:
    def __init__(self, fake: FakeUpstream, cfg: ProxyConfig, client: TestClient) -> None:
        self.fake, self.cfg, self.c = fake, cfg, client

    def post(self, body: Any, session: str, client: TestClient | None = None) -> Any:
        # json.dumps escapes lone surrogates ("\\udc80"), as a client's JSON encoder does
        return (client or self.c).post(
            "/v1/chat/completions",
            content=json.dumps(body).encode(),
            headers={"X-Refold-Session": session, "content-type": "application/json"},
        )

    def visible(self, session: str) -> list[dict[str, Any]] | None:
        r = self.c.get(f"/sessions/{session}")
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        return [s for s in r.json()["steps"] if not s["internal"]]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    fake = FakeUpstream()
    with ServerThread(fake.app) as up:
        store = tmp_path_factory.mktemp("fuzz") / "s.db"
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=str(store), tokenizer="off")
        with TestClient(create_app(cfg), base_url="http://127.0.0.1") as c:
            yield Env(fake, cfg, c)


def no_500(r: Any) -> None:
    assert r.status_code < 500 or r.status_code in (502, 504), r.text
    if r.status_code >= 400:
        err = r.json()["error"]
        assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]
        assert "Traceback" not in err["message"] and "internal proxy error" not in err["message"]


# ---- strategies ---------------------------------------------------------------------------------

TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "PROGRESS: read\nSTALE: 1",
            "```bash\nrestore 1\n```",
            'fold_span "x"',
            "\udc80 bytes",
            "",
            "[step 3]\n[context-manager] fake",
            "<mswea_bash_command>ls</mswea_bash_command>",
        ]
    ),
)
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.builds(lambda d: json.loads("[" * d + "]" * d), st.integers(60, 120)),
)


def call(cid: str, command: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


@st.composite
def turns(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Client steps: an assistant message (text or a tool call) and what followed it."""
    out = []
    for i in range(draw(st.integers(1, 4))):
        content = draw(TEXT)
        if draw(st.booleans()):
            cid = f"c{i}"
            reply: dict[str, Any] = {"role": "assistant", "content": content or None, "tool_calls": [call(cid, draw(TEXT))]}
            obs = [{"role": "tool", "tool_call_id": cid, "content": draw(TEXT)}]
        else:
            reply = {"role": "assistant", "content": content}
            part = draw(st.booleans())
            obs = [{"role": "user", "content": [{"type": "text", "text": draw(TEXT)}] if part else draw(TEXT)}]
        out.append([reply, *obs])
    return out


def conversation(steps: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *[m for s in steps for m in s]]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


def replace(value: Any, path: tuple[Any, ...], junk: Any) -> Any:
    if not path:
        return junk
    out = copy.copy(value)
    out[path[0]] = replace(value[path[0]], path[1:], junk)
    return out


def scrubbed(text: str) -> str:
    return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)


# ---- client requests ----------------------------------------------------------------------------


@FUZZ
@given(turns(), st.data(), JUNK)
def test_one_junk_field_is_a_400_or_harmless_and_never_stores_a_bad_turn(
    env: Env, steps: list[list[dict[str, Any]]], data: st.DataObject, junk: Any
) -> None:
    session = f"junk-{next(_ids)}"
    good = {"model": "m", "messages": conversation(steps), "tools": [BASH], "stream": data.draw(st.booleans())}
    path = data.draw(st.sampled_from([p for p in paths(good) if p]))
    bad = replace(good, path, junk)
    r = env.post(bad, session)
    no_500(r)
    if r.status_code == 400:
        assert r.json()["error"]["param"] or r.json()["error"]["code"] in ("invalid_json", "invalid_body")
        assert env.visible(session) is None  # nothing was stored
    # whatever happened, the good request is answered and records every turn exactly once
    r = env.post(good, session)
    no_500(r)
    assert r.status_code == 200, r.text
    stored = env.visible(session)
    assert stored is not None and len(stored) == len(steps)


@FUZZ
@given(st.lists(turns(), min_size=1, max_size=3), st.booleans(), st.booleans())
def test_accepted_request_sequences_always_render_and_keep_every_turn(
    env: Env, batches: list[list[list[dict[str, Any]]]], stream: bool, restart: bool
) -> None:
    session = f"seq-{next(_ids)}"
    steps: list[list[dict[str, Any]]] = []
    for i, batch in enumerate(batches):
        steps += batch
        body = {"model": "m", "messages": conversation(steps), "tools": [BASH], "stream": stream}
        client = env.c
        if restart and i == len(batches) - 1:  # the last request goes to a fresh process on the same store
            with TestClient(create_app(env.cfg), base_url="http://127.0.0.1") as fresh:
                r = env.post(body, session, fresh)
        else:
            r = env.post(body, session, client)
        no_500(r)
        assert r.status_code == 200, r.text
        if stream:
            assert r.text.endswith("data: [DONE]\n\n")
    stored = env.visible(session)
    assert stored is not None
    assert len(stored) == len(steps)  # none lost, none duplicated
    sent = [s[0] for s in steps]
    for got, want in zip(stored, sent, strict=True):
        w = json.loads(json.dumps(want))
        w["content"] = scrubbed(w["content"]) if isinstance(w.get("content"), str) else w.get("content")
        if w.get("tool_calls"):
            fn = w["tool_calls"][0]["function"]
            fn["arguments"] = scrub_arguments(fn["arguments"])
        assert normalize(got["reply"]) == normalize(w)


# ---- upstream replies ---------------------------------------------------------------------------

REPLY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["choices", "message", "delta", "content", "tool_calls", "function", "index", "name", "arguments", "usage", "finish_reason", "role", "id"]), inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def chunk_like(draw: st.DrawFn) -> str:
    shape = draw(
        st.sampled_from(
            [
                {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
                {"choices": [{"index": 0, "delta": REPLY}]},
                {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": REPLY}]}}]},
                {"choices": REPLY},
                REPLY,
            ]
        )
    )

    def fill(v: Any) -> Any:
        if v is REPLY:
            return draw(REPLY)
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fill(x) for x in v]
        return v

    return json.dumps(fill(shape))


@FUZZ
@given(REPLY, st.booleans())
def test_any_upstream_body_is_answered_without_a_500(env: Env, reply: Any, tools: bool) -> None:
    """With a shell tool, and in text mode (mini-style ```bash actions, no tools)."""
    session = f"up-{next(_ids)}"
    env.fake.raw({"choices": reply} if isinstance(reply, list) else reply)
    body: dict[str, Any] = {"model": "m", "messages": conversation([])}
    if tools:
        body["tools"] = [BASH]
    r = env.post(body, session)
    no_500(r)
    assert r.status_code in (200, 502)
    r = env.post(body, session)
    assert r.status_code == 200, r.text


TEXT_CHUNKS = st.sampled_from([
    json.dumps({"choices": [{"index": 0, "delta": {"content": "Look.\n```bash\nrest"}}]}),
    json.dumps({"choices": [{"index": 0, "delta": {"content": "ore 1\n```"}}]}),
    json.dumps({"choices": [{"index": 0, "delta": {"content": "\udc80"}}]}),
    json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
])


@FUZZ
@given(st.lists(chunk_like() | TEXT_CHUNKS, min_size=1, max_size=5), st.booleans())
def test_any_upstream_stream_ends_properly(env: Env, chunks: list[str], tools: bool) -> None:
    """With a shell tool, and in text mode (a command block may be cut anywhere)."""
    session = f"sse-{next(_ids)}"
    env.fake.raw(chunks)
    steps = [[{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]]
    body: dict[str, Any] = {"model": "m", "messages": conversation(steps), "stream": True}
    if tools:
        body["tools"] = [BASH]
    r = env.post(body, session)
    no_500(r)
    if r.status_code == 200:
        events = [x for x in r.text.splitlines() if x.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        for e in events[:-1]:
            json.loads(e[6:])  # every relayed event is JSON
            assert "internal proxy error" not in e
    else:
        assert r.status_code == 502
    r = env.post(body, session)
    assert r.status_code == 200, r.text
    stored = env.visible(session)
    assert stored is not None and len(stored) == 1  # the turn is recorded once, however the reply went
