"""What a command reads and writes, judged from its text: the basis of 'never dedup across an edit'."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refold.shell import analyze
from refold.shell_info import OpenFile
from refold.shell_paths import paths_overlap


@pytest.mark.parametrize(
    ("command", "kind", "reads", "writes", "anything"),
    [
        ("nl -ba django/a.py | sed -n '1,100p'", "read", ("django/a.py",), (), False),
        ("sed -i 's/a/b/' x.py && cat x.py", "edit", ("x.py",), ("x.py",), False),
        ("cat <<EOF > t.py\nprint(1)\nEOF", "edit", (), ("t.py",), False),
        ("grep -rn foo src/", "search", ("src",), (), False),
        ("python -m pytest tests/x.py", "test", (), (), False),
        ("git checkout x.py", "edit", (), (), True),
        ("patch -p1 < fix.diff", "edit", ("fix.diff",), (), True),
        ("echo hi > /dev/null", "command", (), (), False),
        ("python3 - <<'EOF'\ns = open('a.py').read()\nopen('a.py', 'w').write(s)\nEOF", "edit", (), (), True),
        ("python3 - <<'EOF'\nprint(open('a.py').read())\nEOF", "command", (), (), False),
        ("python -c \"open('a.py','w').write('x')\"", "edit", (), (), True),
        ("echo x | tee -a log.txt", "edit", (), ("log.txt",), False),
    ],
)
def test_analyze(command: str, kind: str, reads: tuple[str, ...], writes: tuple[str, ...], anything: bool) -> None:
    info = analyze(command)
    assert (info.kind, info.reads, info.writes, info.writes_anything) == (kind, reads, writes, anything)


def test_paths_overlap() -> None:
    assert paths_overlap("/testbed/django/a.py", "django/a.py")
    assert paths_overlap("django", "django/a.py")
    assert not paths_overlap("django/a.py", "django/b.py")


@pytest.mark.parametrize(
    ("command", "writes", "anything"),
    [
        ("python -c \"print(1 > 0)\"", (), False),
        ("python -c 'x = a >> b'", (), False),
        ("grep -n 'a > b' src/x.py", (), False),
        ("echo \"a > b\" | cat", (), False),
        ("cat <<'EOF' > t.py\nif a > b:\n    x >> 2\nEOF", ("t.py",), False),
        ("cat <<'EOF' > t.py\nx\nEOF\npython t.py > log.txt 2>&1", ("t.py", "log.txt"), False),
        ("edit 5:7\n    if a > b:\n        print(x, file=open('f', 'w'))\nend_of_edit", (), False),
        ("echo x 2> err.txt; ls >&2", ("err.txt",), False),
        ("bash -lc \"cat > t.py <<'PY'\nx\nPY\"", ("t.py",), False),
        ("echo $(cat a.py > b.py)", ("b.py",), False),
        ("mv a.py b.py", ("a.py", "b.py"), False),
        ("create reproduce.py", ("reproduce.py",), False),
        ("str_replace_editor create /repo/x.py --file_text 'a > b'", ("/repo/x.py",), False),
        ("apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: src/a.py\n*** Add File: n.py\n*** End Patch\nEOF",
         ("src/a.py", "n.py"), False),
        ("git apply <<'EOF'\n--- a/src/x.py\n+++ b/src/x.py\n@@\nEOF", ("src/x.py",), False),
        ("git apply fix.diff", (), True),
    ],
)
def test_writes_and_what_is_data(command: str, writes: tuple[str, ...], anything: bool) -> None:
    info = analyze(command)
    assert (info.writes, info.writes_anything) == (writes, anything)


_CODE = st.text(st.sampled_from(list("ab >|&;<'\"\\$()`\n x1")), max_size=40)


@given(_CODE)
def test_code_in_a_heredoc_or_an_edit_body_is_never_a_redirect(code: str) -> None:
    body = "\n".join(line for line in code.split("\n") if line.strip() not in ("EOF", "end_of_edit"))
    assert analyze(f"cat <<'EOF' > out.py\n{body}\nEOF").writes == ("out.py",)
    info = analyze(f"edit 1:2\n{body}\nend_of_edit")
    assert info.writes == () and info.open_writes and not info.writes_anything


@given(st.text(st.sampled_from(list("ab >|&;<$()`\n x1")), max_size=40))
def test_code_in_single_quotes_is_never_a_redirect(code: str) -> None:
    quoted = code.replace("'", "")
    assert analyze(f"python -c '{quoted}'").writes == ()
    assert analyze(f"grep -rn '{quoted}' src/").writes == ()


@pytest.mark.parametrize(
    ("tool", "args", "writes", "open_writes"),
    [
        ("str_replace_based_edit_tool", '{"command": "str_replace", "path": "/t/a.py", "old_str": "a > b"}', ("/t/a.py",), False),
        ("str_replace_editor", '{"command": "insert", "path": "a.py", "insert_line": 3, "new_str": "x"}', ("a.py",), False),
        ("apply_patch", '{"input": "*** Begin Patch\\n*** Update File: a/b.py\\n*** End Patch"}', ("a/b.py",), False),
        ("write_file", '{"path": "x.md", "content": "hi"}', ("x.md",), False),
        ("Edit", '{"file_path": "/a/b.py", "old_string": "x", "new_string": "y"}', ("/a/b.py",), False),
        ("create", '{"filename": "r.py"}', ("r.py",), False),
        ("edit", '{"search": "a", "replace": "b"}', (), True),  # SWE-agent's windowed editor
        ("insert", '{"text": "x", "line": 3}', (), True),
    ],
)
def test_edit_tools(tool: str, args: str, writes: tuple[str, ...], open_writes: bool) -> None:
    info = analyze(args, tool)
    assert info.kind == "edit" and info.writes == writes and info.open_writes == open_writes


def test_open_file_threads_swe_agent_commands() -> None:
    state = OpenFile()
    seen = [state.advance(analyze(c)) for c in ("open a.py", "goto 50", "edit 1:2\nx\nend_of_edit", "create b.py", "edit 1:1\ny\nend_of_edit", "scroll_down")]
    assert seen[1].reads == ("a.py",) and seen[2].writes == ("a.py",)
    assert seen[3].writes == ("b.py",) and seen[4].writes == ("b.py",) and seen[5].reads == ("b.py",)
    assert OpenFile().advance(analyze("edit 1:2\nx\nend_of_edit")).writes_anything  # no file known


@pytest.mark.parametrize(
    ("command", "first"),
    [
        ("cat a.py", 1), ("sed -n '40,80p' a.py", 40), ("nl -ba a.py | sed -n '240,520p'", 240),
        ("cat a.py | sed -n '10,20p'", 10), ("head -n 30 a.py", 1), ("tail -n +5 a.py", 5),
        ("awk 'NR>=10 && NR<=20' a.py", 10), ("cd /x && sed -n '5,9p' a.py", 5),
        ("sed -n '1,5p;9,12p' a.py", None), ("cat a.py b.py", None), ("tail -20 a.py", None), ("grep x a.py", None),
        ("cat -n a.py; echo $?", 1), ("nl -ba a.py | sed -n '10,20p' && echo ok", 10), ("cat a.py; cat b.py", None),
    ],
)  # fmt: skip
def test_first_line_of_a_file_read(command: str, first: int | None) -> None:
    assert analyze(command).first_line == first


def test_megabyte_commands_are_analyzed_in_linear_time() -> None:
    import time

    t0 = time.perf_counter()
    analyze("cat <<'EOF' > big.py\n" + "x = a > b  # c << d\n" * 50_000 + "EOF")
    analyze('python -c "' + "print(a > b); " * 70_000 + '"')
    analyze("edit 1:2\n" + "    if a > b: return c >> 2\n" * 35_000 + "end_of_edit")
    analyze("x" * 1_000_000)  # the path regex this replaced was quadratic on a long word
    assert time.perf_counter() - t0 < 2.0  # generous: bench_parse.py measures the real figures


# ---- pipelines: the kind is the producer's, filters only shape it ----------------------------


@pytest.mark.parametrize(
    ("command", "kind", "reads", "writes", "exit_of"),
    [
        ("make 2>&1 | tail -40", "command", (), (), "tail"),
        ("python repro.py 2>&1 | head -40", "command", (), (), "head"),
        ("python repro.py |& grep -A 3 Error", "command", (), (), "grep"),
        ("python -m pytest tests/ 2>&1 | tail -30", "test", (), (), "tail"),
        ("cat a.py | head -n 20", "read", ("a.py",), (), "head"),
        ("nl -ba a.py | sed -n '10,20p'", "read", ("a.py",), (), "sed"),
        ("cat a.py | grep -n def", "search", ("a.py",), (), "grep"),
        ("grep -rn x . | sort | uniq | head", "search", (".",), (), "head"),
        ("cat a.py | wc -l", "command", ("a.py",), (), "wc"),
        ("make |& tee build.log", "command", (), ("build.log",), "tee"),
        ("echo x | tee -a log.txt", "edit", (), ("log.txt",), "tee"),
        ("make 2>&1 | tail -40 > out.txt", "edit", (), ("out.txt",), "tail"),
        ("make 2>&1 | tail -40; echo $?", "command", (), (), "tail"),  # $? is tail's
        ("make && echo ok", "command", (), (), None),
        ("find . -name '*.py' | xargs grep -n foo", "search", (".",), (), None),  # xargs: grep reads files
        ("cat a.py | grep -A 3 foo b.py", "search", ("a.py", "b.py"), (), None),  # grep with a file reads it
        ("git log | head -5", "search", (".",), (), "head"),
        ("pip list | grep django", "command", (), (), "grep"),
        ("make 2>&1 |\n  tail -5", "command", (), (), "tail"),  # a pipe continues on the next line
        ("ls | sed -i s/a/b/ x.txt", "edit", (".",), ("x.txt",), None),  # sed -i edits, never a filter
        ('echo "a | grep b" | cat', "command", (), (), "cat"),  # a quoted bar is no pipe
    ],
)  # fmt: skip
def test_a_pipeline_keeps_its_producers_kind(
    command: str, kind: str, reads: tuple[str, ...], writes: tuple[str, ...], exit_of: str | None
) -> None:
    info = analyze(command)
    assert (info.kind, info.reads, info.writes, info.exit_of) == (kind, reads, writes, exit_of)
    assert info.filtered == (exit_of is not None or ";" in command)


def test_a_closing_echo_is_read_as_a_marker() -> None:
    assert analyze("make; echo $?").echo_after == "$?"
    assert analyze('grep x f; echo "rc=$?"').echo_after == "rc=$?"
    assert analyze("pytest && echo ok").echo_after == "ok"
    assert analyze("echo $?").echo_after is None and analyze("make; echo $HOME").echo_after is None


_PRODUCERS = st.sampled_from(
    ["make", "python repro.py", "python -m pytest -q", "cat a.py", "nl -ba a.py", "grep -rn foo src", "ls -la",
     "git diff", "npm test", "./run.sh --fast", "cargo build"]
)  # fmt: skip
_FILTERS = st.sampled_from(
    ["head", "head -n 40", "tail -40", "tail -n +3", "sort", "sort -k 2", "uniq", "cut -d: -f1", "tr a-z A-Z",
     "sed -n '1,20p'", "sed 's/a/b/'", "awk '{print $1}'", "cat", "less", "column -t", "tee out.log"]
)  # fmt: skip


@given(_PRODUCERS, st.lists(_FILTERS, min_size=1, max_size=4), st.sampled_from(["", " 2>&1", " |&"]))
def test_filters_never_change_what_printed_the_output(producer: str, filters: list[str], redirect: str) -> None:
    """A chain of stdin filters after a command leaves the command's kind and reads (a tee adds a
    write on the side), and the exit status is the last filter's."""
    alone = analyze(producer)
    sep = " |& " if redirect == " |&" else f"{redirect} | "
    piped = analyze(producer + sep + " | ".join(filters))
    assert piped.kind == alone.kind and piped.reads == alone.reads
    assert piped.filtered and piped.exit_of == filters[-1].split()[0]
    assert set(piped.writes) - set(alone.writes) <= {"out.log"}


