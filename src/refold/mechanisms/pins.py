"""Pinned objects: never masked, folded by the boundary rule, folded into a span or compacted away.

A pin names an object (``7``, ``7.2``, ``r7``) and is part of the history value, so
``render(history, config, t)`` stays pure and a restart renders the same:

* the user's pins are ``History.pin`` / ``History.unpin`` records (``Pin``), each in effect from
  the call after the step it was set at;
* the agent's are its ``pin <id>`` / ``unpin <id>`` context commands, answered from the history;
* with ``LedgerPolicy.pin_plans`` the latest plan (``objects.reply_kind``) is pinned too, and the
  one before it is released when a new plan is written;
* the outputs of commands that ``Policy.protect`` names are pinned from the call they arrive at.
  They count once the boundary passes them (``protect_limit``): before that they are shown as
  received anyway, and counting them earlier would change the kept layout's pins at every such
  call, which forces a boundary move (a pin is an edit) where none pays;
* so are the messages a person or the harness sent the agent mid-session (``Step.user_messages``),
  counted the same way, and no ``unpin`` releases them: an instruction is never hidden.

A pin takes effect behind the boundary when a ledger op would (``limit``), so pinning never moves
the prefix more often than a fold does.
"""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from ..messages import action_of
from ..protocol import CM, ContextCommand
from ..shell import SHELL_TOOLS
from ..types import Action, Answer, Outcome, Step
from .ledger import parse_ids
from .objects import plan_text, reply_id
from .spans import answer, take_recorded

PIN_COMMANDS = ("pin", "unpin")
Part = tuple[int, int]  # (step, -1 for the reply or the output index)


@dataclass(frozen=True, slots=True)
class Pin:
    """A user's pin (``on``) or unpin of object ``target``, set after ``at`` steps."""

    target: str
    at: int
    on: bool = True

    def record(self) -> dict[str, object]:
        return {"target": self.target, "at": self.at, "on": self.on}


def check_target(target: str, outputs: list[int], at: int) -> tuple[list[tuple[int, int | None]], str | None]:
    """The ids a pin names, or what is wrong with them (``outputs``: observations per step)."""
    ids = parse_ids(target)
    if not ids:
        return [], "name objects by id, e.g. `pin 7`, `pin 7.2` or `pin r7` (the reply of step 7)"
    for step, sub in ids:
        if not 1 <= step <= min(at, len(outputs)):
            return [], f"there is no step {step} yet"
        n = outputs[step - 1]
        if sub is not None and sub != -1 and not 0 <= sub < n:
            return [], f"step {step} has {n} output(s), so there is no {step}.{sub + 1}"
    return ids, None


def parts(ids: Iterable[tuple[int, int | None]], outputs: list[int]) -> list[Part]:
    out: list[Part] = []
    for step, sub in ids:
        out += [(step, j) for j in range(outputs[step - 1])] if sub is None else [(step, sub)]
    return out


def protects(action: Action, rules: tuple[str, ...]) -> bool:
    """Whether ``action`` is one whose outputs ``Policy.protect``'s ``rules`` keep: ``tool:GLOB``
    its tool's name in any case (a shell call is recorded as ``bash`` whatever its tool was named:
    ``tool:Bash`` and ``tool:shell`` match it too), ``path:GLOB`` a file it reads (the whole path
    or its name), else a glob on the command itself. Context commands answer from the history and
    are never protected."""
    if action.context is not None:
        return False
    command = action.command.strip()
    tools = (action.tool.lower(), *SHELL_TOOLS) if action.tool == "bash" else (action.tool.lower(),)
    for rule in rules:
        if rule.startswith("tool:"):
            glob = rule[5:].lower()
            if any(fnmatchcase(t, glob) for t in tools):
                return True
        elif rule.startswith("path:"):
            glob = rule[5:]
            if any(fnmatchcase(p, glob) or fnmatchcase(posixpath.basename(p), glob) for p in action.effects.reads):
                return True
        elif fnmatchcase(command, rule):
            return True
    return False


def protected_parts(step: Step, rules: tuple[str, ...]) -> tuple[Part, ...]:
    """The outputs of ``step`` that ``rules`` protect: each matching action's own output when the
    step has one output per action (tool calls, one command), else all of them."""
    hits = [a for a in step.actions if protects(a, rules)]
    if not hits:
        return ()
    n = len(step.observations)
    if len(step.actions) == n:  # by tool-call id: parallel calls' results may come in another order
        return tuple((step.index, j) for j in range(n) if any(action_of(step, j) is a for a in hits))
    return tuple((step.index, j) for j in range(n))


