"""Synthetic long agent runs for the render benchmark, recorded as refold's mini wrapper stores them.

``synthetic_messages(n, seed)`` is the message list of an n-step mini-swe-agent run (text mode:
one ```bash block per reply, ``<returncode>``/``<output>`` observations) with a realistic mix:
file reads with overlapping line ranges (``nl -ba f | sed -n 'a,bp'``) over a working set of files
that drifts, ``sed -i`` edits that change and shift lines (so later reads differ), greps, test
runs whose failures get fixed, other shell commands, PROGRESS/STALE heads (some marks outside the
window, some replies without a head), and context commands as ``RefoldModel`` records them:
``begin_span``/``fold_span`` pairs (nested, some conclusions refused and retried), ledger
``fold``/``drop`` (some refused), and ``restore N`` (some ranges, some refused). A context command
is in ``extra.refold.actions`` (not ``extra.actions``) and its answer carries ``extra.refold_result``
and, for a restore, ``extra.restore_of``, exactly the fields ``History`` reads back.

Outcomes are decided here by the library's rules (span ids S1, S2, ... in order of opening; a
conclusion needs 40 characters and a reason; ledger ids must name an earlier step) so the
generator needs no renderer and no answerer and keeps working while those are rewritten;
``tests/test_bench_render.py`` checks them against ``refold.context.answers.answer``.
Observations carry no ``raw_output`` copy (mini's records do), so the history is not inflated.

    python benchmarks/synthetic.py 2000     # print the mix of a 2,000-step history
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CM = "[context-manager]"
Message = dict[str, Any]

_WORDS = [
    "value",
    "cache",
    "queue",
    "token",
    "parser",
    "render",
    "frame",
    "index",
    "buffer",
    "record",
    "schema",
    "field",
    "model",
    "query",
    "batch",
    "config",
    "loader",
    "writer",
    "reader",
    "stream",
    "handle",
    "client",
    "server",
    "request",
    "response",
    "session",
    "state",
    "event",
    "filter",
    "mapper",
    "report",
    "result",
    "status",
    "error",
    "limit",
    "offset",
    "cursor",
    "window",
    "shard",
    "block",
    "entry",
]
_VERBS = [
    "get",
    "set",
    "build",
    "load",
    "parse",
    "emit",
    "apply",
    "merge",
    "split",
    "check",
    "update",
    "reset",
    "flush",
    "compute",
    "resolve",
]
_PACKAGES = ("core", "io", "api", "utils", "storage", "cli")

_QUESTIONS = (
    "why does {f} return None for an empty batch",
    "where is the cache of {f} invalidated",
    "which caller of {f} passes the wrong offset",
    "why does the test for {f} fail only on the second run",
    "what changed in {f} between the two code paths",
    "does {f} handle a closed stream",
)
_REASONS = (
    "because the guard checks the length before the batch is filled",
    "since the offset is computed from the old window",
    "so the cache must be cleared in the writer too",
    "due to a missing reset of the cursor",
    "because the loader swallows the error and returns the default",
)
_THOUGHTS = (
    "Let me look at how {f} is implemented before changing anything.",
    "The failure points at {f}; I will read the surrounding code.",
    "I want to check every caller of {f} to see which arguments they pass.",
    "Now I will run the tests again to see whether the change fixed the failure.",
    "The output above shows the relevant part; next I need the definition of {g}.",
    "This looks like an off-by-one in the window handling, so I will inspect it closely.",
    "Before editing, I should confirm the behaviour with a grep over the package.",
    "The edit is in place; I will verify the file content around the change.",
)


def _ident(rnd: random.Random) -> str:
    return f"{rnd.choice(_WORDS)}_{rnd.choice(_WORDS)}"


def _file_lines(rnd: random.Random, n: int) -> list[str]:
    lines: list[str] = []
    while len(lines) < n:
        if rnd.random() < 0.12:
            lines += ["", f"class {rnd.choice(_WORDS).title()}{rnd.choice(_WORDS).title()}:"]
        name = f"{rnd.choice(_VERBS)}_{_ident(rnd)}"
        lines.append(f"    def {name}(self, {rnd.choice(_WORDS)}, {rnd.choice(_WORDS)}=None):")
        for _ in range(rnd.randint(3, 14)):
            r = rnd.random()
            if r < 0.08:
                lines.append("")
            elif r < 0.2:
                lines.append(f"        if {_ident(rnd)} is None:")
            elif r < 0.3:
                lines.append(f"            return self.{_ident(rnd)}")
            else:
                lines.append(
                    f"        {_ident(rnd)} = self.{rnd.choice(_VERBS)}_{_ident(rnd)}({_ident(rnd)}, {rnd.randint(0, 99)})"
                )
        lines.append(f"        return {_ident(rnd)}")
    return lines[:n]


def _numbered(lines: list[str], a: int, b: int) -> str:
    return "".join(f"{n:6d}\t{lines[n - 1]}\n" for n in range(a, min(b, len(lines)) + 1))


def _observation(output: str, rc: int = 0) -> str:
    return f"<returncode>{rc}</returncode>\n<output>\n{output}</output>"


@dataclass
class _Span:
    id: str
    begin: int
    length: int
    question: str


@dataclass
class _Run:
    rnd: random.Random
    files: dict[str, list[str]]
    hot: dict[str, int]
    focus: list[str]
    tests: dict[str, int]  # test file -> failures left
    replies: list[str] = field(default_factory=list)  # per step: reply content
    shown: list[str] = field(default_factory=list)  # per step: its output as first shown (for restores)
    kinds: list[str] = field(default_factory=list)  # per step: what it is (for the mix)
    big: list[int] = field(default_factory=list)  # steps with large shell outputs (fold/drop targets)
    spans: list[_Span] = field(default_factory=list)  # open, innermost last
    opened: int = 0
    edits: dict[str, list[str]] = field(default_factory=dict)  # path -> recent edit lines (git diff)


def _new_run(seed: int) -> _Run:
    rnd = random.Random(seed)
    files = {}
    for pkg in _PACKAGES:
        for _ in range(rnd.randint(4, 7)):
            files[f"src/app/{pkg}/{rnd.choice(_WORDS)}_{rnd.choice(_WORDS)}.py"] = _file_lines(
                rnd, rnd.randint(120, 900)
            )
    paths = sorted(files)
    hot = {p: rnd.randint(1, len(files[p])) for p in paths}
    tests = {f"tests/test_{p.rsplit('/', 1)[1]}": 0 for p in paths}
    return _Run(rnd, files, hot, rnd.sample(paths, 3), tests)


def _head(run: _Run, i: int, kind: str) -> str:
    rnd = run.rnd
    if rnd.random() < 0.06:
        return ""  # the agent forgot the protocol lines (the renderer adds a reminder)
    marks = [
        s
        for s in range(max(1, i - 3), i)
        if run.kinds[s - 1] in ("read", "grep", "test", "other") and rnd.random() < 0.15
    ]
    if rnd.random() < 0.04 and i > 10:
        marks.append(rnd.randint(1, i - 5))  # outside the window: ignored
    stale = ", ".join(map(str, sorted(set(marks)))) or "-"
    return f"PROGRESS: {kind} step {i} on {rnd.choice(run.focus).rsplit('/', 1)[1]}\nSTALE: {stale}\n\n"


def _read(run: _Run) -> tuple[str, str]:
    rnd = run.rnd
    path = rnd.choice(run.focus) if rnd.random() < 0.8 else rnd.choice(sorted(run.files))
    lines = run.files[path]
    run.hot[path] = max(1, min(len(lines), run.hot[path] + rnd.randint(-25, 25)))
    if len(lines) < 60 and rnd.random() < 0.5:
        return f"cat {path}", "\n".join(lines) + "\n"
    a = max(1, run.hot[path] + rnd.randint(-30, 10))
    b = min(len(lines), a + rnd.randint(10, 80))
    return f"nl -ba {path} | sed -n '{a},{b}p'", _numbered(lines, a, b)


def _edit(run: _Run) -> tuple[str, str]:
    rnd = run.rnd
    path = rnd.choice(run.focus)
    lines = run.files[path]
    at = max(1, min(len(lines), run.hot[path] + rnd.randint(-15, 15)))
    if rnd.random() < 0.25:
        new = f"        {_ident(rnd)} = {rnd.choice(_VERBS)}_{_ident(rnd)}({rnd.randint(0, 9)})"
        lines.insert(at, new)  # after line ``at``: every later line moves down
        cmd = f"sed -i '{at}a\\{new}' {path}"
        change = f"+{new}"
    else:
        while at < len(lines) and "_" not in lines[at - 1]:
            at += 1
        words = [
            w
            for w in lines[at - 1].replace("(", " ").replace(")", " ").replace(",", " ").split()
            if "_" in w and w.isidentifier()
        ]
        old = words[0] if words else "None"
        repl = f"{old}_{rnd.choice(_WORDS)}"
        before = lines[at - 1]
        lines[at - 1] = before.replace(old, repl, 1)
        cmd = f"sed -i '{at}s/{old}/{repl}/' {path}"
        change = f"-{before}\n+{lines[at - 1]}"
    run.edits.setdefault(path, []).append(change)
    return cmd, ""


def _create(run: _Run, i: int) -> tuple[str, str]:
    rnd = run.rnd
    path = f"tests/repro_{i}.py"
    body = [f"from app.{rnd.choice(_PACKAGES)} import {rnd.choice(_WORDS)}", ""]
    body += [
        f"print({rnd.choice(_WORDS)}.{rnd.choice(_VERBS)}_{_ident(rnd)}({n}))"
        for n in range(rnd.randint(4, 20))
    ]
    run.files[path] = body
    run.hot[path] = 1
    return f"cat <<'EOF' > {path}\n" + "\n".join(body) + "\nEOF", ""


def _grep(run: _Run) -> tuple[str, str, int]:
    rnd = run.rnd
    path = rnd.choice(run.focus)
    line = run.files[path][max(0, run.hot[path] - 1)]
    words = [
        w
        for w in line.replace("(", " ").replace(")", " ").replace(".", " ").split()
        if "_" in w and w.isidentifier()
    ]
    word = rnd.choice(words) if words else _ident(rnd)
    if rnd.random() < 0.5:
        hits = [f"{n}:{ln}" for n, ln in enumerate(run.files[path], 1) if word in ln]
        cmd = f"grep -n '{word}' {path}"
    else:
        key = word.split("_")[0]
        hits = [
            f"{p}:{n}:{ln}" for p in sorted(run.files) for n, ln in enumerate(run.files[p], 1) if key in ln
        ]
        limit = rnd.choice((20, 30, 50))
        hits = hits[:limit]
        cmd = f"grep -rn '{key}' src/app | head -n {limit}"
    return cmd, "".join(h + "\n" for h in hits), 0 if hits else 1


def _test(run: _Run, i: int) -> tuple[str, str, int]:
    rnd = run.rnd
    target = f"tests/test_{rnd.choice(run.focus).rsplit('/', 1)[1]}"
    fails = run.tests.setdefault(target, 0)
    if rnd.random() < 0.3:
        fails = run.tests[target] = max(0, fails - 1)  # a fix landed
    n = 12 + len(target) % 9
    dots = "." * (n - fails) + "F" * fails
    out = [
        "=" * 30 + " test session starts " + "=" * 29,
        f"collected {n} items",
        "",
        f"{target} {dots}" + " " * 8 + "[100%]",
        "",
    ]
    if fails:
        out.append("=" * 35 + " FAILURES " + "=" * 35)
        for j in range(fails):
            name = f"test_{rnd.choice(_VERBS)}_{j}"
            out += [
                f"____ {name} ____",
                f"    def {name}():",
                f">       assert {_ident(rnd)}({j}) == {j + 1}",
                f"E       AssertionError: assert {j} == {j + 1}",
                f"{target}:{10 + 7 * j}: AssertionError",
            ]
    summary = f"{fails} failed, {n - fails} passed" if fails else f"{n} passed"
    out.append("=" * 20 + f" {summary} in 0.{rnd.randint(10, 99)}s " + "=" * 20)
    return f"python -m pytest {target} -q", "\n".join(out) + "\n", 1 if fails else 0


def _other(run: _Run) -> tuple[str, str]:
    rnd = run.rnd
    r = rnd.random()
    if r < 0.35:
        pkg = rnd.choice(_PACKAGES)
        names = sorted(p.rsplit("/", 1)[1] for p in run.files if f"/{pkg}/" in p)
        return f"ls -la src/app/{pkg}", "".join(
            f"-rw-r--r-- 1 root root {400 + 37 * len(n)} Dec  1 09:00 {n}\n" for n in names
        )
    if r < 0.6:
        changed = sorted(run.edits)
        return "git status --short", "".join(f" M {p}\n" for p in changed) or "\n"
    if r < 0.85 and run.edits:
        path = rnd.choice(sorted(run.edits))
        body = (
            f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n"
            + "\n".join(run.edits[path][-6:])
            + "\n"
        )
        return f"git diff {path}", body
    return f"python -c 'import app.{rnd.choice(_PACKAGES)}; print(\"ok\")'", "ok\n"


_REMINDER = f"{CM} Reminder: begin with the `PROGRESS:` and `STALE:` lines."  # refold.prompts.reminder()


def _shown(run: _Run, i: int, output: str, *, has_head: bool) -> str:
    """Step i's output as the renderer first shows it: label, protocol reminder, span reminder."""
    text = f"[step {i}]\n{output}"
    if not has_head:
        text += "\n" + _REMINDER
    top = run.spans[-1] if run.spans else None
    if top is not None and i > top.begin and (i - top.begin) % 8 == 0:
        text += (
            f'\n{CM} Span {top.id} ("{top.question}") has been open for {i - top.begin} steps: when it is answered, '
            'close it with `fold_span "<conclusion, with the why>"`.'
        )
    return text


