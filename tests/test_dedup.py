"""Dedup (refold.mechanisms.dedup): the claims its stubs make must be true, and deduplicated outputs
an agent can trust (verdicts kept, few markers, edits respected, true line numbers)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.mechanisms.dedup import DedupIndex, _extend
from refold.messages import mask_note
from refold.policy import Policy
from refold.protocol import CM
from refold.render import Renderer
from refold.shell import analyze
from refold.shell_info import CommandInfo
from refold.types import Shown, content_text

from builders import reply, seed_config, text_history


def code(n: int, start: int = 1, tag: str = "v") -> list[str]:
    """Distinct Python lines: a class every 10 lines, methods in between."""
    out = []
    for i in range(start, start + n):
        if i % 10 == 1:
            out.append(f"class Model{i}(Base):")
        elif i % 10 == 2:
            out.append(f"    def method_{i}(self, value_{tag}):")
        else:
            out.append(f"        return value_{tag} + {i} * 1000  # line {i} of the module, long enough")
    return out


def mini(body: str, rc: int = 0) -> str:
    return f"<returncode>{rc}</returncode>\n<output>\n{body}\n</output>"


def run(index: DedupIndex, steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(command, output) per step through the index as the renderer drives it: (kind, text) back."""
    out = []
    for step, (command, body) in enumerate(steps, start=1):
        info = analyze(command)
        index.note_writes(step, info)
        r = index.process(step, body, info)
        out.append((r.kind, r.text))
    return out


def outline_entries(text: str) -> list[tuple[int, str]]:
    return [(int(m.group(1)), m.group(2).strip()) for m in re.finditer(r"^  L(\d+) (.*)$", text, re.MULTILINE)]


# ---- verdicts ---------------------------------------------------------------------------------


def test_a_stub_counts_the_outputs_lines_as_a_mask_note_does() -> None:
    out = mini("\n".join(code(30)) + "\n")  # 30 lines and a blank one; the wrapper adds 3 more
    (_, first), (kind, stub) = run(DedupIndex(), [("cat m.py", out), ("cat m.py", out)])
    assert kind == "stub" and f"{CM} Output omitted (31 lines):" in stub
    note = mask_note(text_history([(reply("read", "-", "cat m.py"), out)]).step(1), 0, reversible=True)
    assert "(exit 0; 31 lines)" in note


def test_trimmed_mini_output_keeps_its_returncode() -> None:
    lines = code(60)
    first = mini("\n".join(lines), 1)
    # the same output again with a new tail: the repeat is cut, its returncode line stays
    second = mini("\n".join(lines) + "\nNameError: name 'x' is not defined\n" + "new output " * 20, 1)
    kinds = run(DedupIndex(), [("python m.py", first), ("python m.py", second)])
    kind, text = kinds[1]
    assert kind == "trimmed"
    assert text.splitlines()[0] == "<returncode>1</returncode>"
    assert "NameError: name 'x' is not defined" in text


def test_a_run_never_swallows_a_verdict_line_in_the_middle() -> None:
    lines = code(80)
    body = "\n".join(lines[:40] + ["exit status 3"] + lines[40:])
    index = DedupIndex()
    run(index, [("./build.sh", body)])
    r = index.process(2, body + "\n" + "new output " * 20, analyze("./build.sh"))
    assert r.kind == "trimmed" and "exit status 3" in r.text.split("\n")
    assert r.text.count(f"{CM} ") == 2  # one marker each side of the kept line


def test_test_run_keeps_its_last_lines() -> None:
    log = [f"tests/test_mod.py::test_case_{i} PASSED                                   [{i}%]" for i in range(40)]
    first = "\n".join([*log, "", "===== 40 passed in 1.20s ====="])
    second = "\n".join([*log[:20], "a new warning line " * 5, *log[20:], "", "===== 40 passed in 1.20s ====="])
    r = run(DedupIndex(), [("python -m pytest tests", first), ("python -m pytest tests", second)])
    kind, text = r[1]
    assert kind == "trimmed"
    assert text.split("\n")[-3:] == second.split("\n")[-3:]


def test_no_whole_stub_across_a_different_verdict() -> None:
    failing_body, passing_body = "\n".join(code(40, 1, "a")), "\n".join(code(40, 1, "b"))
    index = DedupIndex()
    run(index, [("python check.py", mini(passing_body, 0)), ("python check.py", mini(failing_body, 1))])
    # half of each: every line is shown somewhere, but a stub citing both a passing and a failing
    # run would leave its own verdict unreadable
    mixed = "\n".join(passing_body.split("\n")[:20] + failing_body.split("\n")[20:])
    r = index.process(3, mini(mixed, 0), analyze("python check.py"))
    assert r.kind != "stub"
    assert "<returncode>0</returncode>" in r.text
    # the same verdict may be stubbed whole
    assert index.process(4, mini(failing_body, 1), analyze("python check.py")).kind == "stub"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(5, 30)), min_size=1, max_size=8), st.integers(0, 2))
