"""refold view: the embedded data (string table, delta-encoded prompts), the page, the command.

The browser-driven tests are in test_viewer_browser.py; ``synthetic_run`` is shared with them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from refold.cli import app
from refold.errors import PolicyError, TrajectoryError
from refold.history import History
from refold.lab.replay import POLICIES
from refold.lab.viewer import VIEW_FORMAT, build_report, write_report
from refold.lab.viewer.data import build_data
from refold.lab.viewer.encode import TextTable, decode, split_lines
from refold.lab.viewer.preview import display_text, pretty_arguments
from refold.lab.viewer.variants import build_variants, mechanism_id
from refold.policy import Policy
from refold.render import Renderer
from refold.restore import restore_text
from refold.tokens import get_tokenizer

from builders import seed_config

MARKER = "ORIGINAL-CALC-MARKER"
HOSTILE = "</script><script>document.title='pwned'</script><!-- <img src=x onerror=alert(1)>"


def _calc_lines(n: int = 60) -> list[str]:
    out = []
    for i in range(1, n + 1):
        if i % 12 == 1:
            out.append(f"def operation_{i}(left, right):")
        elif i == 30:
            out.append(f"    return left / right  # {MARKER}")
        else:
            out.append(f"    value_{i} = combine(left, right, {i})  # keeps the line long enough to matter")
    return out


def _nl(lines: list[str], start: int = 1) -> str:
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(lines, start=start))


def _reply(progress: str, stale: str, command: str, thought: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"PROGRESS: {progress}\nSTALE: {stale}\nTHOUGHT: {thought}\n\n```bash\n{command}\n```",
    }


def _out(text: str, rc: int = 0) -> dict[str, Any]:
    return {"role": "user", "content": f"<returncode>{rc}</returncode>\n<output>\n{text}\n</output>"}


def synthetic_run(steps: int = 24) -> History:
    """A realistic mini-swe-agent style run that carries PROGRESS/STALE lines: repeated file reads
    (dedup stubs), steps marked STALE (folded into notes), one ``restore`` and a hostile string."""
    calc = _nl(_calc_lines())
    h = History(
        [
            {
                "role": "system",
                "content": "You are a helpful assistant that can interact with a computer shell.",
            },
            {
                "role": "user",
                "content": "<pr_description>\ndivide() crashes on zero; make it raise ValueError.\n</pr_description>",
            },
        ],
        source="synthetic",
        meta={"instance_id": "synthetic__calc-1"},
    )
    h.append(
        _reply("list the repository", "-", "ls -R", "Look around first."),
        [_out("README.md\nsrc\nsrc/calc.py\ntests\ntests/test_calc.py")],
    )
    h.append(_reply("read calc.py", "-", "nl -ba src/calc.py", "Read the module."), [_out(calc)])
    h.append(
        _reply("search for divide", "1", "grep -rn divide src tests", "Where is divide used?"),
        [
            _out(
                "\n".join(
                    f"src/calc.py:{i}:    divide(a, b)  # call site {i} of divide in the module"
                    for i in range(8)
                )
            )
        ],
    )
    h.append(
        _reply("run the tests", "-", "python -m pytest -q tests", "Baseline."),
        [
            _out(
                "\n".join(f"tests/test_calc.py::test_case_{i} PASSED   [{i * 5:3d}%]" for i in range(20))
                + f"\n{HOSTILE}"
            )
        ],
    )
    h.append(
        _reply("re-read calc.py", "3, 4", "nl -ba src/calc.py", "Read it again before editing."), [_out(calc)]
    )
    h.append(
        _reply(
            "fix divide",
            "-",
            "sed -i 's/left \\/ right/left \\/ right if right else raise_zero()/' src/calc.py",
            "Edit.",
        ),
        [_out("")],
    )
    util = _calc_lines(90)
    h.append(
        _reply("read util.py head", "-", "nl -ba src/util.py | sed -n '1,40p'", "Helpers."),
        [_out(_nl(util[:40]))],
    )
    h.append(_reply("read all of util.py", "-", "nl -ba src/util.py", "All of it."), [_out(_nl(util))])
    while len(h) < steps - 2:
        step = len(h) + 1
        lines = "\n".join(
            f"check {step}.{i}: ok, nothing unusual in this part of the module" for i in range(12)
        )
        stale = str(step - 2) if step % 3 == 0 and step > 10 else "-"
        h.append(
            _reply(f"check part {step}", stale, f"python check.py --part {step}", f"Check part {step}."),
            [_out(lines)],
        )
    restore = h.append(
        _reply("bring back the grep", "-", "restore 3", "I need the call sites again."),
        [{"role": "user", "content": restore_text(h, [3], Policy()), "extra": {"restore_of": [3]}}],
    )
    assert restore.restore_of == (3,)
    h.append(
        _reply("submit", "-", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff", "Done."),
        [_out("diff --git a/src/calc.py b/src/calc.py")],
    )
    return h


@pytest.fixture(scope="module")
def run() -> History:
    return synthetic_run()


@pytest.fixture(scope="module")
def data(run: History) -> dict[str, Any]:
    tok = get_tokenizer("chars4")
    from refold.lab.replay import Options

    return build_data(run, build_variants(None, Options(tokenizer=tok)), tok, title="synthetic")


def _decode(data: dict[str, Any], vid: str) -> list[list[int]]:
    variants = {v["id"]: v for v in data["variants"]}
    v = variants[vid]
    while "same_as" in v:
        v = variants[v["same_as"]]
    out, prev = [], []
    for keep, add in v["calls"]:
        prev = prev[:keep] + add
        out.append(prev)
    return out


def _text(data: dict[str, Any], pid: int) -> str:
    return decode(data["strings"], data["pieces"][pid][1])


def _page_data(page: str) -> dict[str, Any]:
    raw = re.search(r'<script type="application/json" id="refold-data">(.*?)</script>', page, re.S)
    assert raw is not None
    data: dict[str, Any] = json.loads(raw.group(1))
    return data


def test_the_page_opens_on_refolds_default_configuration(run: History) -> None:
    # it opened on the seed's policy ("refold"), which on runs without STALE lines saves ~3%: a
    # user reading the demo saw that, not what refold does by default (build_data had the new
    # default but build_report, which refold view, demo and the proxy call, still passed "refold")
    data = _page_data(build_report(run, variants=["refold", "default"], tokenizer="chars4", mechanisms=False))
    assert data["default"] == "default" and "refold" in [v["id"] for v in data["variants"]]


def test_without_the_default_policy_the_page_opens_on_the_first_one_asked_for(run: History) -> None:
    # `refold view --policy masking,compact`: base (always added) is not what was asked to see
    data = _page_data(build_report(run, variants=["masking", "compact"], tokenizer="chars4", mechanisms=False))
    assert data["default"] == "masking"


def test_fixture_exercises_every_mechanism(run: History) -> None:
    r = Renderer(seed_config(Policy()))
    kinds: set[str] = set()
    for t in range(len(run)):
        kinds.update(o.shown.value for o in r.render(run, t).origins)
    assert {"stub", "trimmed", "note", "restored", "received", "prefix"} <= kinds


def test_decoded_prompts_are_exactly_the_rendered_ones(run: History, data: dict[str, Any]) -> None:
    for vid, policy in (
        ("refold", None),
        ("m0111", Policy(dedup=False, reminders=False)),
        ("m1011", Policy(fold=False, reminders=False)),
    ):
        r = Renderer(seed_config(policy or Policy(reminders=False)))  # the variants reproduce the seed
        prompts = _decode(data, vid)
        assert len(prompts) == len(run)
        for t, ids in enumerate(prompts):
            rendered = r.render(run, t)
            assert [_text(data, i) for i in ids] == [display_text(m) for m in rendered.messages]
            assert [data["codes"]["shown"][data["pieces"][i][4]] for i in ids] == [
                o.shown.value for o in rendered.origins
            ]


def test_every_text_is_stored_once_and_labels_wrap_the_recorded_text(
    run: History, data: dict[str, Any]
) -> None:
    strings = data["strings"]
    assert len(strings) == len(set(strings))
    calc = run.step(2).output_texts[0]
    assert strings.count(calc) == 1
    assert not any(calc in s and s != calc for s in strings)  # "[step 2]\n" + calc is not stored whole
    assert data["format"] == VIEW_FORMAT


def test_trimmed_outputs_and_repeats_are_stored_as_references() -> None:
    recorded = "\n".join(f"line {i}: some recorded output that is long enough" for i in range(40)) + "\n"
    trimmed = (
        "[step 7]\n"
        + "".join(split_lines(recorded)[:10])
        + "[context-manager] 20 lines omitted\n"
        + "".join(split_lines(recorded)[30:])
    )
    summary = "[context-manager] Summary (SIMULATED)." + " summary" * 500
    odd = "tabs\tand\r\nCRLF\u2028 and \x0c form feeds\n" * 20
    t = TextTable()
    t.ref(recorded)
    for text in (trimmed, summary, odd, recorded[:-1], "\n\n" + recorded):
        ref = t.ref(text, [recorded])
        assert decode(t.strings, ref) == text
    assert isinstance(t.ref(trimmed, [recorded]), list)
    assert sum(len(s) for s in t.strings) < len(recorded) + len(odd) + 400  # no second copy of anything big
    assert split_lines("a\nb\n") == ["a\n", "b\n"] and split_lines("a\r\nb") == ["a\r\n", "b"]


def test_prompt_lists_are_delta_encoded(data: dict[str, Any]) -> None:
    for v in data["variants"]:
        if "same_as" in v:
            continue
        full = sum(len(p) for p in _decode(data, v["id"]))
        sent = sum(len(add) for _, add in v["calls"])
        assert sent < full / 2, v["id"]


def test_identical_variants_are_stored_once() -> None:
    h = synthetic_run(12)
    plain = History(h.prefix)
    for s in h.steps:  # the same run without PROGRESS/STALE: fold has nothing to do
        text = "\n".join(ln for ln in s.reply_text.splitlines() if not ln.startswith(("PROGRESS", "STALE")))
        plain.append({"role": "assistant", "content": text}, s.observations)
    tok = get_tokenizer("chars4")
    from refold.lab.replay import Options

    d = build_data(plain, build_variants(["refold"], Options(tokenizer=tok)), tok)
    v = {x["id"]: x for x in d["variants"]}

    def root(vid: str) -> str:
        while "same_as" in v[vid]:
            vid = v[vid]["same_as"]
        return vid

    assert d["marks"] == 0
    assert root("m1011") == root("m1111") == "refold"  # fold off changes nothing here ...
    assert root("m0111") != root("m1111")  # ... but dedup off does
    assert "calls" not in v["m1011"]


def test_variants_cover_policies_and_switches() -> None:
    from refold.lab.replay import Options

    vs = build_variants(None, Options(tokenizer=get_tokenizer("chars4")))
    ids = [v.id for v in vs]
    assert ids[: len(POLICIES)] == list(POLICIES)
    assert len([v for v in vs if v.kind == "mechanism"]) == 16
    assert mechanism_id({"dedup": False, "fold": True, "chunk": True, "reversible": True}) == "m0111"
    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        build_variants(["nope"], Options(tokenizer=get_tokenizer("chars4")))


def test_page_is_self_contained_and_escapes_data(run: History) -> None:
    page = build_report(run, variants=["refold"], tokenizer="chars4")
    assert page.count("</script>") == 2  # the data block and the code block, nothing from the data
    assert "pwned" in page and "document.title='pwned'</script>" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    assert "default-src 'none'" in page
    raw = re.search(r'<script type="application/json" id="refold-data">(.*?)</script>', page, re.S)
    assert raw is not None
    assert json.loads(raw.group(1))["title"] == "synthetic__calc-1"


def test_report_size_is_a_small_multiple_of_the_trajectory(tmp_path: Path) -> None:
    h = synthetic_run(40)
    traj = tmp_path / "run.traj.json"
    traj.write_text(
        json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": h.messages()}), encoding="utf-8"
    )
    out = write_report(traj, tmp_path / "r.html", tokenizer="chars4")
    assert out.stat().st_size < 3 * traj.stat().st_size + 200_000


def test_view_command_writes_the_report(tmp_path: Path) -> None:
    traj = tmp_path / "run.traj.json"
    traj.write_text(
        json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": synthetic_run(10).messages()}),
        encoding="utf-8",
    )
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["view", str(traj), "-o", str(out), "--tokenizer", "chars4", "--policy", "refold,masking"]
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and out.exists()
    assert '"refold-view-1"' in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(("agent", "name"), [("Man/ager", "run.traj.Man_ager.html"), ("../../up", "run.traj.______up.html")])
def test_default_report_name_of_an_agent_stays_in_the_folder(tmp_path: Path, agent: str, name: str) -> None:
    """The agent's name went into the default file name as is: 'Man/ager' named a folder that does
    not exist, '../..' a file outside the current folder."""
    from conftest import run_cli

    turns = [("system", "s"), ("user", "t"), ("assistant", "x")]
    history = [{"role": r, "content": c, "agent": a} for a in (agent, "P") for r, c in turns]
    (tmp_path / "run.traj").write_text(json.dumps({"history": history, "trajectory": []}), encoding="utf-8")
    r = run_cli("view", f"run.traj#{agent}", "--tokenizer", "chars4", "--policy", "base", "--no-mechanisms", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / name).is_file() and f"wrote {name} " in r.stdout


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (["--policy", "nope"], PolicyError, "unknown policy 'nope'"),
        (["--stale", "psychic"], PolicyError, "unknown STALE source"),
        (["--tokenizer", "gpt9"], PolicyError, "unknown tokenizer"),
        (["--budget", "5"], PolicyError, "--budget must be at least 1024 tokens, got 5"),
        (["--mask-after", "0"], PolicyError, "--mask-after must be at least 1, got 0"),
    ],
)
def test_view_command_rejects_bad_options(tmp_path: Path, args: list[str], error: type, message: str) -> None:
    traj = tmp_path / "run.json"
    traj.write_text(json.dumps(synthetic_run(6).messages()), encoding="utf-8")
    result = CliRunner().invoke(app, ["view", str(traj), "-o", str(tmp_path / "r.html"), *args])
    assert isinstance(result.exception, error)
    assert message in str(result.exception)


def test_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    # the name's bytes come back as lone surrogates: the page (title, source, meta.path) could not be
    # written, and the command blamed the trajectory ("cannot render this trajectory")
    import os

    traj = tmp_path / os.fsdecode(b"run\xff.json")
    traj.write_text(json.dumps(synthetic_run(6).messages()), encoding="utf-8")
    out = write_report(traj, tmp_path / "r.html", variants=["base"], mechanisms=False, tokenizer="chars4")
    assert "run\ufffd.json" in out.read_text(encoding="utf-8")


def test_view_command_names_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    result = CliRunner().invoke(app, ["view", str(bad), "-o", str(tmp_path / "r.html")])
    assert isinstance(result.exception, TrajectoryError)
    missing = CliRunner().invoke(app, ["view", str(tmp_path / "missing.json")])
    assert isinstance(missing.exception, PolicyError)


def test_agent_chosen_spans_are_shown_as_folded_steps() -> None:
    h = synthetic_run(8)
    span = History(h.prefix)
    conclusion = "divide is only called from calc.py:30, because the tests import it there"
    script = [
        ('begin_span "where is divide called"', "[context-manager] span S1 opened"),
        ("grep -rn divide src", "src/calc.py:30: divide(a, b)"),
        ("grep -rn divide tests", "tests/test_calc.py:3: from calc import divide"),
        (f'fold_span "{conclusion}"', "[context-manager] span S1 folded"),
        ("ls", "README.md"),
        ("ls src", "calc.py"),
    ]
    for cmd, output in script:
        span.append(_reply("span work", "-", cmd, "Spans."), [_out(output)])
    tok = get_tokenizer("chars4")
    from refold.lab.replay import Options

    d = build_data(span, build_variants(["refold"], Options(tokenizer=tok)), tok)
    parts = {d["codes"]["part"][p[3]] for p in d["pieces"]}
    assert "span" in parts
    piece = next(p for p in d["pieces"] if d["codes"]["part"][p[3]] == "span")
    assert piece[5] and conclusion in decode(d["strings"], piece[1])


def test_view_title_with_a_template_marker() -> None:
    from refold.lab.viewer.page import render_page

    page = render_page({"title": "__DATA__ /*__JS__*/ __VERSION__", "x": "__TITLE__"}, version="1")
    m = re.search(r'<script type="application/json" id="refold-data">(.*?)</script>', page, re.S)
    assert m is not None
    assert json.loads(m.group(1)) == {"title": "__DATA__ /*__JS__*/ __VERSION__", "x": "__TITLE__"}
    assert "<title>__DATA__ /*__JS__*/ __VERSION__ · refold view</title>" in page


# ---- a tool-call run (mini-swe-agent 2.x format, written here): previews, arguments, latency, cost

T0 = 1_800_000_000.0
HEREDOC = "cat <<'EOF' > fix.py\ndef divide(a, b):\n    if b == 0:\n        raise ValueError('zero')\n    return a / b\nEOF"
TOOL_STEPS: list[tuple[dict[str, Any], str, int, float]] = [  # arguments, output, exit status, seconds
    (
        {"command": "ls -la"},
        "total 8\ndrwxr-xr-x 2 root root 4096 .\n-rw-r--r-- 1 root root 120 calc.py\n-rw-r--r-- 1 root root 80 README.md",
        0,
        2.5,
    ),
    ({"command": "nl -ba calc.py | sed -n '1,40p'"}, _nl(_calc_lines(40)), 0, 1.25),
    ({"command": HEREDOC, "timeout": 30}, "", 0, 4.0),
    (
        {"command": "python -m pytest -q"},
        "F.\nFAILED tests/test_calc.py::test_zero - ZeroDivisionError\n1 failed, 1 passed in 0.02s",
        1,
        3.5,
    ),
]


def toolcall_trajectory(*, format_error: bool = True) -> dict[str, Any]:
    """A gpt-style tool-call run: assistant ``tool_calls`` with JSON arguments, ``role: tool``
    outputs, per-call usage, cost and timestamps, and (optionally) a format-error call."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant that can run bash commands."},
        {
            "role": "user",
            "content": "<pr_description>\ndivide() crashes on zero.\n</pr_description>",
            "extra": {"timestamp": T0},
        },
    ]
    now = T0
    for i, (args, out, rc, secs) in enumerate(TOOL_STEPS, start=1):
        now += secs
        call_id = f"call_{i}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps(args)},
                    }
                ],
                "extra": {
                    "actions": [{"command": args["command"], "tool_call_id": call_id}],
                    "cost": 0.001 * i,
                    "timestamp": now,
                    "response": {
                        "created": int(now - secs),
                        "usage": {
                            "prompt_tokens": 900 + 300 * i,
                            "completion_tokens": 20,
                            "prompt_tokens_details": {"cached_tokens": 640 * (i - 1)},
                        },
                    },
                },
            }
        )
        now += 0.5
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": f"<returncode>{rc}</returncode>\n<output>\n{out}\n</output>",
                "extra": {"returncode": rc, "timestamp": now},
            }
        )
        if format_error and i == 2:
            msgs.append(
                {
                    "role": "user",
                    "content": "Please always provide EXACTLY ONE action.",
                    "extra": {"interrupt_type": "FormatError"},
                }
            )
    return {
        "trajectory_format": "mini-swe-agent-1.1",
        "messages": msgs,
        "info": {"exit_status": "Submitted"},
        "instance_id": "toolcall__calc-1",
    }