def _restore_text(run: _Run, steps: list[int]) -> str:
    parts = []
    for s in steps:
        parts += [
            f"{CM} Step {s} restored from history (nothing was run again). Its reply:",
            run.replies[s - 1],
            f"{CM} Its output, as first shown:",
            _without_reminder(run.shown[s - 1]),
        ]
    return "\n".join(parts)


def _without_reminder(text: str) -> str:
    """An output as restore shows it: without the reminder it was first shown with."""
    head, sep, rest = text.rpartition("\n" + _REMINDER)
    return head + rest if sep and all(ln.startswith(CM) for ln in rest.split("\n")[1:]) else text


def _span_step(run: _Run, i: int) -> tuple[str, str, dict[str, Any]] | None:
    """A begin_span or fold_span this step, or None."""
    rnd = run.rnd
    top = run.spans[-1] if run.spans else None
    if top is not None and i - top.begin >= top.length:
        f = rnd.choice(run.focus).rsplit("/", 1)[1]
        if rnd.random() < 0.12:  # refused: too short, or no reason given; the agent retries later
            conclusion = rnd.choice(
                ("found it in the loader", f"The helper in {f} returns the wrong value for an empty input")
            )
            top.length += rnd.randint(1, 3)
            why = (
                f"the conclusion is too short ({len(conclusion)} characters, at least 40)"
                if len(conclusion) < 40
                else "the conclusion says what but not why; add the reason (because, since, so, therefore, "
                "due to ...) or a file:line reference"
            )
            text = (
                f'{CM} fold_span refused, span {top.id} ("{top.question}") stays open: {why}. '
                'Try again with `fold_span "<what you found, and why>"`.'
            )
            return (
                f'fold_span "{conclusion}"',
                text,
                {"refold_result": {"name": "fold_span", "ok": False, "target": top.id}},
            )
        conclusion = f"The bug is in {f}:{run.hot[rnd.choice(run.focus)]} {rnd.choice(_REASONS)}"
        run.spans.pop()
        text = (
            f"{CM} Span {top.id} folded: steps {top.begin}-{i} are now shown as one block with your conclusion "
            f"and the artefacts kept. `expand {top.id}` shows them; `restore <step>` shows any step."
        )
        return (
            f'fold_span "{conclusion}"',
            text,
            {"refold_result": {"name": "fold_span", "ok": True, "target": top.id}},
        )
    if top is None and rnd.random() < 0.002:  # a stray fold with nothing open
        text = f'{CM} fold_span refused: no span is open; open one with `begin_span "<question>"`.'
        return (
            'fold_span "done because it works now"',
            text,
            {"refold_result": {"name": "fold_span", "ok": False}},
        )
    chance = (
        0.02 if top is None else (0.03 if len(run.spans) == 1 and i - top.begin < top.length - 12 else 0.0)
    )
    if rnd.random() < chance:
        run.opened += 1
        sid = f"S{run.opened}"
        length = rnd.randint(6, 40) if top is None else rnd.randint(3, 10)
        question = rnd.choice(_QUESTIONS).format(f=f"{rnd.choice(_VERBS)}_{_ident(rnd)}")
        inner = f", inside span {top.id}" if top else ""
        run.spans.append(_Span(sid, i, length, question))
        text = (
            f'{CM} Span {sid} opened at step {i}{inner}: "{question}". When it is answered, '
            f'close it with `fold_span "<conclusion, with the why>"`.'
        )
        return (
            f'begin_span "{question}"',
            text,
            {"refold_result": {"name": "begin_span", "ok": True, "target": sid}},
        )
    return None


