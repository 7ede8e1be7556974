"""Hidden-then-needed: key extraction, hand-made prompts with known answers, and the replay hook."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refold.chat_tokens import message_tokens
from refold.history import History
from refold.lab.replay import (
    Options,
    Settings,
    TaskResult,
    build_report,
    iter_prompts,
    make_projector,
    write_csv,
)
from refold.lab.replay.needed import NeededIndex, ShownKeys, hidden_then_needed
from refold.lab.replay.runner import replay_history
from refold.messages import clean
from refold.named_keys import folded, keys_of, message_text, reply_keys
from refold.tokens import get_tokenizer
from refold.types import Message, Origin, Shown

from builders import SYSTEM, reply, text_history, tool_history
from conftest import run_cli

TOK = get_tokenizer("chars4")

GREP_OUT = "src/pkg/billing_engine.py:12:def compute_total(items):\n" + "\n".join(
    f"src/pkg/other_{i}.py:{i}:    pass  # filler line to make the output long enough" for i in range(12)
)


def _filler(i: int) -> str:
    return "\n".join(f"plain output line {i}.{j} with words only" for j in range(15))


def _run(next_command: str) -> History:
    """Step 1 greps (the path is only in its output), steps 2-7 do other things, step 8 runs
    ``next_command``."""
    steps = [(reply(None, None, "grep -rn compute_total src"), GREP_OUT)]
    steps += [(reply(None, None, f"echo {i}"), _filler(i)) for i in range(2, 8)]
    steps.append((reply(None, None, next_command), "done"))
    return text_history(steps)


def _totals(h: History, policy: str) -> tuple[int, int, int]:
    tot = hidden_then_needed(
        h, ((p.t, p.messages, p.origins) for p in iter_prompts(h, policy, tokenizer="chars4")), TOK
    )
    return tot.calls, tot.needed_calls, tot.restore_tokens


# ---- keys --------------------------------------------------------------------------------------


def test_paths_match_across_roots_and_name_by_their_last_two_components() -> None:
    assert reply_keys("cat /testbed/django/db/models/query.py") == {"models/query.py"}
    assert "models/query.py" in keys_of("./django/db/models/query.py:120: def filter")
    assert "query.py" in keys_of("django/db/models/query.py")  # a bare mention matches it too
    assert reply_keys("open query.py now") == {"query.py"}
    assert reply_keys("see README.md, setup.py and pkg/__init__.py") == frozenset()


def test_identifiers_need_eight_chars_and_an_underscore_or_a_case_change() -> None:
    keys = reply_keys("call compute_total on QuerySet and DJANGO_SETTINGS_MODULE, camelCase2")
    assert keys == {"compute_total", "QuerySet", "DJANGO_SETTINGS_MODULE", "camelCase2"}
    # plain words, short names, numbers, dunders, builtins and TestCase methods are never keys
    assert (
        reply_keys("Traceback something important a_b Foo 12345678 __init__ NotImplementedError")
        == frozenset()
    )
    assert reply_keys("self.assertEqual(x, 1); isinstance(y, int); io.TextIOWrapper") == frozenset()
    assert reply_keys("https://github.com/org/repo and/or v1.2.3 3.14.") == frozenset()


def test_test_ids_and_error_strings() -> None:
    keys = reply_keys("pytest tests/test_query.py::QueryTests::test_filter[a-1] -x")
    assert "test_query.py::QueryTests::test_filter[a-1]" in keys
    msg = "'NoneType' object has no attribute 'compile_filter' here"
    assert f"AttributeError: {msg[:40]}" in keys_of(f"E   AttributeError: {msg}\n")
    assert not any(k.startswith("ValueError") for k in keys_of("ValueError: ab"))


def test_tool_call_arguments_are_read_as_strings_not_json() -> None:
    h = tool_history([("Looking.", [("sed -n 1,9p src/pkg/billing_engine.py", "x")])])
    text = message_text(h.step(1).reply)
    assert "src/pkg/billing_engine.py" in text and '"command"' not in text
    assert reply_keys(text) == {"pkg/billing_engine.py", "billing_engine"}


@given(st.text(alphabet=st.sampled_from("abcAB_./-:9 \n"), max_size=60))
def test_a_text_names_only_keys_it_holds(text: str) -> None:
    assert reply_keys(text) <= keys_of(text)


# ---- hand-made prompts: the answer is known -----------------------------------------------------


def _prompt(h: History, output_1: tuple[Shown, str]) -> tuple[list[Message], list[Origin]]:
    """The prompt of call 3: step 1's output shown as ``output_1``, step 2 as received."""
    msgs: list[Message] = [clean(m) for m in h.prefix]
    origins = [Origin(None, "system", Shown.PREFIX), Origin(None, "task", Shown.PREFIX)]
    s1, s2 = h.step(1), h.step(2)
    msgs += [
        clean(s1.reply),
        {"role": "user", "content": output_1[1]},
        clean(s2.reply),
        clean(s2.observations[0]),
    ]
    origins += [
        Origin(1, "reply", Shown.RECEIVED),
        Origin(1, "output", output_1[0], (1,)),
        Origin(2, "reply", Shown.RECEIVED),
        Origin(2, "output", Shown.RECEIVED),
    ]
    return msgs, origins


