"""Digests of every prompt the renderer produces for the real runs in the repo and for generated
histories, under every shipped configuration: a refactor of the render path must keep them.

    python tests/golden.py            # print how many prompts differ from tests/data/golden_prompts.json
    python tests/golden.py --update   # rewrite it (only for a deliberate change of rendered prompts)
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

from refold.config import Config
from refold.history import History
from refold.loaders import load
from refold.render import Renderer

sys.path.insert(0, str(Path(__file__).parent))
from conftest import real_trajectories  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "golden_prompts.json"

CONFIGS: dict[str, Config] = {
    "base": Config.parse(dedup=False, fold=False, chunk=False, protocol=False, reminders=False),
    "seed": Config.parse(reminders=False),
    "default": Config(),
    "masking": Config.parse(mask_after=2, reminders=False),
    "mini": Config.parse(spans={"prompt": True}, ledger={"prompt": True, "budget_tokens": 128000}),
    "k1-nochunk": Config.parse(k=1, chunk=False, mask_after=3, mask_min_chars=50),
}


def generated(seed: int, steps: int = 40) -> History:
    """A history with overlapping file reads, edits, STALE marks, spans, ledger ops and restores."""
    rnd = random.Random(seed)
    h = History([{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix calc.py."}])
    files = {f"src/m{j}.py": [f"def f{j}_{i}(x):" if i % 7 == 0 else f"    y = x + {i}  # {j}" for i in range(160)] for j in range(3)}
    for i in range(1, steps + 1):
        roll = rnd.random()
        stale = ", ".join(str(s) for s in range(max(1, i - 3), i) if rnd.random() < 0.3) or "-"
        head = f"PROGRESS: step {i} work\nSTALE: {stale}\n" if rnd.random() < 0.7 else ""
        path = rnd.choice(sorted(files))
        if roll < 0.45:
            a = rnd.randint(1, 100)
            b = min(160, a + rnd.randint(5, 70))
            cmd = f"nl -ba {path} | sed -n '{a},{b}p'"
            out = "\n".join(f"{n:6d}\t{files[path][n - 1]}" for n in range(a, b + 1))
        elif roll < 0.55:
            cmd = f"sed -i 's/y = x/y = 2*x/' {path}"
            files[path] = [ln.replace("y = x", "y = 2*x") for ln in files[path]]
            out = ""
        elif roll < 0.65:
            cmd = f"grep -rn 'def f' src | head -{rnd.randint(3, 30)}"
            out = "\n".join(f"{p}:{n}:{files[p][n - 1]}" for p in sorted(files) for n in range(1, 160, 7))[: rnd.randint(200, 3000)]
        elif roll < 0.72:
            cmd = f"restore {rnd.randint(1, i - 1)}" if i > 1 else "ls"
            out = "restored" if i > 1 else "src"
        elif roll < 0.78:
            cmd = 'begin_span "why does f0 fail"'
            out = "span opened"
        elif roll < 0.84:
            cmd = 'fold_span "f0 fails because y is doubled in src/m0.py:14, so the fix is there"'
            out = "span folded"
        elif roll < 0.9:
            cmd = f"{rnd.choice(['fold', 'drop'])} {rnd.randint(1, max(1, i - 1))}"
            out = "ok"
        else:
            cmd = "python -m pytest -q tests"
            out = "\n".join(["F" * rnd.randint(0, 3) + "." * rnd.randint(1, 40), "=" * 30, f"{rnd.randint(0, 3)} failed, 40 passed in 0.5s"])
        reply = {"role": "assistant", "content": f"{head}Thinking about step {i}.\n\n```bash\n{cmd}\n```"}
        h.append(reply, [{"role": "user", "content": out}])
    return h


def histories() -> dict[str, History]:
    out = {p.name: load(p) for p in real_trajectories()}
    for seed in range(6):
        out[f"generated-{seed}"] = generated(seed)
    return out


def prompt_digest(messages: list[dict[str, Any]]) -> str:
    body = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.blake2b(body.encode(), digest_size=10).hexdigest()


def compute() -> dict[str, dict[str, list[str]]]:
    """run -> config -> the digest of the prompt of every call, rendered call by call."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, h in histories().items():
        out[name] = {}
        for cname, config in CONFIGS.items():
            r = Renderer(config)
            out[name][cname] = [prompt_digest(r.render(h, t).messages) for t in range(len(h) + 1)]
    return out


def differences(got: dict[str, dict[str, list[str]]], want: dict[str, dict[str, list[str]]]) -> list[str]:
    bad = []
    for run, per in want.items():
        for cname, digests in per.items():
            mine = got.get(run, {}).get(cname, [])
            for t, d in enumerate(digests):
                if t >= len(mine) or mine[t] != d:
                    bad.append(f"{run} {cname} t={t}")
    return bad


if __name__ == "__main__":
    current = compute()
    if "--update" in sys.argv:
        GOLDEN.write_text(json.dumps(current, indent=0, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN} ({sum(len(d) for per in current.values() for d in per.values())} prompts)")
    else:
        diff = differences(current, json.loads(GOLDEN.read_text()))
        print(f"{len(diff)} prompts differ", *diff[:20], sep="\n")