def test_at_most_two_markers_and_the_verdict_survives(pieces: list[tuple[int, int]], rc: int) -> None:
    """Any output stitched from pieces of earlier outputs gets <= 2 markers and keeps its returncode."""
    sources = [code(120, 1 + 1000 * k, tag=f"s{k}") for k in range(6)]
    index = DedupIndex()
    for k, src in enumerate(sources, start=1):
        index.note_writes(k, analyze("python gen.py"))
        index.process(k, "\n".join(src), analyze("python gen.py"))
    body: list[str] = []
    for k, n in pieces:
        at = (n * 7) % 80
        body += sources[k][at : at + n] + [f"new line {len(body)} that nobody has seen before"]
    r = index.process(99, mini("\n".join(body), rc), analyze("python gen.py"))
    assert len(re.findall(re.escape(CM) + r" \d+ lines omitted here", r.text)) <= 2
    if r.kind != "stub":
        assert f"<returncode>{rc}</returncode>" in r.text


# ---- writes -----------------------------------------------------------------------------------


def test_swe_agent_edit_of_the_open_file_invalidates_its_views() -> None:
    window = "[File: /repo/m.py (200 lines total)]\n" + "\n".join(f"{i}:{ln}" for i, ln in enumerate(code(40), 1))
    steps = [
        ("open m.py", window),
        ("edit 5:5\n        return value_v + 5  # a > b inside the body is no redirect\nend_of_edit", "File updated."),
        ("goto 1", window),  # same text shown after the edit: must not point at the pre-edit view
    ]
    kinds = run(DedupIndex(), steps)
    assert kinds[2][0] == "received"
    # without the edit the same view is a repeat
    again = run(DedupIndex(), [steps[0], ("goto 1", window)])
    assert again[1][0] == "stub"


def test_an_edit_before_any_open_invalidates_every_file_view() -> None:
    index = DedupIndex()
    view = "\n".join(code(40))
    run(index, [("cat a.py", view)])
    index.note_writes(2, analyze("edit 1:1\nx\nend_of_edit"))
    assert index.process(3, view, analyze("cat a.py")).kind == "received"


def test_edit_tools_count_as_writes() -> None:
    view = "\n".join(code(40))
    for tool, args in [
        ("str_replace_based_edit_tool", '{"command": "str_replace", "path": "a.py", "old_str": "x", "new_str": "y"}'),
        ("str_replace_editor", '{"command": "create", "path": "a.py", "file_text": "a > b"}'),
        ("apply_patch", '{"input": "*** Begin Patch\\n*** Update File: a.py\\n@@\\n-x\\n+y\\n*** End Patch"}'),
        ("bash", "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n*** End Patch\nEOF"),
        ("bash", "sed -i 's/a/b/' a.py"),
        ("bash", "cat > a.py <<'EOF'\nx = 1\nEOF"),
    ]:
        index = DedupIndex()
        run(index, [("cat a.py", view)])
        index.note_writes(2, analyze(args, tool))
        assert index.process(3, view, analyze("cat a.py")).kind == "received", tool


# ---- outline line numbers ---------------------------------------------------------------------


def _stubbed_outline(command: str, body: str, info: CommandInfo | None = None) -> list[tuple[int, str]]:
    index = DedupIndex()
    run(index, [(command, body)])
    r = index.process(2, body, info or analyze(command))
    assert r.kind == "stub"
    return outline_entries(r.text)


def test_outline_numbers_are_file_lines_in_every_shape() -> None:
    lines = code(40, 101)  # lines 101-140 of a file
    truth = {ln.strip(): 101 + i for i, ln in enumerate(lines) if ln.lstrip().startswith(("class", "def"))}
    shapes = {
        "nl -ba m.py | sed -n '101,140p'": mini("\n".join(f"{n:6d}\t{ln}" for n, ln in enumerate(lines, 101))),
        "cat -n m.py": "\n".join(f"{n:6d}\t{ln}" for n, ln in enumerate(lines, 101)),
        "sed -n '101,140p' m.py": mini("\n".join(lines)),
        "goto 120": "[File: /repo/m.py (900 lines total)]\n(100 more lines above)\n"
        + "\n".join(f"{n}:{ln}" for n, ln in enumerate(lines, 101))
        + "\n(760 more lines below)\n(Open file: /repo/m.py)\n(Current directory: /repo)\nbash-$",
    }
    for command, body in shapes.items():
        entries = _stubbed_outline(command, body)
        assert entries, command
        for line, sig in entries:
            assert truth[sig] == line, (command, line, sig)


def test_outline_of_a_trimmed_span_uses_file_lines() -> None:
    lines = code(120)
    index = DedupIndex()
    run(index, [("sed -n '1,120p' m.py", mini("\n".join(lines)))])
    # a later read of lines 41-120 of the same file, plus something new
    body = mini("\n".join(lines[40:]) + "\n" + "\n".join(f"new {i} " + "z" * 80 for i in range(3)))
    r = index.process(2, body, analyze("sed -n '41,200p' m.py"))
    assert r.kind == "trimmed"
    for line, sig in outline_entries(r.text):
        assert lines[line - 1].strip() == sig


