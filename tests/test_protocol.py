"""Parsing PROGRESS/STALE heads and context commands the way real models write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refold.protocol import parse_command, parse_head, parse_restore_args, parse_step_list


@pytest.mark.parametrize(
    ("reply", "progress", "stale"),
    [
        ("PROGRESS: read the file\nSTALE: 3, 4\nTHOUGHT: ...", "read the file", (3, 4)),
        ("**PROGRESS:** grep usages\n**STALE:** 3-5", "grep usages", (3, 4, 5)),
        ("PROGRESS: x\nSTALE: -", "x", ()),
        ("PROGRESS: x\nSTALE: none", "x", ()),
        ("PROGRESS: x\nSTALE: None.", "x", ()),
        ("Progress: x\nStale: steps 3 and 7 (old greps of lines 1-100)", "x", (3, 7)),
        ("\n\n- PROGRESS: x\n- STALE: [step 2], [step 4]", "x", (2, 4)),
        ("### PROGRESS: x\n*STALE*: 6,7", "x", (6, 7)),
        ("PROGRESS: `run tests`\nSTALE: `5`", "run tests", (5,)),
    ],
)
def test_head_variants(reply: str, progress: str, stale: tuple[int, ...]) -> None:
    head = parse_head(reply)
    assert head.progress == progress
    assert head.stale == stale
    assert head.has_protocol


def test_never_from_later_in_the_reply_or_code() -> None:
    late = "THOUGHT: one\ntwo\nthree\nfour\nfive\nPROGRESS: x\nSTALE: 3"
    assert parse_head(late) == parse_head("")
    in_code = "```bash\necho 'PROGRESS: x'\necho 'STALE: 3'\n```"
    assert not parse_head(in_code).has_protocol
    # the head is read from the reply only; an output containing the words is never parsed
    assert parse_head("no head\n```bash\ncat notes.txt\n```").stale == ()


def test_missing_stale_line_is_not_protocol() -> None:
    head = parse_head("PROGRESS: only progress\nthen text")
    assert head.progress == "only progress" and not head.has_protocol


@given(st.text(max_size=300))
def test_parse_head_total(text: str) -> None:
    head = parse_head(text)
    assert all(isinstance(s, int) and s >= 0 for s in head.stale)


@given(st.lists(st.integers(1, 500), max_size=8))
def test_step_list_roundtrip(nums: list[int]) -> None:
    assert parse_step_list(", ".join(map(str, nums))) == tuple(sorted(set(nums)))


def test_ranges_are_bounded() -> None:
    assert parse_step_list("1-100000") == ()  # a silly range is ignored, not expanded
    assert parse_step_list("4-6, 9") == (4, 5, 6, 9)


def test_commands() -> None:
    assert parse_command("restore 3") is not None
    c = parse_command("  restore 3-5 ")
    assert c is not None and (c.name, c.argument) == ("restore", "3-5")
    c = parse_command('fold_span "because the cache key differs"')
    assert c is not None and c.argument == "because the cache key differs"
    assert parse_command("restored 3") is None
    assert parse_command("cd x && restore 3") is None
    assert parse_command("ls") is None


@pytest.mark.parametrize(
    ("arg", "steps", "error"),
    [
        ("3", [3], None),
        ("3 5", [3, 5], None),
        ("3-5", [3, 4, 5], None),
        ("3,5", [3, 5], None),
        ("step 4", [4], None),
        ("[step 4]", [4], None),
        ("", [], "needs a step number"),
        ("abc", [], "'abc' is not a step number"),
        ("11", [], "no step 11 yet"),
        ("0", [], "no step 0"),
        ("5-3", [], "not a valid range"),
    ],
)
def test_restore_arguments(arg: str, steps: list[int], error: str | None) -> None:
    got, err = parse_restore_args(arg, 10)
    assert got == steps
    if error is None:
        assert err is None
    else:
        assert err is not None and error in err and "\n" not in err


HUGE = "9" * 5000  # int() of more than 4300 digits raises ValueError


@pytest.mark.parametrize(
    ("reply", "stale"),
    [
        ("PROGRESS: x\nSTALE: steps 3 through 5", (3, 4, 5)),
        ("PROGRESS: x\nSTALE: 3\u20145", (3, 4, 5)),  # em dash
        ("PROGRESS: x\nSTALE: 3 \u2212 5", (3, 4, 5)),  # minus sign
        ("PROGRESS: x\nSTALE: 3\u20105", (3, 4, 5)),  # unicode hyphen
        ("PROGRESS: x\nSTALE: #3, #4", (3, 4)),
        ("PROGRESS: x\nSTALE: step-3", (3,)),
        ("PROGRESS: x\nSTALE: 4, but not 2", (4,)),  # a step the agent still needs is not folded
        ("PROGRESS: x\nSTALE: all except 2", ()),
        ("PROGRESS: x\nSTALE: 3, keep 5", (3,)),
        ("1. PROGRESS: x\n2. STALE: 4", (4,)),
        ("<think>\nfirst\nsecond\nthird\nfourth\nfifth\n</think>\nPROGRESS: x\nSTALE: 4", (4,)),
        (f"PROGRESS: x\nSTALE: {HUGE}, 4", (4,)),
        (f"PROGRESS: x\nSTALE: 1-{HUGE}", ()),  # a silly range is ignored, like 1-100000
    ],
    ids=lambda v: repr(v)[:40] if isinstance(v, str) else None,
)
def test_stale_lines_as_models_write_them(reply: str, stale: tuple[int, ...]) -> None:
    head = parse_head(reply)
    assert head.has_protocol and head.stale == stale


@pytest.mark.parametrize("argument", ["3\u20135", "3..5", "#3 #4 #5", "3 - 5"])
def test_restore_accepts_dash_and_hash_variants(argument: str) -> None:
    steps, error = parse_restore_args(argument, 9)
    assert error is None and steps == [3, 4, 5]