def _three_steps(third: str) -> History:
    return text_history(
        [
            (reply(None, None, "grep -rn compute_total src"), GREP_OUT),
            (reply(None, None, "echo hi"), "hi"),
            (reply(None, None, third), "ok"),
        ]
    )


def test_a_masked_output_whose_path_the_next_reply_opens_is_counted() -> None:
    h = _three_steps("sed -n 1,40p src/pkg/billing_engine.py")
    idx = NeededIndex(h, TOK)
    found = idx.check(2, *_prompt(h, (Shown.NOTE, "[step 1] output masked: restore 1")))
    assert found is not None
    assert found.keys == ("billing_engine", "pkg/billing_engine.py")  # the module name is a key too
    assert found.pieces == ((1, 1),)
    assert found.restore_tokens == len(message_tokens(clean(h.step(1).observations[0]), TOK))


def test_a_path_still_shown_is_not_counted() -> None:
    h = _three_steps("sed -n 1,40p src/pkg/billing_engine.py")
    idx = NeededIndex(h, TOK)
    assert idx.check(2, *_prompt(h, (Shown.RECEIVED, GREP_OUT))) is None
    # a trimmed output that kept the line still shows it
    assert idx.check(2, *_prompt(h, (Shown.TRIMMED, "src/pkg/billing_engine.py:12: [...]"))) is None
    # and so does a note that names the path
    assert idx.check(2, *_prompt(h, (Shown.NOTE, "[step 1] grep hit src/pkg/billing_engine.py"))) is None


def test_new_names_and_names_from_the_task_are_not_counted() -> None:
    h = _three_steps("touch src/pkg/fresh_module.py")  # new to the run
    assert NeededIndex(h, TOK).check(2, *_prompt(h, (Shown.NOTE, "masked"))) is None
    task = {"role": "user", "content": "The bug is in src/pkg/billing_engine.py."}
    h2 = History([SYSTEM, task])
    for s in _three_steps("sed -n 1,40p src/pkg/billing_engine.py").steps:
        h2.append(s.reply, list(s.observations))
    assert NeededIndex(h2, TOK).check(2, *_prompt(h2, (Shown.NOTE, "masked"))) is None


def test_a_piece_is_paid_once_per_call_however_many_keys_it_holds() -> None:
    h = _three_steps("head src/pkg/billing_engine.py src/pkg/other_3.py && grep -n compute_total src/pkg")
    found = NeededIndex(h, TOK).check(2, *_prompt(h, (Shown.NOTE, "masked")))
    assert found is not None  # compute_total is in step 1's reply, which is shown
    assert found.keys == ("billing_engine", "pkg/billing_engine.py", "pkg/other_3.py")
    assert found.restore_tokens == len(message_tokens(clean(h.step(1).observations[0]), TOK))


