"""The prompt texts refold adds: the system section, the span and ledger sections, reminders.

Their wording is refold's own; the protocol tokens they name (``PROGRESS:``, ``STALE:``,
``[step N]``, ``[context-manager]``, ``restore <step>``) are the interface (``refold.protocol``).
"""

from __future__ import annotations

from .protocol import CM

__all__ = ["ledger_section", "reminder", "response_format_lines", "span_reminder", "span_section", "system_section"]


def response_format_lines(k: int) -> str:
    """Replaces the first item of an agent's response-format instructions."""
    return (
        "Begin every response with these two lines, then your reasoning and your command:\n"
        "  PROGRESS: <what THIS step does, in a few words>\n"
        "  STALE: <earlier `[step N]` numbers whose output you will not read again, or `-`>\n"
        f"Only the {k} steps just before this one can be named, so mark a step stale soon after you are done with it."
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
        "- pointer: an output that repeats an earlier `[step N]` is replaced by a line naming it;",
        "- trim: lines repeated from an earlier step are cut, the marker names that step;",
        "- fold note: steps you marked STALE, one line each;",
    ]
    if masking:
        kinds.append("- mask note: an old output, as its command, exit status, size and a one-line summary;")
        kinds.append("- old reply: its reasoning after the first line hidden, its command kept (a long one with its middle cut, marked).")
    restore = (
        "`restore <step>` (also `restore 3 5`, `restore 3-5`) shows steps again byte for byte without "
        "running anything; restore before relying on details a note leaves out."
        if reversible
        else "Omitted content cannot be brought back; re-run a command to see its current output."
    )
    when = f" (this changes at most every {k} steps)" if chunk else ""
    return (
        "\n\n## Context management\n"
        f"Older outputs may be shown shorter{when}. A `{CM}` line marks each omission; it is written "
        "by the context manager, not by your commands:\n"
        + "\n".join(kinds)
        + "\n"
        + restore
        + ("\n\n" + response_format_lines(k) if include_format else "")
    )


def reminder() -> str:
    # paid on every output of an agent that skips the lines: the system section has the details
    return f"{CM} Reminder: begin with the `PROGRESS:` and `STALE:` lines."


# ---- spans and the ledger (seeds 001 and 002) ----------------------------------------------------


def span_section(*, min_chars: int = 40, fold_steps: bool = False) -> str:
    """Appended to the system prompt when the agent may fold its own investigations (seed 001)."""
    after = (
        " If you only see afterwards that steps were one dead end or one finished investigation, "
        '`fold_steps 12-18 "<conclusion>"` folds them the same way; it costs the context after step 12 once.'
        if fold_steps
        else ""
    )
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
        + after
    )


def ledger_section(budget: str | None = None, *, objects: bool = False, view: bool = False) -> str:
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
    if objects:
        text += (
            " Your own replies are objects too: `r7` is the reply of step 7 (a thought, a plan or a result); "
            "fold or drop old reasoning you no longer need the same way. `pin <id>` keeps an object shown "
            "as first shown (never folded, masked or compacted) until `unpin <id>`; your latest plan stays pinned."
        )
    if view:
        text += f" Each prompt ends with a `{CM} Ledger` message listing the objects: use it to decide what to fold."
    if budget:
        text += f" Outputs end with a `{CM} context: N% of {budget}` line: fold or drop what you no longer need."
    return text


def span_reminder(span_id: str, question: str, turns: int) -> str:
    return (
        f'{CM} Span {span_id} ("{question}") has been open for {turns} steps: when it is answered, '
        'close it with `fold_span "<conclusion, with the why>"`.'
    )