def test_outline_without_file_lines_says_so() -> None:
    lines = code(40)
    entries_text = run(DedupIndex(), [("python gen.py", "\n".join(lines)), ("python gen.py", "\n".join(lines))])[1][1]
    assert "numbered by line of this output" in entries_text
    for line, sig in outline_entries(entries_text):
        assert lines[line - 1].strip() == sig


# ---- through the renderer ----------------------------------------------------------------------

LOG = "\n".join(f"tests/test_mod.py::test_case_{i} PASSED                                   [{i * 10:3d}%]" for i in range(1, 9))


def test_a_rerun_with_a_new_result_line_is_not_stubbed_as_a_repeat() -> None:
    before = LOG + "\nFAILED tests/test_mod.py::test_add - assert 3 == 4\n==== 1 failed, 8 passed in 0.31s ===="
    after = LOG + "\n==== 9 passed in 0.30s ===="
    steps = [(reply("run", "-", "pytest -q"), before), (reply("fix", "-", "sed -i 's/-/+/' calc.py"), ""), (reply("rerun", "-", "pytest -q"), after)]
    steps += [(reply(f"echo {i}", "-", f"echo {i}"), str(i)) for i in range(4)]
    p = Renderer(seed_config(Policy(k=1))).render(text_history(steps))
    (shown, origin), = [(m, o) for m, o in zip(p.messages, p.origins, strict=True) if o.step == 3 and o.part == "output"]
    text = content_text(shown.get("content"))
    assert "9 passed" in text and "it repeats" not in text  # the new result stays; no false claim
    assert origin.shown is Shown.TRIMMED


def test_an_output_whose_extra_lines_are_shown_by_the_source_is_still_one_stub() -> None:
    steps = [(reply("run", "-", "pytest -q"), LOG + "\n\n"), (reply("rerun", "-", "pytest -q"), "\n" + LOG)]
    steps += [(reply(f"echo {i}", "-", f"echo {i}"), str(i)) for i in range(4)]
    p = Renderer(seed_config(Policy(k=1))).render(text_history(steps))
    (origin,) = [o for o in p.origins if o.step == 2 and o.part == "output"]
    assert origin.shown is Shown.STUB


# ---- verdict lines: the exact regexes run only on lines whose opening could start a verdict, the same
# rows as running them on every line

_VERDICT_WORDS = st.sampled_from(
    ["<returncode>0</returncode>", "exit status 1", "Exited with code 2", "return code", "RETURNCODE", "command exited",
     "error: x", "Traceback (most recent call last):", "TRACEBACK (MOST RECENT CALL LAST):", "=== 3 passed in 1s ===",
     "FAILED", "ERROR", "PASSED", "OK", "FAIL", "Ran 3 tests in 0.1s", "2 failed", "Tests passed", "ValueError: bad",
     "Exception: x", " ", "  ", "\t", "x", "=", "return x", "token", "\u017fkipped", "e\u0130rror: ", "\u00a0", "\x1c",
     "\u0663 passed", "\u212a", "\u0131", "C", "t", "r", "c", "e", "<"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_VERDICT_WORDS, max_size=4).map("".join), max_size=8), st.sampled_from([None, "read", "test", "command"]))
def test_verdict_rows_equal_trying_every_line(lines: list[str], kind: str | None) -> None:
    from refold.mechanisms import output_verdict
    from refold.shell_info import CommandInfo

    info = None if kind is None else CommandInfo(kind, (), (), False)
    runs_something = info is None or info.kind not in ("read", "search")
    every = {i for i, ln in enumerate(lines) if output_verdict._VERDICT_I.match(ln) or (runs_something and output_verdict._VERDICT.match(ln))}
    got = output_verdict.verdict_rows(lines, info)
    if info is not None and info.kind == "test":
        got -= {i for i in range(len(lines)) if lines[i].strip() and lines[i].strip() != "</output>"}
        every -= {i for i in range(len(lines)) if lines[i].strip() and lines[i].strip() != "</output>"}
    assert got == every


@settings(max_examples=300)
@given(
    a=st.lists(st.sampled_from("xyz"), max_size=60), b=st.lists(st.sampled_from("xyz"), max_size=60),
    p=st.integers(0, 60), q=st.integers(0, 60),
)
def test_extend_equals_comparing_line_by_line(a: list[str], b: list[str], p: int, q: int) -> None:
    p, q = min(p, len(a)), min(q, len(b))
    length = 0
    while p + length < len(a) and q + length < len(b) and a[p + length] == b[q + length]:
        length += 1
    start = min(length, 3)  # any matched start the caller knows
    assert _extend(a, p, b, q, start) == length
