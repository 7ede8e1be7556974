"""Hidden-then-needed: how often a policy hid something the agent's next reply goes on to use.

For the prompt of call ``t + 1`` (rendered from steps ``1..t``) the *recorded reply* is step
``t + 1``'s reply: what the agent actually wrote after that call in the recorded run. A call is
**hidden-then-needed** when that reply names a *key* (defined below) that

1. occurs in the recorded history before the call (the reply or an output of a step ``<= t``),
2. does not occur in any message of the rendered prompt (system, task, replies, outputs, and the
   text of every stub, trim marker, note, mask note, span block or summary; an identifier in
   any spelling of its words, a folder as a folder of a shown path), and
3. does not occur in the history's prefix (system prompt and task as recorded).

So its only occurrences before the call are in content the policy did not show (stubbed, trimmed,
folded, masked, cleared, summarized): an agent working from that prompt would have had to
``restore`` it (or guess). The *restore cost* of such a call is the size, in the replay's
tokenizer, of the recorded pieces (a step's reply or one of its outputs) that contain a needed key
in the latest step that held it (one ``restore`` of that step suffices), each piece counted once
per call however many keys it holds. Keys (paths, identifiers, test ids, error strings) are
defined in ``refold.named_keys``.

Everything is indexed once per history (one pass over each step's reply and outputs) and each
distinct rendered message text once (a memo keyed by the text object); what a policy's prompts
show is kept as running counts updated per changed message (:class:`ShownKeys`), so the per-call
work is a few lookups per key of the reply plus the messages new to the prompt.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from ...chat_tokens import message_tokens
from ...history import History
from ...messages import clean
from ...named_keys import folded, keys_of, message_text, reply_keys
from ...prompt_tokens import same_prefix
from ...tokens import Tokenizer
from ...types import Message, Origin, Shown
from .projectors import Projector, Prompt

__all__ = [
    "NEEDED_NOTE",
    "NeededCall",
    "NeededIndex",
    "NeededTap",
    "NeededTotals",
    "ShownKeys",
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

    def check(
        self, t: int, messages: Sequence[Message], origins: Sequence[Origin], view: ShownKeys | None = None
    ) -> NeededCall | None:
        """The hidden-then-needed finding of the prompt of call ``t + 1``, or None.

        ``view``: the :class:`ShownKeys` of the same policy's earlier prompts (brought up to date
        here, only when a key needs it); without one the prompt is read from scratch.
        """
        if t >= len(self._replies):
            return None  # no recorded reply to check
        synced = False
        needed: list[str] = []
        pieces: set[tuple[int, int]] = set()
        for key in sorted(self._replies[t]):
            where = self._where.get(key, [])
            before = where[: bisect_right(where, (t, _LAST))]  # pieces are indexed in order
            if not before:
                continue  # new to the run: nothing was hidden
            if not synced:
                view = view or ShownKeys(self)
                view.update(messages, origins)
                synced = True
            assert view is not None
            # the latest pieces first: the ones most often still shown
            if any(view.pieces[p] > 0 for p in reversed(before)) or view.has_key(key):
                continue
            if self._shown_folded(key, t, view):
                continue
            needed.append(key)
            latest = before[-1][0]  # one restore, of the latest step that held it, suffices
            pieces.update(p for p in before if p[0] == latest)
        if not needed:
            return None
        ordered = tuple(sorted(pieces))
        return NeededCall(t, tuple(needed), ordered, sum(self.restore_tokens(p) for p in ordered))


    def _shown_folded(self, key: str, t: int, view: ShownKeys) -> bool:
        """Whether the prompt shows an identifier in another spelling of its words (``folded``)."""
        fold = folded(key)
        if fold is None:
            return False
        where = self._where.get(fold, [])
        before = where[: bisect_right(where, (t, _LAST))]
        return any(view.pieces[p] > 0 for p in reversed(before)) or view.has_key(fold)


_VERBATIM = frozenset({Shown.RECEIVED, Shown.RESTORED})
_LAST = float("inf")  # sorts after every output index j


class ShownKeys:
    """What a prompt shows: the recorded pieces shown verbatim, as ``(step, j)``, and the keys of
    every other message, as running counts over successive prompts of one policy.

    A verbatim piece is the recorded text plus protocol lines (``[step N]``, reminders), so it
    holds every key of the recorded piece; a step's reply and outputs are laid out in order.
    Call t+1's prompt repeats call t's leading messages (the very same objects), so an update
    undoes the messages after the shared ones and adds the new: work per changed message, not
    per message shown. The keys of the other messages are read only when a lookup needs them
    (a ledger or summary new at every call is often never read). Counts equal a from-scratch
    reading as long as no message is changed in place between two updates (a replay's never are).
    """

    def __init__(self, index: NeededIndex) -> None:
        self.index = index
        self.pieces: Counter[tuple[int, int]] = Counter()
        # keys added and removed, both counted by Counter.update (C speed)
        self._added: Counter[str] = Counter()
        self._removed: Counter[str] = Counter()
        self._counted = 0  # the slots whose keys are in the counts
        self._msgs: list[Message] = []
        self._origins: list[Origin] = []
        self._slots: list[tuple[int, int] | Message] = []  # a verbatim piece, or another message
        self._nxt: dict[int, int] = {}  # the next output index j of each step laid out so far

    def update(self, messages: Sequence[Message], origins: Sequence[Origin]) -> None:
        if len(messages) != len(origins):
            raise ValueError(f"a prompt of {len(messages)} messages has {len(origins)} origins")
        old = self._origins
        k = same_prefix(self._msgs, messages)
        i = same_prefix(old, origins)
        while i < k and old[i] == origins[i]:  # an equal origin rebuilt is still the same
            i += 1
        k = min(k, i)
        slots, nxt = self._slots, self._nxt
        for pos in range(len(slots) - 1, k - 1, -1):  # undo, last first
            o, gone = old[pos], slots[pos]
            if o.step is not None and o.part == "output":
                nxt[o.step] -= 1
            if isinstance(gone, tuple):
                self.pieces[gone] -= 1
            elif pos < self._counted:
                self._removed.update(self.index._keys_of_message(gone))
        del slots[k:]
        self._counted = min(self._counted, k)
        for m, o in zip(messages[k:], origins[k:], strict=True):
            if o.step is None or o.part not in ("reply", "output"):
                slots.append(m)
                continue
            j = 0 if o.part == "reply" else nxt.get(o.step, 1)
            if o.part == "output":
                nxt[o.step] = j + 1
            if o.shown in _VERBATIM:
                self.pieces[(o.step, j)] += 1
                slots.append((o.step, j))
            else:
                slots.append(m)
        self._msgs = list(messages)  # the caller may change its lists afterwards
        self._origins = list(origins)

    def _count(self) -> None:
        for slot in self._slots[self._counted :]:
            if not isinstance(slot, tuple):
                self._added.update(self.index._keys_of_message(slot))
        self._counted = len(self._slots)

    def has_key(self, key: str) -> bool:
        """Whether a message of the prompt other than a verbatim piece holds ``key``."""
        self._count()
        return self._added[key] > self._removed[key]

    def keys(self) -> set[str]:
        """Every key :meth:`has_key` answers yes for."""
        self._count()
        return {k for k, n in self._added.items() if n > self._removed[k]}


class NeededCounter:
    """Accumulates :class:`NeededTotals` over the prompts of one policy on one history."""

    def __init__(self, index: NeededIndex, keep_examples: int = 0) -> None:
        self.index = index
        self.totals = NeededTotals()
        self.keep_examples = keep_examples
        self.view = ShownKeys(index)

    def add(self, t: int, messages: Sequence[Message], origins: Sequence[Origin]) -> None:
        self.totals.calls += 1
        found = self.index.check(t, messages, origins, self.view)
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

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        for p in self.inner.prompts(history, final):
            if p.t < len(history):  # the final prompt's calls have no reply to judge
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
