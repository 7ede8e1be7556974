"""The PROGRESS/STALE protocol and the context commands the agent can issue.

Wording of every prompt text here is refold's own; the protocol tokens (``PROGRESS:``,
``STALE:``, ``[step N]``, ``[context-manager]``, ``restore <step>``) are the interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CM = "[context-manager]"

_HEAD_LINES = 4  # the two lines must open the reply; we allow a little slack before them
_MARKUP = re.compile(r"^[\s>#*_`\-+]*(?:\d{1,2}[.)]\s+)?[\s>#*_`\-+]*")  # bullets, headings, "1. "
_LINE = re.compile(r"^(PROGRESS|STALE)\s*[*_`]*\s*[:：\-–]\s*[*_`]*\s*(.*)$", re.IGNORECASE)
_DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212"  # hyphen, en/em dashes, minus sign
_RANGE = re.compile(r"(\d+)\s*(?:[" + _DASHES + r"]|\.\.|to|through|thru)\s*(\d+)", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:except|but|not|keep|keeping|excluding|still)\b", re.IGNORECASE)  # '4, but not 2'
_THINK = re.compile(r"^\s*<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_MAX_DIGITS = 9  # longer numbers are no step (and int() of thousands of digits raises)
_NONE_WORDS = {"", "-", "none", "n/a", "na", "nothing", "no", "nil", "[]", "—", "–"}
_MAX_RANGE = 64


@dataclass(frozen=True, slots=True)
class Head:
    progress: str | None
    stale: tuple[int, ...]
    has_protocol: bool  # both lines present at the head of the reply


def parse_head(reply: str) -> Head:
    """Read PROGRESS and STALE from the first lines of a reply, and only from there."""
    progress: str | None = None
    stale: tuple[int, ...] | None = None
    seen = 0
    reply = _THINK.sub("", reply, count=1)  # reasoning models may open with a <think> block
    for raw in reply.splitlines():
        if not raw.strip():
            continue
        if raw.lstrip().startswith("```"):
            break  # a code block ends the head: numbers inside commands are not marks
        seen += 1
        if seen > _HEAD_LINES:
            break
        line = _MARKUP.sub("", raw.strip())
        m = _LINE.match(line)
        if not m:
            continue
        key, value = m.group(1).upper(), m.group(2).strip().strip("*_` ")
        if key == "PROGRESS" and progress is None:
            progress = value
        elif key == "STALE" and stale is None:
            stale = parse_step_list(value)
    return Head(progress, stale or (), progress is not None and stale is not None)


def parse_step_list(text: str) -> tuple[int, ...]:
    """'3, 4' / '3-5' / '[step 3] and 7' / '-' / 'none (all needed)' -> sorted step numbers."""
    text = re.sub(r"\([^)]*\)", " ", text)  # asides like '(lines 1-100)' are not steps
    text = _NEGATION.split(text, maxsplit=1)[0]  # '4, but not 2': only what comes before is stale
    if text.strip().lower().rstrip(".") in _NONE_WORDS:
        return ()
    found: set[int] = set()
    for a, b in _RANGE.findall(text):
        if len(a) > _MAX_DIGITS or len(b) > _MAX_DIGITS:
            continue
        lo, hi = int(a), int(b)
        if lo <= hi and hi - lo <= _MAX_RANGE:
            found.update(range(lo, hi + 1))
    for n in re.findall(r"\d+", _RANGE.sub(" ", text)):
        if len(n) <= _MAX_DIGITS:
            found.add(int(n))
    return tuple(sorted(found))


# ---- context commands -------------------------------------------------------------------

COMMAND_NAMES = ("restore", "begin_span", "fold_span", "fold", "drop", "expand", "search_ledger")
_COMMAND_RE = re.compile(r"^\s*(" + "|".join(COMMAND_NAMES) + r")\b(.*)$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ContextCommand:
    name: str
    argument: str


def parse_command(command: str) -> ContextCommand | None:
    """A context command when the whole action is one (``restore 3``), else None."""
    m = _COMMAND_RE.match(command.strip())
    if not m:
        return None
    arg = m.group(2).strip()
    if arg.startswith("(") and arg.endswith(")"):
        arg = arg[1:-1].strip()  # fold_span("...") written as a call
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "'\"":
        arg = arg[1:-1]
    return ContextCommand(m.group(1), arg)


def parse_restore_args(argument: str, latest: int) -> tuple[list[int], str | None]:
    """Steps named by ``restore`` arguments, or an error sentence for the agent."""
    text = re.sub(r"(?i)\[?\bsteps?\b\]?|\]|(?<!\S)#", " ", argument).replace(",", " ")
    text = re.sub(r"(?<=\d)\s*[" + _DASHES + r"]\s*(?=\d)", "-", text)  # '3–5', '3 - 5'
    text = re.sub(r"(?<=\d)\s*\.\.\s*(?=\d)", "-", text)  # '3..5'
    if not text.strip():
        return [], f"{CM} restore needs a step number, e.g. `restore 3`, `restore 3 5` or `restore 3-5`."
    steps: list[int] = []
    for word in text.split():
        m = re.fullmatch(r"(\d{1,9})(?:-(\d{1,9}))?", word)  # _MAX_DIGITS
        if not m:
            shown = word if len(word) <= 40 else word[:39] + "…"
            return [], f"{CM} restore: '{shown}' is not a step number; use e.g. `restore 3` or `restore 3-5`."
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if hi < lo or hi - lo > _MAX_RANGE:
            return [], f"{CM} restore: '{word}' is not a valid range."
        steps.extend(range(lo, hi + 1))
    bad = [s for s in steps if s < 1 or s > latest]
    if bad:
        return [], (
            f"{CM} restore: there is no step {bad[0]} yet; steps 1-{latest} can be restored."
            if latest
            else f"{CM} restore: there are no earlier steps to restore yet."
        )
    return list(dict.fromkeys(steps)), None


# ---- prompt texts -------------------------------------------------------------------------


def response_format_lines(k: int) -> str:
    """Replaces the first item of an agent's response-format instructions."""
    return (
        "Open every response with exactly these two lines, then write your reasoning and your command:\n"
        "  PROGRESS: <a few words on what THIS step does>\n"
        "  STALE: <numbers of earlier steps whose output you will not need to read again, or `-`>\n"
        "Tool outputs are labeled `[step N]`; use those numbers. "
        f"Only the {k} steps just before this one can be named; older numbers are ignored, "
        "so mark a step stale soon after you are done with it."
    )


