"""Anthropic cache_control breakpoints over a Rendered prompt: where the render is stable, at most 4."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.history import History
from refold.integrations.cache_control import EPHEMERAL, breakpoints, place_cache_control
from refold.policy import Policy
from refold.render import Renderer
from refold.types import content_text

from builders import seed_config


def history(n: int, *, tool: bool = False) -> History:
    h = History([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}])
    for i in range(1, n + 1):
        if tool:
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"echo {i}"})},
            }
            h.append(
                {"role": "assistant", "content": None, "tool_calls": [call]},
                [{"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"}],
            )
        else:
            h.append(
                {"role": "assistant", "content": f"PROGRESS: p{i}\nSTALE: -\n```bash\necho {i}\n```"},
                [{"role": "user", "content": f"out {i}"}],
            )
    return h


def marked(messages: list[dict]) -> list[int]:
    out = []
    for i, m in enumerate(messages):
        parts = m["content"] if isinstance(m.get("content"), list) else []
        if "cache_control" in m or any(isinstance(p, dict) and "cache_control" in p for p in parts):
            out.append(i)
    return out


def test_breakpoints_at_prefix_boundary_previous_end_and_end() -> None:
    h = history(10)
    r = Renderer(seed_config(Policy(k=3))).render(h)  # t=10, boundary 6
    assert r.stats.boundary == 6
    got = breakpoints(r)
    assert len(got) == 4
    o = r.origins
    assert o[got[0]].step is None and o[got[0] + 1].step == 1  # end of system + task
    assert o[got[1]].step == 6 and o[got[1] + 1].step == 7  # last message before the first step after b_t
    assert o[got[2]].step == 9 and o[got[2] + 1].step == 10  # where the previous call's prompt ended
    assert got[3] == len(r.messages) - 1


def test_marks_only_the_chosen_messages_and_leaves_the_render_untouched() -> None:
    h = history(8, tool=True)
    r = Renderer(seed_config(Policy(k=3))).render(h)
    before = copy.deepcopy(r.messages)
    out = place_cache_control(r)
    assert r.messages == before  # the renderer's cached messages are shared: never mutated
    assert marked(out) == breakpoints(r)
    for i in breakpoints(r):
        m = out[i]
        if m["role"] == "tool" or m.get("content") is None:
            assert m["cache_control"] == EPHEMERAL
        else:
            assert m["content"][-1]["cache_control"] == EPHEMERAL
        assert content_text(m.get("content")) == content_text(r.messages[i].get("content"))


def test_existing_marks_are_cleared_and_limit_respected() -> None:
    h = history(7)
    r = Renderer(seed_config(Policy(k=3))).render(h)
    r.messages[3]["cache_control"] = dict(EPHEMERAL)  # as if someone marked a message before us
    try:
        out = place_cache_control(r, limit=2)
        assert marked(out) == breakpoints(r)[-2:]
        assert len(marked(out)) == 2
    finally:
        r.messages[3].pop("cache_control")


def test_empty_and_prefix_only() -> None:
    h = history(0)
    r = Renderer(seed_config(Policy())).render(h)
    assert breakpoints(r) == [len(r.messages) - 1]
    assert breakpoints(r, limit=0) == []


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 25), k=st.integers(1, 6), limit=st.integers(1, 4), tool=st.booleans())
def test_breakpoints_are_stable_points(n: int, k: int, limit: int, tool: bool) -> None:
    """Every breakpoint but the last ends a prefix that the next call's prompt also starts with
    (unless the boundary moves), so a provider cache written there is read next time."""
    h = history(n, tool=tool)
    renderer = Renderer(seed_config(Policy(k=k)))
    r = renderer.render(h, n - 1) if n else renderer.render(h, 0)
    got = breakpoints(r, limit)
    assert got == sorted(set(got)) and 1 <= len(got) <= limit and got[-1] <= len(r.messages) - 1
    if n:
        nxt = Renderer(seed_config(Policy(k=k))).render(h, n)
        if nxt.stats.boundary == r.stats.boundary:
            for i in got:
                assert nxt.messages[: i + 1] == r.messages[: i + 1]


@pytest.mark.parametrize("limit", [1, 3])
def test_latest_breakpoints_win(limit: int) -> None:
    r = Renderer(seed_config(Policy(k=3))).render(history(12))
    assert breakpoints(r, limit) == breakpoints(r)[-limit:]
