"""The command of a text reply: the first shell block, fences paired as Markdown pairs them."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from refold.reply_command import SHELL_LANGS, bash_block

_BLOCKS = re.compile(r"^[ \t]*```([^\n`]*)\n(.*?)\n[ \t]*```", re.DOTALL | re.MULTILINE)  # the obvious, quadratic reading
_XML = re.compile(r"<mswea_bash_command>(.*?)</mswea_bash_command>", re.DOTALL)
_PIECES = ["```", "`", "bash", "sh", "shell", "ell", "python", "mswea_bash_command", "\n", " ", "\t", "x",
           "\u00a0", "<mswea_bash_command>", "</mswea_bash_command>", "```bash\n", "```python\n", "\n```"]  # fmt: skip


def _oracle(text: str) -> str | None:
    def body_of(body: str) -> str | None:
        lead = re.match(r"\s*", body).group(0)  # type: ignore[union-attr]
        return body[lead.rfind("\n") + 1 :] if body.strip() else None

    xml = _XML.search(text)
    shell = next((m for m in _BLOCKS.finditer(text) if m.group(1).strip() in SHELL_LANGS and body_of(m.group(2))), None)
    if xml and (shell is None or xml.start() < shell.start()):
        return xml.group(1)
    if shell:
        return body_of(shell.group(2))
    # as for shell blocks, the first unlabeled block that holds a command (an empty one is skipped)
    plain = next((m for m in _BLOCKS.finditer(text) if not m.group(1).strip() and body_of(m.group(2))), None)
    return None if plain is None else body_of(plain.group(2))


@given(st.lists(st.sampled_from(_PIECES), max_size=30))
def test_bash_block_reads_what_the_obvious_regex_reads(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert bash_block(text) == _oracle(text)


def test_bash_block_examples() -> None:
    assert bash_block("THOUGHT: look\n\n```bash\nls -la\n```\nmore") == "ls -la"
    assert bash_block("```mswea_bash_command\ncat a.py\n```") == "cat a.py"
    assert bash_block("x <mswea_bash_command>pwd</mswea_bash_command>") == "pwd"
    assert bash_block("```python\nprint(1)\n```") is None
    assert bash_block("```bash\nunclosed") is None
    assert bash_block("```\nls\n```") == "ls"  # an unlabeled block, when no shell block exists


def test_a_python_block_closing_fence_is_not_a_command() -> None:
    # A real Gemini reply shape: code shown in ```python, then the command in ```bash.
    reply = "I see:\n```python\ndef f(a, b):\n    pass\n```\n\nI need to change it to:\n```python\ndef f(b):\n```\n\n```bash\ngrep -r f .\n```"
    assert bash_block(reply) == "grep -r f ."
    assert bash_block("```python\nx = 1\n```\nthen\n```\nls\n```") == "ls"
    prose = "It says `Default: ``None```. Set it to `Default: ``'x'```.\n\n```bash\nsed -i s/a/b/ f.txt\n```"
    assert bash_block(prose) == "sed -i s/a/b/ f.txt"  # inline backticks in prose open no block
    assert bash_block("1. then:\n   ```bash\n   ls\n   ```") == "   ls"  # an indented (list item) block
