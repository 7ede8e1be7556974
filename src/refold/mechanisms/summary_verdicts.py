"""What a run's output says about its outcome, without a model call: its first error line, a
test run's pass/fail counts and first failing test, a subagent's report's subject and conclusion
(the verdict a hidden output's note keeps)."""

from __future__ import annotations

import re

_EXC_LINE = re.compile(
    r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Warning|Fault))\b(?::.*)?$"
)
_ERR_LINE = re.compile(
    r"^(?:[-*]\s*)?(?:[EF]\d{3}\s+\S|(?:[\w./ -]{1,60}: )?(?:error|fatal|ERROR|FATAL|Error)\b[:\s]"
    r"|.*(?:command not found|No such file or directory|No module named |Permission denied|cannot open)"
    r"|g?make(?:\[\d+\])?: \*\*\* "  # make: *** [Makefile:3: all] Error 2
    r"|(?:ba|da|z)?sh: (?:-c: )?line \d+: )"  # bash: -c: line 40: syntax error near unexpected token
)
# Wordings that are errors only when the command failed or recorded no status (a script may print them).
_WEAK_ERR_LINE = re.compile(r"^.*(?:\bnot found\.?$|\bdoes not exist\.?$|\bCould not find |\bUnable to )")
# What any line matching _EXC_LINE or _ERR_LINE (resp. _WEAK_ERR_LINE) contains (a superset).
_ERR_HINT = re.compile(
    r"Error|Exception|Exit|Interrupt|Failure|Warning|Fault|error|fatal|ERROR|FATAL|[EF]\d{3}|command not found"
    r"|No such file or directory|No module named |Permission denied|cannot open|make(?:\[\d+\])?: \*\*\* "
    r"|sh: (?:-c: )?line \d+: "
)
_WEAK_HINT = re.compile(r"not found|does not exist|Could not find |Unable to ")


def first_error(body: str, *, weak: bool = True) -> str | None:
    """The line that says what went wrong: the exception of the last traceback, else an error line.

    ``weak=False`` ignores wordings a successful script may print ("x does not exist").
    """
    lines = body.split("\n")
    if "Traceback (most recent call last)" in body:
        tb = max(
            (i for i, ln in enumerate(lines) if ln.strip().startswith("Traceback (most recent call last)")),
            default=-1,
        )
        if tb >= 0:
            for ln in lines[tb + 1 :]:
                s = ln.strip()
                if s and not ln[:1].isspace() and not s.startswith(("File ", "^", "~")):
                    return s
    # lines before the first one with a hint of an error cannot match: skip them in one search
    for ln in _from_hint(body, lines, _ERR_HINT):
        s = ln.strip()
        if s and (_EXC_LINE.match(s) or _ERR_LINE.match(s)):
            return s
    if weak:
        return next((ln.strip() for ln in _from_hint(body, lines, _WEAK_HINT) if _WEAK_ERR_LINE.match(ln.strip())), None)
    return None


def _from_hint(body: str, lines: list[str], hint: re.Pattern[str]) -> list[str]:
    """``lines`` (``body`` split at newlines) from the first one that contains a match of ``hint``."""
    m = hint.search(body)
    return [] if m is None else lines[body.count("\n", 0, m.start()) :]


# ---- test runs --------------------------------------------------------------------------------

_TEST_CMD = re.compile(
    r"\b(?:pytest|py\.test|runtests(?:\.py)?|unittest|tox|nox|nosetests|manage\.py\s+test|bin/test|"
    r"go\s+test|cargo\s+test|npm\s+(?:run\s+)?test|yarn\s+test|sympy\.testing|setup\.py\s+test)\b"
)
_PYTEST_TOTAL = re.compile(
    r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+)"
    r"\s+in\s+[\d.]+\s*(?:s|seconds)\b.*$|^=+ no tests ran in .*$",
    re.MULTILINE,
)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")
_RAN = re.compile(r"^Ran (\d+) tests? in ")
_UNITTEST_END = re.compile(r"^(OK|FAILED)\b\s*(\(.*\))?\s*$")
_UNITTEST_FAIL = re.compile(r"^(FAIL|ERROR): (\S+)(?: \(([\w.]+)\))?")
_PYTEST_FAIL = re.compile(r"^(?:FAILED|ERROR) ([^\s(]\S*)|^(\S+::\S+) (?:FAILED|ERROR)\b")
_PYTEST_HEADER = re.compile(r"^_{3,} (?:ERROR collecting )?(\S.*?) _{3,}$")
_DOTS = re.compile(r"^[.FEsxX]+\s*(?:\[\s*\d+%\])?$")