def test_only_the_latest_step_holding_a_key_is_paid_for() -> None:
    h = text_history(
        [
            (reply(None, None, "grep -rn compute_total src"), GREP_OUT),
            (reply(None, None, "grep -rn compute_total src | head -1"), GREP_OUT.splitlines()[0]),
            (reply(None, None, "sed -n 1,40p src/pkg/billing_engine.py"), "ok"),
        ]
    )
    msgs, origins = _prompt(h, (Shown.NOTE, "masked"))
    msgs[-1], origins[-1] = {"role": "user", "content": "masked too"}, Origin(2, "output", Shown.NOTE, (2,))
    found = NeededIndex(h, TOK).check(2, msgs, origins)
    assert found is not None and found.pieces == ((2, 1),)
    assert found.restore_tokens == len(message_tokens(clean(h.step(2).observations[0]), TOK))


def test_a_folded_reply_counts_as_hidden_content() -> None:
    h = text_history(
        [
            (reply(None, None, "python -c 'import special_helper_mod'"), "ok"),
            (reply(None, None, "echo hi"), "hi"),
            (reply(None, None, "python -m special_helper_mod"), "ok"),
        ]
    )
    msgs = [clean(m) for m in h.prefix] + [{"role": "user", "content": "[context-manager] step 1 folded"}]
    origins = [
        Origin(None, "system", Shown.PREFIX),
        Origin(None, "task", Shown.PREFIX),
        Origin(1, "note", Shown.NOTE, (1,)),
    ]
    msgs += [clean(h.step(2).reply), clean(h.step(2).observations[0])]
    origins += [Origin(2, "reply", Shown.RECEIVED), Origin(2, "output", Shown.RECEIVED)]
    found = NeededIndex(h, TOK).check(2, msgs, origins)
    assert found is not None and found.pieces == ((1, 0),)


def test_paths_every_model_knows_are_not_keys() -> None:
    assert (
        reply_keys("find . -name x 2>/dev/null; #!/usr/bin/env bash; -H 'Accept: application/json'")
        == frozenset()
    )
    assert reply_keys("cat /srv/app/bin/envoy.yaml") == {"bin/envoy.yaml"}  # only the exact pairs


def test_a_shown_path_shows_its_folders() -> None:
    keys = keys_of("/Users/me/repo/src/agents/core/run.ts")
    assert {"src/agents", "agents/core", "core/run.ts"} <= keys
    assert "me/repo" not in keys  # shorter than a folder named alone can be
    assert reply_keys("ls src/agents") == {"src/agents"}
    # step 1 (hidden) named the folder; step 2 (shown) a file under it
    h = text_history(
        [
            (reply(None, None, "find src -type d"), "src/agents_extra\n" + GREP_OUT),
            (reply(None, None, "echo hi"), "src/agents_extra/pay_b/z.py"),
            (reply(None, None, "ls src/agents_extra"), "ok"),
        ]
    )
    idx = NeededIndex(h, TOK)
    assert idx.check(2, *_prompt(h, (Shown.NOTE, "masked"))) is None
    msgs, origins = _prompt(h, (Shown.NOTE, "masked"))
    msgs[-1] = {"role": "user", "content": "nothing"}  # the control: the folder shown nowhere
    origins[-1] = Origin(2, "output", Shown.NOTE, (2,))
    found = idx.check(2, msgs, origins)
    assert found is not None and "src/agents_extra" in found.keys


def test_an_identifier_shown_in_another_spelling_is_not_counted() -> None:
    h = text_history(
        [
            (
                reply(None, None, "cat lib/web/invoice_export_controller.ex"),
                "defmodule Web.InvoiceExportController do\n" + _filler(1),
            ),
            (reply(None, None, "echo hi"), "hi"),
            (reply(None, None, "grep -n InvoiceExportController lib"), "ok"),
        ]
    )
    idx = NeededIndex(h, TOK)
    # step 1's reply (shown) spells it invoice_export_controller: the module name is not hidden
    found = idx.check(2, *_prompt(h, (Shown.NOTE, "masked")))
    assert found is None
    assert (
        folded("InvoiceExportController") == folded("invoice_export_controller") == "~invoiceexportcontroller"
    )
    assert folded("web/invoice_export_controller.ex") is None
    # the control: with step 1's reply condensed to a line without the name, it is counted
    msgs, origins = _prompt(h, (Shown.NOTE, "masked"))
    msgs[2], origins[2] = (
        {"role": "assistant", "content": "read a file"},
        Origin(1, "reply", Shown.NOTE, (1,)),
    )
    found = idx.check(2, msgs, origins)
    assert found is not None and found.keys == ("InvoiceExportController",)


