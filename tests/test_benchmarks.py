"""The synthetic runs of the render benchmark have the intended mix and record what refold would."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from refold.config import Config
from refold.context.answers import answer
from refold.history import History
from refold.mechanisms.ledger import LedgerBook
from refold.mechanisms.spans import SpanBook
from refold.protocol import parse_command

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from synthetic import mix, synthetic_messages  # noqa: E402

AT_ONCE = Config.parse(boundary={"fold_wait": 0})  # the generator answers folds as shown at once (no renderer)
_RANGE = re.compile(r"^nl -ba (\S+) \| sed -n '(\d+),(\d+)p'$")
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module", params=SEEDS)
def run(request: pytest.FixtureRequest) -> tuple[list[dict[str, object]], History]:
    messages = synthetic_messages(200, request.param)
    return messages, History.from_messages(messages)


def test_shell_mix(run: tuple[list[dict[str, object]], History]) -> None:
    _, h = run
    assert len(h) == 200
    commands = [s.actions[0].command for s in h.steps]
    ranges: dict[str, list[tuple[int, int]]] = {}
    for c in commands:
        m = _RANGE.match(c)
        if m:
            ranges.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3))))
    overlapping = sum(
        1
        for spans in ranges.values()
        for i, (a, b) in enumerate(spans)
        for c, d in spans[:i]
        if a <= d and c <= b
    )
    assert sum(len(v) for v in ranges.values()) >= 30
    assert overlapping >= 5  # later reads cover lines an earlier read showed
    assert sum(c.startswith("sed -i ") for c in commands) >= 10
    assert sum(c.startswith("grep ") for c in commands) >= 10
    assert sum("pytest" in c for c in commands) >= 5
    assert sum(bool(s.stale) for s in h.steps) >= 20
    assert any(not s.has_protocol for s in h.steps)  # a few replies forget the head


def test_context_commands_as_the_library_reads_them(run: tuple[list[dict[str, object]], History]) -> None:
    messages, h = run
    spans = SpanBook.replay(list(h.steps))
    assert len(spans.closed) >= 1
    assert all(s.end is not None and s.end > s.begin and s.conclusion for s in spans.closed)
    ledger = LedgerBook()
    for s in h.steps:
        ledger.observe(s)
    assert {op.kind for op in ledger.ops} <= {"fold", "drop"} and len(ledger.ops) >= 3
    restores = [s for s in h.steps if s.restore_of]
    assert len(restores) >= 2
    counts = mix(messages)
    assert counts["fold_span ok"] == len(spans.closed)
    assert counts["fold ok"] + counts["drop ok"] == len(ledger.ops)
    assert counts["restore ok"] == len(restores)


def test_recorded_answers_are_the_librarys(run: tuple[list[dict[str, object]], History]) -> None:
    """Each context command's recorded answer, outcome and restore_of are what refold answers."""
    _, h = run
    checked = 0
    for s in h.steps:
        if not s.outcomes:
            continue
        cmd = s.actions[0].context
        assert cmd is not None and cmd == parse_command(s.actions[0].command), s.index
        a = answer(h, cmd, AT_ONCE, t=s.index - 1)
        assert s.output_texts[0] == a.text, s.index
        assert s.outcomes == (a.outcome,), s.index
        assert s.restore_of == a.restore_of, s.index
        checked += 1
    assert checked >= 10


def test_deterministic() -> None:
    assert synthetic_messages(50, 3) == synthetic_messages(50, 3)
    assert synthetic_messages(50, 3) != synthetic_messages(50, 4)


def test_huge_history_exercises_dedup_stubs_trims_and_outlines(tmp_path: Path) -> None:
    """bench_huge's history (small here) shows, under its dedup config, a trimmed rerun and a
    whole-output stub with an outline; its report names the command and every config."""
    from bench_huge import CONFIGS, huge_messages, main

    from refold.render import Renderer

    h = History.from_messages(huge_messages(11, 400, 0))
    texts = [str(m.get("content")) for m in Renderer(CONFIGS["dedup"][1]).render(h).messages]
    assert any("lines omitted here" in t for t in texts)
    stubs = [t for t in texts if "Output omitted" in t]
    assert stubs and all("Outline of the omitted lines" in t for t in stubs)
    out = tmp_path / "huge.txt"
    assert main(["--steps", "3", "--lines", "60", "--configs", "default,dedup", "--out", str(out)]) == 0
    report = out.read_text()
    assert "command: python benchmarks/bench_huge.py --steps 3 --lines 60" in report
    assert re.search(r"^default .*\n^dedup ", report, re.M)


def test_bench_user_messages_adds_the_instruction_to_every_policy_as_base_does(tmp_path: Path) -> None:
    """On a small tool-call run: no policy hides the instruction, so each adds at least what base adds."""
    import json

    from bench_user_messages import main

    msgs: list[dict[str, object]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}]
    for i in range(1, 16):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": f"cat f{i}.py"})}}
        msgs += [{"role": "assistant", "content": f"PROGRESS: {i}\nSTALE: {'5' if i == 7 else ''}\nok", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": "\n".join(f"v_{i}_{k} = f({k}, 'text long enough')" for k in range(40))}]
    (tmp_path / "run.json").write_text(json.dumps({"messages": msgs}), encoding="utf-8")
    out = tmp_path / "r.txt"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    rows = {ln.split()[0]: ln.split() for ln in out.read_text(encoding="utf-8").splitlines()[4:-1]}
    assert set(rows) == {"base", "default", "refold-best", "masking"}
    for name, row in rows.items():
        assert float(row[4]) >= 0.999, name  # added vs base
