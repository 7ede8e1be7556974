"""Hidden-then-needed: how often a policy hid something the agent's next reply goes on to use.

For the prompt of call ``t + 1`` (rendered from steps ``1..t``) the *recorded reply* is step
``t + 1``'s reply: what the agent actually wrote after that call in the recorded run. A call is
**hidden-then-needed** when that reply names a *key* (defined below) that

1. occurs in the recorded history before the call (the reply or an output of a step ``<= t``),
2. does not occur in any message of the rendered prompt (system, task, replies, outputs, and the
   text of every stub, trim marker, note, mask note, span block or summary), and
3. does not occur in the history's prefix (system prompt and task as recorded).

So its only occurrences before the call are in content the policy did not show (stubbed, trimmed,
folded, masked, cleared, summarized): an agent working from that prompt would have had to
``restore`` it (or guess). The *restore cost* of such a call is the size, in the replay's
tokenizer, of the recorded pieces (a step's reply or one of its outputs) that contain a needed key
in the latest step that held it (one ``restore`` of that step suffices), each piece counted once
per call however many keys it holds. Keys (paths, identifiers, test ids, error strings) are
defined in ``refold.lab.replay.needed_keys``.

Everything is indexed once per history (one pass over each step's reply and outputs) and each
distinct rendered message text once (a memo keyed by the text object), so the per-call work is a
few set lookups per key of the reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ...chat_tokens import message_tokens
from ...history import History
from ...messages import clean
from ...tokens import Tokenizer
from ...types import Message, Origin, Shown
from .needed_keys import keys_of, message_text, reply_keys
from .policies import Projector, Prompt

__all__ = [
    "NEEDED_NOTE",
    "NeededCall",
    "NeededIndex",
    "NeededTap",
    "NeededTotals",
    "hidden_then_needed",
]

NEEDED_NOTE = (
    "Hidden-then-needed (estimated from recorded replies): calls whose next recorded reply names a "
    "path, identifier, test id or error string that occurred before the call only in content the "
    "prompt did not show; restore tokens: the size of the recorded pieces holding them, once per "
    "piece per call. Definitions: refold.lab.replay.needed."
)

@dataclass(frozen=True, slots=True)
class NeededCall:
    """One hidden-then-needed call: the keys, and the recorded pieces ``(step, j)`` holding them
    (``j`` 0 is the step's reply, ``j`` >= 1 its output ``j - 1``) with their restore cost."""

    t: int
    keys: tuple[str, ...]
    pieces: tuple[tuple[int, int], ...]
    restore_tokens: int


@dataclass(slots=True)
class NeededTotals:
    calls: int = 0
    needed_calls: int = 0
    restore_tokens: int = 0
    examples: list[NeededCall] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.needed_calls / self.calls if self.calls else 0.0


class NeededIndex:
    """The keys of one history, indexed once; :meth:`check` answers for one rendered prompt.

    Shared by every policy replayed on the same history (the marked copy a STALE policy sees has
    the same replies and outputs).
    """

    def __init__(self, history: History, tok: Tokenizer) -> None:
        self.history = history
        self.tok = tok
        self._prefix = frozenset().union(*(keys_of(message_text(m)) for m in history.prefix))
        self._where: dict[str, list[tuple[int, int]]] = {}
        self._replies: list[frozenset[str]] = []
        self._pieces: dict[tuple[int, int], Message] = {}
        self._cost: dict[tuple[int, int], int] = {}
        self._by_id: dict[int, tuple[object, frozenset[str]]] = {}
        self._by_text: dict[str, frozenset[str]] = {}
        for s in history.steps:
            reply = message_text(s.reply)
            self._replies.append(reply_keys(reply) - self._prefix)
            for j, msg in enumerate((s.reply, *s.observations)):
                self._pieces[(s.index, j)] = msg
                text = reply if j == 0 else message_text(msg)
                for k in self._memo_text(text):
                    self._where.setdefault(k, []).append((s.index, j))

    def _memo_text(self, text: str) -> frozenset[str]:
        keys = self._by_text.get(text)
        if keys is None:
            keys = self._by_text[text] = keys_of(text)
        return keys

    def _keys_of_message(self, m: Message) -> frozenset[str]:
        hit = self._by_id.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        keys = self._memo_text(message_text(m))
        self._by_id[id(m)] = (m, keys)  # holding m keeps its id from being reused
        return keys

    def restore_tokens(self, piece: tuple[int, int]) -> int:
        n = self._cost.get(piece)
        if n is None:
            n = self._cost[piece] = len(message_tokens(clean(self._pieces[piece]), self.tok))
        return n

    def check(self, t: int, messages: Sequence[Message], origins: Sequence[Origin]) -> NeededCall | None:
        """The hidden-then-needed finding of the prompt of call ``t + 1``, or None."""
        if t >= len(self._replies):
            return None  # no recorded reply to check
        shown: set[tuple[int, int]] | None = None
        other: list[Message] = []
        needed: list[str] = []
        pieces: set[tuple[int, int]] = set()
        for key in sorted(self._replies[t]):
            before = [p for p in self._where.get(key, ()) if p[0] <= t]
            if not before:
                continue  # new to the run: nothing was hidden
            if shown is None:
                shown, other = _split(messages, origins)
            if any(p in shown for p in before) or any(key in self._keys_of_message(m) for m in other):
                continue
            needed.append(key)
            latest = before[-1][0]  # one restore, of the latest step that held it, suffices
            pieces.update(p for p in before if p[0] == latest)
        if not needed:
            return None
        ordered = tuple(sorted(pieces))
        return NeededCall(t, tuple(needed), ordered, sum(self.restore_tokens(p) for p in ordered))


_VERBATIM = frozenset({Shown.RECEIVED, Shown.RESTORED})


def _split(
    messages: Sequence[Message], origins: Sequence[Origin]
) -> tuple[set[tuple[int, int]], list[Message]]:
    """(recorded pieces shown verbatim, as ``(step, j)``; every other message of the prompt).

    A verbatim piece is the recorded text plus protocol lines (``[step N]``, reminders), so it
    holds every key of the recorded piece; a step's reply and outputs are laid out in order.
    """
    shown: set[tuple[int, int]] = set()
    other: list[Message] = []
    nxt: dict[int, int] = {}
    for m, o in zip(messages, origins, strict=True):
        if o.step is None or o.part not in ("reply", "output"):
            other.append(m)
            continue
        j = 0 if o.part == "reply" else nxt.get(o.step, 1)
        if o.part == "output":
            nxt[o.step] = j + 1
        if o.shown in _VERBATIM:
            shown.add((o.step, j))
        else:
            other.append(m)
    return shown, other


class NeededCounter:
    """Accumulates :class:`NeededTotals` over the prompts of one policy on one history."""

    def __init__(self, index: NeededIndex, keep_examples: int = 0) -> None:
        self.index = index
        self.totals = NeededTotals()
        self.keep_examples = keep_examples

    def add(self, t: int, messages: Sequence[Message], origins: Sequence[Origin]) -> None:
        self.totals.calls += 1
        found = self.index.check(t, messages, origins)
        if found is None:
            return
        self.totals.needed_calls += 1
        self.totals.restore_tokens += found.restore_tokens
        if len(self.totals.examples) < self.keep_examples:
            self.totals.examples.append(found)


class NeededTap:
    """A projector that passes ``inner``'s prompts through and counts hidden-then-needed calls
    on the way, so ``measure`` needs no change to report them."""

    def __init__(self, inner: Projector, index: NeededIndex) -> None:
        self.inner = inner
        self.name = inner.name
        self.counter = NeededCounter(index)

    @property
    def totals(self) -> NeededTotals:
        return self.counter.totals

    def prompts(self, history: History) -> Iterator[Prompt]:
        for p in self.inner.prompts(history):
            self.counter.add(p.t, p.messages, p.origins)
            yield p


def hidden_then_needed(
    history: History,
    prompts: Iterable[tuple[int, Sequence[Message], Sequence[Origin]]],
    tok: Tokenizer,
    *,
    index: NeededIndex | None = None,
    keep_examples: int = 0,
) -> NeededTotals:
    """Totals over ``prompts`` (``(t, messages, origins)`` of call ``t + 1``) of ``history``."""
    counter = NeededCounter(index or NeededIndex(history, tok), keep_examples)
    for t, messages, origins in prompts:
        counter.add(t, messages, origins)
    return counter.totals
