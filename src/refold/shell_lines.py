"""The file line a read's output starts at (``sed -n '40,80p' f`` -> 40), so outlines and notes
give file line numbers rather than output line numbers."""

from __future__ import annotations

import re

from .shell_lex import Simple
from .shell_paths import is_path, path_words

__all__ = ["first_line"]

_SED_RANGE = re.compile(r"(\d+)(?:,(\d+|\$))?p")
_AWK_FROM = re.compile(r"NR\s*(>=|==|>)\s*(\d+)")


def first_line(simples: list[Simple]) -> int | None:
    """File line of the output's first line when the command prints one file from a known line.

    ``cat f``, ``head f`` -> 1; ``sed -n '40,80p' f``, ``tail -n +40 f``, ``awk 'NR>=40' f`` -> 40;
    filters after a pipe shift it (``cat f | sed -n '40,80p'``); an ``echo $?`` after it changes
    nothing. Anything else: None.
    """
    kept = [c for c in simples if c.words and c.words[0] not in ("cd", "pushd", "true")]
    cmds = [c.words for c in kept]
    if not cmds or cmds[0][0].rsplit("/", 1)[-1] not in ("cat", "sed", "head", "tail", "awk", "nl"):
        return None
    if any(not c.piped for c in kept[1:]):  # 'cat f; echo $?': what follows the read prints after it
        after = next(i for i, c in enumerate(kept) if i and not c.piped)
        if not all(w[0] in ("echo", "printf") for w in cmds[after:]):
            return None
        cmds = cmds[:after]
    head, *rest = cmds[0]
    head = head.rsplit("/", 1)[-1]
    operands = [w for w in rest if not w.startswith("-")]
    start: int | None
    if head in ("cat", "nl"):
        start = 1 if len(operands) == 1 else None
    elif head == "head":
        start = 1 if len(path_words(operands)) == 1 else None
    elif head == "tail":
        m = re.fullmatch(r"\+(\d+)", rest[rest.index("-n") + 1]) if "-n" in rest[:-1] else None
        start = int(m.group(1)) if m and len(path_words(operands)) == 1 else None
    else:
        start = _filter_start(head, rest, has_file=True)
    for words in cmds[1:]:
        if start is None:
            return None
        name = words[0].rsplit("/", 1)[-1]
        if name == "head":
            continue
        shift = _filter_start(name, words[1:], has_file=False) if name in ("sed", "awk") else None
        start = None if shift is None else start + shift - 1
    return start


def _filter_start(head: str, rest: list[str], *, has_file: bool) -> int | None:
    """First printed line of ``sed -n 'a,bp'`` / ``awk 'NR>=a'``, with or without a file operand."""
    operands = [w for w in rest if not w.startswith("-")]
    if len(operands) != (2 if has_file else 1) or (has_file and not is_path(operands[1])):
        return None
    script = operands[0].strip()
    if head == "sed":
        m = _SED_RANGE.fullmatch(script) if "-n" in rest else None
        return int(m.group(1)) if m else None
    m = _AWK_FROM.search(script)
    if m is None or ";" in script or "||" in script:
        return None
    return int(m.group(2)) + (1 if m.group(1) == ">" else 0)
