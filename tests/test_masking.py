"""Condensed old replies: PROGRESS (or first) line, the names the hidden reasoning mentioned, commands byte-exact."""

from __future__ import annotations

from refold.history import History
from refold.mechanisms.masking import condensed_reply

from builders import SYSTEM, TASK, reply, text_history


def _condensed(reply: str) -> str | None:
    """``reply`` as the one step of a history, condensed (min_chars 50, reversible)."""
    step = History([SYSTEM, TASK]).append({"role": "assistant", "content": reply}, [{"role": "user", "content": "out"}])
    return condensed_reply(step, reversible=True, min_chars=50)


def test_condensed_reply_keeps_commands_and_the_names_it_talked_about() -> None:
    reply = (
        "PROGRESS: find the bug\nSTALE: -\nTHOUGHT: The bug is in `django/db/models/query.py` near _filter_or_exclude.\n"
        "QuerySet.update calls bulk_update, see test_bulk_update_large.\nThe rest of a long reasoning.\n" * 3
        + "\n```bash\nsed -n '1,40p' django/db/models/query.py\n```"
    )
    text = _condensed(reply)
    assert text is not None
    # the agent's summary; STALE has done its work; the names sit inside the marker, never on a line
    # of their own that reads as the agent's words
    assert text.startswith("PROGRESS: find the bug\n[context-manager] ") and "\nMentions" not in text
    names = ("django/db/models/query.py", "_filter_or_exclude", "QuerySet", "bulk_update", "test_bulk_update_large")
    assert all(n in text for n in names) and "STALE" not in text
    assert text.endswith("```bash\nsed -n '1,40p' django/db/models/query.py\n```")  # the command, byte-exact
    assert "of reasoning hidden (mentions " in text and ". `restore 1` shows them." in text and len(text) < len(reply)


def test_an_escaped_newline_is_no_name() -> None:
    reply = "THOUGHT: Patch it with a script.\n" + "It writes 'a\\nPY' and calls fix_indent.\n" * 4 + "```bash\nls\n```"
    text = _condensed(reply)
    assert text is not None and "fix_indent" in text and "nPY" not in text


def test_names_a_kept_tool_call_shows_are_not_mentioned() -> None:
    from builders import tool_history

    script = "python fix.py --target write_text"
    text = "THOUGHT: Patch plot.py.\n" + "The script calls write_text and checks keep_na.\n" * 4
    h = tool_history([(text, [(script, "patched")])])
    out = condensed_reply(h.step(1), reversible=True, min_chars=50)
    assert out is not None and "keep_na" in out and "write_text" not in out  # the tool call shows it


def test_a_bare_heading_keeps_the_line_after_it() -> None:
    reply = "DISCUSSION\nThe bug is in `query.py` near _filter_or_exclude.\n" + "More reasoning here.\n" * 10 + "```\nopen query.py\n```"
    text = _condensed(reply)
    assert text is not None and text.startswith("DISCUSSION\nThe bug is in `query.py` near _filter_or_exclude.\n[context-manager] 10 more")


def test_a_reply_is_not_condensed_when_the_marker_outweighs_what_it_hides() -> None:
    reply = "THOUGHT: Read the config loader to see how the mode reaches open().\nOk.\n\n```bash\nls\n```"
    assert _condensed(reply) is None


def test_without_progress_the_first_line_stays() -> None:
    reply = "THOUGHT: The bug is in `query.py` near _filter_or_exclude.\n" + "More reasoning here.\n" * 30 + "```bash\nls\n```"
    text = _condensed(reply)
    assert text is not None and text.startswith("THOUGHT: The bug is in `query.py` near _filter_or_exclude.\n")
    assert text.count("_filter_or_exclude") == 1  # already in the first line: not repeated


def test_an_unlabeled_fence_is_the_command_of_swe_agent_replies() -> None:
    # SWE-agent and CodeR fence their command without a language: it is what the step ran and stays
    reply = (
        "The `mode` parameter was added. Now update the `open` call in from_file.\n" + "More reasoning here.\n" * 8
        + "\n```\nedit 264:265\n    with open(filename, mode=mode) as f:\nend_of_edit\n```"
    )
    text = _condensed(reply)
    assert text is not None
    assert text.endswith("```\nedit 264:265\n    with open(filename, mode=mode) as f:\nend_of_edit\n```")
    assert "end_of_edit" not in text.split("```")[0]  # the command's words are not listed as mentions