def _ledger_step(run: _Run, i: int) -> tuple[str, str, dict[str, Any]]:
    rnd = run.rnd
    name = "fold" if rnd.random() < 0.6 else "drop"
    pool = [s for s in run.big[-200:] if s < i] if rnd.random() < 0.7 else [s for s in run.big if s < i]
    target = rnd.choice(pool) if pool else max(1, i - 1)
    if rnd.random() < 0.06:  # refused: a later step, or an output the step does not have
        if rnd.random() < 0.5:
            arg, why = f"{i + 3}", f"there is no earlier step {i + 3}"
        else:
            arg, why = f"{target}.2", f"step {target} has 1 output(s), so there is no {target}.2"
        return f"{name} {arg}", f"{CM} {name} refused: {why}.", {"refold_result": {"name": name, "ok": False}}
    what = "replaced by its one-line summary" if name == "fold" else "removed (only a marker stays)"
    text = f'{CM} {target}: {what} from the next context refresh. `expand <id>` shows it again; `search_ledger "<words>"` finds it.'
    return f"{name} {target}", text, {"refold_result": {"name": name, "ok": True, "target": str(target)}}


def _restore_step(run: _Run, i: int) -> tuple[str, str, dict[str, Any]]:
    rnd = run.rnd
    if rnd.random() < 0.04:
        text = f"{CM} restore: there is no step {i + 7} yet; steps 1-{i - 1} can be restored."
        return f"restore {i + 7}", text, {"refold_result": {"name": "restore", "ok": False}}
    s = rnd.randint(max(1, i - 40), i - 1) if rnd.random() < 0.7 else rnd.randint(1, i - 1)
    steps = [s]
    arg = str(s)
    if rnd.random() < 0.1 and s + 2 < i:
        steps, arg = [s, s + 1, s + 2], f"{s}-{s + 2}"
    meta = {
        "refold_result": {"name": "restore", "ok": True, "target": " ".join(map(str, steps))},
        "restore_of": steps,
    }
    return f"restore {arg}", _restore_text(run, steps), meta


