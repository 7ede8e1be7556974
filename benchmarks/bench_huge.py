"""Render time of a short history whose tool outputs are huge (SIMULATED): a few steps of ~5 MB each.

Agents print whole logs, ``cat`` generated files, ``pip freeze``, test runs of thousands of lines;
the proxy renders on the request path, so what one render of such a history costs is latency the
user pays. The history (simulated, seeded) has ``--steps`` steps (default 11, each kind once) of
mini-swe-agent text-mode observations, each ``--lines`` lines (default 200,000, 4-6 MB), with
repeated and overlapping content: a build log, then printed again with 30 lines changed and more
appended (trimmed), a generated Python module (later printed again: a whole-output stub with an
outline), a verbose test run that fails, then passes (it repeats, but ends otherwise), a package
list, the log's first half twice, the module after an edit, and a numbered read (``nl -ba``) twice.

Reported per config: CPU seconds of this thread (gc on, cold caches) for building the History from
JSON, for the first render of the last call by a fresh Renderer (what a restarted proxy pays), for
rendering every call 0..n with one Renderer (an agent loop, one call per step); the characters of
the last prompt and its digest, so a change can be checked to keep the rendered prompt.

    python benchmarks/bench_huge.py [--steps 11] [--lines 200000] [--seed 0] [--configs default,mask5,mini,dedup]
        [--profile N] [--out FILE]

``--profile N``: print the N most expensive functions (cProfile, cumulative) of the first render.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import platform
import pstats
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import refold
from refold.config import Config
from refold.history import History
from refold.render import Renderer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_render import CONFIGS as RENDER_CONFIGS  # noqa: E402
from bench_render import git_rev  # noqa: E402
from render_passes import cold_caches  # noqa: E402

# bench_render's configs, and one whose prompt shows dedup's stubs and trims (no masking, the fixed boundary)
_DEDUP = {"mask_after": None, "boundary": {"rule": "fixed"}}
CONFIGS = {**RENDER_CONFIGS, "dedup": (f"Config.parse(**{_DEDUP})", Config.parse(**_DEDUP))}

Message = dict[str, Any]
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")
_MODS = ("core", "io", "api", "utils", "storage", "cli", "cache", "queue")


def _log(rnd: random.Random, n: int) -> list[str]:
    return [
        f"{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d} {rnd.choice(_LEVELS)} {rnd.choice(_MODS)} {i} {rnd.randint(1, 999)}ms"
        for i in range(n)
    ]


def _module(rnd: random.Random, n: int) -> list[str]:
    out: list[str] = []
    k = 0
    while len(out) < n:
        k += 1
        if k % 20 == 1:
            out += ["", f"class Gen{k}:"]
        out.append(f"    def m{k}(self, v, n={rnd.randint(0, 99)}):")
        out += [f"        v = v * {rnd.randint(2, 9)} + {j}" for j in range(rnd.randint(3, 12))]
        out.append("        return v")
    return out[:n]


def _tests(rnd: random.Random, n: int, failing: int) -> list[str]:
    lines = ["============================= test session starts ==============================", "platform linux"]
    for i in range(n - 4):
        ok = i % 997 != 0 or failing == 0
        lines.append(f"t/test_{_MODS[i % len(_MODS)]}.py::t{i} {'PASSED' if ok else 'FAILED'}")
    bad = sum(1 for i in range(n - 4) if i % 997 == 0) if failing else 0
    lines += ["", f"========= {bad} failed, {n - 4 - bad} passed in 812.31s ========="]
    return lines


def _freeze(rnd: random.Random, n: int) -> list[str]:
    return [f"pkg-{i:06d}=={rnd.randint(0, 9)}.{rnd.randint(0, 40)}.{rnd.randint(0, 9)}" for i in range(n)]


def _edited(rnd: random.Random, lines: list[str], changes: int, appended: list[str]) -> list[str]:
    out = list(lines)
    for _ in range(changes):
        i = rnd.randrange(len(out))
        out[i] = out[i] + "  # changed"
    return out + appended


def huge_messages(steps: int = 11, lines: int = 200_000, seed: int = 0) -> list[Message]:
    """System, task, then ``steps`` reply/observation pairs whose outputs are ~``lines`` lines each."""
    rnd = random.Random(seed)
    log = _log(rnd, lines)
    module = _module(rnd, lines)
    numbered = [f"{n:6d}\t{line}" for n, line in enumerate(_edited(random.Random(seed), module, 50, []), 1)]
    cycle: list[tuple[str, list[str], int]] = [
        ("cat build.log", log, 0),  # kept, then a source
        ("cat build.log", _edited(rnd, log[lines // 20 :], 30, _log(rnd, lines // 20)), 0),  # trimmed
        ("cat src/app/gen.py", module, 0),
        ("python -m pytest -v tests/", _tests(rnd, lines, 1), 1),
        ("cat src/app/gen.py", module, 0),  # a whole-output stub
        ("python -m pytest -v tests/", _tests(rnd, lines, 0), 0),  # repeats, but ends otherwise
        ("pip freeze", _freeze(rnd, lines), 0),
        ("cat build.log build.log", log[: lines // 2] + log[: lines // 2], 0),
        ("sed -i 's/n=1/n=2/' src/app/gen.py && cat src/app/gen.py", _edited(rnd, module, 50, []), 0),
        ("nl -ba src/app/gen.py", numbered, 0),  # a numbered read
        ("nl -ba src/app/gen.py", numbered, 0),  # again: a whole-output stub with a numbered outline
    ]
    messages: list[Message] = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer shell."},
        {"role": "user", "content": "Please solve this issue: the build log shows slow steps.\n\n" + "Work step by step. " * 40},
    ]
    for i in range(steps):
        cmd, out, rc = cycle[i % len(cycle)]
        reply = f"PROGRESS: looking at the output of step {i + 1}\nTHOUGHT: I will run it.\n\n```bash\n{cmd}\n```"
        body = "\n".join(out) + "\n"
        messages.append({"role": "assistant", "content": reply, "extra": {"actions": [{"command": cmd}]}})
        messages.append({"role": "user", "content": f"<returncode>{rc}</returncode>\n<output>\n{body}</output>"})
    return messages


def _digest(messages: list[Message]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def measure(wire: str, config: Config, every: bool) -> tuple[float, float, float | None, int, str]:
    cold_caches()
    t0 = time.thread_time()
    h = History.from_messages(json.loads(wire), source="huge")
    t1 = time.thread_time()
    p = Renderer(config).render(h)
    msgs = p.messages
    t2 = time.thread_time()
    loop = None
    if every:
        cold_caches()
        r = Renderer(config)
        t3 = time.thread_time()
        for t in range(len(h) + 1):
            _ = r.render(h, t).messages
        loop = time.thread_time() - t3
    chars = sum(len(str(m.get("content") or "")) for m in msgs)
    return t1 - t0, t2 - t1, loop, chars, _digest(list(msgs))


def summaries(messages: list[Message]) -> list[str]:
    """CPU seconds of ``summarize`` and of an outline (as Python) of each distinct output: both read
    only the head of a huge output, so they cost the same at any size past it."""
    from refold import outline as ol
    from refold.mechanisms import summary

    out = [f"{'output':40} {'MB':>5} {'summary s':>10} {'outline s':>10}  summary"]
    seen: set[str] = set()
    for reply, obs in zip(messages[2::2], messages[3::2], strict=True):
        command = str(reply["content"]).split("```bash\n", 1)[1].split("\n```", 1)[0]
        text = str(obs["content"])
        if command in seen:
            continue
        seen.add(command)
        cold_caches()
        t0 = time.thread_time()
        s = summary.summarize(command, text)
        t1 = time.thread_time()
        ol.outline(text, path="m.py")
        t2 = time.thread_time()
        out.append(f"{command[:40]:40} {len(text) / 1e6:5.1f} {t1 - t0:10.3f} {t2 - t1:10.3f}  {s.text[:60]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=11, help="steps of the history (default 11: each kind once)")
    ap.add_argument("--lines", type=int, default=200_000, help="lines per output (default 200000, ~4 MB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest functions of the first default render")
    ap.add_argument(
        "--summaries", action="store_true", help="also time one summary (a masked output's note) and one outline per output kind"
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.configs.split(",") if k.strip()]
    bad = [k for k in keys if k not in CONFIGS]
    if bad or not keys:
        ap.error(f"--configs: unknown '{','.join(bad) or args.configs}'; choose from {', '.join(CONFIGS)}")
    if args.steps < 1 or args.lines < 10:
        ap.error("--steps must be >= 1 and --lines >= 10")
    messages = huge_messages(args.steps, args.lines, args.seed)
    wire = json.dumps(messages)
    text = sum(len(str(m["content"])) for m in messages)
    # lazy imports and regex caches load once, before anything is measured
    Renderer(Config()).render(History.from_messages(huge_messages(2, 50, args.seed + 1)))
    command = (
        f"python benchmarks/bench_huge.py --steps {args.steps} --lines {args.lines} --seed {args.seed} --configs {','.join(keys)}"
        + (" --summaries" if args.summaries else "")
        + (f" --out {args.out}" if args.out else "")
    )
    lines = [
        f"refold huge-output render benchmark  {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  "
        f"python {platform.python_version()} {platform.machine()}  git {git_rev()}",
        f"command: {command}",
        f"refold from {Path(refold.__file__).resolve().parent.parent}",
        f"history (SIMULATED, seed {args.seed}): {args.steps} steps, {args.lines} lines per output, "
        f"{text / 1e6:.1f} MB of text; CPU seconds of this thread (time.thread_time), gc on, cold caches per pass",
        "",
        f"{'config':8} {'History from JSON s':>20} {'first render s':>15} {'every call 0..n s':>18} {'last prompt chars':>18}  digest",
    ]
    for key in keys:
        build, first, loop, chars, digest = measure(wire, CONFIGS[key][1], every=True)
        lines.append(f"{key:8} {build:20.2f} {first:15.2f} {loop or 0:18.2f} {chars:18d}  {digest}")
        print(lines[-1], file=sys.stderr, flush=True)
    if args.summaries:
        lines += ["", *summaries(messages)]
    if args.profile:
        cold_caches()
        h = History.from_messages(json.loads(wire), source="huge")
        prof = cProfile.Profile()
        prof.enable()
        _ = Renderer(Config()).render(h).messages
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
