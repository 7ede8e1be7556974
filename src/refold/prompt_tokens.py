"""Token ids of one session's successive prompts, at a cost proportional to what changes.

A replay counts every model call's whole prompt, and call t repeats call t-1's leading messages
(the very same objects). ``PromptTokens`` keeps the last prompt's ids and each message's end
offset, finds the shared leading messages at C speed (by identity), and tokenizes only the rest
(through ``chat_tokens``' per-message memo). A run of n calls then costs Python work per *new*
message, not per message shown, plus one C-level copy of each prompt's ids for the caller.

Each result equals ``prompt_token_ids`` of the same messages, as long as no message object is
changed in place between two calls of one session (a replay's histories and prompts never are).
"""

from __future__ import annotations

import operator
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from .chat_tokens import message_ids, priming_ids, qwen_system_ids, tools_token_ids, turn_flags, with_tools
from .tokens import Tokenizer

__all__ = ["MessageBounds", "PromptTokens", "same_prefix"]

Msg = Mapping[str, Any]


def same_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading positions of ``a`` and ``b`` hold the very same objects."""
    flags = list(map(operator.is_, a, b))
    try:
        return flags.index(False)
    except ValueError:
        return len(flags)


class PromptTokens:
    """``prompt_token_ids(messages, tok, add_generation_prompt, tools)`` for each prompt of a session.

    ``ids`` returns a new list (the caller may keep it); ``count`` its length, without the copy;
    ``lent`` the same ids without the copy, in the session's own list: valid until the next call,
    for a caller that only reads them (a cache simulator that keeps its own copy).
    """

    def __init__(
        self,
        tok: Tokenizer,
        *,
        tools: Sequence[Msg] | None = None,
        add_generation_prompt: bool = True,
    ) -> None:
        self.tok = tok
        self.tools = tools
        qwen = getattr(tok, "template", "openai") == "qwen"
        # OpenAI-style: the tool block comes first (Qwen's is in the system turn)
        self._ids: list[int] = tools_token_ids(tools, tok) if tools and not qwen else []
        self._head = len(self._ids)
        self._priming = list(priming_ids(tok)) if add_generation_prompt else []
        self._msgs: list[Msg] = []
        self._ends: list[int] = []  # end offset in _ids of each message of _msgs
        self.stable = 0
        """How many leading ids of the last result equal those of the one before (a lower bound;
        never more than the earlier result's length without its generation priming)."""

    def ids(self, messages: Sequence[Msg]) -> list[int]:
        self._update(messages)
        return self._ids + self._priming

    def lent(self, messages: Sequence[Msg]) -> list[int]:
        self._update(messages)  # cuts the ids back to the last message's end: no priming left
        self._ids += self._priming
        return self._ids

    def count(self, messages: Sequence[Msg]) -> int:
        self._update(messages)
        return len(self._ids) + len(self._priming)

    def _update(self, messages: Sequence[Msg]) -> None:
        msgs, qwen_tools = with_tools(messages, self.tok, self.tools)
        prev, n = self._msgs, len(msgs)
        k = same_prefix(prev, msgs)
        # a Qwen tool result's turn flags depend on its neighbours: the last shared message is
        # redone unless both prompts end with it
        keep = k if k == len(prev) == n else max(0, k - 1)
        ends, ids = self._ends, self._ids
        self.stable = ends[keep - 1] if keep else self._head
        del ids[self.stable :]
        del ends[keep:]
        qwen = getattr(self.tok, "template", "openai") == "qwen"
        for i in range(keep, n):
            msg = msgs[i]
            if i == 0 and qwen_tools:
                ids.extend(qwen_system_ids(msg, self.tok, qwen_tools))
            else:
                ids.extend(message_ids(msg, self.tok, *turn_flags(msgs, i, qwen)))
            ends.append(len(ids))
        self._msgs = list(msgs)  # the caller may change its list afterwards


class MessageBounds:
    """Where each message of successive prompts ends, counting every message as a whole turn
    (``message_tokens``), capped at the prompt's length: what Anthropic- and DeepSeek-style
    simulators take as ``boundaries``. Shared leading messages keep their offsets."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self._msgs: list[Msg] = []
        self._ends: list[int] = []

    def __call__(self, messages: Sequence[Msg], total: int) -> list[int]:
        k = same_prefix(self._msgs, messages)
        ends = self._ends
        del ends[k:]
        pos = ends[-1] if ends else 0
        for m in messages[k:]:
            pos += len(message_ids(m, self.tok, True, True))  # message_tokens, uncopied
            ends.append(pos)
        self._msgs = list(messages)
        cut = bisect_right(ends, total)
        return ends[:cut] + [total] * (len(ends) - cut)
