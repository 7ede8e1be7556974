"""One-line summaries of tool outputs (refold.mechanisms.summary): every kind, every output shape."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.loaders import load
from refold.mechanisms.summary import MAX_CHARS, summarize
from refold.mechanisms.summary_wrap import command_line, exit_status, unwrap

DATA = Path(__file__).parent / "data"


def mini(body: str, rc: int = 0) -> str:
    """A mini-swe-agent 1.x/2.x text observation."""
    return f"<returncode>{rc}</returncode>\n<output>\n{body}</output>"


def swe(body: str, open_file: str = "/repo/app.py") -> str:
    """A SWE-agent observation with its state lines."""
    return f"{body}\n(Open file: {open_file})\n(Current directory: /repo)\nbash-$"


# ---- wrappers and exit status ---------------------------------------------------------------


def test_exit_status_of_every_shape() -> None:
    assert exit_status(mini("x\n", 2)) == 2
    assert exit_status(swe("x")) is None
    assert exit_status('{\n  "returncode": 1,\n  "output": "boom\\n"\n}') == 1
    timeout = "<exception>Command timed out after 60 seconds</exception>\n<returncode>-1</returncode>\n<output>\n...</output>"
    assert exit_status(timeout) == -1
    # a returncode tag printed inside the output is not the status
    assert exit_status("hello <returncode>3</returncode>") is None


def test_unwrap_head_and_tail() -> None:
    text = (
        "<returncode>0</returncode>\n<warning>\nThe output of your last command was too long.\n</warning>"
        "<output_head>\nimport os\n\n\nclass A:\n    pass\n</output_head>\n<elided_chars>\n1234 characters elided\n"
        "</elided_chars>\n<output_tail>\ndef last():\n    return 1\n</output_tail>"
    )
    u = unwrap(text)
    assert u.status == 0 and u.elided == 1234
    assert "class A:" in u.body and "def last():" in u.body and "too long" not in u.body


def test_swe_state_lines_are_not_output() -> None:
    assert unwrap(swe("344")).body == "344"
    assert (
        summarize("rm x.py", swe("Your command ran successfully and did not produce any output.")).text
        == "no output"
    )


# ---- reads ------------------------------------------------------------------------------------


def test_read_nl_sed_range_uses_file_line_numbers() -> None:
    body = "".join(
        f"{n:6}\t{line}\n"
        for n, line in enumerate(
            [
                "",
                "class RelatedField(Field):",
                '    """A field."""',
                "",
                "    def check(self):",
                "        return []",
                "",
                "def helper():",
                "    pass",
            ],
            start=80,
        )
    )
    s = summarize("nl -ba django/db/models/fields/related.py | sed -n '80,88p'", mini(body))
    assert s.kind == "read" and s.status == 0 and s.informative
    assert s.text.startswith("django/db/models/fields/related.py lines 80-88")
    assert "class RelatedField L81" in s.text and "def helper L87" in s.text


def test_read_sed_without_numbers_is_offset_by_the_range() -> None:
    body = "x = 1\n\ndef parse(text):\n    return text\n"
    s = summarize("sed -n '200,203p' src/conf.py", mini(body))
    assert s.text == "src/conf.py lines 200-203: def parse L202"


def test_a_sed_with_two_ranges_gives_no_file_line_numbers() -> None:
    body = "x = 1\n\ny = 2\n    return text\n\ndef parse(text):\n    return text\n"
    s = summarize("sed -n '200,203p;300,303p' src/conf.py", mini(body))
    assert "L" not in s.text.split(":", 1)[-1] and "lines 200-" not in s.text  # 'def parse L205' was a guess
    assert "def parse" in s.text


def test_read_swe_window() -> None:
    window = "\n".join(
        ["[File: /repo/src/fields.py (1998 lines total)]", "(1456 more lines above)"]
        + [
            f"{n}:{t}"
            for n, t in zip(
                range(1457, 1463),
                ["", "class Mapping(Field):", "    x = 1", "", "    def load(self):", "        pass"],
                strict=True,
            )
        ]
        + ["(536 more lines below)"]
    )
    s = summarize("goto 1460", swe(window), "bash")
    assert s.kind == "read"
    assert s.text == "/repo/src/fields.py lines 1457-1462 of 1998: class Mapping L1458"


def test_read_tool_call_editor_view() -> None:
    out = "Here's the result of running `cat -n` on /repo/a.py:\n     1\timport os\n     2\t\n     3\tdef main():\n     4\t    pass\n"
    s = summarize('{"command": "view", "path": "/repo/a.py"}', out, "str_replace_editor")
    assert s.kind == "read" and s.text == "/repo/a.py lines 1-4: def main L3"


def test_read_elided_cat() -> None:
    text = (
        "<returncode>0</returncode>\n<warning>\ntoo long\n</warning><output_head>\nimport os\n\nclass Base:\n    pass\n"
        "</output_head>\n<elided_chars>\n5000 characters elided\n</elided_chars>\n<output_tail>\n    return x\n</output_tail>"
    )
    s = summarize("cat pkg/base.py", text)
    # the head's last line may be cut mid-line: it is not counted; the tail's file lines are unknown
    assert (
        s.kind == "read"
        and s.text == "pkg/base.py lines 1-3, then its tail (5,000 chars elided): class Base L3"
    )
    assert "L" not in summarize("cat a.py | tail -n +5", text).text.split(":", 1)[-1]


def test_read_of_a_missing_file_is_an_error() -> None:
    s = summarize(
        "nl -ba tests/test_x.py | sed -n '1,50p'", mini("nl: tests/test_x.py: No such file or directory\n")
    )
    assert s.kind == "error" and s.text == "error: nl: tests/test_x.py: No such file or directory"


# ---- searches ---------------------------------------------------------------------------------


def test_grep_recursive_hits_and_files() -> None:
    body = "src/a.py:10:def foo():\nsrc/a.py:40:    foo()\nsrc/b.py:3:from a import foo\ntests/t.py:7:foo()\n"
    s = summarize('grep -rn "foo" src tests', mini(body))
    assert s.kind == "search" and s.text == "4 hits in 3 files (src/a.py, src/b.py, tests/t.py)"


def test_grep_single_file_names_it() -> None:
    s = summarize(
        'grep -n "def members_option" sphinx/ext/autodoc/__init__.py', mini("76:def members_option(arg):\n")
    )
    assert s.text == "1 hit in 1 file (sphinx/ext/autodoc/__init__.py)"


def test_grep_without_match_exits_1_and_is_not_an_error() -> None:
    s = summarize('grep -rn "nothing" src', "<returncode>1</returncode>\n<output>\n</output>")
    assert s.kind == "search" and s.text == "0 hits" and s.status == 1


def test_grep_context_lines_are_not_hits() -> None:
    s = summarize('grep -C 2 "POLICY" docs/checks.txt', mini("a\nb\nPOLICY x\nc\nd\n"))
    assert s.text == "5 lines with context in docs/checks.txt"


def test_find_paths() -> None:
    s = summarize(
        'find . -name "*.py" -path "*sitemaps*"',
        mini("./a/sitemaps/x.py\n./a/sitemaps/y.py\n./b/sitemaps/z.py\n"),
    )
    assert s.kind == "search" and s.text == "3 paths found (a/sitemaps/x.py, a/sitemaps/y.py, b/sitemaps/z.py)"
    assert summarize('find django -name "tests.py"', mini("")).text == "0 paths found"


def test_a_long_listing_names_its_first_paths_within_a_budget() -> None:
    root = "/home/user/projects/app/src/components"
    paths = [f"{root}/widgets/widget_{k:02d}.tsx" for k in range(40)]
    s = summarize("find /home/user/projects/app/src -name '*.tsx'", mini("\n".join(paths)))
    # the shared folder once, each path with its own folder (what a reply opens it by), then how many more
    assert s.text.startswith("40 paths found (under …/projects/app/src/components: widgets/widget_00.tsx, ")
    assert s.text.endswith(" more)")
    named = re.findall(r"widget_\d\d", s.text)
    assert 2 <= len(named) < 40 and s.text.endswith(f"+{40 - len(named)} more)")
    assert len(s.text) <= 160
    # a path too long for the room: its end, which names the file
    deep = "/very/deep/" + "/".join(f"folder_number_{k}" for k in range(12)) + "/target_module.py"
    s = summarize("find / -name target_module.py", mini(deep + "\n/srv/target_module.py"))
    assert "folder_number_11/target_module.py, +1 more)" in s.text and "…" in s.text


def test_swe_search_dir_file_and_find_file() -> None:
    search_dir = swe(
        'Found 4 matches for "Rule" in /repo:\n/repo/docs/a.rst (1 matches)\n/repo/src/app.py (3 matches)\n'
        'End of matches for "Rule" in /repo'
    )
    assert (
        summarize('search_dir "Rule"', search_dir).text
        == '"Rule": 4 hits in 2 files (/repo/docs/a.rst, /repo/src/app.py)'
    )
    search_file = swe(
        'Found 2 matches for "byte" in /repo/src/rewrite.py:\nLine 12:    b = byte()\nLine 90:  byte\n'
        'End of matches for "byte" in /repo/src/rewrite.py'
    )
    assert summarize('search_file "byte"', search_file).text == '"byte": 2 hits in /repo/src/rewrite.py'
    found = swe('Found 1 matches for "cli.py" in /repo:\n/repo/src/flask/cli.py')
    assert summarize('find_file "cli.py"', found).text == '"cli.py": 1 file found (/repo/src/flask/cli.py)'
    none = swe('No matches found for "zzz" in /repo')
    assert summarize('search_dir "zzz"', none).text == '"zzz": no hits in /repo'
    # the same commands as function tools (SWE-agent 1.x)
    s = summarize('{"file_name": "cli.py", "dir": "src"}', found, "find_file")
    assert s.kind == "search" and "1 file found" in s.text


# ---- test runs --------------------------------------------------------------------------------

PYTEST_FAIL = """============================= test session starts ==============================
collected 4 items

