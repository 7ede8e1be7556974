"""The Mechanism protocol: each projection rule shapes how a step behind the boundary is shown.

A layout walks steps 1..b. Each step starts as a ``StepPlan`` holding its messages as first
received; every mechanism of ``Config.mechanisms``, in order, may reshape it (structlog's
processor chain). A mechanism that makes the step part of a larger unit (a span block, a note
of adjacent folded steps) ends the chain for that step::

    plan = StepPlan.received(step, view)
    for mechanism in view.mechanisms:
        mechanism.shape(plan, view)
        if plan.unit != "step":
            break

The facts mechanisms read are computed once, as steps cross the boundary (``render.behind``:
dedup forms, the masked set) or as they arrive (span and ledger books); a mechanism only
decides how they show. The layout is incremental: ``dirty_from`` names the first step whose
shaping may differ from the previous layout's (None: only steps crossing the boundary change).

A mechanism may also name every step it changed (``dirty_steps``, the ``Incremental`` protocol):
when all of the chain do, the layout shapes only those steps' units again and copies the rest
from the previous layout; a mechanism with only ``dirty_from`` makes it rebuild from that step.

Adding a mechanism is one class with ``shape`` (and ``dirty_from``) plus its name in
``Config.mechanisms``: a short name from ``BUILTIN`` or a dotted path, as mini-swe-agent names
its classes (``Config.parse(mechanisms=[..., "mypkg.rules.Pinned"])``).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, cast, runtime_checkable

from ..config import Config
from ..errors import PolicyError
from ..history import History
from ..mechanisms.pins import Part
from ..mechanisms.spans import Span
from ..types import Message, Origin, Step

if TYPE_CHECKING:
    from .behind import Behind, Form
    from .layout import Layout
    from .received import Received

Unit = Literal["step", "fold", "span"]


@dataclass(slots=True)
class StepPlan:
    """How one step behind the boundary is shown: its messages, or the unit it joins."""

    step: Step
    msgs: list[Message]
    origins: list[Origin]
    unit: Unit = "step"  # "fold": joins a note of adjacent folded steps; "span": inside a span's block
    span: Span | None = None
    _owned: bool = False  # msgs/origins are this plan's own lists (else shared with a cached form)

    @classmethod
    def received(cls, step: Step, view: LayoutView) -> StepPlan:
        form = view.received[step.index - 1]
        return cls(step, form.msgs, form.origins)

    def show(self, msgs: list[Message], origins: list[Origin]) -> None:
        """Show these messages (shared, not copied: ``put`` copies before the first edit)."""
        self.msgs, self.origins, self._owned = msgs, origins, False

    def put(self, j: int, msg: Message, origin: Origin) -> None:
        """Replace message ``j`` (0: the reply, 1..: the outputs)."""
        if not self._owned:
            self.msgs, self.origins, self._owned = list(self.msgs), list(self.origins), True
        self.msgs[j] = msg
        self.origins[j] = origin


@dataclass(slots=True)
class LayoutView:
    """What mechanisms read while a layout of steps 1..b is built (and the caches they share)."""

    history: History
    config: Config
    b: int
    spans: list[Span]  # the outermost closed spans that begin at or before b
    hidden: tuple[tuple[int, int, str], ...]  # ledger folds and drops in effect: (step, output, kind)
    behind: Behind
    received: list[Received]
    mechanisms: tuple[Mechanism, ...]
    pinned: frozenset[Part] = frozenset()  # (step, -1 reply | output) shown as received
    pins_of: dict[int, list[int]] = field(default_factory=dict)  # step -> its pinned parts (steps laid out)
    cover: dict[int, Span] = field(default_factory=dict)  # step -> the span that covers it (steps laid out)
    gone: dict[tuple[int, int], str] = field(default_factory=dict)  # (step, output) -> fold|drop
    ledger_steps: set[int] = field(default_factory=set)
    hidden_texts: dict[tuple[int, int, str], str] = field(default_factory=dict)
    reply_texts: dict[int, str | None] = field(default_factory=dict)
    mask_notes: dict[tuple[int, int], Message] = field(default_factory=dict)

    def is_gone(self, i: int) -> bool:
        """Whether step i's outputs are hidden (masked, or folded/dropped by the ledger)."""
        return i in self.behind.masked or i in self.ledger_steps


