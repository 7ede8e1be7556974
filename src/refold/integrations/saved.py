"""Rebuild the Renderer a refold mini run used, from its saved trajectory (no mini import).

``RefoldModel.serialize`` stores the policy, span and ledger policies and whether the system
section carried the PROGRESS/STALE lines under ``info.config.refold``; a renderer built from them
replays the run to exactly the prompts its model was sent::

    history = load(path)
    renderer = renderer_for(read_json(path))
    prompts = [renderer.render(history, t).messages for t in range(len(history))]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Config
from ..render import Renderer


def run_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """``info.config.refold`` of a saved trajectory ({} when the run was not refold's)."""
    info = data.get("info")
    config = info.get("config") if isinstance(info, Mapping) else None
    refold = config.get("refold") if isinstance(config, Mapping) else None
    return dict(refold) if isinstance(refold, Mapping) else {}


def renderer_for(data: Mapping[str, Any]) -> Renderer:
    """A Renderer configured as the run saved in ``data`` was (defaults for what it lacks)."""
    return Renderer(config_for(data))


def config_for(data: Mapping[str, Any]) -> Config:
    """The Config the run saved in ``data`` used (defaults for what it lacks)."""
    saved = {k: v for k, v in run_config(data).items() if v is not None}
    return Config.from_saved(saved)
