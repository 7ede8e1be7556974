"""``Policy.mask_by = "use"``: an output a recent reply named is not masked at the move, and every
renderer invariant holds (prefix stable between boundary moves, nothing lost, restorable)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.render import Renderer
from test_properties import check_invariants, histories

SYSTEM = {"role": "system", "content": "You are an agent."}
TASK = {"role": "user", "content": "Fix the bug."}


def _name(i: int) -> str:
    return f"src/mod{i}/widget.py"  # a path per output


@st.composite
def used_histories(draw: st.DrawFn) -> History:
    """Steps whose outputs each show their own path; replies name earlier ones at random."""
    tool_style = draw(st.booleans())
    h = History([SYSTEM, TASK])
    for i in range(1, draw(st.integers(4, 24)) + 1):
        named = draw(st.lists(st.integers(1, i - 1), max_size=2)) if i > 1 else []
        text = "Looking at " + ", ".join(_name(j) for j in named) + "." if named else "Next."
        cmd = f"python probe_{i}.py"
        long = draw(st.booleans()) or draw(st.booleans())
        output = "\n".join(f"{_name(i)} row {n}: value {i * n} with padding text" for n in range(12 if long else 1))
        if tool_style:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}
            h.append({"role": "assistant", "content": text, "tool_calls": [call]}, [{"role": "tool", "tool_call_id": f"c{i}", "content": output}])
        else:
            h.append({"role": "assistant", "content": f"{text}\n```bash\n{cmd}\n```"}, [{"role": "user", "content": output}])
    return h


USE = [Config.parse(mask_by="use"), Config.parse(mask_by="use", k=1, mask_min_chars=50), Config.parse(mask_by="use", cache="anthropic")]


@pytest.mark.parametrize("config", USE, ids=["use", "use-k1", "use-anthropic"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=used_histories())
def test_a_recently_named_output_is_not_masked_at_the_move(config: Config, h: History) -> None:
    p = config.policy
    assert p.mask_after is not None
    recent = p.mask_after + p.k
    r = Renderer(config)
    masked = 0
    for t in range(len(h) + 1):
        r.render(h, t)
        order = r._behind.mask_order  # the steps masked so far, in order
        for i in order[masked:]:
            for s in range(max(i + 1, t - recent + 1), t + 1):
                assert _name(i) not in h.step(s).reply_text, f"call {t} masked step {i}, named by reply {s}"
        masked = len(order)


def test_arrival_masks_what_use_keeps() -> None:
    """The property above does not hold by arrival: a step named by the latest replies is masked."""
    h = History([SYSTEM, TASK])
    for i in range(1, 13):
        text = f"Still using {_name(1)}." if i > 1 else "Start."
        output = "\n".join(f"{_name(i)} row {n}: value {n} with padding text" for n in range(12))
        h.append({"role": "assistant", "content": f"{text}\n```bash\npython probe_{i}.py\n```"}, [{"role": "user", "content": output}])
    for mode, hidden in (("arrival", True), ("use", False)):
        r = Renderer(Config.parse(mask_by=mode))
        r.render(h, len(h))
        assert (1 in r._behind.masked) is hidden, mode
        assert 2 in r._behind.masked  # never named again: masked either way


@pytest.mark.parametrize("config", USE, ids=["use", "use-k1", "use-anthropic"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.one_of(used_histories(), histories()), fresh_at=st.sets(st.integers(0, 24), max_size=3))
def test_invariants_hold_when_masking_by_use(config: Config, h: History, fresh_at: set[int]) -> None:
    check_invariants(h, config, fresh_at)


def test_a_long_chain_of_outputs_citing_the_one_before_renders() -> None:
    # a log polled with `tail`: each output repeats most of the one before, so its trim cites it
    # and step i's content lives on in i+1, i+2, ...; whether i is still in use was a recursion
    # along that chain (RecursionError past ~450 steps)
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "watch the run"}])
    for i in range(1, 901):
        body = "\n".join(f"log line {k}: worker {k % 13} processed batch {k * 31} in {k % 97} ms" for k in range(i * 10, i * 10 + 40))
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "tail -n 40 logs/run.log"})}}
        h.append({"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: \nPolling.", "tool_calls": [call]},
                 [{"role": "tool", "tool_call_id": f"c{i}", "content": body}])  # fmt: skip
    out = Renderer(Config.parse(mask_by="use")).render(h, 900)
    assert any(o.part == "output" and o.step == 900 for o in out.origins)
