"""The prompt while a session is sent its plain history (``prompt.deferred``).

Until hiding pays for the protocol's own text, each call is the prefix and every step as recorded
(``recorded_config``: no labels, reminders or protocol section). The steps are appended call by
call, so a call costs the slices of what was received, not a render."""

from __future__ import annotations

import time

from ..config import Config
from ..history import History
from ..mechanisms.boundary import step_time
from ..messages import clean
from ..types import Message, Origin
from .prompt import Joined, OriginParts, StatsArgs
from .received import ReceivedLog, message_chars, prefix_messages, received_form
from .rope import Rope

_NO_MESSAGES: Rope[Message] = Rope([], None)
_NO_ORIGINS: Rope[Origin] = Rope([], None)


class PlainHistory:
    """The plain prompts of one history (its steps only grow: the renderer resets it otherwise)."""

    def __init__(self, config: Config, history: History) -> None:
        self.config = config
        self.prefix, self.prefix_origins = prefix_messages(history, config)
        self.prefix_chars = sum(message_chars(clean(m)) for m in history.prefix)
        self.recv = ReceivedLog()
        self.sizes: list[int] = []  # characters of steps 1..n as recorded, running total
        self.t = -1  # the last call answered
        self.last_len = 0  # messages in that call's prompt

    def prompt(self, history: History, t: int) -> tuple[Joined[Message], OriginParts, StatsArgs]:
        """Call t's prompt: the prefix and steps 1..t as received; stable = the last prompt when
        it was call t-1 (a plain prompt only grows)."""
        start = time.perf_counter()
        for s in history.steps_between(len(self.recv), t):
            self.recv.add(s, received_form(s, self.config, None), None, step_time(s))
        tail: list[Message] = []
        origins: list[Origin] = []
        self.recv.extend_plain(0, t, tail, origins)
        messages = Joined(self.prefix, _NO_MESSAGES, tail)
        stable = self.last_len if self.t == t - 1 else 0
        self.t, self.last_len = t, len(messages)
        ms = (time.perf_counter() - start) * 1000
        return messages, (self.prefix_origins, _NO_ORIGINS, origins), (t, 0, 0, 0, 0, 0, 0, ms, stable)

    def advance(self, history: History, t: int) -> None:
        """What ``prompt(history, t)`` leaves for the next call, without its O(t) lists (a replayed call)."""
        for s in history.steps_between(len(self.recv), t):
            self.recv.add(s, received_form(s, self.config, None), None, step_time(s))
        self.t, self.last_len = t, len(self.prefix) + self.recv.at[t]

    def shared(self, prefix: list[Message]) -> tuple[int, int]:
        """Leading messages, and their characters, that a prompt starting with ``prefix`` shares with
        the plain one (all of its prefix, unless a demonstration is hidden: ``prompt.hide_demos``)."""
        n = chars = 0
        for a, b in zip(self.prefix, prefix, strict=False):
            if a != b:
                break
            n, chars = n + 1, chars + message_chars(a)
        return n, chars

    def size(self, history: History, t: int) -> tuple[int, int]:
        """Characters of call t's plain prompt and of step t's outputs in it (what the cache lacks)."""
        sizes = self.sizes
        for s in history.steps_between(len(sizes), t):
            own = message_chars(clean(s.reply)) + sum(message_chars(clean(o)) for o in s.observations)
            sizes.append((sizes[-1] if sizes else 0) + own)
        size = self.prefix_chars + (sizes[t - 1] if t else 0)
        reply = message_chars(clean(history.step(t).reply)) if t else 0
        outputs = size - self.prefix_chars - (sizes[t - 2] if t > 1 else 0) - reply
        return size, outputs
