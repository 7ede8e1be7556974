"""When the agent last used an output (``Policy.mask_by = "use"``): the latest reply (its text and
tool-call arguments) naming a path, test id or error string the output shows, with the keys of the
hidden-then-needed measure (``refold.named_keys``).

Identifiers are not uses: an output shows dozens (a file read, a grep), and code the agent writes
names them all, so counting them kept most outputs shown (real Claude Code logs: prompt tokens
0.59x -> 0.77x of base; benchmarks/results/mask_by_variants.txt).

Per key only the latest reply naming it is kept: an output's last use is the latest of those over
its own keys, computed when masking first weighs it (its keys once per output), so a reply costs
its own keys, never a scan of the outputs holding them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from ..types import Step


def _keys() -> ModuleType:
    # imported when first used (mask_by="use" only): it reads the standard library's names at import
    from .. import named_keys

    return named_keys


class Uses:
    """Replies 1..``read`` seen; ``last(step)`` the latest reply after ``step`` naming its output."""

    def __init__(self) -> None:
        self.read = 0
        self._k = _keys()
        self._named: dict[str, int] = {}  # key -> the latest reply step naming it
        self._keys: dict[int, frozenset[str]] = {}  # step -> the keys its outputs hold (weighed once)

    def read_replies(self, step_of: Callable[[int], Step], upto: int) -> None:
        """Read the replies of steps ``read+1 .. upto`` (never a reply not yet given: no hindsight)."""
        named, k = self._named, self._k
        for s in range(self.read + 1, upto + 1):
            for key in k.reply_keys(k.message_text(step_of(s).reply)):
                if k.folded(key) is None:  # not an identifier
                    named[key] = s
        self.read = max(self.read, upto)

    def last(self, step: Step, said: tuple[int, ...] = ()) -> int:
        """The step of the latest reply naming something ``step``'s outputs show (its own step if
        none); ``said``: its outputs that are messages to the agent, not weighed."""
        keys = self._keys.get(step.index)
        if keys is None:
            text = "\n".join(t for j, t in enumerate(step.output_texts) if j not in said)
            keys = self._keys[step.index] = self._k.keys_of(text)
        named = self._named
        return max(step.index, max((named.get(key, 0) for key in keys), default=0))

    def forget(self, i: int) -> None:
        """Step ``i`` is masked for good: its keys are not weighed again."""
        self._keys.pop(i, None)
