"""The notes that replace hidden Claude Code and Codex outputs say what the tool showed: regressions
found reading the prompts of real sessions (fixtures here are written by hand in their shape)."""

from __future__ import annotations

import json

from claude_code_log import CALC, numbered
from refold.mechanisms.summary import summarize
from refold.mechanisms.summary_wrap import unwrap

REMINDER = (
    "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered "
    "malware. You CAN and SHOULD provide analysis of malware.\n</system-reminder>\n"
)


def test_a_reads_trailing_system_reminder_is_neither_its_lines_nor_its_text() -> None:
    read = json.dumps({"file_path": "/w/calc.py"})
    out = numbered(CALC) + REMINDER
    assert unwrap(out).lines == len(CALC)
    s = summarize(read, out, "Read")
    assert s.kind == "read"
    assert s.text.startswith(f"/w/calc.py lines 1-{len(CALC)}: def add L4, def divide L8"), s.text
    assert s.text == summarize(read, numbered(CALC), "Read").text
    # two reminders, and one inside the output (a file that quotes one) stays the file's text
    quoted = numbered(["x = '<system-reminder>hi</system-reminder>'", "y = 1"])
    assert unwrap(quoted + REMINDER + REMINDER).body == quoted


def test_a_read_of_two_files_names_both_and_no_line_range_or_outline_numbers() -> None:
    a = "\n".join(["import os", "", "def build(x):", "    return x", *["    pass"] * 76])
    b = "\n".join(["def other():", "    return 1", "", "class Later:", "    y = 2"])
    cmd = "sed -n '70,150p' src/a.py && sed -n '1,220p' tests/b.py"
    s = summarize(cmd, f"Exit code: 0\nWall time: 0.1 seconds\nOutput:\n{a}\n{b}\n", "shell")
    assert (s.kind, s.text) == ("reads", "contents of 2 files (src/a.py, tests/b.py)")
    assert summarize("cat a.py b.py", f"{a}\n{b}").text == "contents of 2 files (a.py, b.py)"
    # one file read twice is one file's read, with its range
    assert summarize("sed -n '3,4p' a.py && sed -n '3,4p' a.py", "def build(x):\n    return x\n").text.startswith("a.py lines 3-")
