"""STALE folding: S_t collects the steps the agent marked stale within the last k turns."""

from __future__ import annotations

from ..protocol import CM
from ..types import Step


def valid_marks(step: Step, k: int) -> tuple[int, ...]:
    """STALE_t ∩ {t-k, ..., t-1}: numbers outside the window are ignored."""
    if not step.stale:  # most replies mark nothing
        return ()
    lo = max(1, step.index - k)
    return tuple(s for s in step.stale if lo <= s < step.index)


def one_line(step: Step, limit: int = 160) -> str:
    """What a folded step did: its PROGRESS line, or its first words and command."""
    if step.progress:
        text = step.progress
    else:
        first = next((ln.strip() for ln in step.reply_text.splitlines() if ln.strip()), "")
        first = first.removeprefix("THOUGHT:").strip()
        cmd = step.actions[0].command.strip().splitlines()[0] if step.actions and step.actions[0].command.strip() else ""
        text = f"{first[:100]} $ {cmd[:80]}" if cmd else first
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def note_text(steps: list[Step], *, reversible: bool, reason: str = "marked STALE", lines_cache: dict[int, str] | None = None) -> str:
    """One note for adjacent folded steps, one line each (``lines_cache``: step -> its line, reused)."""
    a, b = steps[0].index, steps[-1].index
    span = f"Step {a}" if a == b else f"Steps {a}-{b}"
    # the restore hint in the header: a line of its own after the list was paid per note
    hint = (f", `restore {a}` shows them" if a == b else ", `restore <step>` shows one") if reversible else ""
    lines = [f"{CM} {span} folded ({reason}); reply and output omitted{hint}:"]
    for s in steps:
        line = lines_cache.get(s.index) if lines_cache is not None else None
        if line is None:
            line = f"[step {s.index}] {one_line(s)}"
            if lines_cache is not None:
                lines_cache[s.index] = line
        lines.append(line)
    return "\n".join(lines)
