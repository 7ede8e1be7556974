"""Tokens-saved accounting (``refold_prompt_tokens_full_total``, ``..._rendered_total``,
``refold_tokens_saved_total``, ``refold_tokens_added_total``), shared by every surface: the full
conversation the client sent against the prompt refold rendered from it, counted with ``--tokenizer``
in a worker thread off the request path (a metric never fails or delays a request)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..messages import clean
from ..types import Message
from .metrics import Metrics


class SavedTokens:
    def __init__(self, tokenizer: str | None, metrics: Metrics) -> None:
        self.tokenizer = tokenizer or ""
        self.metrics = metrics
        self._tok: Any = None
        self._background: set[asyncio.Task[None]] = set()

    def count(self, full: Sequence[Message], rendered: Sequence[Message]) -> None:
        """Count ``full`` (as the client sent it) and ``rendered`` (as sent upstream) in the background."""
        if not self.tokenizer or self.tokenizer == "off":
            return
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._count_sync, full, rendered))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _count_sync(self, full: Sequence[Message], rendered: Sequence[Message]) -> None:
        try:
            from ..chat_tokens import count_messages
            from ..tokens import get_tokenizer

            if self._tok is None:
                self._tok = get_tokenizer(self.tokenizer)
            a = count_messages([clean(m) for m in full], self._tok)
            b = count_messages([clean(m) for m in rendered], self._tok)
        except Exception:  # noqa: BLE001 - metrics must never fail a request
            return
        self.metrics.inc("refold_prompt_tokens_full_total", a)
        self.metrics.inc("refold_prompt_tokens_rendered_total", b)
        self.metrics.inc("refold_tokens_saved_total", max(0, a - b))  # counters only go up
        self.metrics.inc("refold_tokens_added_total", max(0, b - a))

    async def drain(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
