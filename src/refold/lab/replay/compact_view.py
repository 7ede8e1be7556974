"""The prompt a compacting policy sends: the prefix, the summary, and the inner prompt after it.

Call t+1's inner prompt repeats call t's leading messages (the very same objects), so the view
is kept between calls and only the inner messages after the shared ones are read again: work per
changed message, not per message shown. A new summary, boundary or protected part rebuilds it.
Each result equals a reading from scratch as long as no message is changed in place between two
calls (a replay's never are).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...prompt_tokens import same_prefix
from ...protocol import CM
from ...types import Message, Origin, Shown, content_text

__all__ = ["CompactView", "prefix_len"]


def prefix_len(origins: Sequence[Origin]) -> int:
    """How many leading messages are the recorded system prompt and task."""
    n = 0
    while n < len(origins) and origins[n].step is None and origins[n].part in ("system", "task"):
        n += 1
    return n


class CompactView:
    """``view(inner prompt, upto, summary, kept)``: the compacted prompt's messages and origins.

    Steps ``<= upto`` are summarized away; a pinned message, or a received output whose
    ``(step, j)`` is in ``kept`` (protected), survives as a note (the same note object at every
    call, so later identity-based work sees it as unchanged).
    """

    def __init__(self) -> None:
        self._state: tuple[int, int, int, frozenset[tuple[int, int]]] | None = None
        self._summary: Message | None = None  # held: its id is part of the state
        self._inner: list[Message] = []
        self._inner_origins: list[Origin] = []
        self._head = 0  # len(self._msgs) before the first inner message after the prefix
        self._ends: list[int] = []  # len(self._msgs) after each inner message after the prefix
        self._msgs: list[Message] = []
        self._origins: list[Origin] = []
        self._outputs: dict[int, int] = {}  # each step's outputs met so far: the next one's index
        self._notes: dict[tuple[int, str, int | None], tuple[Message, Message]] = {}

    def __call__(
        self,
        messages: Sequence[Message],
        origins: Sequence[Origin],
        upto: int,
        summary: Message | None,
        kept: set[tuple[int, int]],
    ) -> tuple[list[Message], list[Origin]]:
        if len(messages) != len(origins):
            raise ValueError(f"a prompt of {len(messages)} messages has {len(origins)} origins")
        n_prefix = prefix_len(origins)
        state = (n_prefix, upto, id(summary), frozenset(kept))
        old = self._inner_origins
        k_msgs = same_prefix(self._inner, messages)
        k = min(k_msgs, same_prefix(old, origins))
        while k < k_msgs and old[k] == origins[k]:  # an equal origin rebuilt is still the same
            k += 1
        if state != self._state or k < n_prefix:
            self._reset(messages, origins, n_prefix, upto, summary)
            self._state = state
            k = n_prefix
        else:
            for pos in range(len(old) - 1, k - 1, -1):  # undo, last first
                o = old[pos]
                if o.part == "output" and o.step:
                    self._outputs[o.step] -= 1
            del self._ends[k - n_prefix :]
            cut = self._ends[-1] if self._ends else self._head
            del self._msgs[cut:], self._origins[cut:]
        msgs, outs, outputs = self._msgs, self._origins, self._outputs
        for m, o in zip(messages[k:], origins[k:], strict=True):
            j = -1
            if o.part == "output" and o.step:
                j = outputs.get(o.step, 0)
                outputs[o.step] = j + 1
            last = max(o.covers) if o.covers else (o.step or 0)
            if last > upto or o.part == "ledger":
                msgs.append(m)
                outs.append(o)
            elif o.shown is Shown.PINNED or o.shown is Shown.RECEIVED and (o.step or 0, j) in kept:
                msgs.append(self._note(m, o))
                outs.append(Origin(o.step, "pin", Shown.PINNED, o.covers))
            self._ends.append(len(msgs))
        self._inner, self._inner_origins = list(messages), list(origins)
        return list(msgs), list(outs)  # the caller keeps them; the view goes on changing

    def _reset(
        self,
        messages: Sequence[Message],
        origins: Sequence[Origin],
        n_prefix: int,
        upto: int,
        summary: Message | None,
    ) -> None:
        self._summary = summary
        self._msgs, self._origins = list(messages[:n_prefix]), list(origins[:n_prefix])
        if summary is not None:
            self._msgs.append(summary)
            self._origins.append(Origin(None, "note", Shown.NOTE, tuple(range(1, upto + 1))))
        self._head = len(self._msgs)
        self._ends = []
        self._outputs = {}

    def _note(self, m: Message, o: Origin) -> Message:
        """A pinned (or protected) object kept verbatim through the summary, as a note."""
        key = (id(m), o.part, o.step)
        hit = self._notes.get(key)
        if hit is not None and hit[0] is m:
            return hit[1]
        text = content_text(m.get("content"))
        if o.part != "pin":
            text = f"{CM} Pinned {o.part} of step {o.step}, kept verbatim through the compaction:\n{text}"
        note: Message = {"role": "user", "content": text}
        self._notes[key] = (m, note)  # holding m keeps its id from being reused
        return note
