"""How every summary reader phrases a note: one-line quotes, counted words, and the file names a
search, listing or edit found, cut to the room a note has (the note is in every prompt)."""

from __future__ import annotations

import re

from ..shell_paths import normalize_path


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


def _nonblank(body: str) -> list[str]:
    return [ln for ln in body.split("\n") if ln.strip()]


FILES_ROOM = 110
"""Characters a search's or listing's note gives the paths it found (the note is in every prompt)."""


def _files(names: list[str], room: int = FILES_ROOM, unlisted: int = 0) -> str:
    """The first paths a search or listing printed that fit in ``room`` characters, then how many
    more: what a later reply opens or edits by name. A long folder they share is said once, each
    path keeping its own folder (``under …/app/lib: web/router.ex, web/live.ex, +6 more``).
    ``unlisted``: paths found but not printed (counted in the ``+N more``)."""
    uniq = list(dict.fromkeys(normalize_path(u) for u in names if u.strip()))
    if not uniq:
        return ""
    root = _shared_root(uniq)
    rel = [u[len(root) :].lstrip("/") for u in uniq] if root else uniq
    head = f"under {_left_cut(root, 30)}: " if root else ""
    shown: list[str] = []
    for name in rel:
        rest = len(rel) - len(shown) - 1 + unlisted
        more = f", +{rest} more" if rest else ""
        if len(head) + len(", ".join([*shown, name])) + len(more) > room:
            if not shown:  # not even one whole: the end of the first, which names the file
                if room - len(more) < 20:
                    return ""
                head, shown = "", [_left_cut(uniq[0], room - len(more))]
            break
        shown.append(name)
    rest = len(rel) - len(shown) + unlisted
    return f" ({head}{', '.join(shown)}{f', +{rest} more' if rest else ''})"


_NAMED_PATH = re.compile(r"(?<![\w./@+-])[\w.@+-]*/[\w./@+-]*\.[A-Za-z]\w{0,7}\b")


def _named_paths(text: str) -> list[str]:
    """The file paths a text names (``lib/web/router.ex``, not ``and/or``), in order."""
    return [p for p in _NAMED_PATH.findall(text) if "//" not in p]


def _shared_root(paths: list[str]) -> str:
    """The folder above the one the paths share, when saying it once saves room (so each
    path still names its own folder); '' otherwise."""
    if len(paths) < 2:
        return ""
    split = [p.split("/") for p in paths]
    common: list[str] = []
    for parts in zip(*(s[:-1] for s in split), strict=False):
        if any(x != parts[0] for x in parts):
            break
        common.append(parts[0])
    root = "/".join(common[:-1])
    return root if len(root) >= 15 else ""


def _left_cut(text: str, limit: int) -> str:
    """``text`` cut from the left to ``limit`` characters: a path's end names it."""
    if len(text) <= limit:
        return text
    cut = text[len(text) - max(1, limit - 1) :]
    return "\u2026" + (cut[cut.index("/") :] if "/" in cut[:-1] else cut)


_PLURALS = {"match": "matches", "entry": "entries"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else _PLURALS.get(word, word + 's')}"