@pytest.fixture
def toolcall_file(tmp_path: Path) -> Path:
    path = tmp_path / "toolcall.traj.json"
    path.write_text(json.dumps(toolcall_trajectory()), encoding="utf-8")
    return path


def _toolcall_data(path: Path, **kw: Any) -> dict[str, Any]:
    from refold.lab.replay import Options
    from refold.loaders import load

    tok = get_tokenizer("chars4")
    return build_data(
        load(path), build_variants(["refold", "masking"], Options(tokenizer=tok), mechanisms=False), tok, **kw
    )


def _piece(d: dict[str, Any], step: int, part: str) -> list[Any]:
    return next(
        p
        for p in d["pieces"]
        if p[2] == step and d["codes"]["part"][p[3]] == part and d["codes"]["shown"][p[4]] == "received"
    )


def test_rows_preview_the_command_and_a_summary_of_the_output(toolcall_file: Path) -> None:
    d = _toolcall_data(toolcall_file)
    s = d["strings"]
    assert s[_piece(d, 1, "reply")[7]] == "$ ls -la"
    assert s[_piece(d, 2, "output")[7]].startswith("calc.py lines 1-40")  # not the first line "<returncode>"
    assert s[_piece(d, 4, "output")[7]].startswith("[exit 1] ")
    assert "1 failed" in s[_piece(d, 4, "output")[7]]
    heredoc = s[_piece(d, 3, "reply")[7]]
    assert heredoc.startswith("$ cat <<'EOF' > fix.py") and "\n" not in heredoc
    # the synthetic mini 1.x run: the reply row is the command too, every prompt copy the same summary
    run = synthetic_run(12)
    tok = get_tokenizer("chars4")
    from refold.lab.replay import Options

    d2 = build_data(run, build_variants(["refold"], Options(tokenizer=tok), mechanisms=False), tok)
    outs = {
        d2["strings"][p[7]]
        for p in d2["pieces"]
        if p[2] == 2 and p[3] == d2["codes"]["part"].index("output") and p[7] >= 0
    }
    assert len(outs) == 1  # received and trimmed copies alike
    assert outs.pop().startswith("src/calc.py lines 1-60: def operation_1 L1, def operation_13 L13")


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -1.0])
def test_a_recorded_cost_that_is_no_figure_is_left_out(tmp_path: Path, cost: float) -> None:
    """A NaN cost (Python's json writes it as NaN) failed the whole page: 'Out of range float
    values are not JSON compliant'; it is shown as no recorded cost."""
    data = toolcall_trajectory()
    replies = [m for m in data["messages"] if m["role"] == "assistant"]
    replies[0]["extra"]["cost"] = cost
    path = tmp_path / "nan.traj.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    steps = _toolcall_data(path)["history"]["steps"]
    assert [s["recorded_cost"] for s in steps] == [None, 0.002, 0.003, 0.004]
    out = tmp_path / "nan.html"
    assert CliRunner().invoke(app, ["view", str(path), "-o", str(out), "--policy", "base", "--no-mechanisms"]).exit_code == 0
    assert out.stat().st_size > 0