def synthetic_messages(n: int, seed: int = 0) -> list[Message]:
    """The recorded messages of an n-step run (system, task, then reply/observation pairs)."""
    run = _new_run(seed)
    rnd = run.rnd
    messages: list[Message] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {
            "role": "user",
            "content": "Please solve this issue: the batch writer drops the last record.\n\n"
            + "Work step by step. " * 40,
        },
    ]
    phase_end = 0
    for i in range(1, n + 1):
        if i > phase_end:  # a new sub-task: the working set drifts, a test starts failing
            phase_end = i + rnd.randint(60, 250)
            run.focus[rnd.randrange(len(run.focus))] = rnd.choice(sorted(run.files))
            run.tests[f"tests/test_{rnd.choice(run.focus).rsplit('/', 1)[1]}"] = rnd.randint(1, 4)
        context: tuple[str, str, dict[str, Any]] | None = None
        rc = 0
        kind = ""
        span = _span_step(run, i) if i > 1 else None
        if span is not None:
            context, kind = span, span[0].split()[0]
        else:
            r = rnd.random()
            if r < 0.05 and i > 5:
                context, kind = _ledger_step(run, i), "ledger"
            elif r < 0.085 and i > 2:
                context, kind = _restore_step(run, i), "restore"
            elif r < 0.40:
                (cmd, out), kind = _read(run), "read"
            elif r < 0.53:
                (cmd, out), kind = _edit(run), "edit"
            elif r < 0.545:
                (cmd, out), kind = _create(run, i), "edit"
            elif r < 0.69:
                cmd, out, rc = _grep(run)
                kind = "grep"
            elif r < 0.78:
                cmd, out, rc = _test(run, i)
                kind = "test"
            else:
                (cmd, out), kind = _other(run), "other"
        thought = rnd.choice(_THOUGHTS).format(f=f"{rnd.choice(_VERBS)}_{_ident(rnd)}", g=_ident(rnd))
        if context is not None:
            cmd, obs_text, obs_extra = context
        else:
            obs_text, obs_extra = _observation(out, rc), {}
        reply_text = f"{_head(run, i, kind)}THOUGHT: {thought}\n\n```bash\n{cmd}\n```"
        extra: dict[str, Any] = {"refold": {"format": "refold-mini-1", "t": i - 1}}
        if context is not None:
            name = cmd.split()[0]
            extra["actions"] = []
            extra["refold"] |= {
                "actions": [{"command": cmd}],
                "context_actions": [
                    {"index": 0, "name": name, "argument": cmd[len(name) :].strip().strip('"')}
                ],
            }
            obs_extra = {"refold_command": name, **obs_extra}
        else:
            extra["actions"] = [{"command": cmd}]
            if kind in ("read", "grep", "test") and len(obs_text) > 600:
                run.big.append(i)
        run.replies.append(reply_text)
        run.shown.append(_shown(run, i, obs_text, has_head=reply_text.startswith("PROGRESS:")))
        run.kinds.append(kind)
        messages.append({"role": "assistant", "content": reply_text, "extra": extra})
        obs: Message = {"role": "user", "content": obs_text}
        if obs_extra:
            obs["extra"] = obs_extra
        messages.append(obs)
    return messages


