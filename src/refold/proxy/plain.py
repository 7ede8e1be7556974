"""Prompts of rounds in which the proxy answers no context command (pass-through tells the truth).

When a round's context commands will not be answered (its request's rounds are used up,
``--max-rounds 0``, a prefill, several choices) its prompt must not offer them: no context
tools, no "restore <step>" hint, nothing hidden that could only be brought back by one, no spans,
no ledger. Every surface renders such a round with ``plain_config`` and keeps one renderer per
session for it (a plain prompt is cached as any other).
"""

from __future__ import annotations

from collections import OrderedDict

from ..config import Config
from ..render import Renderer

_SESSIONS = 256


def plain_config(config: Config) -> Config:
    """``config`` for a prompt that offers no context command: nothing hidden can be restored,
    no spans, no ledger."""
    return config.override(["policy.reversible=false", "spans.enabled=false", "ledger.enabled=false"])


class PlainRenderers:
    """One ``plain_config`` renderer per session, the most recently used kept; and, the same way,
    one per session for prompts that offer no command the agent's own tools are named like
    (``context.tools.clashes``: its own ``restore`` tool)."""

    def __init__(self, config: Config) -> None:
        self.base = config
        self.config = plain_config(config)
        self._configs: dict[tuple[str, ...], Config] = {}
        self._by_sid: OrderedDict[tuple[str, tuple[str, ...] | None], Renderer] = OrderedDict()

    def get(self, sid: str, overrides: tuple[str, ...] | None = None) -> Renderer:
        """The session's plain renderer, or (``overrides``) its renderer under those overrides."""
        key = (sid, overrides)
        r = self._by_sid.get(key)
        if r is None:
            r = self._by_sid[key] = Renderer(self.config if overrides is None else self.config_for(overrides))
            while len(self._by_sid) > _SESSIONS:
                self._by_sid.popitem(last=False)
        self._by_sid.move_to_end(key)
        return r

    def config_for(self, overrides: tuple[str, ...]) -> Config:
        c = self._configs.get(overrides)
        if c is None:
            c = self._configs[overrides] = self.base.override(list(overrides))
        return c
