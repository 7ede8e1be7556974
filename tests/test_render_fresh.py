"""A fresh renderer (a restarted proxy) replays the calls before t with decisions only: its prompt
at call t is the incremental renderer's, message for message, origins and stats included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from refold.config import Config
from refold.history import History
from refold.loaders import load
from refold.render import Renderer
from refold.types import Rendered
from test_properties import histories

from conftest import real_trajectories

MINI = Config.parse(spans={"prompt": True}, ledger={"prompt": True, "budget_tokens": 128000})
USE = Config.parse(mask_by="use")
CONFIGS = {"default": Config(), "mini": MINI, "anthropic": Config.parse(cache="anthropic"), "use": USE}


def _key(r: Rendered) -> tuple[object, ...]:
    return r.messages, r.origins, dataclasses.replace(r.stats, render_ms=0.0)


def check_fresh(h: History, config: Config) -> None:
    memo = Renderer(config)
    incremental = [_key(memo.render(h, t)) for t in range(len(h) + 1)]
    for t in range(len(h) + 1):
        assert _key(Renderer(config).render(h, t)) == incremental[t], f"t={t}"
    half = Renderer(config)  # a replay, then calls one by one from there
    for t in range(len(h) // 2, len(h) + 1):
        assert _key(half.render(h, t)) == incremental[t], f"t={t} after a replay to {len(h) // 2}"
        assert _key(half.render(h, t)) == incremental[t], f"t={t} asked again"


@pytest.mark.parametrize("config", CONFIGS.values(), ids=list(CONFIGS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=histories())
def test_fresh_equals_incremental_generated(config: Config, h: History) -> None:
    check_fresh(h, config)


@pytest.mark.parametrize("path", real_trajectories(), ids=lambda p: p.name)
@pytest.mark.parametrize("config", [Config(), MINI, USE], ids=["default", "mini", "use"])
def test_fresh_equals_incremental_real_runs(path: Path, config: Config) -> None:
    check_fresh(load(path), config)


def test_a_replay_stopped_by_an_error_is_not_taken_for_a_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay keeps no prompt: asked for the call it stopped at, the renderer renders it."""
    h = load(real_trajectories()[0])
    n = len(h)
    want = {t: _key(Renderer(Config()).render(h, t)) for t in (n - 2, n - 1, n)}
    r = Renderer(Config())
    real = Renderer._render

    def stop_at_the_last(self: Renderer, history: History, t: int, start: float, *, replay: bool = False) -> Rendered | None:
        if not replay:
            raise KeyboardInterrupt
        return real(self, history, t, start, replay=replay)

    monkeypatch.setattr(Renderer, "_render", stop_at_the_last)
    with pytest.raises(KeyboardInterrupt):
        r.render(h, n)  # replays calls 0..n-1, then stops
    monkeypatch.setattr(Renderer, "_render", real)
    assert _key(r.render(h, n - 1)) == want[n - 1]  # the last call replayed: rendered, not taken as kept
    assert _key(r.render(h, n)) == want[n]
