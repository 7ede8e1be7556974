"""Parsing PROGRESS/STALE heads and context commands the way real models write them."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refold.context.recognize import from_shell, from_tool_call
from refold.protocol import (
    parse_command,
    parse_head,
    parse_restore_args,
    parse_step_list,
)
from refold.reply_command import bash_block


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
        # a value's own backticks stay balanced (a fold note's line is this text)
        ("PROGRESS: `Foo` has bar, see `x.py`\nSTALE: -", "`Foo` has bar, see `x.py`", ()),
        ("**PROGRESS: edit foo**\n**STALE: 2**", "edit foo", (2,)),
        ("PROGRESS: _reset_visual_defaults and __init__\nSTALE: -", "_reset_visual_defaults and __init__", ()),
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
    # agents that run every command in a fresh shell open it with a cd: that changes nothing for
    # a context command (it went to the shell: 'restore: command not found', nothing restored)
    for line in ("cd x && restore 3", "cd '/a b'; restore 3", "cd && cd /testbed && restore 3"):
        c = parse_command(line)
        assert c is not None and (c.name, c.argument) == ("restore", "3"), line
    assert parse_command("cd x | restore 3") is None and parse_command("cd x\nrestore 3") is None
    assert parse_command("cd x && ls") is None and parse_command("cdx && restore 3") is None
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
        ("[4]", [4], None),  # the label without its word: "'[4' is not a step number"
        ("4.2", [], "'4.2' is not a step number; restore takes whole steps: `restore 4`."),
        ("r4", [], "restore takes whole steps: `restore 4`."),
        ("r0", [], "'r0' is not a step number; use e.g."),  # no step to name instead
        ("12.1", [], "'12.1' is not a step number; use e.g."),  # `restore 12` is no step either
    ],
)
def test_restore_arguments(arg: str, steps: list[int], error: str | None) -> None:
    got, err = parse_restore_args(arg, 10)
    assert got == steps
    if error is None:
        assert err is None
    else:
        assert err is not None and error in err and "\n" not in err


# ---- STALE takes whole step numbers only ----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "stale"),
    [
        ("2.1", ()),  # a ledger id or a decimal is no step: not steps 1 and 2
        ("7.2, 3", (3,)),
        ("1.5-3", ()),
        ("-1", ()),
        ("3, -1", (3,)),
        ("\u22122", ()),  # minus sign
        ("1e3", ()),
        ("2E5", ()),
        ("3rd", ()),
        ("py3", ()),
        ("3.", (3,)),  # a full stop ends the sentence, not a decimal
        ("3 - 5", (3, 4, 5)),
        ("3\u20135", (3, 4, 5)),
        ("3 through 5", (3, 4, 5)),
        ("3 to 5 and 9", (3, 4, 5, 9)),
        ("3..5", (3, 4, 5)),
        ("**3**, `4`", (3, 4)),
        ("none", ()),
        ("-", ()),
        ("\u2014", ()),
        ("4, but not 2", (4,)),
        ("6 (lines 1-100 of it)", (6,)),
        ("(unclosed 1-3", (1, 2, 3)),
    ],
)
def test_stale_integers_only(value: str, stale: tuple[int, ...]) -> None:
    assert parse_step_list(value) == stale
    assert parse_head(f"PROGRESS: x\nSTALE: {value}").stale == stale


@given(st.integers(0, 10**6), st.from_regex(r"\A[0-9]{1,4}\Z"), st.sampled_from(["{}", "{}-9", "8-{}", "{}, 5"]))
def test_stale_decimals_are_no_steps(whole: int, fraction: str, form: str) -> None:
    decimal = f"{whole}.{fraction}"  # 2.1, 7.2 (a ledger id), 3.0
    assert parse_step_list(decimal) == ()
    assert parse_step_list(form.format(decimal)) == ((5,) if form == "{}, 5" else ())


@given(st.integers(1, 10**6), st.sampled_from(["-", "\u2212", "\u2013"]))
def test_stale_negatives_are_no_steps(n: int, sign: str) -> None:
    assert parse_step_list(f"{sign}{n}") == ()


@given(st.integers(1, 99), st.integers(0, 9), st.sampled_from(["e", "E", "e+", "e-", "E+"]))
def test_stale_exponents_are_no_steps(m: int, e: int, mark: str) -> None:
    assert parse_step_list(f"{m}{mark}{e}") == ()


_SEPARATORS = st.sampled_from([", ", ",", " ", " and ", "; ", " & "])
_RANGE_SEPS = st.sampled_from(["-", " - ", "\u2013", "\u2014", "..", " to ", " through ", " thru "])
_DECOR = st.sampled_from(["{}", "[step {}]", "step {}", "#{}", "**{}**", "`{}`"])


@given(
    st.lists(st.tuples(st.integers(1, 500), st.integers(0, 6), _RANGE_SEPS, _DECOR), min_size=1, max_size=6),
    _SEPARATORS,
)
def test_stale_tolerant_forms(items: list[tuple[int, int, str, str]], sep: str) -> None:
    parts, expected = [], set()
    for lo, width, dash, decor in items:
        if width:
            parts.append(f"{lo}{dash}{lo + width}")
            expected.update(range(lo, lo + width + 1))
        else:
            parts.append(decor.format(lo))
            expected.add(lo)
    text = sep.join(parts)
    assert parse_step_list(text) == tuple(sorted(expected))
    assert parse_head(f"PROGRESS: x\nSTALE: {text}").stale == tuple(sorted(expected))


# ---- linear time: megabyte replies ------------------------------------------------------------

_MB = 1_000_000
_HOSTILE = {
    "digits": "PROGRESS: x\nSTALE: " + "1" * _MB,  # quadratic in the regex this replaced (5 s at 4,000)
    "digits-dash": "PROGRESS: x\nSTALE: " + "1" * _MB + "-",
    "list": "PROGRESS: x\nSTALE: " + "1, " * (_MB // 3),
    "asides": "PROGRESS: x\nSTALE: " + "(" * _MB,
    "spaces": "PROGRESS" + " " * _MB + "x",
    "think": "<think>" + "x" * _MB,
    "fences": "```bash\nx" * (_MB // 9),
    "xml": "<mswea_bash_command>" * (_MB // 20),
    "blank-fence": "```bash" + " \n" * (_MB // 2),
    "prose": ("PROGRESS: read\nSTALE: 3\n" + "Reasoning about the code at line 12-40. " * (_MB // 41) + "\n```bash\nls\n```"),
}


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_megabyte_replies_parse_in_linear_time(name: str) -> None:
    reply = _HOSTILE[name]
    t0 = time.perf_counter()
    parse_head(reply)
    bash_block(reply)
    for cmd in (parse_command(reply), parse_command("restore " + reply)):
        if cmd is not None and cmd.name == "restore":
            parse_restore_args(cmd.argument, 10)
    from_tool_call("restore", reply)
    from_shell(reply)
    # generous: the benchmark measures <= 50 ms; the quadratic parsers took minutes here
    assert time.perf_counter() - t0 < 2.0


def test_restore_of_too_many_steps_is_one_sentence() -> None:
    for arg in (" ".join(["1"] * 101), "1 " * 5000):
        steps, err = parse_restore_args(arg, 10)
        assert steps == [] and err is not None and "at most 100" in err and "\n" not in err
    for arg in ("1" * 3000, "3 " + "4" * 3000, "3 " * 50 + "x" * 5000):
        steps, err = parse_restore_args(arg, 10)
        assert steps == [] and err is not None and "is not a step number" in err and len(err) < 200
    assert parse_restore_args(" ".join(["1"] * 100), 10) == ([1], None)


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


@pytest.mark.parametrize(
    ("argument", "steps", "rest"),
    [
        ("2", [2], None),
        ("2 # the config file", [2], None),
        ("2 2>&1", [2], None),
        ("2 >/dev/null", [2], None),
        ("2; ls", [], "`ls`"),
        ("2\nls", [], "`ls`"),
        ("2 | head -5", [], "`head -5`"),
        ("2 && echo ok", [], "`echo ok`"),
        ("2 2>&1 | tail", [], "`2>&1 | tail`"),
    ],
)
def test_a_restore_with_more_shell_after_it_says_what_was_not_run(argument: str, steps: list[int], rest: str | None) -> None:
    from refold.protocol import CM, parse_restore_args

    got, error = parse_restore_args(argument, 9)
    assert got == steps
    if rest is None:
        assert error is None
    else:
        assert error is not None and error.startswith(f"{CM} Not run:") and "Run `restore 2` alone" in error and rest in error


@pytest.mark.parametrize("command", ["ls; restore", "restore; ls", "ls && restore"])
def test_a_restore_without_a_step_beside_another_command_names_a_step(command: str) -> None:
    """``ls; restore`` was told "Run `restore ` alone": a command that only earns the next error."""
    from refold.context.recognize import from_shell
    from refold.protocol import parse_restore_args

    cmd = from_shell(command, compound=True)
    assert cmd is not None and cmd.name == "restore"
    _, error = parse_restore_args(cmd.argument, 9)
    assert error is not None and "Not run" in error and "`restore ` " not in error
    assert "Run `restore <step>` alone" in error and "`ls`" in error


def test_a_restore_with_only_a_separator_after_it_names_nothing_else() -> None:
    """``restore 2;`` (the proxy's answer to a ``time restore 2`` its client's shell ran) said
    "then `` in a command of its own"."""
    steps, error = parse_restore_args("2;", 5)
    assert not steps and error is not None and "Run `restore 2` alone, as a command of its own." in error and "``" not in error