class PinBook:
    """The pins of a history's first ``t`` steps (fed in order with ``observe``)."""

    def __init__(self, *, plans: bool = False, protect: tuple[str, ...] = ()) -> None:
        self.plans = plans
        self.protect = protect
        self.protected: list[Part] = []  # in step order
        self.said: list[Part] = []  # the steps' user messages (``Step.user_messages``), in step order
        self.events: list[tuple[int, bool, tuple[Part, ...]]] = []  # (in effect from step, on, parts)
        self.outputs: list[int] = []
        self.plan_steps: list[int] = []
        self.t = 0
        self._memo: tuple[tuple[tuple[tuple[int, bool, tuple[Part, ...]], ...], int, tuple[Pin, ...], int, int], frozenset[Part]] | None = None

    def observe(self, step: Step) -> None:
        records: list[Outcome] | None = None  # copied only for a step with a pin command
        for action in step.actions:
            cmd = action.context
            if cmd is not None and cmd.name in PIN_COMMANDS:
                if records is None:
                    records = list(step.outcomes)
                self.apply(cmd, step.index, take_recorded(records, cmd.name))
        self.outputs.append(len(step.observations))
        if self.protect:
            self.protected.extend(protected_parts(step, self.protect))
        if step.user_messages:
            self.said.extend((step.index, j) for j in step.user_messages)
        if self.plans and plan_text(step.reply_text) is not None:
            self.plan_steps.append(step.index)
        self.t = step.index

    def apply(self, cmd: ContextCommand, at: int, recorded: Outcome | None = None) -> Answer:
        """``pin`` / ``unpin`` issued at step ``at``, naming earlier steps' objects."""
        outputs = self.outputs
        ids, error = check_target(cmd.argument, outputs, at - 1)
        if recorded is not None and recorded.ok is False:
            error = error or "it was refused when issued"
        if not error and cmd.name == "unpin" and not (recorded and recorded.ok) and ids and set(parts(ids, outputs)) <= set(self.said):
            error = "it is a message to you (from the user or the harness): those are never hidden"
        if error:
            return answer(cmd.name, False, f"{CM} {cmd.name} refused: {error}.")
        on = cmd.name == "pin"
        self.events.append((at, on, tuple(parts(ids, outputs))))
        names = " ".join(cmd.argument.split())
        text = (
            f"{CM} {names} pinned: shown as first shown in every prompt (never masked, folded or compacted) "
            f"until `unpin {names}`."
            if on
            else f"{CM} {names} unpinned: it may be shown in a shorter form again from the next context refresh."
        )
        return answer(cmd.name, True, text, names)

    def pinned(
        self, limit: int, user: tuple[Pin, ...] = (), *, plans_limit: int | None = None, protect_limit: int | None = None
    ) -> frozenset[Part]:
        """The parts pinned for a render whose pins count up to step ``limit`` (the latest plan up to
        ``plans_limit``: a plan released by a newer one stays pinned until the boundary moves; the
        protected outputs and the user messages up to ``protect_limit``, the boundary)."""
        if not self.events and not user and not self.plan_steps and not self.protected and not self.said:
            return _NOTHING
        plans_limit = limit if plans_limit is None else plans_limit
        protect_limit = limit if protect_limit is None else protect_limit
        # asked a few times per call: the key is what the result depends on, O(pins), not O(steps)
        events = tuple(e for e in self.events if e[0] <= limit) if self.events else ()
        mine = tuple(p for p in user if p.at <= limit) if user else ()
        k = bisect.bisect_right(self.plan_steps, plans_limit)
        plan = self.plan_steps[k - 1] if k else 0
        kept = bisect.bisect_right(self.protected, (protect_limit, 1 << 30)) if self.protected else 0
        said = bisect.bisect_right(self.said, (protect_limit, 1 << 30)) if self.said else 0
        if not events and not mine and not plan and not kept and not said:
            return _NOTHING
        key = (events, plan, mine, kept, said)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        found: list[tuple[int, bool, tuple[Part, ...]]] = [(p[0], True, (p,)) for p in self.protected[:kept]]
        found += events
        for p in mine:
            ids, error = check_target(p.target, self.outputs, p.at)
            if error is None:
                found.append((p.at, p.on, tuple(parts(ids, self.outputs))))
        state: set[Part] = set()
        for _, on, ps in sorted(found, key=lambda e: e[0]):  # stable: a step's own order kept
            if on:
                state.update(ps)
            else:
                state.difference_update(ps)
        if plan:
            state.add((plan, -1))
        state.update(self.said[:said])  # after every unpin: no unpin releases them
        result = frozenset(state)
        self._memo = (key, result)
        return result


_NOTHING: frozenset[Part] = frozenset()


def pinned_label(step: int, sub: int, count: int) -> str:
    """The id of a pinned part (``r7``, ``7`` or ``7.2``)."""
    if sub == -1:
        return reply_id(step)
    return str(step) if count <= 1 else f"{step}.{sub + 1}"


def pinned_note(step: int, sub: int, count: int, text: str, *, said: bool = False) -> str:
    """A pinned part of a step that is folded (STALE, a span, a compaction): kept verbatim. ``said``:
    the part is a message to the agent (``Step.user_messages``), not an output."""
    if said:
        return f"{CM} Message {pinned_label(step, sub, count)} of step {step} (to you, never hidden), kept whole while its step is folded:\n{text}"
    what = "reply" if sub == -1 else "output"
    return f"{CM} Pinned {what} {pinned_label(step, sub, count)} of step {step}, kept verbatim while its step is folded:\n{text}"
