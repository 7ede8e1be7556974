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
    """One ``plain_config`` renderer per session, the most recently used kept."""

    def __init__(self, config: Config) -> None:
        self.config = plain_config(config)
        self._by_sid: OrderedDict[str, Renderer] = OrderedDict()

    def get(self, sid: str) -> Renderer:
        r = self._by_sid.get(sid)
        if r is None:
            r = self._by_sid[sid] = Renderer(self.config)
            while len(self._by_sid) > _SESSIONS:
                self._by_sid.popitem(last=False)
        self._by_sid.move_to_end(sid)
        return r
