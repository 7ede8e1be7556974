"""What self-GC costs and saves on recorded runs: the ledger view, the budget line, pinned plans,
and folding old replies (with SIMULATED agent marks: the recorded agents never folded a reply).

    python benchmarks/bench_selfgc.py DIR_OR_FILE [...] [--out benchmarks/results/selfgc] [--age 4]

Per configuration, summed over every model call of every run (qwen3.6 chat-template tokens):

* ``default``            the library's default Config;
* ``self-gc``            the documented preset (pinned plans, ledger view at the tail, budget line);
* ``self-gc -view``      the preset without the view and the budget line (what they cost);
* ``self-gc -view +marks`` and ``self-gc +marks``: SIMULATED marks, the agent folding its reply of
  ``age`` steps ago at every step when that reply is a thought (plans and results are kept).

* ``default +span folds``: SIMULATED ``fold_steps A-B "<conclusion>"`` after the fact, every
  ``--fold-every`` steps, of the ``--fold-len`` steps that ended ``age`` steps ago; ``at once`` shows each
  fold from the call that issued it (``boundary.fold_wait=0``, refold before 0.3), ``deferred``
  lets the cost rule wait for a boundary move that pays (the default: at most 2 fixed-rule moves).

The view's and the budget line's own tokens are counted in every prompt of ``self-gc``. Reminders
are off everywhere: a replay's replies cannot react to them. ``cost`` is SIMULATED: the prompt
tokens priced with the vllm profile's relative prices (a token cached since the previous call 0.1,
a recomputed one 1.0). ``--only NAME`` measures only the configurations whose name contains NAME;
``--fold-wait N`` sets ``boundary.fold_wait`` of the deferred row. Writes ``<out>.txt`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from refold.chat_tokens import count_messages
from refold.config import Config
from refold.history import History
from refold.loaders import load_all
from refold.mechanisms.objects import reply_kind
from refold.protocol import CM, ContextCommand
from refold.render import Renderer
from refold.tokens import get_tokenizer
from refold.types import Facts, content_text
from refold.wire import action

BASE = Config.parse(reminders=False)
SELF_GC = Config.parse(preset="self-gc", reminders=False)
NO_VIEW = SELF_GC.override(["ledger.view=false", "ledger.budget_tokens=null"])
CONFIGS: dict[str, tuple[Config, bool]] = {
    "default": (BASE, False),
    "self-gc": (SELF_GC, False),
    "self-gc -view": (NO_VIEW, False),
    "self-gc -view +marks (simulated)": (NO_VIEW, True),
    "self-gc +marks (simulated)": (SELF_GC, True),
    "self-gc -view -masking": (NO_VIEW.override(["policy.mask_after=null"]), False),
    "self-gc -view -masking +marks (simulated)": (NO_VIEW.override(["policy.mask_after=null"]), True),
    "default +span folds at once (simulated)": (BASE.override(["boundary.fold_wait=0"]), True),
    "default +span folds deferred (simulated)": (BASE, True),
}
SPAN_FOLDS = ("default +span folds at once (simulated)", "default +span folds deferred (simulated)")
CONCLUSION = "steps {lo}-{hi} were a dead end: the error at line 1 is not raised there, so the cause lies elsewhere"


def histories(paths: list[Path]) -> Iterator[tuple[str, History]]:
    for p in paths:
        files = sorted(q for q in p.rglob("*") if q.is_file() and q.suffix in (".json", ".traj", ".jsonl")) if p.is_dir() else [p]
        for f in files:
            try:
                loaded = load_all(f)  # a multi-agent file: one history per agent
            except Exception as e:  # a folder may hold manifests and notes: skip what is no run
                print(f"skipped {f.name}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
                continue
            for i, h in enumerate(loaded):
                if len(h) >= 2:
                    yield (f.name if len(loaded) == 1 else f"{f.name}#{h.source.rsplit('#', 1)[-1] or i}"), h


def with_marks(h: History, age: int) -> tuple[History, int]:
    """``h`` with a SIMULATED ``fold r{t-age}`` added to step t when that reply is a thought."""
    out = History(h.prefix, source=h.source, meta=h.meta)
    marks = 0
    for s in h.steps:
        actions = s.actions
        old = s.index - age
        if old >= 1 and reply_kind(h.step(old)) == "thought":
            actions = (*actions, action(f"fold r{old}", context=ContextCommand("fold", f"r{old}")))
            marks += 1
        out.append(s.reply, s.observations, facts=Facts(actions, s.outcomes, s.restore_of), meta=s.meta)
    return out, marks


def with_span_folds(h: History, age: int, every: int, length: int) -> tuple[History, int]:
    """``h`` with a SIMULATED ``fold_steps A-B`` at every ``every``-th step, of the ``length`` steps
    that ended ``age`` steps before it (the ranges never overlap when ``every`` > ``length``)."""
    out = History(h.prefix, source=h.source, meta=h.meta)
    folds = 0
    for s in h.steps:
        actions = s.actions
        hi = s.index - age
        lo = hi - length + 1
        if s.index % every == 0 and lo >= 1:
            arg = f'{lo}-{hi} "{CONCLUSION.format(lo=lo, hi=hi)}"'
            actions = (*actions, action(f"fold_steps {arg}", context=ContextCommand("fold_steps", arg)))
            folds += 1
        out.append(s.reply, s.observations, facts=Facts(actions, s.outcomes, s.restore_of), meta=s.meta)
    return out, folds


def measure(h: History, config: Config, tok: Any) -> dict[str, int]:
    r = Renderer(config)
    total = view = budget = uncached = 0
    for t in range(len(h)):
        p = r.render(h, t)
        n = count_messages(p.messages, tok)
        total += n
        if p.stats.stable:
            uncached += n - count_messages(p.messages[: p.stats.stable], tok)
        else:
            uncached += n
        if p.origins and p.origins[-1].part == "ledger":
            view += len(tok.encode(content_text(p.messages[-1].get("content"))))
        if config.ledger.budget_tokens:
            lines = [ln for m in p.messages for ln in content_text(m.get("content")).splitlines() if ln.startswith(f"{CM} context: ")]
            budget += sum(len(tok.encode(ln)) + 1 for ln in lines)
    shown = sum(1 for s in r.span_book.closed if s.id in r.fold_costs)
    return {
        "prompt_tokens": total, "view_tokens": view, "budget_tokens": budget, "uncached_tokens": uncached,
        "calls": len(h), "cost_milli": round(100 * (total - uncached) + 1000 * uncached),
        "folds_shown": shown, "folds_closed": len(r.span_book.closed),
        "fold_wait_calls": sum(c.step - (s.closed_at or c.step) for s in r.span_book.closed if (c := r.fold_costs.get(s.id))),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--age", type=int, default=4, help="simulated marks fold the reply this many steps old")
    ap.add_argument("--fold-every", type=int, default=6, help="a simulated fold_steps every this many steps")
    ap.add_argument("--fold-len", type=int, default=5, help="... of this many steps")
    ap.add_argument("--only", default=None, help="measure only the configurations whose name contains this")
    ap.add_argument("--fold-wait", type=int, default=None, help="boundary.fold_wait of the deferred row (default: the library's)")
    a = ap.parse_args(argv)
    configs = {n: c for n, c in CONFIGS.items() if a.only is None or a.only in n}
    if a.fold_wait is not None and SPAN_FOLDS[1] in configs:
        configs[SPAN_FOLDS[1]] = (BASE.override([f"boundary.fold_wait={a.fold_wait}"]), True)
    tok = get_tokenizer("qwen3.6")
    sums: dict[str, dict[str, int]] = {name: {} for name in configs}
    runs: list[dict[str, Any]] = []
    marks = plans = replies = span_folds = 0
    start = time.perf_counter()
    for name, h in histories(a.paths):
        marked, n_marks = with_marks(h, a.age)
        marks += n_marks
        spanned, n_folds = with_span_folds(h, a.age, a.fold_every, a.fold_len)
        span_folds += n_folds
        kinds = [reply_kind(s) for s in h.steps]
        plans += kinds.count("plan")
        replies += len(kinds)
        row: dict[str, Any] = {"run": name, "steps": len(h)}
        for cname, (config, simulated) in configs.items():
            m = measure((spanned if cname in SPAN_FOLDS else marked) if simulated else h, config, tok)
            row[cname] = m
            for k, v in m.items():
                sums[cname][k] = sums[cname].get(k, 0) + v
        runs.append(row)
        print(f"{name}: {len(h)} steps", file=sys.stderr)
    base = sums.get("default", {}).get("prompt_tokens")
    lines = [
        f"self-gc on {len(runs)} runs ({sum(r['steps'] for r in runs)} calls; {replies} replies: {plans} plans detected; "
        f"{marks} SIMULATED reply folds at age {a.age}; {span_folds} SIMULATED fold_steps of {a.fold_len} steps every "
        f"{a.fold_every}, deferred with fold_wait={a.fold_wait if a.fold_wait is not None else BASE.boundary.fold_wait}); "
        "qwen3.6 tokens, reminders off; cost SIMULATED (vllm prices: cached 0.1, recomputed 1)",
        f"{'configuration':42} {'prompt tokens':>14} {'vs default':>10} {'uncached':>13} {'cost (sim.)':>12} {'view':>11} {'budget':>9}",
    ]
    for cname, t in sums.items():
        ratio = f"{t['prompt_tokens'] / base:.3f}x" if base else "-"
        lines.append(
            f"{cname:42} {t['prompt_tokens']:>14,} {ratio:>10} {t['uncached_tokens']:>13,} "
            f"{t['cost_milli'] / 1000:>12,.0f} {t['view_tokens']:>11,} {t['budget_tokens']:>9,}"
        )

    def have(*names: str) -> bool:
        return all(n in sums for n in names)

    if have("self-gc -view", "self-gc -view +marks (simulated)"):
        nv, mk = sums["self-gc -view"]["prompt_tokens"], sums["self-gc -view +marks (simulated)"]["prompt_tokens"]
        lines.append(f"folding old replies (SIMULATED marks) saves {nv - mk:,} tokens ({(nv - mk) / (nv or 1):.1%}) against self-gc -view")
    if have("self-gc -view -masking", "self-gc -view -masking +marks (simulated)"):
        nm, mm = sums["self-gc -view -masking"]["prompt_tokens"], sums["self-gc -view -masking +marks (simulated)"]["prompt_tokens"]
        lines.append(f"... and {nm - mm:,} tokens ({(nm - mm) / (nm or 1):.1%}) where masking does not condense old replies already")
    if have("self-gc"):
        v = sums["self-gc"]
        lines.append(
            f"the ledger view costs {v['view_tokens']:,} tokens ({v['view_tokens'] / (v['prompt_tokens'] or 1):.1%} of self-gc's prompts), "
            f"the budget line {v['budget_tokens']:,} ({v['budget_tokens'] / (v['prompt_tokens'] or 1):.1%})"
        )
    if have(*SPAN_FOLDS):
        now, later = (sums[n] for n in SPAN_FOLDS)
        lines.append(
            f"span folds (SIMULATED): deferred to the next boundary move vs at once: {later['prompt_tokens'] - now['prompt_tokens']:+,} "
            f"prompt tokens ({later['prompt_tokens'] / (now['prompt_tokens'] or 1) - 1:+.2%}), {later['uncached_tokens'] - now['uncached_tokens']:+,} "
            f"uncached ({later['uncached_tokens'] / (now['uncached_tokens'] or 1) - 1:+.2%}), simulated cost "
            f"{later['cost_milli'] / (now['cost_milli'] or 1) - 1:+.2%}; {later['folds_shown']} of {later['folds_closed']} folds shown, "
            f"waiting {later['fold_wait_calls'] / (later['folds_shown'] or 1):.2f} calls on average"
        )
    lines.append(f"({time.perf_counter() - start:.0f} s)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".txt").write_text(text + "\n")
        a.out.with_suffix(".json").write_text(
            json.dumps({"format": "refold-bench-selfgc-1", "age": a.age, "fold_every": a.fold_every, "fold_len": a.fold_len,
                        "totals": sums, "runs": runs}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