tests/test_a.py .F..                                                     [100%]

=================================== FAILURES ===================================
_________________________________ test_parse __________________________________

    def test_parse():
>       assert parse("1") == 2
E       AssertionError: assert 1 == 2

tests/test_a.py:8: AssertionError
=========================== short test summary info ============================
FAILED tests/test_a.py::test_parse - AssertionError: assert 1 == 2
========================= 1 failed, 3 passed in 0.12s ==========================
"""

DJANGO_FAIL = """Testing against Django installed in '/testbed/django' with up to 8 processes
System check identified no issues (0 silenced).
..F.
======================================================================
FAIL: test_abstract_inherited_fields (model_fields.tests.BasicFieldTests)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/testbed/tests/model_fields/tests.py", line 120, in test_abstract_inherited_fields
    self.assertNotEqual(a, b)
AssertionError: 1 == 1

----------------------------------------------------------------------
Ran 33 tests in 0.041s

FAILED (failures=1)
"""


def test_pytest_counts_and_first_failure() -> None:
    s = summarize("python -m pytest tests/test_a.py", mini(PYTEST_FAIL, 1))
    assert s.kind == "test" and s.status == 1
    assert s.text == "tests: 1 failed, 3 passed; first failure: tests/test_a.py::test_parse"


def test_pytest_quiet_pass() -> None:
    s = summarize(
        "pytest -q tests",
        mini("........                                  [100%]\n8 passed, 2 warnings in 0.50s\n"),
    )
    assert s.text == "tests: 8 passed"


def test_django_runtests_failure() -> None:
    s = summarize("./tests/runtests.py model_fields", mini(DJANGO_FAIL, 1))
    assert s.kind == "test"
    assert (
        s.text
        == "tests: 33 ran, FAILED (failures=1); first failure: test_abstract_inherited_fields (model_fields.tests.BasicFieldTests)"
    )


def test_unittest_ok() -> None:
    s = summarize(
        "python -m unittest discover",
        mini(
            "...\n----------------------------------------------------------------------\nRan 3 tests in 0.001s\n\nOK\n"
        ),
    )
    assert s.text == "tests: 3 ran, OK"


def test_timed_out_run_counts_progress_dots() -> None:
    text = (
        "<exception>Command 'pytest -q' timed out after 60 seconds</exception>\n<returncode>-1</returncode>\n<output>\n"
        "........FF.. [ 50%]\n....E.</output>"
    )
    s = summarize("pytest -q", text)
    assert s.kind == "test" and s.status == -1
    # the timeout is said (it was left out for test runs: a killed run read like one still going)
    assert s.text == "Command 'pytest -q' timed out after 60 seconds; tests (no final line): 15 passed, 2 failed, 1 errors so far"


def test_mini_1x_timeout_template_is_read_as_a_timeout() -> None:
    text = (
        "The last command <command>pytest -q\necho 'a </command> in a string'</command> timed out and has been killed.\n"
        "The output of the command was:\n <output>\n........F. [ 50%]\n</output>\n"
        "Please try another command and make sure to avoid those requiring interactive input."
    )
    s = summarize("pytest -q", text)
    assert s.text == "timed out and was killed; tests (no final line): 9 passed, 1 failed so far"


def test_test_run_that_never_started() -> None:
    s = summarize("pytest tests/", mini("bash: line 1: pytest: command not found\n", 127))
    assert s.kind == "error" and s.text == "tests did not run: bash: line 1: pytest: command not found"


def test_test_summary_found_in_a_script_run() -> None:
    s = summarize(
        "python3 reproduce.py",
        mini("==== test session starts ====\nx.py F\n==== 1 failed in 0.01s ====\n", 1),
    )
    assert s.kind == "test" and s.text.startswith("tests: 1 failed")


# ---- errors, edits and the rest -----------------------------------------------------------------


def test_traceback_gives_its_exception_line() -> None:
    body = (
        'Traceback (most recent call last):\n  File "apply_fix.py", line 6, in <module>\n    lines = f.readlines()\n'
        "UnicodeDecodeError: 'ascii' codec can't decode byte 0xe2 in position 3611\n"
    )
    s = summarize("python apply_fix.py", mini(body, 1))
    assert (
        s.kind == "error"
        and s.text == "error: UnicodeDecodeError: 'ascii' codec can't decode byte 0xe2 in position 3611"
    )


def test_error_line_without_traceback() -> None:
    s = summarize(
        "django-admin test_command --skip-checks",
        mini("usage: django-admin ...\ndjango-admin: error: unrecognized arguments: --skip-checks\n", 2),
    )
    assert s.kind == "error" and s.text == "error: django-admin: error: unrecognized arguments: --skip-checks"


def test_swe_edit_not_applied() -> None:
    out = swe(
        "Your proposed edit has introduced new syntax error(s). Please understand the fixes and retry your edit commmand.\n\n"
        "ERRORS:\n- E999 IndentationError: unexpected indent\n\nThis is how your edit would have looked if applied\n"
        "-------------------------------------------------\n[File: /repo/src/config.py (339 lines total)]\n(258 more lines above)\n"
        "259:\n-------------------------------------------------\nYour changes have NOT been applied."
    )
    s = summarize("edit 264:265\n    x = 1\nend_of_edit", out)
    assert (
        s.kind == "error"
        and s.text == "edit to /repo/src/config.py NOT applied: E999 IndentationError: unexpected indent"
    )


def test_swe_edit_applied_and_create() -> None:
    out = swe(
        "[File: /repo/reproduce.py (7 lines total)]\n1:import x\n2:\n3:x.run()\nFile updated. Please review the changes."
    )
    assert summarize("edit 1:1\nimport x\nend_of_edit", out).text == "edited /repo/reproduce.py (now 7 lines)"
    created = swe("[File: /repo/reproduce.py (1 lines total)]\n1:")
    assert summarize("create reproduce.py", created).text == "created /repo/reproduce.py (now 1 line)"


def test_shell_edits() -> None:
    assert summarize("sed -i 's/a/b/' src/x.py", mini("")).text == "edit of src/x.py; no output"
    assert summarize("rm a.py b.py", mini("")).text == "removed a.py, b.py; no output"


def test_format_error_and_empty_and_fallback() -> None:
    fmt = summarize(
        "", "No tool calls found in the response. Every response MUST include at least one tool call."
    )
    assert fmt.kind == "format" and fmt.informative
    assert summarize("true", mini("")).kind == "empty"
    s = summarize("python3 verify.py", mini("Count: 0\nSQL: SELECT 1\nDone: True\n"))
    assert s.kind == "output" and not s.informative and s.text == '"Count: 0" … "Done: True"'


def test_git_diff_and_listing() -> None:
    diff = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    assert summarize("git diff", mini(diff)).text == "diff of 1 file (x.py): +1 -1 lines"
    assert summarize("ls -F", mini("setup.py\nsrc/\ntests/\n")).text == "3 entries: setup.py, src/, tests/"


def test_command_line_of_tools_and_scripts() -> None:
    assert command_line("bash", "python - <<'EOF'\nprint(1)\nEOF") == "python - <<'EOF' …"
    assert command_line("open", '{"path": "src/a.py", "line_number": 40}') == "open src/a.py 40"
    assert (
        command_line("str_replace_editor", '{"command": "view", "path": "/a.py"}')
        == "str_replace_editor view /a.py"
    )
    assert len(command_line("bash", "echo " + "x" * 500)) == 80
    assert "`" not in command_line("bash", "echo `date`")


# ---- real runs (MIT fixtures) -------------------------------------------------------------------


def _summaries(name: str) -> list[tuple[int, str, str]]:
    h = load(DATA / name)
    out = []
    for step in h.steps:
        for j, text in enumerate(step.output_texts):
            a = step.actions[j] if j < len(step.actions) else None
            s = summarize(a.command if a else "", text, a.tool if a else "bash")
            out.append((step.index, s.kind, s.text))
    return out


def test_dev_mini_run() -> None:
    got = {
        i: (kind, text) for i, kind, text in _summaries("mswea-gemini3pro__django__django-16255.traj.json")
    }
    assert got[6] == (
        "read",
        "django/contrib/sitemaps/__init__.py lines 165-175: def get_latest_lastmod L165",
    )
    assert got[12] == ("search", "0 paths found")
    assert got[15] == ("test", "tests: 60 ran, OK")
    assert got[17][0] == "diff" and "django/contrib/sitemaps/__init__.py" in got[17][1]


def test_dev_sweagent_runs() -> None:
    got = {i: (kind, text) for i, kind, text in _summaries("sweagent__pydicom__pydicom-1458.traj.gz")}
    assert got[3] == (
        "error",
        "error: AttributeError: Unable to convert the pixel data as the following required elements are missing from the dataset: PixelRepresentation",
    )
    assert got[4] == (
        "search",
        '"numpy_handler.py": 3 files found (under /pydicom__pydicom: pydicom/overlays/numpy_handler.py, +2 more)',
    )
    assert got[5][0] == "read" and "lines 273-372 of 372" in got[5][1]
    assert got[6] == (
        "error",
        "edit to /pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py NOT applied: E999 SyntaxError: unmatched ']'",
    )
    assert (
        got[9][1] == "edited /pydicom__pydicom/pydicom/pixel_data_handlers/numpy_handler.py (now 373 lines)"
    )
    tools = {
        i: (kind, text)
        for i, kind, text in _summaries("sweagent__marshmallow-code__marshmallow-1867.traj.gz")
    }
    assert tools[6] == ("read", "src/marshmallow/fields.py lines 1457-1556 of 1997: class Mapping L1491")


def test_mini_tool_call_json_observations() -> None:
    got = {i: (kind, text) for i, kind, text in _summaries("mswea11_toolcall_refold.traj.json")}
    assert got[2] == ("read", "settings.txt lines 1-40")
    assert got[5] == ("edit", "edit of settings.txt; no output")


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.iterdir() if ".traj" in p.name))
def test_every_fixture_output_gets_a_bounded_line(name: str) -> None:
    for _, kind, text in _summaries(name):
        assert kind and text and "\n" not in text and len(text) <= MAX_CHARS


# ---- invariants ---------------------------------------------------------------------------------

_PIECES = st.sampled_from(
    [
        "<returncode>0</returncode>", "<returncode>-1</returncode>", "<output>", "</output>", "<output_head>",
        "<elided_chars>\n12 characters elided\n</elided_chars>", "<output_tail>", "<exception>x</exception>",
        "[File: /a.py (10 lines total)]", "(3 more lines above)", "12:def f():", "    40\tclass A:",
        "Traceback (most recent call last):", "ValueError: bad", "Found 3 matches for \"x\" in /r:", "/r/a.py (3 matches)",
        "FAILED t.py::x", "== 1 failed in 0.1s ==", "Ran 3 tests in 0.1s", "FAILED (errors=1)", "a.py:3:x", "\r\n",
        "\n", "\t", "(Open file: /a.py)", "bash-$", "Your changes have NOT been applied", "File updated.", '{"returncode": 2,',
        "\x00", "\u2028", "é",
    ]
)  # fmt: skip
_COMMANDS = st.sampled_from(
    ["", "cat a.py", "nl -ba a.py | sed -n '1,9p'", "grep -rn x .", "find . -name x", "pytest -q", "edit 1:2\nx\nend_of_edit",
     "goto 9", "search_dir x", "ls -la", "git diff", "python - <<'EOF'\nopen('a','w')\nEOF", "restore 3", "submit", '{"path": "a"}']
)  # fmt: skip


# 150: every output of every fixture run is also checked (test_every_fixture_output_gets_a_bounded_line)
@settings(max_examples=150, deadline=None)
@given(
    command=st.one_of(_COMMANDS, st.text(max_size=80)),
    parts=st.lists(st.one_of(_PIECES, st.text(max_size=30)), max_size=30),
    tool=st.sampled_from(["bash", "open", "str_replace_editor", "search_file", "find_file", "fold", "x"]),
    limit=st.integers(min_value=1, max_value=400),
)
def test_summaries_never_raise_and_are_one_bounded_line(
    command: str, parts: list[str], tool: str, limit: int
) -> None:
    text = "\n".join(parts)
    s = summarize(command, text, tool, limit=limit)
    assert s.text and len(s.text) <= max(16, limit)
    assert "\n" not in s.text and "\r" not in s.text
    assert summarize(command, text, tool, limit=limit) == s  # deterministic


def test_old_pytest_seconds_and_collection_errors() -> None:
    body = (
        "collected 0 items / 1 errors\n___ ERROR collecting reproduce.py ___\nE   AssertionError: assert b'' == b'42'\n"
        "FAILED reproduce.py - AssertionError: assert b'' == b'42'\n!!! Interrupted: 1 errors during collection !!!\n"
        "=========================== 1 error in 0.12 seconds ============================"
    )
    s = summarize("pytest reproduce.py", swe(body))
    assert s.kind == "test" and s.text == "tests: 1 error; first failure: reproduce.py"


def test_script_that_writes_and_prints() -> None:
    s = summarize("cat <<'EOF' > check.py\nprint(False)\nEOF\npython check.py", mini("False\n"))
    assert s.kind == "edit" and s.text == 'edit of check.py; printed "False"'


def test_a_traceback_inside_a_read_file_is_not_an_error() -> None:
    body = 'def test_crash():\n    out = run()\n    assert "Traceback (most recent call last)" in out\nValueError: x\n'
    s = summarize("cat tests/test_crash.py", mini(body))
    assert s.kind == "read" and s.text.startswith("tests/test_crash.py lines 1-4")


def test_a_successful_script_may_print_error_words() -> None:
    s = summarize("python check.py", mini("set_antialiased does not exist\n"))
    assert s.kind == "output"
    assert summarize("python check.py", mini("set_antialiased does not exist\n", 1)).kind == "error"


def test_commit_install_and_warnings() -> None:
    commit = "[main 0a67cef828] Fix collation on FK columns\n 1 file changed, 2 insertions(+)\n"
    assert summarize('git add -A && git commit -m "Fix"', mini(commit)).text == (
        'committed 0a67cef828 on main: "Fix collation on FK columns"; 1 file changed, 2 insertions(+)'
    )
    pip = "Looking in indexes: https://pypi.org/simple\nCollecting antlr4\nSuccessfully installed antlr4-4.7.2\n"
    assert summarize("pip install antlr4", mini(pip)).text == "pip: Successfully installed antlr4-4.7.2"
    warned = (
        "/x/basic.py:3: DeprecationWarning: Using ABCs\n  from collections import Mapping\nResult: 5\nDone\n"
    )
    assert summarize("python reproduce.py", mini(warned)).text == '"Result: 5" … "Done"'
    assert (
        summarize("ls -la tests | sed -n '1,40p'", mini("total 8\n-rw-r--r-- 1 r r 1 a.py\n")).kind
        == "listing"
    )


def test_elided_numbered_read_gives_both_ranges() -> None:
    head = (
        "".join(f"{n:6}\t{'class Session:' if n == 3 else 'x = 1'}\n" for n in range(1, 41)) + "    41\tpart"
    )
    tail = "ial line\n" + "".join(
        f"{n:6}\t{'def session():' if n == 560 else '    pass'}\n" for n in range(530, 570)
    )
    text = (
        "<returncode>0</returncode>\n<warning>\ntoo long\n</warning><output_head>\n"
        + head
        + "\n</output_head>\n"
        "<elided_chars>\n9000 characters elided\n</elided_chars>\n<output_tail>\n" + tail + "</output_tail>"
    )
    s = summarize("nl -ba requests/sessions.py", text)
    assert s.kind == "read"
    assert (
        s.text
        == "requests/sessions.py lines 1-40 and 530-569 (9,000 chars elided): class Session L3, def session L560"
    )


def test_outline_without_known_file_lines_has_no_numbers() -> None:
    s = summarize("tail -n 20 src/app.py", mini("x = 1\n\ndef late():\n    pass\n"))
    assert s.kind == "read" and s.text == "src/app.py (4 lines): def late"


# ---- first_error skips, in one search, the lines before any hint of an error ----------------------


def _first_error_every_line(body: str, weak: bool = True) -> str | None:
    """The reference: every line tried in order (what first_error did before its hint search)."""
    from refold.mechanisms.summary_verdicts import _ERR_LINE, _EXC_LINE, _WEAK_ERR_LINE

    lines = body.split("\n")
    tb = max((i for i, ln in enumerate(lines) if ln.strip().startswith("Traceback (most recent call last)")), default=-1)
    if tb >= 0:
        for ln in lines[tb + 1 :]:
            s = ln.strip()
            if s and not ln[:1].isspace() and not s.startswith(("File ", "^", "~")):
                return s
    for ln in lines:
        s = ln.strip()
        if s and (_EXC_LINE.match(s) or _ERR_LINE.match(s)):
            return s
    if weak:
        return next((ln.strip() for ln in lines if _WEAK_ERR_LINE.match(ln.strip())), None)
    return None


_ERR_WORDS = st.sampled_from(
    ["error", "Error", "ERROR", "fatal", "FATAL", "E501", "F401", "ValueError", "Exception", "Warning", ":", " ",
     "- ", "* ", "x", "not found", "does not exist", "Could not find ", "Unable to ", "command not found",
     "No such file or directory", "Permission denied", "Traceback (most recent call last)", "  File a.py", "\t",
     ".", "Fault", "cannot open", "No module named ", "\u2028", "E ", "KeyboardInterrupt"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(_ERR_WORDS, max_size=6).map("".join), max_size=8).map("\n".join), st.booleans())
def test_first_error_equals_trying_every_line(body: str, weak: bool) -> None:
    from refold.mechanisms.summary_verdicts import first_error

    assert first_error(body, weak=weak) == _first_error_every_line(body, weak)


# ---- pipelines: the kind comes from the command that printed the output ----------------------

_FILE = "".join(f"def fn_{i}(x):\n    return x + {i}\n" for i in range(12))
_PYTEST = (
    "============ test session starts ============\ncollected 13 items\n\ntests/test_a.py ..F.......\n"
    + "tests/test_b.py ...\n" * 20
    + "FAILED tests/test_a.py::test_parse - AssertionError: assert 1 == 2\n======= 1 failed, 12 passed in 0.12s =======\n"
)
_MAKE = "gcc -c a.c\n" * 30 + "make: *** [Makefile:3: all] Error 2\n"
_TB = "log\n" * 30 + 'Traceback (most recent call last):\n  File "repro.py", line 2, in main\nValueError: bad tz\n'
_GREP = "src/a.py:3:    foo()\nsrc/b.py:9:foo = 1\nsrc/b.py:12:  foo()\n"

# (command, output, kind, what the line must say, exit status when run alone)
_BASES = [
    ("cat src/calc.py", _FILE, "read", "def fn_0", 0),
    ('grep -rn "foo" src', _GREP, "search", "3 hits in 2 files", 0),
    ("python -m pytest tests/", _PYTEST, "test", "1 failed, 12 passed; first failure: tests/test_a.py::test_parse", 1),
    ("python repro.py", _TB, "error", "ValueError: bad tz", 1),
    ("make", _MAKE, "error", "make: *** [Makefile:3: all] Error 2", 2),
]


def _shapes(cmd: str, out: str, rc: int) -> list[tuple[str, str]]:
    """The ways agents run a command: (command, observation), with and without mini's wrapper."""
    lines = out.rstrip("\n").split("\n")
    tail = "\n".join(lines[-40:]) + "\n"  # what '| tail -40' leaves
    shapes = [
        (f"{cmd} 2>&1 | tail -40", tail, 0),  # the exit status is tail's
        (f"{cmd} |& head -n 60", out, 0),
        (f"{cmd} 2>&1 | tail -n 50 | cat", tail, 0),
        (f"{cmd}; echo $?", out + f"{rc}\n", 0),
        (f"{cmd} 2>&1 | tail -40; echo exit=$?", tail + "exit=0\n", 0),
        (f"{cmd} && echo ok", out + ("ok\n" if rc == 0 else ""), rc),
        (f"cd /repo && {cmd} 2>&1 | head -40", out, 0),
    ]
    return [(c, o) for c, o, _ in shapes] + [(c, mini(o, s)) for c, o, s in shapes] + [(cmd, out), (cmd, mini(out, rc))]


