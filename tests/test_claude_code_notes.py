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


def test_edit_tool_results_say_applied_created_or_not_applied() -> None:
    edit = json.dumps({"file_path": "/w/calc.py", "old_string": "a + b", "new_string": "a - b"})
    ok = summarize(edit, "The file /w/calc.py has been updated successfully.", "Edit")
    assert (ok.kind, ok.text) == ("edit", "edited /w/calc.py")
    snippet = "The file /w/calc.py has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"
    assert summarize(edit, snippet + numbered(CALC[2:6], 3), "Edit").text == "edited /w/calc.py; printed its lines 3-6 after the edit"
    every = "The file /w/calc.py has been updated. All occurrences of 'a + b' were successfully replaced with 'a - b'."
    assert summarize(edit, every, "Edit").text == "edited /w/calc.py: every occurrence replaced"
    new = json.dumps({"file_path": "/w/new.py", "content": "x = 1\n"})
    assert summarize(new, "File created successfully at: /w/new.py", "Write").text == "created /w/new.py"
    failed = summarize(edit, "<tool_use_error>String to replace not found in file.\nString: a + c</tool_use_error>", "Edit")
    assert (failed.kind, failed.text) == ("error", "edit of /w/calc.py NOT applied: String to replace not found in file. String: a + c")
    no = "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the new_string was NOT written to the file)."
    assert summarize(edit, no, "Edit").text == "edit of /w/calc.py NOT applied: the user rejected it"
    assert summarize("pytest -q", no, "bash").text == "not run: the user rejected this tool use"
    # a long path gives way to what was done: the note never ends cut inside the range
    deep = "/home/dev/" + "very-long-folder-name/" * 8 + "calc.py"
    s = summarize(edit, snippet.replace("/w/calc.py", deep) + numbered(CALC, 1), "Edit")
    assert s.text.endswith(f"calc.py; printed its lines 1-{len(CALC)} after the edit") and s.text.startswith("edited \u2026/")


def test_codex_apply_patch_names_each_file_and_what_it_did() -> None:
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** End Patch"
    out = json.dumps({"output": "Success. Updated the following files:\nM src/a.py\nA src/b.py\n", "metadata": {"exit_code": 0}})
    assert summarize(patch, out, "apply_patch").text == "patch applied: added src/b.py; modified src/a.py"


def test_a_plan_note_gives_its_state() -> None:
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading"},
        {"content": "Fix the off-by-one", "status": "in_progress", "activeForm": "Fixing"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running"},
    ]
    s = summarize(json.dumps({"todos": todos}), "Todos have been modified successfully. Ensure that you continue to use the todo list.", "TodoWrite")
    assert s.text == 'plan updated: 1 of 3 items done, in progress: "Fix the off-by-one", 1 pending'
    plan = {"plan": [{"step": "Write tests", "status": "completed"}, {"step": "Fix", "status": "completed"}]}
    assert summarize(json.dumps(plan), "Plan updated", "update_plan").text == "plan updated: 2 of 2 items done"


def test_a_search_piped_into_another_tool_is_not_counted_as_its_paths_or_hits() -> None:
    paths = "/w/s/a.jsonl\n/w/s/b.jsonl\n"
    assert summarize('find /w/s -name "*.jsonl" | sort | head -5', paths).text == "2 paths found (/w/s/a.jsonl, /w/s/b.jsonl)"
    assert summarize("find /w/s -name '*.jsonl' -exec grep -l token {} \\; | head -1", "/w/s/a.jsonl\n").text == "1 path found (/w/s/a.jsonl)"
    assert summarize('rg -n "a|b" src | head -3', "src/x.py:3:a = 1\nsrc/y.py:9:b = 2\n").text.startswith("2 hits in 2 files")
    records = '{"type":"session_meta","id":"1"}\n{"type":"event_msg","n":2}\n{"type":"event_msg","n":3}\n'
    for cmd in (
        "find /w/s -name '*.jsonl' | head -1 | xargs cat",
        "find /w/s -name '*.jsonl' -exec cat {} \\; | jq -c .",
        'grep -c "event" /w/s/a.jsonl | sort',
    ):
        s = summarize(cmd, records)
        assert s.kind == "output" and "found" not in s.text and "hit" not in s.text, (cmd, s.text)


def test_codex_unified_exec_notice_of_a_cut_output_is_not_its_first_line() -> None:
    out = "Chunk ID: 1a2b3c\nWall time: 0.0958 seconds\nProcess exited with code 0\nOriginal token count: 13644\nOutput:\nTotal output lines: 73\n\nfirst line\nlast line\n"
    assert unwrap(out).body == "first line\nlast line"
    assert summarize("ps -ef", out, "shell").text == '"first line" … "last line"'


def test_a_read_without_range_or_outline_quotes_what_it_printed() -> None:
    log = "==> deps\nCompiling 8 files (.ex)\nGenerated app\n"
    s = summarize("tail -30 /tmp/tasks/b1.output", log)
    assert (s.kind, s.text) == ("output", '/tmp/tasks/b1.output: "==> deps" … "Generated app"')
    records = '{"type":"a"}\n{"type":"b"}\n'
    assert summarize("cat /w/s.jsonl | jq -c .", records).text == '/w/s.jsonl: "{"type":"a"}" … "{"type":"b"}"'
    # a read with its range keeps it
    assert summarize("head -5 /w/calc.py", "\n".join(CALC[:5]) + "\n").text.startswith("/w/calc.py lines 1-5")


