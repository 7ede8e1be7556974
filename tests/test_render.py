"""The renderer against the seed's definition of c_t, on scripted histories."""

from __future__ import annotations

import pytest

from refold.config import Config
from refold.policy import Policy
from refold.protocol import CM
from refold.render import Renderer
from refold.restore import restore_text
from refold.types import Shown

from builders import file_lines, numbered, reply, seed_config, text_history, tool_history


def out(body: str) -> str:
    return f"<returncode>0</returncode>\n<output>\n{body}\n</output>"


@pytest.mark.parametrize(
    ("k", "t", "b"),
    [(3, 0, 0), (3, 1, 0), (3, 3, 0), (3, 5, 0), (3, 6, 3), (3, 8, 3), (3, 9, 6), (3, 100, 96), (1, 5, 4), (5, 12, 5)],
)
def test_boundary_formula(k: int, t: int, b: int) -> None:
    assert Policy(k=k).boundary(t) == b
    assert Policy(k=k, chunk=False).boundary(t) == t


def stale_run(marks: dict[int, str], n: int = 12) -> list[tuple[str, str]]:
    return [
        (reply(f"step {i} work", marks.get(i, "-"), f"echo {i}"), out(f"output of step {i} " + "x" * 50))
        for i in range(1, n + 1)
    ]


def test_stale_folds_only_behind_boundary_and_adjacent_share_a_note() -> None:
    h = text_history(stale_run({5: "3, 4", 6: "5"}))
    r = Renderer(seed_config(Policy()))
    # t=5: boundary 0, nothing folded yet even though 3 and 4 are marked
    p5 = r.render(h, 5)
    assert p5.stats.boundary == 0 and p5.stats.folded_steps == 0
    # t=6: boundary 3 -> step 3 folds; 4 and 5 are marked but still in the tail
    p6 = r.render(h, 6)
    assert p6.stats.boundary == 3 and p6.stats.folded_steps == 1
    # t=9: boundary 6 -> steps 3, 4, 5 fold into ONE note
    p9 = r.render(h, 9)
    notes = [(m, o) for m, o in zip(p9.messages, p9.origins, strict=True) if o.shown is Shown.NOTE]
    assert len(notes) == 1
    msg, origin = notes[0]
    assert origin.covers == (3, 4, 5)
    assert "[step 3] step 3 work" in msg["content"] and "[step 5] step 5 work" in msg["content"]
    assert msg["content"].startswith(CM)
    # folded steps leave reply and output together
    texts = "".join(str(m["content"]) for m in p9.messages)
    assert "output of step 4" not in texts and "PROGRESS: step 4 work" not in texts
    assert "output of step 6" in texts


def test_stale_outside_window_is_ignored() -> None:
    # step 8 names 2 (too old: window is 5..7) and 9 (future); step 7 names 6 (valid)
    h = text_history(stale_run({8: "2, 9", 7: "6"}))
    p = Renderer(seed_config(Policy())).render(h, 12)
    folded = {c for o in p.origins if o.shown is Shown.NOTE for c in o.covers}
    assert folded == {6}


def test_fold_off_and_reminders() -> None:
    h = text_history(stale_run({5: "3"}))
    p = Renderer(seed_config(Policy(fold=False))).render(h, 9)
    assert p.stats.folded_steps == 0
    # replies without the protocol lines get a reminder with the next observation
    h2 = text_history([("no protocol here\n```bash\nls\n```", "a"), (reply("ok", "-", "ls"), "b")])
    msgs = Renderer(seed_config()).render(h2).messages
    assert "Reminder" in msgs[3]["content"] and "Reminder" not in msgs[5]["content"]
    assert msgs[3]["content"].startswith("[step 1]\n")


def test_protocol_section_in_system_prompt() -> None:
    h = text_history(stale_run({}, 2))
    msgs = Renderer(seed_config(Policy(k=4))).render(h).messages
    sys_text = msgs[0]["content"]
    for token in ("PROGRESS:", "STALE:", "[step N]", CM, "restore <step>"):
        assert token in sys_text
    assert "Only the 4 steps" in sys_text
    assert "PROGRESS" not in Renderer(seed_config(Policy(protocol=False))).render(h).messages[0]["content"]


def file_read_steps() -> list[tuple[str, str]]:
    lines = file_lines(120)
    return [
        (reply("read 1-100", "-", "nl -ba calc.py | sed -n '1,100p'"), out(numbered(lines[:100]))),
        (reply("read 40-120", "-", "nl -ba calc.py | sed -n '40,120p'"), out(numbered(lines[39:120], 40))),
        (reply("read again", "-", "nl -ba calc.py | sed -n '1,100p'"), out(numbered(lines[:100]))),
        (reply("run", "-", "python calc.py"), out("ok")),
        (reply("run", "-", "python calc.py"), out("ok")),
        (reply("run", "-", "python calc.py"), out("ok")),
    ]