@pytest.mark.parametrize(("cmd", "out", "kind", "says", "rc"), _BASES, ids=[b[0].split()[0] + "-" + b[2] for b in _BASES])
def test_a_pipeline_is_summarized_as_what_printed_it(cmd: str, out: str, kind: str, says: str, rc: int) -> None:
    for shown, text in _shapes(cmd, out, rc):
        s = summarize(shown, text)
        if kind == "error" and "<returncode>" not in text and "Traceback" not in text:
            # no exit status recorded: make's last line is still in the note, by the fallback
            assert s.kind in ("error", "output") and says in s.text, (shown, s)
            continue
        assert s.kind == kind and says in s.text, (shown, text[:60], s)
        assert "file (" not in s.text, shown


def test_a_read_through_filters_stays_a_read_of_its_file() -> None:
    s = summarize("cat src/calc.py | head -n 24", mini(_FILE))
    assert s.kind == "read" and s.text.startswith("src/calc.py lines 1-24: def fn_0 L1")
    s = summarize("nl -ba src/calc.py | sed -n '3,8p'; echo $?", mini("".join(f"{n:6d}\t{ln}\n" for n, ln in enumerate(_FILE.split("\n")[2:8], 3)) + "0\n"))
    assert s.kind == "read" and s.text.startswith("src/calc.py lines 3-")