def mix(messages: list[Message]) -> Counter[str]:
    """What the steps of a synthetic run are: shell kinds by command, context commands by name and outcome."""
    out: Counter[str] = Counter()
    for m in messages:
        if m.get("role") == "assistant":
            actions = m["extra"].get("refold", {}).get("actions") or m["extra"]["actions"]
            cmd = actions[0]["command"]
            word = cmd.split()[0]
            if word in ("nl", "cat") and "<<" not in cmd:
                out["read"] += 1
            elif word == "sed" or "<<" in cmd:
                out["edit"] += 1
            elif word in ("grep", "python", "ls", "git"):
                out["test" if "pytest" in cmd else word] += 1
            else:
                out[word] += 1
            head = m["content"].split("\n", 2)
            if len(head) > 1 and head[1].startswith("STALE: ") and head[1] != "STALE: -":
                out["stale marks"] += 1
        else:
            result = (m.get("extra") or {}).get("refold_result")
            if isinstance(result, dict):
                out[f"{result['name']} {'ok' if result['ok'] else 'refused'}"] += 1
    return out


def text_chars(messages: list[Message]) -> int:
    return sum(len(m["content"]) for m in messages)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    msgs = synthetic_messages(n)
    print(f"{n} steps, {text_chars(msgs) / 1e6:.1f} MB of text")
    for k, v in sorted(mix(msgs).items()):
        print(f"  {k:18} {v}")


if __name__ == "__main__":
    main()
