"""How a client itself cut its history before sending it, so ``base`` replays what was billed.

Most clients send the whole conversation; some run a history processor first. Those known from
their published configuration are listed in ``CLIENT_HISTORY`` by (file format, agent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...history import History
from ...types import Message, Origin, Shown, content_text

__all__ = ["CLIENT_HISTORY", "ClientHistory", "client_history"]


@dataclass(frozen=True, slots=True)
class ClientHistory:
    """A client's own history processor: all observations but the task and the last ``keep``
    shown as ``placeholder`` (``{lines}``: the output's line count), as SWE-agent 0.x's
    ``last_n_history`` does."""

    keep: int
    placeholder: str

    def apply(self, messages: Sequence[Message], origins: Sequence[Origin]) -> tuple[list[Message], list[Origin]]:
        """One prompt as the client sent it (the task is a prefix message, never an output)."""
        outputs = [i for i, o in enumerate(origins) if o.part == "output"]
        msgs, origs = list(messages), list(origins)
        for idx in outputs[: max(0, len(outputs) - self.keep)]:
            lines = len(content_text(msgs[idx].get("content")).splitlines())
            msgs[idx] = {**msgs[idx], "content": self.placeholder.format(lines=lines)}
            o = origs[idx]
            origs[idx] = Origin(o.step, "output", Shown.NOTE, (o.step,) if o.step else ())
        return msgs, origs


CLIENT_HISTORY: dict[tuple[str, str], ClientHistory] = {
    # CodeR (NL2Code/CodeR config/roles/reproducer.yml at d634683): the Reproducer runs
    # ``history_processor: LastNObservations`` with n=5 (SWE-agent 0.x); the other roles send all
    ("swe-agent", "Reproducer"): ClientHistory(5, "Old output omitted ({lines} lines)"),
}
"""(file format, agent) -> how that agent's client cut its history; ``base`` replays the cut."""


def client_history(history: History) -> ClientHistory | None:
    """The client's own history processor for one agent of a multi-agent file, if known."""
    agent, fmt = history.meta.get("agent"), history.meta.get("format")
    if not isinstance(agent, str) or not isinstance(fmt, str):
        return None
    return CLIENT_HISTORY.get((fmt, agent))
