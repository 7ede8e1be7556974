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

from ..errors import PolicyError
from ..mechanisms.ledger import LedgerPolicy
from ..mechanisms.spans import SpanPolicy
from ..policy import Policy
from ..render import Renderer


def run_config(data: Mapping[str, Any]) -> dict[str, Any]:
    """``info.config.refold`` of a saved trajectory ({} when the run was not refold's)."""
    info = data.get("info")
    config = info.get("config") if isinstance(info, Mapping) else None
    refold = config.get("refold") if isinstance(config, Mapping) else None
    return dict(refold) if isinstance(refold, Mapping) else {}


def renderer_for(data: Mapping[str, Any]) -> Renderer:
    """A Renderer configured as the run saved in ``data`` was (defaults for what it lacks)."""
    saved = run_config(data)
    try:
        return Renderer(
            Policy.model_validate(saved.get("policy") or {}),
            spans=SpanPolicy.model_validate(saved.get("spans") or {}),
            ledger=LedgerPolicy.model_validate(saved.get("ledger") or {}),
            format_in_system=bool(saved.get("format_in_system", True)),
        )
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        raise PolicyError(f"saved refold config: {str(e).splitlines()[0]}") from None
