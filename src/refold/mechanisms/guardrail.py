"""The substance guardrail of a fold's conclusion (seed 001: "a conclusion must carry the why").

A conclusion may close a span when it names something concrete that was found (an anchor: a
``file:line``, a file, a symbol, a test, a value, an error or a commit) and a reason (``because``,
``since``, ``so``, ``due to``, ...). Filler is taken out before looking: the ``so`` of "and so on"
is no reason and the "it" of "nothing else to see here" is no anchor. ``missing`` says what a
refused conclusion lacks, in words the agent can act on.
"""

from __future__ import annotations

import re

_FILLER = re.compile(
    r"\b(?:and so on|and so forth|so far|so on|or so|so yeah|just because|because reasons|because it is what it is"
    r"|since then|as (?:expected|usual|planned|always)|nothing (?:else )?to see(?: here)?"
    r"|et cetera|etc\.?|for now|looks? (?:good|fine|ok)|all good|whatever|and stuff|and things|something like that)\b",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"\b(?:because|since|so|therefore|due to|hence|thus|as a result|caused by|causes|which means|meaning|"
    r"in order to|so that|leads to|results in|explains why|the reason|otherwise|instead of|whereas|"
    r"only when|only if|unless|different|differs)\b|->|→|=>",
    re.IGNORECASE,
)
_ANCHORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("file:line", re.compile(r"[\w./-]+\.\w{1,8}:\d+|\blines? \d+|\bL\d+\b|:\d{1,6}\b")),
    ("commit", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")),
    ("test", re.compile(r"\btest_\w+|\b\w+Test(?:s|Case)?\b|\btests?/[\w./-]+|\bpytest\b|\bunittest\b")),
    ("error", re.compile(r"\b\w+(?:Error|Exception|Warning)\b|\bTraceback\b|\bsegfault\b|\bexit (?:code|status) \d+")),
    ("file", re.compile(r"\b[\w./-]+\.(?:py|pyi|js|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|toml|yaml|yml|json|cfg|ini|md|rst|txt|html|css|sh|sql|lock)\b")),
    ("symbol", re.compile(
        r"\b\w+\(\)|`[^`\n]{2,60}`|\b[a-z][a-z0-9]*_\w+\b|\b_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b"
        r"|\b[A-Za-z_]\w*\.[A-Za-z_]\w+(?:\.\w+)*\b|\b[A-Z]{2,}_[A-Z_]+\b"
    )),
    ("value", re.compile(
        r"(?:==|!=|<=|>=|=)\s*\S+|\b(?:returns?|returned|equals?|got|expected|yields?|prints?|is now|becomes?)\s+"
        r"(?:[-+]?\d[\d.,]*|'[^']*'|\"[^\"]*\"|None|True|False|null|nil|NaN|empty|an? empty \w+)"
        r"|\b(?:None|True|False|NaN|null)\b|'[^'\n]{1,40}'|\"[^\"\n]{1,40}\"|\b\d+(?:\.\d+)?\s*(?:%|ms|s|MB|KB|bytes|tokens|rows|items|times|x)\b"
    )),
)
_NOT_SYMBOL = re.compile(r"^(?:e\.g|i\.e|etc|vs|a\.k\.a)$", re.IGNORECASE)
def anchors(text: str) -> list[str]:
    """The kinds of concrete anchor ``text`` names (file:line, commit, test, error, file, symbol, value)."""
    cleaned = _FILLER.sub(" ", text)
    found = []
    for name, pattern in _ANCHORS:
        for m in pattern.finditer(cleaned):
            if name == "symbol" and _NOT_SYMBOL.match(m.group(0).strip("`")):
                continue
            found.append(name)
            break
    return found


def has_reason(text: str) -> bool:
    return _REASON.search(_FILLER.sub(" ", text)) is not None


def missing(conclusion: str, *, min_chars: int = 40) -> str | None:
    """What a conclusion lacks to close a span, or None when it has substance."""
    text = " ".join(conclusion.split())
    if not text:
        return "the conclusion is empty"
    if len(text) < min_chars:
        return f"the conclusion is too short ({len(text)} characters, at least {min_chars})"
    anchor, reason = bool(anchors(text)), has_reason(text)
    filler = _FILLER.search(text)
    said = f" ('{filler.group(0)}' is filler, not a reason)" if filler else ""
    concrete = "a concrete anchor (a file:line, a symbol, a test, a value, an error or a commit)"
    if not reason:  # refold 0.1's wording first, so recorded refusals read the same
        return (
            "the conclusion says what but not why; add the reason (because, since, so, therefore, "
            f"due to ...) or a file:line reference{said}" + ("" if anchor else f"; it also needs {concrete}")
        )
    return None if anchor else f"the conclusion names nothing that was found; add {concrete}"