def test_tool_call_arguments_are_pretty_printed(toolcall_file: Path) -> None:
    d = _toolcall_data(toolcall_file)
    text = decode(d["strings"], _piece(d, 3, "reply")[1])
    assert '{"command"' not in text
    assert text.startswith("→ bash\n  command:\n      cat <<'EOF' > fix.py\n      def divide(a, b):\n")
    assert text.endswith("\n  timeout: 30")
    assert (
        display_text(
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]}
        )
        == "→ f\n  not json"
    )
    nested = display_text(
        {
            "role": "assistant",
            "tool_calls": [{"function": {"name": "edit", "arguments": '{"path": "a.py", "lines": [1, 2]}'}}],
        }
    )
    assert nested == "→ edit\n  path: a.py\n  lines: [\n      1,\n      2\n    ]"


def test_recorded_latency_cost_and_usage_per_call(toolcall_file: Path) -> None:
    d = _toolcall_data(toolcall_file)
    steps = d["history"]["steps"]
    # latency: the reply's timestamp minus that of the message before it (the task, or the last
    # output); after the format error (no timestamp) from the provider's whole-second ``created``
    assert [s["latency"] for s in steps] == [2.5, 1.25, 4.75, 3.5]
    assert [s["latency_approx"] for s in steps] == [False, False, True, False]
    assert [s["recorded_cost"] for s in steps] == [0.001, 0.002, 0.003, 0.004]
    assert [s["recorded_prompt_tokens"] for s in steps] == [1200, 1500, 1800, 2100]
    assert steps[1]["recorded_cached_tokens"] == 640
    run = synthetic_run(6)  # no timestamps: no latency, never a guess
    tok = get_tokenizer("chars4")
    from refold.lab.replay import Options

    d2 = build_data(run, build_variants(["refold"], Options(tokenizer=tok), mechanisms=False), tok)
    assert {s["latency"] for s in d2["history"]["steps"]} == {None}