def test_dedup_whole_and_partial_overlaps() -> None:
    h = text_history(file_read_steps())
    p = Renderer(seed_config(Policy())).render(h)  # t=6, boundary 3: steps 1-3 deduplicated
    by_step = {o.step: (m, o) for m, o in zip(p.messages, p.origins, strict=True) if o.part == "output"}
    assert by_step[1][1].shown is Shown.RECEIVED
    trimmed_msg, trimmed = by_step[2]
    assert trimmed.shown is Shown.TRIMMED and 1 in trimmed.covers
    # lines 40-100 repeat step 1; 101-120 are new and kept
    assert "lines omitted here" in trimmed_msg["content"] and "[step 1]" in trimmed_msg["content"]
    assert "value_101" in trimmed_msg["content"] and "value_55 " not in trimmed_msg["content"]
    stub_msg, stub = by_step[3]
    assert stub.shown is Shown.STUB
    assert "`restore 3`" in stub_msg["content"] and "[step 1]" in stub_msg["content"]
    # the long stubbed span keeps a signature outline with line numbers
    assert "L1" in stub_msg["content"] and "f_func_0" in stub_msg["content"]


def test_edit_between_reads_is_not_deduplicated() -> None:
    lines = file_lines(60)
    edited = [*lines[:30], "    value_30 = patched()", *lines[31:]]
    steps = [
        (reply("read", "-", "cat calc.py"), out("\n".join(lines))),
        (reply("edit", "-", "sed -i 's/compute_f(30/patched(/' calc.py"), out("")),
        (reply("read", "-", "cat calc.py"), out("\n".join(edited))),
        *[(reply("x", "-", "true"), out("")) for _ in range(3)],
    ]
    p = Renderer(seed_config(Policy())).render(text_history(steps))
    shown = {o.step: o.shown for o in p.origins if o.part == "output"}
    assert shown[3] is Shown.RECEIVED
    # the same read without the edit in between is deduplicated
    steps[1] = (reply("look", "-", "ls"), out("calc.py"))
    steps[2] = (reply("read", "-", "cat calc.py"), out("\n".join(lines)))
    p2 = Renderer(seed_config(Policy())).render(text_history(steps))
    assert {o.step: o.shown for o in p2.origins if o.part == "output"}[3] is Shown.STUB


def test_no_stub_points_at_a_folded_step() -> None:
    lines = file_lines(80)
    steps = [
        (reply("read", "-", "cat calc.py"), out("\n".join(lines))),
        (reply("x", "1", "ls"), out("a")),  # marks step 1 stale
        (reply("read again", "-", "cat calc.py"), out("\n".join(lines))),
        *[(reply("x", "-", "true"), out("")) for _ in range(6)],
    ]
    p = Renderer(seed_config(Policy())).render(text_history(steps))
    shown = {o.step: o.shown for o in p.origins if o.part == "output"}
    assert 1 not in shown  # folded
    assert shown[3] is Shown.RECEIVED  # its twin is gone, so it must stay


def test_tool_calls_fold_with_their_results() -> None:
    steps = [
        (f"PROGRESS: s{i}\nSTALE: {'1' if i == 3 else '-'}", [(f"echo {i}", f"out {i}"), (f"echo {i}b", "more")])
        for i in range(1, 8)
    ]
    p = Renderer(seed_config(Policy())).render(tool_history(steps))
    ids = {c["id"] for m in p.messages for c in m.get("tool_calls") or []}
    results = [m for m in p.messages if m["role"] == "tool"]
    assert {m["tool_call_id"] for m in results} == ids  # no orphan results, no orphan calls
    assert "call_1_0" not in ids  # step 1 folded: call and results left together
    assert all(r["content"].startswith("[step ") for r in results)


def test_restore_is_byte_exact_and_reversible_off() -> None:
    h = text_history(file_read_steps())
    r = Renderer(seed_config(Policy()))
    first = r.received(h, 3)
    text = restore_text(h, [3])
    assert first[1]["content"] in text and first[0]["content"] in text
    assert "nothing was run again" in text
    off = restore_text(h, [3], Policy(reversible=False))
    assert "cannot be brought back" in off
    p = Renderer(seed_config(Policy(reversible=False))).render(h)
    assert "restore" not in "".join(str(m["content"]) for m in p.messages[1:])


