"""Mask notes (refold.messages.mask_note) and the prompt texts that explain them."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.mechanisms.summary_wrap import unwrap
from refold.messages import mask_note
from refold.prompts import ledger_section, span_section, system_section
from refold.protocol import CM
from refold.render import Renderer
from refold.types import Shown

from builders import SYSTEM, TASK, reply, text_history, tool_history

GREP = "<returncode>0</returncode>\n<output>\nsrc/a.py:3:foo\nsrc/b.py:9:foo()\nsrc/b.py:12:foo\n</output>"
TEST = (
    "<returncode>1</returncode>\n<output>\n" + "x\n" * 40 + "FAILED tests/t.py::test_foo - assert 0\n"
    "==== 1 failed, 9 passed in 0.3s ====\n</output>"
)


def test_note_names_step_command_status_size_and_summary() -> None:
    h = text_history([(reply("search", "-", 'grep -rn "foo" src'), GREP)])
    note = mask_note(h.step(1), 0, reversible=True)
    assert note.startswith(f"[step 1]\n{CM} ")
    assert "\n" not in note.split("\n", 1)[1]  # one line after the label
    assert note.split("\n", 1)[1].startswith(f'{CM} Output of `grep -rn "foo" src` hidden ')
    assert "(exit 0; 3 lines)" in note  # the command's own lines, not the wrapper's; chars only when lines are long
    assert "): 3 hits in 2 files (src/a.py, src/b.py)." in note
    assert note.endswith("`restore 1` shows it.")


def test_a_format_error_after_a_tool_output_is_not_counted_as_an_output() -> None:
    h = History([SYSTEM, TASK])
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}
    error = {"role": "user", "content": "No tool calls found in the response. Every response MUST include at least one tool call."}
    obs = [{"role": "tool", "tool_call_id": "c1", "content": TEST}, error, error]
    step = h.append({"role": "assistant", "content": "", "tool_calls": [call]}, obs)
    note = mask_note(step, 0, reversible=True)
    assert f"{CM} Output of `pytest -q` hidden" in note and " of 3" not in note


def test_note_sizes_count_only_that_output() -> None:
    h = tool_history([("run both", [('grep -rn "foo" src', GREP), ("pytest -q", TEST)])])
    step = h.step(1)
    first, second = mask_note(step, 0, reversible=True), mask_note(step, 1, reversible=True)
    assert (
        "Output 1 of 2 of `grep" in first and "(exit 0; 3 lines)" in first and "`pytest" not in first
    )
    assert "Output 2 of 2 of `pytest -q` hidden" in second
    assert "(exit 1; 42 lines)" in second  # 40 + the failure + the summary: <returncode>/<output> are not output
    assert "): tests: 1 failed, 9 passed; first failure: tests/t.py::test_foo." in second


def test_a_note_counts_a_reads_trailing_blank_lines() -> None:
    # sed -n '242,262p' of a file whose line 262 is empty prints 21 lines, the last one blank
    rows = [f"    value_{i} = compute({i})  # file line {i}" for i in range(242, 262)] + [""]
    out = "<returncode>0</returncode>\n<output>\n" + "\n".join(rows) + "\n</output>"
    note = mask_note(text_history([(reply("read", "-", "sed -n '242,262p' src/m.py"), out)]).step(1), 0, reversible=True)
    assert "(exit 0; 21 lines)" in note and "lines 242-262" in note
    assert unwrap(out).lines == 21 and unwrap(out).body.count("\n") == 19  # the body still ends at its text
    # a harness's trailer after the output is not a line the command printed
    swe = "\n".join(rows[:-1]) + "\n\n(Open file: /m.py)\n(Current directory: /repo)\nbash-$"
    assert unwrap(swe).lines == 20


def test_a_note_names_a_read_file_whose_name_holds_spaces() -> None:
    """``sed -n '40,180p' /d/Demo\\ Prep.vtt`` (a real Codex log): the note said only "lines 40-180",
    four such notes of one step not telling which file; a quoted name was cut at its first space."""
    rows = "\n".join(f"00:{i:02d} speaker {i}" for i in range(40, 181))
    out = f"<returncode>0</returncode>\n<output>\n{rows}\n</output>"
    for cmd in [r"sed -n '40,180p' /home/me/Downloads/Demo\ Prep\ notes.vtt", "sed -n '40,180p' '/home/me/Downloads/Demo Prep notes.vtt'"]:
        note = mask_note(text_history([(reply("read", "-", cmd), out)]).step(1), 0, reversible=True)
        assert "/home/me/Downloads/Demo Prep notes.vtt lines 40-180" in note, note
    short = mask_note(text_history([(reply("read", "-", r"cat /a/b\ c.py"), out)]).step(1), 0, reversible=True)
    assert "hidden (exit 0; 141 lines): /a/b c.py lines 1-141" in short, short  # was "c.py lines ..."


def test_a_note_counts_chars_when_lines_are_long() -> None:
    minified = "<returncode>0</returncode>\n<output>\n" + '{"k": 1, ' * 300 + "}\n</output>"
    note = mask_note(text_history([(reply("read", "-", "cat data.json"), minified)]).step(1), 0, reversible=True)
    assert f"(exit 0; 1 line, {len(minified.split(chr(10))[2]):,} chars)" in note


def test_irreversible_note_says_so() -> None:
    h = text_history([(reply("search", "-", "grep -rn foo src"), GREP)])
    note = mask_note(h.step(1), 0, reversible=False)
    assert "cannot be restored" in note and "restore 1" not in note


def test_a_message_without_a_command_gets_no_command() -> None:
    h = tool_history([("run", [("ls", "<returncode>0</returncode>\n<output>\na\nb\n</output>")])])
    step = h.append(
        {"role": "assistant", "content": "oops"},
        [{"role": "user", "content": "No tool calls found in the response."}],
    )
    note = mask_note(step, 0, reversible=True)
    assert (
        note
        == f"[step 2]\n{CM} Output hidden (1 line): format error: the reply's command was not run. `restore 2` shows it."
    )


def test_rendered_mask_notes_carry_summaries() -> None:
    body = "".join(f"def f{n}():\n    pass\n" for n in range(60))
    steps = [
        (
            reply(f"step {i}", "-", f"cat src/f{i}.py"),
            f"<returncode>0</returncode>\n<output>\n{body}</output>",
        )
        for i in range(1, 13)
    ]
    h = text_history(steps)
    r = Renderer(Config.parse(mask_after=2)).render(h)
    notes = [m["content"] for m, o in zip(r.messages, r.origins, strict=True) if o.shown == Shown.NOTE]
    assert notes, "masking should have hidden some outputs"
    for text in notes:
        m = re.match(r"\[step (\d+)\]\n", text)
        assert m is not None
        i = m.group(1)
        assert (
            f"`cat src/f{i}.py`" in text
            and "(exit 0; 120 lines)" in text  # the file's lines, without mini's wrapper
            and "): lines 1-120: def f0 L1, def f1 L3" in text  # the command names the file
        )


# ---- prompt texts ---------------------------------------------------------------------------------


def test_system_section_explains_every_omission_and_restore() -> None:
    text = system_section(3)
    for word in (
        "pointer",
        "trim",
        "fold note",
        "mask note",
        "`restore <step>`",
        "STALE",
        CM,
        "PROGRESS:",
        "at most every 3 steps",
    ):
        assert word in text, word
    assert "where the same content still is" not in text
    assert "mask note" not in system_section(3, masking=False)
    assert "at most every" not in system_section(3, chunk=False)
    irreversible = system_section(3, reversible=False)
    assert "cannot be brought back" in irreversible and "`restore <step>`" not in irreversible


def test_span_and_ledger_sections_say_how_their_omissions_look() -> None:
    assert f"one `{CM}` block" in span_section()
    text = ledger_section("128k")
    assert "one-line summary" in text and "one-line marker" in text and f"`{CM} context: N% of 128k`" in text


@settings(max_examples=150, deadline=None)
@given(
    calls=st.lists(st.tuples(st.text(max_size=60), st.text(max_size=300)), min_size=1, max_size=4),
    reversible=st.booleans(),
)
def test_every_mask_note_is_a_label_and_one_line(calls: list[tuple[str, str]], reversible: bool) -> None:
    step = tool_history([("run", calls)]).step(1)
    for j, (_, out) in enumerate(calls):
        note = mask_note(step, j, reversible=reversible)
        label, _, body = note.partition("\n")
        assert label == "[step 1]" and body.startswith(f"{CM} Output") and "\n" not in body
        u = unwrap(out)  # the size is the printed output's, without a wrapper
        printed, lines = u.body, u.lines  # blank lines it printed after its text count too
        size = f"{lines:,} line{'' if lines == 1 else 's'}"
        if len(printed) > 200 * max(lines, 1):
            size += f", {len(printed):,} chars"
        assert f"{size})" in body
        assert ("`restore 1` shows it." in body) == reversible


def _tool_step(name: str, args: dict[str, object], output: str) -> History:
    h = History([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}])
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    h.append({"role": "assistant", "content": "", "tool_calls": [call]}, [{"role": "tool", "tool_call_id": "c1", "content": output}])
    return h


def test_a_function_tools_read_note_gives_its_size_once() -> None:
    code = "\n".join(f"def g{j}(): return {j}" for j in range(40))
    note = mask_note(_tool_step("read_file", {"path": "m1.py"}, code).step(1), 0, reversible=True)
    assert f"{CM} Output of `read_file m1.py` hidden (40 lines): def g0, def g1" in note
    assert note.count("lines)") == 1 and "(40 lines): (" not in note
    plain = mask_note(_tool_step("read_file", {"path": "notes.txt"}, "a\nb\nc\n").step(1), 0, reversible=True)
    assert 'hidden (3 lines): "a" … "c".' in plain  # nothing to outline: what it printed, no second count
    shell = text_history([(reply("read", "-", "cat lib/m.py | head -n 20"), "<returncode>0</returncode>\n<output>\n" + code[:400] + "\n</output>")])
    text = mask_note(shell.step(1), 0, reversible=True)
    assert "lines): (" not in text and "lines 1-" in text  # 'cat f | head' starts at the file's line 1


def test_a_note_says_whose_exit_status_a_filtered_command_has() -> None:
    make = "gcc -c a.c\n" * 30 + "make: *** [Makefile:3: all] Error 2\n"
    h = text_history([(reply("build", "-", "make 2>&1 | tail -40"), f"<returncode>0</returncode>\n<output>\n{make}</output>")])
    note = mask_note(h.step(1), 0, reversible=True)
    assert "hidden (exit 0 of tail; 31 lines): error: make: *** [Makefile:3: all] Error 2." in note
    read = text_history([(reply("read", "-", "nl -ba a.py | sed -n '1,3p'"), "<returncode>0</returncode>\n<output>\n     1\tx = 1\n</output>")])
    assert "(exit 0; 1 line)" in mask_note(read.step(1), 0, reversible=True)  # a read's status: no remark


def test_with_content_replaces_responses_text_parts_too() -> None:
    """A Responses message's ``input_text`` part is text: replaced, not kept beside the new text (the
    proxy sent a Codex user message twice), while an image stays."""
    from refold.messages import with_content

    image = {"type": "input_image", "image_url": "data:image/png;base64,AA"}
    m = {"role": "user", "content": [{"type": "input_text", "text": "use v2"}, image, {"type": "output_text", "text": "x"}]}
    assert with_content(m, "[step 4]\nuse v2x")["content"] == [{"type": "text", "text": "[step 4]\nuse v2x"}, image]
