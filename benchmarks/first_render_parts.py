"""What a fresh renderer's first render of an N-step history is made of (thread CPU seconds).

The render of bench_render.py's ``--first-render``: the last call of a synthetic N-step history
by a fresh ``Renderer(Config())`` (the cost rule replays every call before it), and the same call
with nothing to replay (fixed boundary, no budget line). Each named part is timed inclusively
(a part inside another counts in both; a recursive call once) by wrapping the function, from cold
caches; the wrappers cost a little, so the parts are shares, the totals a bit above bench_render's.
Both are then timed again with the output summaries kept (the memo the cold pass filled; the rest
cold, a new Renderer and History): what a restart that kept the summaries would still pay.

Run:  PYTHONPATH=src python benchmarks/first_render_parts.py [N] [--out benchmarks/results/first_render_parts.txt]
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from render_passes import cold_caches  # noqa: E402
from synthetic import synthetic_messages  # noqa: E402

from refold import shell as _shell  # noqa: E402
from refold.config import Config  # noqa: E402
from refold.history import History  # noqa: E402
from refold.render import Renderer  # noqa: E402

PARTS = {  # label: (module, attribute, modules that imported the function by name)
    "receive every step (received forms, books)": ("refold.render.renderer", "Renderer._receive", ()),
    "behind the boundary (Behind.advance)": ("refold.render.behind", "Behind.advance", ()),
    "dedup (DedupIndex.process)": ("refold.mechanisms.dedup", "DedupIndex.process", ()),
    "layouts (Renderer._layout_at)": ("refold.render.renderer", "Renderer._layout_at", ()),
    "mask notes (messages.mask_note)": ("refold.messages", "mask_note", ("refold.render.masking_mechanisms",)),
    "summaries (summary._summarize, memo hits included)": ("refold.mechanisms.summary", "_summarize", ()),
    "outlines (outline.outline)": ("refold.outline", "outline", ()),
    "the cost rule with pending span folds (Renderer._defer)": ("refold.render.renderer", "Renderer._defer", ()),
}


def _wrap(label: str, module: str, attr: str, importers: tuple[str, ...], acc: dict[str, list[float]]) -> None:
    owner: Any = importlib.import_module(module)
    *path, name = attr.split(".")
    for p in path:
        owner = getattr(owner, p)
    f: Callable[..., Any] = getattr(owner, name)
    acc[label] = [0.0, 0.0, 0.0]  # seconds, calls, depth

    def timed(*a: Any, **k: Any) -> Any:
        e = acc[label]
        e[2] += 1
        start = time.thread_time() if e[2] == 1 else None
        try:
            return f(*a, **k)
        finally:
            e[2] -= 1
            if start is not None:
                e[0] += time.thread_time() - start
                e[1] += 1

    if hasattr(f, "cache_clear"):  # an lru_cache: cold_caches() empties it through the wrapper
        timed.cache_clear = f.cache_clear  # type: ignore[attr-defined]
    setattr(owner, name, timed)
    for m in importers:
        setattr(importlib.import_module(m), name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="?", type=int, default=5000)
    ap.add_argument("--out", help="write the report here too")
    args = ap.parse_args()
    n = args.steps
    wire = json.dumps(synthetic_messages(n, 0))
    cold_caches()
    acc: dict[str, list[float]] = {}
    for label, (module, attr, importers) in PARTS.items():
        _wrap(label, module, attr, importers, acc)
    lines = [
        f"first render parts ({platform.python_version()}, {platform.machine()}): "
        f"PYTHONPATH=src python benchmarks/first_render_parts.py {n}",
        f"synthetic-{n} (simulated, seed 0), Config(); thread CPU seconds, inclusive, from cold caches",
        "parts overlap: dedup runs inside Behind.advance; mask notes inside the layouts and (whether an output is worth",
        "a note) inside Behind.advance; summaries inside mask notes; outlines inside summaries",
    ]
    fixed = Config().replace(boundary={"rule": "fixed"}, ledger={"budget_tokens": None})
    for title, config, kept in (
        ("render of the last call by a fresh Renderer", Config(), False),
        ("the same render with the summaries kept", Config(), True),
        ("the same call with nothing to replay", fixed, False),
        ("nothing to replay, the summaries kept", fixed, True),
    ):
        if kept:  # the memo the cold pass just filled stays; the shell analysis cache does not
            analyzed = getattr(_shell, "_analyze", None)
            if analyzed is not None:
                analyzed.cache_clear()
        else:
            cold_caches()
        for e in acc.values():
            e[0] = e[1] = 0.0
        h = History.from_messages(json.loads(wire), source=f"synthetic-{n}")
        start = time.thread_time()
        Renderer(config).render(h)
        total = time.thread_time() - start
        lines.append(f"{title}: {total:.2f} s")
        for label, (s, calls, _) in acc.items():
            lines.append(f"  {label:58} {s:6.2f} s {s / total:5.0%}  {int(calls):6d} calls")
    print("\n".join(lines))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