def test_grep_count_mode_and_no_match_are_not_counted_as_hits() -> None:
    count = json.dumps({"pattern": "agentId", "path": "/w/t", "output_mode": "count"})
    rows = "t/short.jsonl:1\nt/sub.jsonl:4\n\nFound 5 total occurrences across 2 files."
    assert summarize(count, rows, "Grep").text == "5 matching lines in 2 files (t/short.jsonl, t/sub.jsonl)"
    one = json.dumps({"pattern": "agentId", "path": "/w/t/sub.jsonl", "output_mode": "count"})
    assert summarize(one, "20\n\nFound 0 total occurrences across 0 files.", "Grep").text == "20 matching lines in 1 file (/w/t/sub.jsonl)"
    none = "No matches found\n\nFound 0 total occurrences across 0 files."
    assert summarize(one, none, "Grep").text == "0 hits"
    content = json.dumps({"pattern": "route", "output_mode": "content", "-n": True})
    assert summarize(content, "No matches found", "Grep").text == "0 hits"


def test_a_persisted_output_is_summarized_from_its_preview_and_says_so() -> None:
    out = (
        "<persisted-output>\nOutput too large (141KB). Full output saved to: /h/.claude/tool-results/t1.txt\n\n"
        "Preview (first 2KB):\nRUN v4.0\n ok test/a.js (4 tests)\n...\n</persisted-output>"
    )
    u = unwrap(out)
    assert u.body == "RUN v4.0\n ok test/a.js (4 tests)\n..." and u.exception == "output too large (141KB), only its preview shown"
    assert summarize("npx vitest run", out).text == 'output too large (141KB), only its preview shown; "RUN v4.0" … "..."'


def test_claude_code_tool_errors_are_errors_not_quoted_output() -> None:
    read = json.dumps({"file_path": "/w/gone.py"})
    assert summarize(read, "<tool_use_error>File does not exist.</tool_use_error>", "Read").text == "error: File does not exist."
    big = "File content (85812 tokens) exceeds maximum allowed tokens (25000). Please use offset and limit parameters."
    assert summarize(read, big, "Read").text == "error: File content (85812 tokens) exceeds maximum allowed tokens (25000)."
    # a result that is only a reminder is the tool's answer, not nothing
    past = "<system-reminder>Warning: the file exists but is shorter than the provided offset (3850). The file has 2586 lines.</system-reminder>"
    assert unwrap(past).body.startswith("Warning: the file exists but is shorter")
    assert summarize(read, past, "Read").kind != "empty"


def test_a_read_of_a_long_path_keeps_its_range() -> None:
    deep = "/home/dev/.claude/projects/" + "-home-dev-projects-worktrees-feature-branch" * 2 + "/tool-results/toolu_0123456789abcdef.txt"
    s = summarize(json.dumps({"file_path": deep}), numbered(CALC, 2560), "Read")
    assert s.text.startswith("\u2026/") and f"toolu_0123456789abcdef.txt lines 2560-{2559 + len(CALC)}" in s.text, s.text


def test_a_codex_process_still_running_has_no_output_yet_not_zero_hits() -> None:
    running = "Chunk ID: 60a5a7\nWall time: 1.0011 seconds\nProcess running with session ID 58192\nOriginal token count: 0\nOutput:\n"
    assert unwrap(running).status is None
    s = summarize('rg -n "compact" src', running, "shell")
    assert (s.kind, s.text) == ("empty", "still running (session 58192); no output yet")
    partial = running.replace("Output:\n", "Output:\n> pkg@1.0 test\nRUN v4\n")
    assert summarize("npm test", partial, "shell").text.startswith("still running (session 58192); ")
    done = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 1\nOriginal token count: 0\nOutput:\n"
    assert summarize('rg -n "compact" src', done, "shell").text == "0 hits"


def test_an_empty_search_pipeline_into_another_tool_is_no_output_not_zero_hits() -> None:
    assert summarize("find /w/s -name '*.jsonl' | head -1 | xargs cat | jq -c .", "").text == "no output"
    assert summarize("grep -A2 clear /w/h.jsonl | jq -c .", "").text == "no output"
    two = "find /w -name '*.jsonl' -exec grep -l a {} \\; -exec grep -l b {} \\; | head -1 | xargs cat | jq ."
    assert summarize(two, "").text == "no output"
    assert summarize("grep -n clear /w/h.jsonl | head -3", "").text == "0 hits"


def test_grep_content_of_one_file_is_hits_not_a_read() -> None:
    grep = json.dumps({"pattern": "scope", "path": "/w/lib/router.ex", "output_mode": "content", "-n": True})
    s = summarize(grep, "22:  scope \"/\" do\n23:    pipe_through :browser\n24:  scope \"/api\" do\n25:  end", "Grep")
    assert (s.kind, s.text) == ("search", "4 hits in 1 file (/w/lib/router.ex)")


def test_a_read_chained_with_a_search_counts_only_the_searchs_hits() -> None:
    cmd = "sed -n '220,240p' tests/t.ts && rg -n parseConfig src tests"
    out = "describe('x', () => {\n  it('y', () => {});\n});\nsrc/a.ts:12:parseConfig(env)\ntests/t.ts:40:parseConfig(env)\n"
    assert summarize(cmd, out).text == "2 hits in 2 files (src/a.ts, tests/t.ts); 3 other lines"


def test_what_the_pipeline_and_read_fixes_keep() -> None:
    # 'find | xargs grep -l' still prints paths; a sed address is not a second file
    found = "django/db/models/lookups.py\ndjango/db/models/base.py\n"
    assert summarize('find django/db/models -name "*.py" | xargs grep -l "def __hash__"', found).text.startswith("2 paths found")
    body = "    def create_parser(self, prog_name):\n        parser = Parser()\n        return parser\n"
    s = summarize("sed -n '/def create_parser/,/return parser/p' django/core/management/base.py", body)
    assert s.kind == "read" and "contents of" not in s.text, s.text