def test_quoted_code_is_not_a_command_when_a_shell_block_is_there() -> None:
    reply = "THOUGHT: the function reads\n```\ndef f(): pass\n```\n" + "More reasoning here.\n" * 8 + "```bash\nls\n```"
    text = _condensed(reply)
    assert text is not None and "def f(): pass" not in text and text.endswith("```bash\nls\n```")


def test_a_short_reply_is_not_condensed() -> None:
    h = History([SYSTEM, TASK])
    step = h.append({"role": "assistant", "content": "THOUGHT: look.\n\n```bash\nls\n```"}, [{"role": "user", "content": "a"}])
    assert condensed_reply(step, reversible=True, min_chars=400) is None


def test_names_in_the_hidden_middle_of_a_long_command_are_mentioned() -> None:
    script = "\n".join(
        ["cat <<'EOF' > repro.py", "from django.db import models", "", "class Author(models.Model):"]
        + [f"    field_{i} = models.CharField(max_length={i})" for i in range(10)]
        + ["print(Author._meta.get_fields())", "EOF", "python repro.py"]
    )
    reply = "THOUGHT: Write a reproduction script.\n" + "It builds a model and prints its fields.\n" * 8 + f"\n```bash\n{script}\n```"
    text = _condensed(reply)
    assert text is not None and "lines of this command hidden" in text
    mentions = next(ln for ln in text.splitlines() if "(mentions " in ln)
    assert "max_length" in mentions and "field_3" in mentions  # only in the hidden middle of the heredoc
    assert "repro.py" not in mentions  # visible in the command's kept first line: not repeated


def test_a_short_output_stays_unmasked_however_many_notes_follow_it() -> None:
    from refold.config import Config
    from refold.render import Renderer
    from refold.render.masking_mechanisms import output_chars
    from refold.types import Shown


    assert output_chars("[step 3]\nabc\n[context-manager] Reminder: begin ...\n[context-manager] span S1 open") == 3
    assert output_chars("[context-manager] same as [step 2]") == len("[context-manager] same as [step 2]")
    short = "a.py:1: def translate_url(x):" * 3  # about 90 characters: under mask_min_chars (200)
    steps = [(reply(None, None, f"grep -rn f{i} ."), short) for i in range(1, 16)]  # no protocol: reminders on
    r = Renderer(Config.parse(mask_after=2, reminders=True)).render(text_history(steps))
    outputs = [o for o in r.origins if o.part == "output"]
    assert outputs and all(o.shown != Shown.NOTE for o in outputs)


def test_in_a_step_with_several_outputs_only_those_over_the_floor_become_notes() -> None:
    """The 200-character floor holds per output: a masked step's short output (a one-line echo
    beside a long read) stays as received, since its note would be no shorter than it."""
    from refold.config import Config
    from refold.render import Renderer
    from refold.types import Shown

    from builders import tool_history

    long = "\n".join(f"line {n} of a long listing with words in it" for n in range(40))
    steps = [("Looking.", [(f"cat f{i}.txt", long), (f"echo done {i}", f"done {i}")]) for i in range(1, 16)]
    r = Renderer(Config.parse(mask_after=2, prompt={"deferred": False})).render(tool_history(steps))
    first = [(o.shown, m["content"]) for m, o in zip(r.messages, r.origins, strict=True) if o.step == 1 and o.part == "output"]
    assert [s for s, _ in first] == [Shown.NOTE, Shown.RECEIVED]
    assert first[1][1].startswith("[step 1]\ndone 1") and "restore 1" in first[0][1]


def test_an_output_no_longer_than_its_note_stays_shown() -> None:
    from refold.config import Config
    from refold.render import Renderer
    from refold.types import Shown

    # 201 characters: over the floor, yet its note (command, status, size, summary) is as long
    short = "<returncode>0</returncode>\n<output>\n" + "ok " * 55 + "\n</output>"
    long = "<returncode>0</returncode>\n<output>\n" + "\n".join(f"row {n} of the table" for n in range(40)) + "\n</output>"
    steps = [(reply("p", "-", "python long_script_name_for_the_check.py --verbose"), short), (reply("p", "-", "cat table.txt"), long)]
    steps += [(reply("p", "-", f"echo {i}"), str(i)) for i in range(12)]
    r = Renderer(Config.parse(mask_after=2, reminders=False, boundary={"rule": "fixed"})).render(text_history(steps))
    shown = {o.step: o.shown for o in r.origins if o.part == "output"}
    assert shown[1] is Shown.RECEIVED and shown[2] is Shown.NOTE
