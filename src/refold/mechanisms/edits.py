"""When the agent last edited a file it read (``Policy.mask_by = "edit"``): a read of a file stays
shown while a recent reply writes that file (an ``Edit``'s exact ``old_string``, a patch's context
lines need the file's text; no note holds it).

File-scoped, from what the history's actions already say (``CommandInfo.reads``/``writes``, the
same for a ``Read``/``Edit`` tool call and a ``cat``/``sed -i`` command): a search, a listing or a
test run is never held, nor a read of a file the agent has stopped writing.
"""

from __future__ import annotations

from collections.abc import Callable

from ..types import Step


def read_paths(step: Step) -> frozenset[str]:
    """The files ``step``'s read commands show (a search or a listing shows no file's text)."""
    return frozenset(p for a in step.actions if a.effects.kind == "read" for p in a.effects.reads)


class Edits:
    """Replies 1..``read`` seen; ``last(step)`` the latest reply after ``step`` writing a file it read."""

    def __init__(self) -> None:
        self.read = 0
        self._written: dict[str, int] = {}  # path -> the latest reply step writing it
        self._read_at: dict[str, int] = {}  # path -> the latest step reading it

    def read_replies(self, step_of: Callable[[int], Step], upto: int) -> None:
        """Read the actions of steps ``read+1 .. upto`` (never a reply not yet given: no hindsight)."""
        written, read_at = self._written, self._read_at
        for s in range(self.read + 1, upto + 1):
            for a in step_of(s).actions:
                for p in a.effects.writes:
                    written[p] = s
                if a.effects.kind == "read":
                    for p in a.effects.reads:
                        read_at[p] = s
        self.read = max(self.read, upto)

    def last(self, step: Step, said: tuple[int, ...] = ()) -> int:
        """The step of the latest write of a file ``step`` read, while ``step`` is still that file's
        latest read (a later read shows it as it is now); its own step if none."""
        i = step.index
        written, read_at = self._written, self._read_at
        return max(i, max((written.get(p, 0) for p in read_paths(step) if read_at.get(p, i) <= i), default=0))

    def forget(self, i: int) -> None:
        """Nothing is kept per step."""
