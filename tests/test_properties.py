"""Invariants of rendering, checked on generated histories and on real recorded runs.

(a) nothing lost: every omitted piece is named by a marker and restore returns its exact bytes;
(b) prefix stability: while the boundary does not move, each prompt extends the previous one;
(c) determinism: incremental rendering equals rendering from scratch, every time;
(d) rendering never changes the history.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.loaders import load
from refold.mechanisms.boundary import plain_first, recorded_config
from refold.policy import Policy
from refold.render import Renderer
from refold.render.received import without_reminder
from refold.restore import restore_text
from refold.types import Shown, content_text

from builders import SYSTEM, TASK, numbered, seed_config
from conftest import real_trajectories

POLICIES = [
    Policy(),
    Policy(k=1),
    Policy(k=4, reversible=False),
    Policy(chunk=False),
    Policy(dedup=False),
    Policy(mask_after=2, mask_min_chars=50),
    Policy(protocol=False, dedup_min_chars=40),
]


def check_invariants(h: History, config: Config, fresh_at: Collection[int] = ()) -> None:
    """(b)-(d) at every call; (c), the memo against a fresh renderer (which replays every call
    before t: quadratic), at the last call and at ``fresh_at``. Every call order is checked
    against the pure function in test_render_golden and test_spans."""
    before = h.messages()  # a deep copy
    digests = [s.digest for s in h.steps]
    inc = Renderer(config)
    lookup = Lookup(h, Renderer(config))
    plain = Renderer(recorded_config(config)) if plain_first(config) else None
    prev_serial, prev_b = "", -1
    for t in range(len(h) + 1):
        p = inc.render(h, t)
        if t == len(h) or t in fresh_at:
            fresh = Renderer(config).render(h, t)
            assert p.messages == fresh.messages and p.origins == fresh.origins  # (c)
        serial = p.serialized()
        if plain is not None and p.messages == plain.render(h, t).messages:  # the history as is, until the protocol pays
            prev_serial, prev_b = serial, -2  # the first prompt of the protocol is a move
            continue
        if p.stats.boundary == prev_b:
            assert serial.startswith(prev_serial), f"prefix changed at t={t} without a boundary move"  # (b)
        prev_serial, prev_b = serial, p.stats.boundary
        _nothing_lost(lookup, config, p.messages, p.origins, t, p.stats.boundary)
    assert h.messages() == before and [s.digest for s in h.steps] == digests  # (d)


class Lookup:
    """What step i received and what ``restore i`` returns, read once per step for all t (the
    history does not change while it is checked: (d) asserts it)."""

    def __init__(self, h: History, renderer: Renderer) -> None:
        self.h, self.renderer = h, renderer
        self._received: dict[int, list] = {}  # type: ignore[type-arg]
        self._restored: dict[int, str] = {}

    def received(self, i: int) -> list:  # type: ignore[type-arg]
        if i not in self._received:
            self._received[i] = self.renderer.received(self.h, i)
        return self._received[i]

    def restored(self, i: int) -> str:
        if i not in self._restored:
            self._restored[i] = restore_text(self.h, [i])
        return self._restored[i]


def _notes_dropped(shown: dict[str, Any], received: dict[str, Any]) -> bool:
    """Whether ``shown`` is ``received`` without the spent reminder among the notes at its end."""
    text = content_text(received.get("content"))
    return shown == {**received, "content": without_reminder(text)} and without_reminder(text) != text


def _nothing_lost(lookup: Lookup, config: Config, messages: list, origins: list, t: int, b: int = 0) -> None:  # type: ignore[type-arg]
    policy = config.policy
    shown_msgs = {json.dumps(m, sort_keys=True) for m in messages}
    folded = {c for o in origins if o.part == "note" for c in o.covers}
    hidden_outputs = {o.step for o in origins if o.part == "output" and o.shown is Shown.NOTE}
    parts: dict[tuple[int | None, str], list[tuple[Any, Any]]] = {}  # (step, part) -> its messages, in order
    notes: dict[int, Any] = {}  # step -> the first note covering it
    for m, o in zip(messages, origins, strict=True):
        parts.setdefault((o.step, o.part), []).append((m, o))
        if o.part == "note":
            for c in o.covers:
                notes.setdefault(c, m)
    for i in range(1, t + 1):
        received = lookup.received(i)
        if i in folded:
            note = notes[i]
            assert f"[step {i}]" in note["content"]
            if policy.reversible:
                _restorable(lookup, i, received)
            continue
        reply = parts[(i, "reply")][0]
        if reply[1].shown is Shown.NOTE:  # an old reply condensed: its commands stay, its reasoning restores
            text = content_text(reply[0].get("content"))
            assert "[context-manager]" in text and (not policy.reversible or f"restore {i}" in text)
            assert reply[0].get("tool_calls") == received[0].get("tool_calls")
            if policy.reversible:
                _restorable(lookup, i, received)
        else:
            assert json.dumps(received[0], sort_keys=True) in shown_msgs, f"reply of step {i} missing"
        outs = parts.get((i, "output"), [])
        assert len(outs) == len(received) - 1, f"step {i}: an output message went missing"
        for (m, o), orig in zip(outs, received[1:], strict=True):
            if o.shown in (Shown.RECEIVED, Shown.RESTORED):
                # behind the boundary the notes that came with an output are spent and go
                assert m == orig or (i <= b and _notes_dropped(m, orig))
                continue
            text = content_text(m.get("content"))
            assert "[context-manager]" in text
            if policy.reversible:
                assert f"restore {i}" in text, f"marker of step {i} does not say how to restore it"
                _restorable(lookup, i, received)
            for src in o.covers[1:]:  # a stub may only point at a step whose output is still shown
                assert src not in folded and src not in hidden_outputs and src < i


def _restorable(lookup: Lookup, i: int, received: list) -> None:  # type: ignore[type-arg]
    text = lookup.restored(i)
    for m in received:  # every output, but the spent reminder after the last one
        assert without_reminder(content_text(m.get("content"))) in text


# ---- generated histories --------------------------------------------------------------------

FILES = {name: [f"{name}_line_{n} = value({n}, 'padding to make lines long enough')" for n in range(1, 90)] for name in ("a", "b")}


@st.composite
def histories(draw: st.DrawFn) -> History:
    tool_style = draw(st.booleans())
    files = {k: list(v) for k, v in FILES.items()}
    h = History([SYSTEM, TASK])
    n = draw(st.integers(1, 16))
    for i in range(1, n + 1):
        head = ""
        if draw(st.booleans()):
            marks = draw(st.lists(st.integers(0, i + 2), max_size=3))
            head = f"PROGRESS: step {i}\nSTALE: {', '.join(map(str, marks)) or '-'}\n"
        kind = draw(st.sampled_from(["read", "read", "edit", "run", "restore"]))
        name = draw(st.sampled_from(sorted(files)))
        extra: dict[str, Any] = {}  # a restore's observation records what it showed again
        if kind == "read":
            lo = draw(st.integers(1, 60))
            hi = draw(st.integers(lo, 89))
            cmd = f"nl -ba {name}.py | sed -n '{lo},{hi}p'"
            output = numbered(files[name][lo - 1 : hi], lo)
        elif kind == "edit":
            line = draw(st.integers(0, 88))
            files[name][line] = f"{name}_edited_{i} = True"
            cmd, output = f"sed -i '{line + 1}s/.*/x/' {name}.py", ""
        elif kind == "run":
            cmd = "python run.py"
            output = draw(st.sampled_from(["ok", "FAILED test_x\n" * 12, "Traceback...\n" * 20]))
        else:
            if i == 1:
                cmd, output = "ls", "a.py b.py"
            else:
                target = draw(st.integers(1, i - 1))
                cmd, output = f"restore {target}", restore_text(h, [target])
                extra = {"extra": {"restore_of": [target]}}
        text = f"{head}I will do {kind}."
        if tool_style:
            call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}
            obs = {"role": "tool", "tool_call_id": f"c{i}", "content": output, **extra}
            h.append({"role": "assistant", "content": text, "tool_calls": [call]}, [obs])
        else:
            reply = {"role": "assistant", "content": f"{text}\n```bash\n{cmd}\n```"}
            h.append(reply, [{"role": "user", "content": output, **extra}])
    return h


CONFIGS = [seed_config(p) for p in POLICIES] + [Config(), Config.parse(k=1, mask_min_chars=50), Config.parse(cache="anthropic")]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: json.dumps(c.model_dump(exclude_defaults=True), sort_keys=True) or "default")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=histories(), fresh_at=st.sets(st.integers(0, 16), max_size=3))
def test_invariants_generated(config: Config, h: History, fresh_at: set[int]) -> None:
    check_invariants(h, config, fresh_at)


@pytest.mark.parametrize("path", real_trajectories(), ids=lambda p: p.name)
def test_invariants_real_runs(path: Path) -> None:
    h = load(path)
    quarters = range(0, len(h) + 1, max(1, len(h) // 4))
    for config in (seed_config(Policy()), seed_config(Policy(mask_after=3)), seed_config(Policy(chunk=False, k=2)), Config()):
        check_invariants(h, config, quarters)
