"""Rebuild the Renderer a refold mini run used, from its saved trajectory (no mini import).

``RefoldModel.serialize`` stores the policy, span and ledger policies, the prompt placement and
the boundary rule under ``info.config.refold``; a renderer built from them replays the run to
exactly the prompts its model was sent::

    history = load(path)
    renderer = renderer_for(read_json(path))   # or Renderer(config_of(history))
    prompts = [renderer.render(history, t).messages for t in range(len(history))]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import Config
from ..history import History
from ..mechanisms.boundary import plain_first
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
    messages = data.get("messages")
    replies = (m for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant") if isinstance(messages, list) else ()
    first = next(iter(replies), None)
    extra = first.get("extra") if first is not None else None
    return _config(run_config(data), extra.get("refold") if isinstance(extra, Mapping) else None)


def config_of(history: History) -> Config | None:
    """The Config a loaded refold mini run rendered with; None when the run is not refold's or
    ran with refold switched off (its model was sent the plain messages)."""
    saved = history.meta.get("refold_config")
    if not isinstance(saved, Mapping) or saved.get("enabled") is False:
        return None
    return _config(saved, history.step(1).meta.get("refold") if len(history) else None)


def _config(saved: Mapping[str, Any], first_call: Any) -> Config:
    config = Config.from_saved({k: v for k, v in saved.items() if v is not None})
    if "prompt" in saved or not isinstance(first_call, Mapping):
        return config
    # Runs saved before the integration stored ``prompt`` rendered with the prompt defaults of their
    # day; from_saved takes those of runs older than ``prompt.deferred`` (protocol from the first
    # call). A run whose first call was sent exactly its plain history was deferring.
    sent, plain = first_call.get("prompt_tokens"), first_call.get("base_prompt_tokens")
    deferring = config.replace(prompt={**config.prompt.model_dump(), "deferred": True})
    if isinstance(sent, int) and sent == plain and plain_first(deferring):
        return deferring
    return config