def _test_summary(lines: list[str]) -> str | None:
    total = next((m for ln in reversed(lines) if (m := _PYTEST_TOTAL.match(ln.strip()))), None)
    first_fail = None
    for ln in lines:
        s = ln.strip()
        m = _PYTEST_FAIL.match(s)
        if m:
            first_fail = m.group(1) or m.group(2)
            break
    if first_fail is None:
        for ln in lines:
            m = _UNITTEST_FAIL.match(ln.strip())
            if m:
                first_fail = f"{m.group(2)} ({m.group(3)})" if m.group(3) else m.group(2)
                break
    if first_fail is None:
        first_fail = next((m.group(1) for ln in lines if (m := _PYTEST_HEADER.match(ln.strip()))), None)
    fail = f"; first failure: {first_fail}" if first_fail else ""
    if total is not None:
        counts = ", ".join(f"{n} {w}" for n, w in _COUNT.findall(total.group(0)))
        return f"tests: {counts or 'no tests ran'}{fail}"
    ran = next((i for i in range(len(lines) - 1, -1, -1) if _RAN.match(lines[i].strip())), None)
    if ran is not None:
        ran_n = lines[ran].strip().split()[1]
        end = next((m for ln in lines[ran + 1 : ran + 6] if (m := _UNITTEST_END.match(ln.strip()))), None)
        verdict = ""
        if end is not None:
            verdict = f", {end.group(1)}" + (f" {end.group(2)}" if end.group(2) else "")
        return f"tests: {ran_n} ran{verdict}{fail}"
    dots = [ln.strip() for ln in lines if _DOTS.match(ln.strip()) and len(ln.strip()) > 3]
    if dots:
        marks = "".join(d.split("[")[0] for d in dots)
        tally = [(marks.count("."), "passed"), (marks.count("F"), "failed"), (marks.count("E"), "errors")]
        shown = ", ".join(f"{k} {w}" for k, w in tally if k) or "0 passed"
        return f"tests (no final line): {shown} so far{fail}"
    return None


# ---- reads ------------------------------------------------------------------------------------


# ---- a subagent's report (Claude Code's Task/Agent tool) -----------------------------------------

SUBAGENT_TOOLS = frozenset({"Task", "Agent"})
# Claude Code appends the agent's id and usage to its answer (glued to its last line)
_AGENT_TRAILER = re.compile(r"agentId: \w+ \(for resuming[^)\n]*\)\s*(?:<usage>.*?</usage>\s*)?$", re.DOTALL)
# 'Perfect! Now I have all the information I need. Let me create a comprehensive report:'
_PREAMBLE = re.compile(
    r"^(?:(?:Perfect|Excellent|Great|Good|Okay|OK|Alright|Done)\b[!.,]|Now I have\b|Based on (?:my|the)\b.*:$|.*\b(?:Let me|Here's|Here is)\b.*:$)"
)
_RULE = re.compile(r"^(?:-{3,}|\*{3,}|`{3}.*|\|?[\s:|-]+\|?)$")
_MARKUP = re.compile(r"^(?:#{1,6}\s+|[-*+]\s+|\d+\.\s+|>\s*)|\*\*|__")


def report_summary(body: str, files: str, limit: int) -> str | None:
    """A subagent's answer: its subject (first heading, else first line after the preamble), the
    files it names (``files``: a note's list of them) and its last line (where a report concludes);
    None when it printed nothing."""
    body = _AGENT_TRAILER.sub("", body.rstrip())
    lines = [ln.strip() for ln in body.split("\n") if ln.strip() and not _RULE.match(ln.strip())]
    while len(lines) > 1 and _PREAMBLE.match(lines[0]):
        lines.pop(0)
    if not lines:
        return None
    subject = next((ln for ln in lines[:40] if ln.startswith("#")), lines[0])
    plain = [_MARKUP.sub("", ln).strip() for ln in (subject, lines[-1])]
    head = f'report: "{_cut(plain[0], 50)}"{files}'
    return head if len(lines) == 1 else f'{head}; ends "{_cut(plain[1], max(30, limit - len(head) - 9))}"'


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