@runtime_checkable
class Mechanism(Protocol):
    """One projection rule, as the layout applies it to each step behind the boundary."""

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        """Reshape ``plan`` (its messages, or the unit it joins)."""

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        """The first step whose shaping may differ from ``prev``'s, or None."""


@runtime_checkable
class Incremental(Protocol):
    """A mechanism that can name every step whose shaping may differ from a previous layout's."""

    def dirty_steps(self, prev: Layout, view: LayoutView) -> Iterable[int]:
        """Steps 1..prev.b whose shaping may differ from ``prev``'s (a superset is fine; steps
        after prev.b are shaped anyway)."""


class Stage(Protocol):
    """What a mechanism does as steps cross the boundary (``render.behind``), once per step and in
    step order, so that it may keep state (dedup's index of shown outputs). A mechanism offers one
    with ``behind(config) -> Stage``; each ``Behind`` gets its own."""

    def cross(self, step: Step, behind: Behind) -> None:
        """Every step as it crosses, folded or not (before its form exists)."""

    def shape_form(self, step: Step, rec: Received, form: Form, behind: Behind) -> None:
        """Reshape the final form of a step that is not folded."""

    def settle(self, b: int, behind: Behind) -> None:
        """The boundary has reached b: every step up to b has crossed."""

    def retire(self, i: int) -> None:
        """Step i's outputs are no longer shown: nothing may cite them."""


class BaseStage:
    """A ``Stage`` that does nothing: subclasses override what they need."""

    def cross(self, step: Step, behind: Behind) -> None:
        pass

    def shape_form(self, step: Step, rec: Received, form: Form, behind: Behind) -> None:
        pass

    def settle(self, b: int, behind: Behind) -> None:
        pass

    def retire(self, i: int) -> None:
        pass


_BUILTINS = "refold.render.builtins"
_MASKING = "refold.render.masking_mechanisms"
BUILTIN: dict[str, str] = {
    "spans": f"{_BUILTINS}.Spans",
    "fold": f"{_BUILTINS}.Fold",
    "dedup": f"{_BUILTINS}.Dedup",
    "ledger": f"{_BUILTINS}.Ledger",
    "masking": f"{_MASKING}.Masking",
    "replies": f"{_MASKING}.Replies",
    "objects": f"{_BUILTINS}.ReplyObjects",
    "pins": f"{_BUILTINS}.Pins",
}


def resolve(specs: Sequence[str]) -> tuple[Mechanism, ...]:
    """The mechanisms named by ``specs`` (short names or dotted paths), instantiated, in order."""
    out: list[Mechanism] = []
    for spec in specs:
        factory, is_class = _factory(spec)
        mechanism = factory() if is_class else factory
        if not (is_class and type(mechanism) in _CHECKED or isinstance(mechanism, Mechanism)):
            raise PolicyError(f"invalid config field 'mechanisms': '{spec}' has no shape(plan, view) / dirty_from(prev, view)")
        if is_class:
            _CHECKED.add(type(mechanism))  # a Protocol isinstance check is slow: once per class
        out.append(cast(Mechanism, mechanism))
    return tuple(out)


_CHECKED: set[type] = set()


@functools.lru_cache(maxsize=256)
def _factory(spec: str) -> tuple[Callable[[], object], bool]:
    """What ``spec`` names, imported once: (it, whether it is a class to instantiate)."""
    module, _, attr = BUILTIN.get(spec, spec).rpartition(".")
    try:
        factory: Callable[[], object] = getattr(importlib.import_module(module), attr)
    except (ValueError, ImportError, AttributeError):
        raise PolicyError(
            f"invalid config field 'mechanisms': cannot import '{spec}'; built in: {', '.join(BUILTIN)}"
        ) from None
    return factory, isinstance(factory, type)