def test_a_read_narrowed_by_grep_is_a_search_and_a_count_is_no_read() -> None:
    s = summarize("cat src/calc.py | grep -n return", mini("2:    return x + 0\n4:    return x + 1\n"))
    assert s.kind == "search" and s.text == "2 hits in 1 file (src/calc.py)"
    assert summarize("cat src/calc.py | wc -l", mini("24\n")).kind == "output"
    assert summarize("grep -rn foo src | wc -l", mini("3\n")).kind == "output"
    # grep over a command's output: what the command printed, filtered
    s = summarize("python repro.py 2>&1 | grep -i error", mini("ValueError: bad tz\n"))
    assert s.kind == "error" and "ValueError: bad tz" in s.text


def test_a_filtered_command_exit_status_is_the_filters() -> None:
    # a passing build piped into tail: no error line, so no error
    assert summarize("make 2>&1 | tail -3", mini("gcc -c a.c\ngcc -o app a.o\n")).kind == "output"
    # a failing status of a pipeline is still a failure
    s = summarize("set -o pipefail; make 2>&1 | tail -3", mini("make: *** [Makefile:3: all] Error 2\n", 2))
    assert s.kind == "error"


def test_a_shell_syntax_error_after_a_script_is_its_verdict() -> None:
    # the script ran and printed, then bash refused what followed: exit 2 must not read as a success
    cmd = "python - <<'PY'\nopen('a.py', 'w').write('x')\nprint('fixed indentation')\nPY\n&& git add a.py"
    body = "fixed indentation\nbash: -c: line 5: syntax error near unexpected token `&&'\nbash: -c: line 5: `&& git add a.py'\n"
    s = summarize(cmd, mini(body, rc=2))
    assert s.text == "error: bash: -c: line 5: syntax error near unexpected token `&&'"


