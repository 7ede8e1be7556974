"""When each ledger object was last touched, and which were touched latest, without per-object work
for a read that touches every earlier output of its file.

An object is touched when it is created, when a context command names it, and when a command
reads or edits its file. Objects of one path form a group: a read touches the groups of the paths
it overlaps (``PathIndex``), once each, however many outputs they hold (a file read 300 times has
300 outputs). An object's last touched turn is then the latest of its step, its own last touch
and its group's. ``recent`` walks the turns back from the last one and takes the objects whose
last touch is that turn (by step and output, latest first) until it has enough: the ledger view's
``view_items`` most recently touched, at a cost of about the lines it shows.
"""

from __future__ import annotations

from .path_index import PathIndex

Part = tuple[int, int]  # (step, -1 for the reply or the output index)


class Recency:
    """Touches of the objects of steps 1..t, fed in step order; ``listed`` objects are the ones
    the ledger view lists (every object but a context command's answer)."""

    def __init__(self) -> None:
        self.listed: set[Part] = set()
        self._own: dict[Part, int] = {}  # the last touch naming the object itself
        self._group_of: dict[Part, str] = {}
        self._group_last: dict[str, int] = {}
        self._members: dict[str, list[Part]] = {}  # in the order created (ascending)
        self._paths: PathIndex[str] = PathIndex()
        self._created: dict[int, list[Part]] = {}  # turn -> the listed objects it created
        self._own_at: dict[int, set[Part]] = {}  # turn -> the listed objects named at it
        self._groups_at: dict[int, set[str]] = {}  # turn -> the groups touched at it

    def add(self, part: Part, *, listed: bool, path: str | None = None) -> None:
        """A new object of step ``part[0]`` (after that step's touches), in a path's group or not."""
        if not listed:
            return
        self.listed.add(part)
        self._created.setdefault(part[0], []).append(part)
        if path is not None:
            self._group_of[part] = path
            members = self._members.get(path)
            if members is None:
                members = self._members[path] = []
                self._paths.add(path, path)
            members.append(part)

    def touch(self, part: Part, at: int) -> None:
        """A context command at step ``at`` named the object."""
        self._own[part] = at
        if part in self.listed:
            self._own_at.setdefault(at, set()).add(part)

    def touch_path(self, path: str, at: int) -> None:
        """A command at step ``at`` read or edited ``path``: every group it overlaps is touched."""
        for group in self._paths.overlapping(path):
            self._group_last[group] = at
            self._groups_at.setdefault(at, set()).add(group)

    def last(self, part: Part) -> int:
        """The object's last touched turn (its step when nothing touched it since)."""
        group = self._group_of.get(part)
        return max(part[0], self._own.get(part, 0), self._group_last.get(group, 0) if group is not None else 0)

    def recent(self, limit: int, t: int) -> list[Part]:
        """The ``limit`` listed objects of steps 1..t touched latest, by (last touched, step, output),
        latest first (``t``: the last step observed)."""
        out: list[Part] = []
        turn = t
        while turn >= 1 and len(out) < limit:
            found: set[Part] = set()
            for part in self._created.get(turn, ()):
                if self.last(part) == turn:
                    found.add(part)
            for part in self._own_at.get(turn, ()):
                if self.last(part) == turn:
                    found.add(part)
            for group in self._groups_at.get(turn, ()):
                if self._group_last[group] != turn:
                    continue  # touched again later: its members count there
                taken = 0
                for part in reversed(self._members[group]):  # latest first: at most `limit` are needed
                    if part[0] < turn and self.last(part) == turn:
                        found.add(part)
                        taken += 1
                        if taken >= limit:
                            break
            out += sorted(found, reverse=True)
            turn -= 1
        return out[:limit]