def test_per_call_figures_line_up_with_the_calls_and_sum_to_the_totals(toolcall_file: Path) -> None:
    d = _toolcall_data(toolcall_file)
    assert d["calls"] == 4
    for v in d["variants"]:
        if "same_as" in v:
            continue
        assert (
            len(v["tokens"]) == len(v["cached"]) == len(v["cost"]) == 4
        )  # the format-error call is left out
        assert v["totals"]["unreplied_calls"] == 1
        assert all(0 <= c <= n for c, n in zip(v["cached"], v["tokens"], strict=True))
        assert 0 < sum(v["cost"]) < v["totals"]["cost_usd"]  # the unreplied call is billed in the total only
    base = next(v for v in d["variants"] if v["id"] == "base")
    assert base["tokens"] == sorted(base["tokens"])  # base only grows


def test_progress_is_reported_per_rendering() -> None:
    seen: list[tuple[int, int, str]] = []
    build_report(
        synthetic_run(8), variants=["refold"], tokenizer="chars4", progress=lambda *a: seen.append(a)
    )
    total = seen[0][1]
    assert total == 2 + 16  # base, refold and the 16 switch combinations
    assert [s[0] for s in seen] == list(range(total + 1))
    assert seen[0][2] == "base" and seen[-1][2] == "page"