# ---- real projectors --------------------------------------------------------------------------


def test_swe_agent_masking_counts_the_call_base_never_does() -> None:
    h = _run("sed -n 1,40p src/pkg/billing_engine.py")
    assert _totals(h, "base") == (8, 0, 0)
    calls, needed, cost = _totals(h, "masking")
    assert (calls, needed) == (8, 1)  # only call 8: step 1's output is masked there
    assert cost == len(message_tokens(clean(h.step(1).observations[0]), TOK))


def test_refold_masking_is_counted_and_its_notes_are_read() -> None:
    h = _run("sed -n 1,40p src/pkg/other_11.py")  # a file the grep found, past those its note names
    prompts = list(make_projector("refold-best", Options(tokenizer=TOK, mask_after=2)).prompts(h))
    masked = [p.t for p in prompts if Origin(1, "output", Shown.NOTE, (1,)) in p.origins]
    assert masked == [6, 7]  # the boundary moved at call 7 (k=3)
    tot = hidden_then_needed(h, ((p.t, p.messages, p.origins) for p in prompts), TOK, keep_examples=5)
    assert tot.needed_calls == 1 and tot.examples[0].t == 7
    # the note names the grep's first files: opening one of them needed nothing hidden
    h = _run("sed -n 1,40p src/pkg/billing_engine.py")
    prompts = list(make_projector("refold-best", Options(tokenizer=TOK, mask_after=2)).prompts(h))
    note = next(
        m
        for m, o in zip(prompts[-1].messages, prompts[-1].origins, strict=True)
        if o.step == 1 and o.part == "output"
    )
    assert "src/pkg/billing_engine.py" in str(note["content"])
    assert hidden_then_needed(h, ((p.t, p.messages, p.origins) for p in prompts), TOK).needed_calls == 0


def test_a_shown_path_under_masking_is_not_counted() -> None:
    # step 4's output lists the path again: still among the last 5 outputs at call 8
    steps = [(reply(None, None, "grep -rn compute_total src"), GREP_OUT)]
    steps += [(reply(None, None, f"echo {i}"), _filler(i)) for i in range(2, 8)]
    steps[3] = (reply(None, None, "ls -R src"), "src/pkg/billing_engine.py\nsrc/pkg/other_1.py")
    steps.append((reply(None, None, "sed -n 1,40p src/pkg/billing_engine.py"), "done"))
    h = text_history(steps)
    assert _totals(h, "masking")[1] == 0
    steps[3] = (reply(None, None, "ls -R src"), "nothing here")  # the control: now it is counted
    assert _totals(text_history(steps), "masking")[1] == 1