def system_section(
    k: int, *, reversible: bool = True, include_format: bool = True, masking: bool = True, chunk: bool = True
) -> str:
    """Appended to the system prompt when refold renders the agent's context.

    ``include_format=False`` leaves out the PROGRESS/STALE instructions, for agents whose own
    prompt already carries them (``response_format_lines``), so they appear only once.
    ``masking=False`` leaves out the mask note, for renderings that never mask; ``chunk=False``
    says that the shorter forms may change at any call (no boundary).
    """
    kinds = [
        "- pointer: an output repeating what an earlier step shows, replaced by a line naming that `[step N]`.",
        "- trim: lines repeated from an earlier step were cut; the marker names them and that step.",
        "- fold note: steps you marked STALE, reply and output, as one line each.",
    ]
    if masking:
        kinds.append("- mask note: an old output hidden, with its command, exit status, size and a mechanical one-line summary.")
        kinds.append("- old reply: its reasoning hidden after the first line; its command kept.")
    restore = (
        "`restore <step>` (or `restore 3 5`, `restore 3-5`) shows a step's reply, command and output again, "
        "byte for byte, without running anything (re-running a command shows the current state instead). "
        "Restore before relying on details an omission does not show."
        if reversible
        else "Omitted content cannot be brought back; re-run a command to see its current output."
    )
    when = f"; this changes at most every {k} steps" if chunk else ""
    return (
        "\n\n## Context management\n"
        f"Older tool outputs may be shown in a shorter form{when}. Each omission is marked by a `{CM}` "
        "line, written by the context manager (NOT an error from your commands):\n"
        + "\n".join(kinds)
        + "\n"
        + restore
        + ("\n\n" + response_format_lines(k) if include_format else "")
    )


def reminder() -> str:
    return (
        f"{CM} Reminder: begin every response with the two lines `PROGRESS: ...` and `STALE: ...` "
        "(use `STALE: -` when no step is stale)."
    )


# ---- spans and the ledger (seeds 001 and 002) ----------------------------------------------------


def span_section(*, min_chars: int = 40) -> str:
    """Appended to the system prompt when the agent may fold its own investigations (seed 001)."""
    return (
        "\n\n## Folding an investigation\n"
        'Before a search or investigation, run `begin_span "<the question>"`; when you have the answer, '
        'run `fold_span "<conclusion>"`. The steps in between are then shown as one block: the '
        "question, your conclusion and what stays useful (files edited with the edit, commits, the last "
        "test results, files created); the searches and dead ends fold away. A conclusion must carry "
        f"the why, not just the what (at least {min_chars} characters, with `because`, `since`, `so`, "
        "`therefore`, `due to`, or a `file:line` reference), or it is refused and the span stays open. "
        "A folded span is one `[context-manager]` block in place of its steps. "
        "Spans nest: a `begin_span` inside an open span opens an inner one. `expand <span id>` shows a "
        "folded span one level deep; `restore <step>` shows any step. Fold promptly: a fold costs only "
        "the context after the span's start."
    )


def ledger_section(budget: str | None = None) -> str:
    """Appended to the system prompt when the agent may fold or drop single outputs (seed 002)."""
    text = (
        "\n\n## The ledger of outputs\n"
        "Every tool output is an object with the id of its step (`7`, or `7.2` for the second output "
        "of step 7). `fold <id>` replaces an output by a one-line summary, `drop <id>` removes it and "
        "leaves a one-line marker (both take effect at the next context refresh); `expand <id>` "
        "shows it again as first shown; "
        '`search_ledger "<words>"` searches every output, folded or not, and lists matching ids; '
        "`search_ledger *` lists the whole ledger. "
        "Nothing runs again for any of these."
    )
    if budget:
        text += f" Outputs end with a `{CM} context: N% of {budget}` line: fold or drop what you no longer need."
    return text


def span_reminder(span_id: str, question: str, turns: int) -> str:
    return (
        f'{CM} Span {span_id} ("{question}") has been open for {turns} steps: when it is answered, '
        'close it with `fold_span "<conclusion, with the why>"`.'
    )