def test_view_command_prints_progress(tmp_path: Path) -> None:
    from conftest import run_cli

    traj = tmp_path / "run.traj.json"
    traj.write_text(json.dumps(toolcall_trajectory()), encoding="utf-8")
    r = run_cli(
        "view", str(traj), "-o", str(tmp_path / "r.html"), "--tokenizer", "chars4", "--policy", "refold"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == f"refold view: {traj} loaded, 18 renderings to build"
    assert lines[1] == "refold view: rendering 2/18 (refold)"
    assert lines[-1].endswith("renderings done, writing the page")
    assert len(lines) <= 6  # a few lines for a log, not one per rendering
    assert r.stdout.startswith("wrote ")


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


# 100: nesting, non-JSON and multi-line strings also have fixed cases (test_tool_call_arguments_are_pretty_printed)
@settings(max_examples=100, deadline=None)
@given(args=st.dictionaries(st.text(min_size=1, max_size=8), _json | st.text(max_size=60), max_size=4))
def test_pretty_arguments_keep_every_key_and_string(args: dict[str, Any]) -> None:
    out = pretty_arguments(json.dumps(args))
    for key, value in args.items():
        assert f"{key}:" in out
        if isinstance(value, str):
            for line in value.split("\n"):
                assert line in out
    assert pretty_arguments("not json {") == "not json {"
