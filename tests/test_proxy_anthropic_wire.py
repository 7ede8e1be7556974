"""Invariants of the Messages <-> session conversion on random tool-calling histories (hypothesis):
whatever the rendering folds, masks or condenses, every signed block that is sent is byte-identical
to the one received, every tool_use is answered in the next message and every tool_result answers
the call before it (with nothing to repair), and at most 4 breakpoints are set."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import DEFAULT, Config
from refold.proxy import anthropic_build
from refold.proxy import anthropic_wire as wire
from refold.proxy.anthropic import stateless_history
from refold.render import Renderer

CONFIGS = (DEFAULT, DEFAULT.override(["policy.mask_after=1", "boundary.rule=fixed", "policy.k=1"]))
LINES = ["def f():", "    return 1", "x = compute(y)", "FAILED tests/test_a.py::test_x", "import os", "print('ok')"]


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 12))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug in a.py"}]
    for i in range(n):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": f"thinking {i} " * draw(st.integers(1, 30)), "signature": f"sig{i}+/=" * 8})
        if draw(st.booleans()):
            blocks.append({"type": "redacted_thinking", "data": f"redacted{i}=="})
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": f"PROGRESS: step {i}\nSTALE: -\nLooking at file {i % 3}." * draw(st.integers(1, 20))})
        calls = draw(st.integers(1, 2))
        for c in range(calls):
            command = draw(st.sampled_from(["cat a.py", "cat b.py", "pytest -q", f"sed -n {i},40p a.py", "ls"]))
            blocks.append({"type": "tool_use", "id": f"toolu_{i}_{c}", "name": "Bash", "input": {"command": command}})
        messages.append({"role": "assistant", "content": blocks})
        results: list[dict[str, Any]] = []
        for c in range(calls):
            body = "\n".join(draw(st.lists(st.sampled_from(LINES), min_size=0, max_size=120)))
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": f"toolu_{i}_{c}", "content": body}
            if draw(st.integers(0, 5)) == 0:
                block["is_error"] = True
            results.append(block)
        if draw(st.integers(0, 4)) == 0:
            results.append({"type": "text", "text": "<system-reminder>keep going</system-reminder>"})
        messages.append({"role": "user", "content": results})
    return {"model": "m", "max_tokens": 100, "messages": messages, "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]}


def signed(body: dict[str, Any]) -> set[str]:
    return {json.dumps(b, sort_keys=True) for m in body["messages"] if m["role"] == "assistant"
            for b in m["content"] if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")}


def marks(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


@settings(max_examples=60, deadline=None)
@given(conversations(), st.sampled_from(CONFIGS))
def test_rendered_requests_keep_signed_blocks_and_pairs(body: dict[str, Any], config: Config) -> None:
    parsed = wire.parse(body)
    history, tail = stateless_history(parsed)
    rendered = Renderer(config).render(history)
    out, fixes = anthropic_build.build(body, parsed, rendered, history, tail, [], first_party=False)
    assert fixes == 0
    assert signed(out) <= signed(body)  # only blocks received, unchanged (a folded step may drop its own)
    msgs = out["messages"]
    assert msgs[0]["role"] == "user"
    for i, m in enumerate(msgs):
        if i:
            assert m["role"] != msgs[i - 1]["role"]
        ids = [b["id"] for b in m["content"] if b.get("type") == "tool_use"]
        if ids:
            assert i + 1 < len(msgs)
            answered = [b["tool_use_id"] for b in msgs[i + 1]["content"] if b.get("type") == "tool_result"]
            assert answered[: len(ids)] == ids  # results first, in call order
        if m["role"] == "user":
            before = {b["id"] for b in msgs[i - 1]["content"] if b.get("type") == "tool_use"} if i else set()
            assert {b["tool_use_id"] for b in m["content"] if b.get("type") == "tool_result"} <= before
        for b in m["content"]:
            assert not (b.get("type") == "text" and not b.get("text"))  # Anthropic rejects empty text blocks
    assert 1 <= marks(out) <= 4
    # the last assistant turn keeps every signed block it had (continuing a tool loop needs them)
    last = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    sent_last = [m for m in msgs if m["role"] == "assistant"][-1]
    assert [b for b in last["content"] if b["type"] in ("thinking", "redacted_thinking")] == [
        b for b in sent_last["content"] if b["type"] in ("thinking", "redacted_thinking")]


def test_repair_fixes_orphans() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "note"}, {"type": "tool_result", "tool_use_id": "zz", "content": "stray"}]},
    ]
    assert anthropic_build.repair(msgs) == 2
    assert msgs[2]["content"][0] == {"type": "tool_result", "tool_use_id": "a", "content": "[context-manager] No output was recorded for this call."}
    assert {"type": "text", "text": "stray"} in msgs[2]["content"]


def test_breakpoints_take_the_clients_ttl_from_its_system_breakpoint() -> None:
    body: dict[str, Any] = {
        "model": "m", "max_tokens": 5,
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                     {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
    }
    parsed = wire.parse(body)
    history, tail = stateless_history(parsed)
    out, _ = anthropic_build.build(body, parsed, Renderer(DEFAULT).render(history), history, tail, [], first_party=False)
    found = [b["cache_control"] for m in out["messages"] for b in m["content"] if "cache_control" in b]
    found += [b["cache_control"] for b in out["system"] if "cache_control" in b]
    assert found and all(c == {"type": "ephemeral", "ttl": "1h"} for c in found)
    assert "cache_control" in out["system"][-1] and out["system"][0]["text"] == "sys"
