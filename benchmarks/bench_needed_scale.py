"""CPU time of the hidden-then-needed check alone on a long synthetic run, per policy.

Prompts of every default replay policy are rendered beforehand (not timed); the check of each
policy's prompts (``hidden_then_needed``, index built beforehand) is timed.

Run:  PYTHONPATH=src python benchmarks/bench_needed_scale.py [STEPS]   (default 1000)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay_scale import write_run

from refold.lab.replay.needed import NeededIndex, hidden_then_needed
from refold.lab.replay.runner import iter_prompts
from refold.lab.replay.settings import Settings
from refold.loaders import load_all


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with tempfile.TemporaryDirectory() as d:
        (h,) = load_all(str(write_run(n, Path(d))))
    s = Settings()
    tok = s.options().tokenizer
    total = 0.0
    for name in s.policies:
        prompts = [(x.t, x.messages, x.origins) for x in iter_prompts(h, name, tokenizer=s.tokenizer)]
        index = NeededIndex(h, tok)
        start = time.process_time()
        found = hidden_then_needed(h, prompts, tok, index=index)
        cpu = time.process_time() - start
        total += cpu
        print(f"{name:16} {cpu:6.2f} s  hidden-then-needed calls {found.needed_calls}", flush=True)
    print(f"total {total:.2f} s ({n} steps)")


if __name__ == "__main__":
    main()
