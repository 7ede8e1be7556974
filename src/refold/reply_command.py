"""The command of a text reply: where the shell block an agent wrote sits, in linear time.

An agent that answers in text (mini-swe-agent's text mode, SWE-agent) writes its action as a fenced
shell block or mini's ``<mswea_bash_command>`` form; code it quotes while reasoning is not the
action. ``bash_block`` reads the action, ``command_spans`` says where it sits (masking keeps it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# mini-swe-agent 1.x (```bash), 2.x text mode (```mswea_bash_command) and its XML variant
SHELL_LANGS = frozenset({"bash", "sh", "shell", "mswea_bash_command"})
_XML_OPEN, _XML_CLOSE = "<mswea_bash_command>", "</mswea_bash_command>"
_INDENT = re.compile(r"[ \t]*+")


def _line_fences(text: str) -> Iterator[int]:
    """Where each '```' that begins a line (after spaces or tabs) starts, in linear time."""
    pos = line_start = 0
    indent_end = _INDENT.match(text, 0).end()  # type: ignore[union-attr]  # [ \t]* always matches
    while (at := text.find("```", pos)) >= 0:
        nl = text.rfind("\n", pos, at)
        if nl >= 0:
            line_start = nl + 1
            indent_end = _INDENT.match(text, line_start).end()  # type: ignore[union-attr]
        if at == indent_end:
            yield at
        pos = at + 3


def fenced_blocks(text: str) -> Iterator[tuple[int, int, str, str]]:
    r"""(where it opens, where its closing fence ends, info string, body) of each fenced block, fences paired as Markdown does.

    The blocks ``re.finditer(r"^[ \t]*```([^\n`]*)\n(.*?)\n[ \t]*```", text, re.M | re.S)``
    finds, in linear time. Only a fence that begins a line counts, so a ```` ``None``` ```` in prose
    opens nothing, and a '```python' block's closing fence is not the opening of a command.
    """
    fences = _line_fences(text)
    for at in fences:
        nl = text.find("\n", at + 3)
        if nl < 0:
            return
        if "`" in text[at + 3 : nl]:
            continue  # '```x```' on one line: inline code, not a fence
        for close in fences:
            body_end = text.rfind("\n", nl + 1, close)  # the body ends on a line before the fence
            if body_end >= 0:
                yield at, close + 3, text[at + 3 : nl], text[nl + 1 : body_end]
                break
        else:
            return  # no fence closes this one


def _command_body(body: str) -> str | None:
    """A block's command: blank lines before it dropped, None when there is none."""
    rest = body.lstrip()
    if not rest:
        return None
    cut = body.rfind("\n", 0, len(body) - len(rest))
    return body[cut + 1 :]


def command_spans(text: str) -> list[tuple[int, int]]:
    """Where each shell-fenced block and each ``<mswea_bash_command>`` form sits in a reply: what
    the agent ran, as opposed to code it quoted while reasoning. Failing both, the first unlabeled
    fenced block, which ``bash_block`` takes for the command (SWE-agent's and CodeR's replies)."""
    blocks = list(fenced_blocks(text))
    spans = [(at, end) for at, end, info, _ in blocks if info.strip() in SHELL_LANGS]
    if not spans and _XML_OPEN not in text:
        spans = next(
            ([(at, end)] for at, end, info, body in blocks if not info.strip() and _command_body(body) is not None), []
        )
    pos = 0
    while (at := text.find(_XML_OPEN, pos)) >= 0 and (end := text.find(_XML_CLOSE, at)) >= 0:
        spans.append((at, end + len(_XML_CLOSE)))
        pos = end + len(_XML_CLOSE)
    spans.sort()
    out: list[tuple[int, int]] = []
    for a, b in spans:  # an XML form quoted inside a fenced block stays part of that block
        if out and a < out[-1][1]:
            continue
        out.append((a, b))
    return out


def bash_block(text: str) -> str | None:
    """The command of a text reply, in linear time, or None.

    The first block fenced as a shell (```bash, ```sh, ```shell, ```mswea_bash_command) or written
    as ``<mswea_bash_command>...</mswea_bash_command>``, whichever comes first; failing both, the
    first unlabeled fenced block. Code shown in a ```python block is never taken for the command.
    """
    xml_at = text.find(_XML_OPEN)
    xml_end = text.find(_XML_CLOSE, xml_at + len(_XML_OPEN)) if xml_at >= 0 else -1
    xml = text[xml_at + len(_XML_OPEN) : xml_end] if xml_end >= 0 else None
    unlabeled: str | None = None
    for at, _, info, body in fenced_blocks(text):
        if xml is not None and xml_at < at:
            break  # the XML form comes before any later labeled block
        lang = info.strip()
        if lang in SHELL_LANGS and (command := _command_body(body)) is not None:
            return command
        if not lang and unlabeled is None:
            unlabeled = _command_body(body)
    return xml if xml is not None else unlabeled