def test_ls_a_lists_entries_without_dot_and_dotdot() -> None:
    body = "total 12\ndrwxr-xr-x 4 r r 4096 Jan 1 .\ndrwxr-xr-x 9 r r 4096 Jan 1 ..\n-rw-r--r-- 1 r r 10 Jan 1 setup.py\ndrwxr-xr-x 2 r r 4096 Jan 1 src\n"
    assert summarize("ls -la", mini(body)).text == "2 entries: setup.py, src"


def test_a_listing_names_the_projects_files_before_its_dotfiles() -> None:
    body = "".join(f"-rw-r--r-- 1 r r 1 Jan 1 {n}\n" for n in (".editorconfig", ".git", ".github", "README.rst", "django", "docs", "setup.py"))
    assert summarize("ls -la", mini(body)).text == "7 entries: README.rst, django, docs, setup.py, …"


def test_a_listing_of_an_empty_folder_says_so() -> None:
    body = "total 8\ndrwxr-xr-x 2 r r 4096 Jan 1 .\ndrwxr-xr-x 9 r r 4096 Jan 1 ..\n"
    assert summarize("ls -la", mini(body)).text == "no entries"  # was "0 entries:"


def test_a_script_that_writes_files_is_summarized_by_what_it_printed_first_and_last() -> None:
    cmd = "cat <<'EOF' > check.py\nimport sympy\nprint(sympy.Union)\nEOF\npython check.py"
    body = (
        "/testbed/sympy/core/basic.py:3: DeprecationWarning: Using or importing the ABCs is deprecated\n"
        "  from collections import Mapping\nUnion built\nchecking 3 sets\nAll checks passed\n"
    )
    s = summarize(cmd, mini(body))
    assert s.kind == "edit" and s.text == 'edit of check.py; printed "Union built" … "All checks passed"'