def test_replay_reports_recomputed_and_hidden_needed_per_policy(tmp_path: Path) -> None:
    h = _run("sed -n 1,40p src/pkg/billing_engine.py")
    settings = Settings(policies=("base", "masking"), tokenizer="chars4", validate=False)
    result = TaskResult(file="x")
    replay_history(h, settings, result)
    base, masking = result.policies["base"], result.policies["masking"]
    assert base["hidden_needed_calls"] == 0 and base["hidden_needed_restore_tokens"] == 0
    assert masking["hidden_needed_calls"] == 1 and masking["hidden_needed_restore_tokens"] > 0
    assert masking["recomputed_tokens"] == masking["prompt_tokens"] - masking["cached_tokens"]
    summary = build_report([result], settings)["summary"]["all"]["policies"]
    assert summary["masking"]["hidden_needed_rate"] == round(1 / 8, 6)
    assert summary["base"]["hidden_needed_rate"] == 0.0
    json.dumps(summary)
    write_csv([result], tmp_path / "r.csv")
    with open(tmp_path / "r.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["hidden_needed_calls"] for r in rows] == ["0", "1"]


def test_cli_table_and_json_carry_the_new_columns(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps(_run("sed -n 1,40p src/pkg/billing_engine.py").messages()))
    out = tmp_path / "r.json"
    res = run_cli("replay", str(run), "--policy", "base,masking", "--tokenizer", "chars4", "--json", str(out))
    assert res.returncode == 0, res.stderr
    header = next(line for line in res.stdout.splitlines() if "policy" in line)
    assert "recomputed" in header and "needed" in header and "restore" in header
    masking = next(line for line in res.stdout.splitlines() if "masking" in line)
    assert "12.5%" in masking  # 1 of 8 calls
    report = json.loads(out.read_text())
    assert report["tasks"][0]["policies"]["masking"]["hidden_needed_calls"] == 1
    assert report["summary"]["all"]["policies"]["masking"]["hidden_needed_rate"] == 0.125


# ---- incremental reading of successive prompts ------------------------------------------------

_WORDS = ("src/pkg/alpha_mod.py", "beta_helper", "GammaThing", "lib/delta_util.py", "plain", "words")
_POOL: list[Message] = [
    {"role": "user", "content": " ".join(_WORDS[i] for i in range(6) if n >> i & 1)} for n in range(64)
]
_ORIGIN = st.builds(
    Origin,
    st.sampled_from([None, 1, 2, 3]),
    st.sampled_from(["system", "task", "reply", "output", "note"]),
    st.sampled_from(list(Shown)),
)
_ITEM = st.tuples(st.sampled_from(range(len(_POOL))), _ORIGIN)
# each prompt keeps a leading part of the previous one (the same objects) and appends new items
# (keep, new items, rebuild the origins, read this prompt: the keys of unread prompts are never
# counted, so the next update has fewer to undo)
_STEPS = st.lists(
    st.tuples(st.integers(0, 12), st.lists(_ITEM, max_size=6), st.booleans(), st.booleans()), max_size=12
)


def _from_scratch(messages: list[Message], origins: list[Origin]) -> tuple[set[tuple[int, int]], set[str]]:
    """What the prompt shows, read whole: the verbatim pieces and the keys of every other message."""
    shown: set[tuple[int, int]] = set()
    keys: set[str] = set()
    nxt: dict[int, int] = {}
    for m, o in zip(messages, origins, strict=True):
        if o.step is not None and o.part in ("reply", "output"):
            j = 0 if o.part == "reply" else nxt.get(o.step, 1)
            if o.part == "output":
                nxt[o.step] = j + 1
            if o.shown in (Shown.RECEIVED, Shown.RESTORED):
                shown.add((o.step, j))
                continue
        keys |= keys_of(message_text(m))
    return shown, keys


@given(_STEPS)
def test_the_incremental_reading_equals_a_reading_from_scratch(
    steps: list[tuple[int, list[tuple[int, Origin]], bool, bool]],
) -> None:
    h = text_history(
        [
            (reply(None, None, "cat src/pkg/alpha_mod.py"), "beta_helper GammaThing"),
            (reply(None, None, "echo beta_helper"), "lib/delta_util.py"),
            (reply(None, None, "run beta_helper src/pkg/alpha_mod.py lib/delta_util.py GammaThing"), "go"),
        ]
    )
    idx = NeededIndex(h, TOK)
    view = ShownKeys(idx)
    msgs: list[Message] = []
    origins: list[Origin] = []
    for keep, new, rebuild, read in steps:
        msgs = msgs[:keep] + [_POOL[i] for i, _ in new]
        origins = origins[:keep] + [o for _, o in new]
        if rebuild:  # equal origins, new objects: still the same prompt
            origins = [Origin(o.step, o.part, o.shown, o.covers) for o in origins]
        view.update(msgs, origins)
        if not read:
            continue
        shown, keys = _from_scratch(msgs, origins)
        assert {p for p, n in view.pieces.items() if n > 0} == shown
        assert view.keys() == keys
        assert all(n >= 0 for n in view.pieces.values())
        for t in range(3):
            assert idx.check(t, msgs, origins, view) == NeededIndex(h, TOK).check(t, msgs, origins)


def test_a_prompt_with_an_origin_missing_is_refused() -> None:
    h = _three_steps("echo hi")
    msgs, origins = _prompt(h, (Shown.NOTE, "masked"))
    with pytest.raises(ValueError, match="5 origins"):
        ShownKeys(NeededIndex(h, TOK)).update(msgs, origins[:-1])
