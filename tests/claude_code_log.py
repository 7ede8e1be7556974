"""Write Claude Code session logs for tests: synthetic lines in the shape Claude Code writes (one JSON
object a line, ``uuid``/``parentUuid`` threads, one line per content block of a response)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Log:
    """Lines appended in file order; each method returns the new line's uuid."""

    def __init__(self, session: str = "0b5e2c1e-0000-4000-8000-000000000001", sidechain: bool = False) -> None:
        self.lines: list[dict[str, Any]] = []
        self.session = session
        self.sidechain = sidechain
        self._n = 0
        self.last: str | None = None

    def _base(self, kind: str, parent: str | None, **more: Any) -> dict[str, Any]:
        self._n += 1
        uuid = f"u{self._n:04d}-{'s' if more.get('isSidechain', self.sidechain) else 'm'}"
        line = {
            "parentUuid": parent,
            "isSidechain": self.sidechain,
            "userType": "external",
            "cwd": "/home/dev/calc",
            "sessionId": self.session,
            "version": "2.0.50",
            "gitBranch": "main",
            "type": kind,
            "uuid": uuid,
            "timestamp": f"2026-03-01T10:{self._n // 60:02d}:{self._n % 60:02d}.000Z",
        }
        line.update(more)
        self.lines.append(line)
        self.last = uuid
        return line

    def _parent(self, parent: str | None | bool) -> str | None:
        return self.last if parent is True else parent if isinstance(parent, str) else None

    def user(self, content: Any, parent: str | None | bool = True, **more: Any) -> str:
        line = self._base("user", self._parent(parent), message={"role": "user", "content": content}, **more)
        return str(line["uuid"])

    def results(self, *pairs: tuple[str, str], parent: str | None | bool = True, error: bool = False) -> str:
        blocks = [{"tool_use_id": cid, "type": "tool_result", "content": out, "is_error": error} for cid, out in pairs]
        return self.user(blocks, parent)

    def reply(
        self,
        msg_id: str,
        blocks: list[dict[str, Any]],
        parent: str | None | bool = True,
        usage: dict[str, int] | None = None,
        split: bool = True,
        model: str = "claude-sonnet-4-5-20250929",
    ) -> list[str]:
        """One API response: a line per block (``split``), all sharing ``message.id`` and usage."""
        usage = usage or {"input_tokens": 4, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 1000, "output_tokens": 50}
        groups = [[b] for b in blocks] if split else [blocks]
        out = []
        p = self._parent(parent)
        for g in groups:
            message = {
                "model": model, "id": msg_id, "type": "message", "role": "assistant", "content": g,
                "stop_reason": None, "stop_sequence": None, "usage": dict(usage),
            }  # fmt: skip
            line = self._base("assistant", p, message=message, requestId=f"req_{msg_id}")
            p = str(line["uuid"])
            out.append(p)
        return out

    def other(self, kind: str, parent: str | None | bool = True, **more: Any) -> str:
        return str(self._base(kind, self._parent(parent), **more)["uuid"])

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(line) + "\n" for line in self.lines), encoding="utf-8")
        return path


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": args}


def numbered(lines: list[str], start: int = 1) -> str:
    """Read's output: ``cat -n`` with an arrow (``     1→code``)."""
    return "\n".join(f"{n:>6}\u2192{line}" for n, line in enumerate(lines, start))


CALC = [
    '"""A tiny calculator."""',
    "",
    "",
    "def add(a, b):",
    "    return a + b",
    "",
    "",
    "def divide(a, b):",
    "    return a / b",
    "",
    "",
    "def mean(xs):",
    "    return sum(xs) / len(xs) - 1",
]