@pytest.mark.parametrize("depth", [1, 4, 6, 9])
def test_an_edit_of_a_long_path_never_leaves_a_quote_open(depth: int) -> None:
    """Claude Code's edits print the path again: the quotes shrink to the room the path leaves
    (the line's limit cut them open in 239 of 3,419 notes of real logs: 'printed "The file /ho…')."""
    path = "/home/u/" + "/".join(f"dir_{i:02d}_of_the_project" for i in range(depth)) + "/session_hook_controller.ex"
    printed = f"The file {path} has been updated. Here's the result:\n" + "".join(f"{i:6}\u2192line {i}\n" for i in range(1, 40))
    s = summarize(f"sed -i 's/a/b/' {path}", mini(printed))
    assert s.kind == "edit" and s.text.startswith("edit of /home/u/dir_00") and len(s.text) <= MAX_CHARS
    assert s.text.count('"') % 2 == 0, s.text
    assert "printed" not in s.text or s.text.endswith('"39\u2192line 39"')


@pytest.mark.parametrize("depth", [0, 3])
def test_a_timed_out_commands_quotes_leave_room_for_its_exception(depth: int) -> None:
    """mini 2.x puts the exception first: the quotes were fitted to the whole line and then cut open."""
    exc = "<exception>Command timed out after 60 seconds and was killed by the harness</exception>\n"
    path = "/home/u/" + "".join(f"dir_{i:02d}_of_it/" for i in range(depth)) + "ctl.ex"
    edit = f"The file {path} has been updated. Here is the result:\n" + "".join(f"{i:6}\u2192line {i}\n" for i in range(1, 40))
    for command, printed in [(f"sed -i 's/a/b/' {path}", edit), ("python run.py", "x" * 200 + "\nmiddle\n" + "y" * 200)]:
        s = summarize(command, f"<returncode>-1</returncode>\n{exc}<output>\n{printed}</output>")
        assert s.text.startswith("Command timed out") and len(s.text) <= MAX_CHARS
        assert s.text.count('"') % 2 == 0, s.text


def test_a_context_commands_answer_is_not_named_twice_in_its_note() -> None:
    from refold.messages import mask_note

    from builders import reply, text_history

    h = text_history([(reply("look again", "-", "restore 1"), "[context-manager] Step 1 restored from history ...")])
    note = mask_note(h.step(1), 0, reversible=True)
    assert note.count("restore 1`") == 2 and "nothing run" in note  # `restore 1` hidden ... `restore 1` shows it