@pytest.mark.parametrize(
    "command", [r"cat /a/Demo\ Prep.vtt", "cat '/a/Demo Prep.vtt'", r"sed -n '40,180p' /a/Demo\ Prep.vtt", r"head -50 /a/Demo\ Prep.vtt"]
)
def test_a_read_of_a_file_whose_name_holds_a_space_names_it(command: str) -> None:
    """A quoted or escaped name is one word with a space: it was not read as a path at all."""
    assert analyze(command).reads == ("/a/Demo Prep.vtt",)


def test_a_quoted_pattern_with_a_space_is_still_no_path() -> None:
    assert analyze('grep -n "foo bar" x.py').reads == ("x.py",)


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ('git commit -m "fix a.py, b.py"', (".",)),  # was read as the file 'fix a.py, b.py'
        ('git commit -am "Update README.md"', (".",)),
        ("git commit -m fix a.py", ("a.py",)),
        ('grep -e "see notes.txt" a.py', ("a.py",)),
        ('git add "a b.py"', ("a b.py",)),
        ('git grep -n "import os.path" src/', ("src",)),  # the pattern, not a file
        ('git log --grep "fix a.py" -S "x.y z" -- b.py', ("b.py",)),
    ],
)
def test_a_commit_message_or_a_pattern_with_a_space_is_no_path(command: str, reads: tuple[str, ...]) -> None:
    assert analyze(command).reads == reads