def test_chunk_off_acts_immediately() -> None:
    h = text_history(stale_run({2: "1"}, 3))
    p = Renderer(seed_config(Policy(chunk=False))).render(h)
    assert p.stats.boundary == 3 and p.stats.folded_steps == 1


def test_masking_is_restorable_and_boundary_keyed() -> None:
    steps = [(reply(f"s{i}", "-", f"cat big{i}.txt"), out(f"line {i}\n" * 100)) for i in range(1, 13)]
    h = text_history(steps)
    p = Renderer(seed_config(Policy(mask_after=3))).render(h, 12)  # b=9: steps 1..6 masked
    masked = sorted(o.step for o in p.origins if o.part == "output" and o.shown is Shown.NOTE)
    assert masked == [1, 2, 3, 4, 5, 6]
    text = next(m["content"] for m, o in zip(p.messages, p.origins, strict=True) if o.step == 2 and o.part == "output")
    assert "`restore 2`" in text


def test_incremental_equals_from_scratch() -> None:
    h = text_history(file_read_steps() + stale_run({3: "1, 2", 4: "3"}, 8))
    inc = Renderer(seed_config(Policy()))
    for t in range(len(h) + 1):
        a = inc.render(h, t)
        b = Renderer(seed_config(Policy())).render(h, t)
        assert a.messages == b.messages and a.origins == b.origins


def test_render_rejects_bad_t() -> None:
    h = text_history(stale_run({}, 2))
    with pytest.raises(ValueError, match="outside"):
        Renderer(seed_config()).render(h, 5)


def test_protocol_joins_a_developer_message() -> None:
    from refold.history import History

    h = History([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "task"}])
    h.append({"role": "assistant", "content": "PROGRESS: a\nSTALE: -\n```bash\nls\n```"}, [{"role": "user", "content": "x"}])
    msgs = Renderer(seed_config()).render(h).messages
    assert [m["role"] for m in msgs[:2]] == ["developer", "user"]
    assert msgs[0]["content"].startswith("Be brief.") and "PROGRESS:" in msgs[0]["content"]


def test_the_last_call_rendered_again_is_the_same_prompt_and_a_pending_fold_stays_pending() -> None:
    """A surface may ask for the same call twice (a retried request): the cost rule's choice for a
    pending fold is made once per call, so the prompt repeats byte for byte and the memo stays exact."""
    pad = "value = 1  # a long line of a long file\n" * 40
    steps = [(reply(f"read {i}", "-", f"cat f{i}.py"), out(pad + str(i))) for i in range(1, 13)]
    steps.append((reply("fold", "-", 'fold_steps 2-3 "f2.py:1 sets value because it is the default, so it is not the bug"'), "ok"))
    steps += [(reply(f"probe {i}", "-", f"echo {i}"), out(str(i))) for i in (14, 15)]
    h = text_history(steps)
    config = Config.parse(reminders=False, boundary={"position": "seed"})  # ``window`` moves at call 14, taking the fold along
    r = Renderer(config)
    first = r.render(h, 13)
    again = r.render(h, 13)
    assert again.messages == first.messages and again.stats == first.stats
    assert not any(o.part == "span" for o in again.origins)  # the fold far back waits for a move
    assert r.render(h, 13).messages == Renderer(config).render(h, 13).messages
    assert r.render(h, 15).messages == Renderer(config).render(h, 15).messages  # and shown by its deadline
    assert any(o.part == "span" and o.covers == (2, 3) for o in r.render(h, 15).origins)


def test_a_restore_shows_the_output_without_its_spent_reminder() -> None:
    out = "<returncode>0</returncode>\n<output>\n" + "\n".join(f"line {n}" for n in range(30)) + "\n</output>"
    h = text_history([("no protocol here\n```bash\ncat a.txt\n```", out)])
    assert "Reminder" in Renderer(seed_config()).received(h, 1)[1]["content"]  # it was shown with one
    text = restore_text(h, [1], seed_config())
    assert text.endswith(out) and "Reminder" not in text  # the output byte for byte, not refold's nudge


def test_a_fold_note_carries_its_restore_hint_in_its_header() -> None:
    from refold.mechanisms.fold import note_text

    h = text_history([(reply(f"step {i}", "-", "ls"), "out") for i in range(1, 4)])
    one = note_text([h.step(2)], reversible=True).split("\n")
    two = note_text([h.step(1), h.step(2)], reversible=True).split("\n")
    assert one == [f"{CM} Step 2 folded (marked STALE); reply and output omitted, `restore 2` shows them:", "[step 2] step 2"]
    assert two[0].endswith("`restore <step>` shows one:") and two[1:] == ["[step 1] step 1", "[step 2] step 2"]
    assert "restore" not in note_text([h.step(2)], reversible=False)