def session(path: Path) -> Path:
    """A small but complete session: a task, split replies with parallel calls (Read, Grep, Bash,
    Edit), a dead branch, meta lines, a compaction, and a subagent in the same file."""
    log = Log()
    log.other("file-history-snapshot", None, messageId="x", snapshot={}, isSnapshotUpdate=False)
    task = log.user("The mean() in calc.py is wrong; fix it and run the tests.")
    a1 = log.reply("msg_01", [
        {"type": "thinking", "thinking": "Look at the code first.", "signature": "c2ln"},
        text("I'll read calc.py and look for the tests."),
        call("toolu_01", "Read", file_path="/home/dev/calc/calc.py"),
        call("toolu_02", "Grep", pattern="def test_mean", path="/home/dev/calc", output_mode="content", **{"-n": True}),
    ], parent=task, usage={"input_tokens": 3, "cache_creation_input_tokens": 4000, "cache_read_input_tokens": 12000, "output_tokens": 120})  # fmt: skip
    # the results hang off the line holding their own call (as Claude Code writes parallel calls)
    log.results(("toolu_02", "/home/dev/calc/test_calc.py:9:def test_mean():"), parent=a1[3])
    r1 = log.results(("toolu_01", numbered(CALC)), parent=a1[2])
    a2 = log.reply("msg_02", [
        text("The `- 1` is the bug. Running the tests first."),
        call("toolu_03", "Bash", command="python -m pytest -q test_calc.py", description="Run the tests"),
    ], parent=r1, usage={"input_tokens": 5, "cache_creation_input_tokens": 600, "cache_read_input_tokens": 16000, "output_tokens": 60})  # fmt: skip
    r2 = log.results(("toolu_03", "F..\n1 failed, 2 passed in 0.02s"), parent=a2[-1])
    # a dead branch: a reply the user rejected, then the edit that was kept
    dead = log.reply("msg_03x", [call("toolu_04x", "Write", file_path="/home/dev/calc/calc.py", content="")], parent=r2)
    log.results(("toolu_04x", "The user doesn't want to proceed with this tool use."), parent=dead[-1], error=True)
    a3 = log.reply("msg_03", [
        call("toolu_04", "Edit", file_path="/home/dev/calc/calc.py", old_string="len(xs) - 1", new_string="len(xs)"),
    ], parent=r2, usage={"input_tokens": 6, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 16600, "output_tokens": 70})  # fmt: skip
    r3 = log.results(("toolu_04", "The file /home/dev/calc/calc.py has been updated."), parent=a3[-1])
    a4 = log.reply("msg_04", [call("toolu_05", "Bash", command="python -m pytest -q test_calc.py")], parent=r3,
                   usage={"input_tokens": 6, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 16900, "output_tokens": 40})  # fmt: skip
    r4 = log.results(("toolu_05", "...\n3 passed in 0.01s"), parent=a4[-1])
    a5 = log.reply("msg_05", [text("Fixed: mean() no longer subtracts 1; the tests pass.")], parent=r4,
                   usage={"input_tokens": 6, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 17100, "output_tokens": 20})  # fmt: skip
    # a local command (/compact): its lines, then the boundary that starts a new context
    cmd = log.user("<command-name>/compact</command-name>\n<command-message>compact</command-message>\n<command-args></command-args>", parent=a5[-1])
    log.other("system", cmd, subtype="compact_boundary", content="Conversation compacted", level="info")
    boundary = log.last
    log.lines[-1]["parentUuid"] = None
    log.lines[-1]["logicalParentUuid"] = cmd
    log.lines[-1]["compactMetadata"] = {"trigger": "manual", "preTokens": 17200}
    summary = log.user(
        "This session is being continued from a previous conversation that ran out of context. "
        "Summary: mean() in calc.py subtracted 1; fixed with an Edit; the tests pass.",
        parent=boundary, isCompactSummary=True, isVisibleInTranscriptOnly=True,
    )
    ask = log.user("Now add a docstring to mean().", parent=summary)
    a6 = log.reply("msg_06", [call("toolu_06", "Read", file_path="/home/dev/calc/calc.py", offset=12, limit=2)], parent=ask,
                   usage={"input_tokens": 10, "cache_creation_input_tokens": 3000, "cache_read_input_tokens": 12000, "output_tokens": 30})  # fmt: skip
    r6 = log.results(("toolu_06", numbered(CALC[11:13], 12)), parent=a6[-1])
    a7 = log.reply("msg_07", [call("toolu_07", "Task", description="Check style", prompt="Check calc.py for style problems.", subagent_type="general-purpose")],
                   parent=r6, usage={"input_tokens": 4, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 15000, "output_tokens": 30})  # fmt: skip
    # the subagent's own conversation, inline (older versions): sidechain lines from their own root
    log.sidechain = True
    sub = log.user("Check calc.py for style problems.", parent=None)
    s1 = log.reply("msg_s1", [call("toolu_s1", "Bash", command="ruff check calc.py")], parent=sub,
                   usage={"input_tokens": 8, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 0, "output_tokens": 25})  # fmt: skip
    s2 = log.results(("toolu_s1", "All checks passed!"), parent=s1[-1])
    log.reply("msg_s2", [text("No style problems found.")], parent=s2,
              usage={"input_tokens": 8, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 2000, "output_tokens": 10})  # fmt: skip
    log.sidechain = False
    r7 = log.results(("toolu_07", "No style problems found."), parent=a7[-1])
    log.reply("msg_08", [call("toolu_08", "Edit", file_path="/home/dev/calc/calc.py", old_string="def mean(xs):\n", new_string='def mean(xs):\n    """The average of xs."""\n')],
              parent=r7, usage={"input_tokens": 4, "cache_creation_input_tokens": 150, "cache_read_input_tokens": 15200, "output_tokens": 45})  # fmt: skip
    r8 = log.results(("toolu_08", "The file /home/dev/calc/calc.py has been updated."))
    log.reply("msg_09", [text("Done.")], parent=r8,
              usage={"input_tokens": 4, "cache_creation_input_tokens": 50, "cache_read_input_tokens": 15350, "output_tokens": 5})  # fmt: skip
    log.other("summary", None, summary="Fix mean() in calc.py", leafUuid=log.last)
    log.lines[-1].pop("uuid")
    return log.write(path)
