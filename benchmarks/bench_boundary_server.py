"""The boundary position and peak weight on one shared vLLM server (``refold simulate``'s model; SIMULATED).

    python benchmarks/bench_boundary_server.py DIR [DIR ...] [--runs base,seed:0.1,window:0.1] [--sessions 75,150,300] [--kv-tokens 230000] [--out FILE]

Each run is ``base`` or ``position:peak_weight`` for refold's ``default``; each session count w runs
w sessions over the files' sessions (round robin) on a Qwen3-32B/H100 roofline with a KV pool of
``--kv-tokens`` (230k: cache_spec.md's Qwen3-32B-on-one-H200 example). Makespan is the time the w
sessions take together (lower: more throughput); where KV memory binds, a smaller peak admits more.
Token counts use the chars/4 tokenizer (fast; every run alike).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench_default import default_boundary

from refold.lab.replay.paths import collect_paths
from refold.lab.serversim.sim import ServerConfig, simulate
from refold.lab.serversim.steptime import make_step_time
from refold.lab.serversim.workload import build_trace, set_shared_prefixes
from refold.loaders import load_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--runs", default="base,seed:0.1,window:0.1")
    ap.add_argument("--sessions", default="75,150,300")
    ap.add_argument("--kv-tokens", type=int, default=230_000)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    histories = [h for f in collect_paths(a.paths) for h in load_all(f)]
    step = make_step_time("roofline", "qwen3-32b", "h100")
    cfg = ServerConfig(a.kv_tokens // 16, 16)
    lines = [
        f"default's boundary position and peak weight on one vLLM server, {len(histories)} sessions of "
        f"{', '.join(a.paths)}; Qwen3-32B, H100 roofline, KV pool {a.kv_tokens:,} tokens; SIMULATED", "",
    ]
    for run in a.runs.split(","):
        if run == "base":
            traces = [build_trace(h, "base", tokenizer="chars4") for h in histories]
        else:
            position, weight = run.split(":")
            with default_boundary(position=position, peak_weight=float(weight)):
                traces = [build_trace(h, "default", tokenizer="chars4") for h in histories]
        set_shared_prefixes(traces, 16)
        for w in (int(x) for x in a.sessions.split(",")):
            r = simulate(traces, w, cfg, step)
            lines.append(
                f"{run:12s} w={w:<4d} makespan {r.makespan:8.1f} s  prefilled {r.prefilled_tokens:>11,}  "
                f"preemptions {r.preemptions:4d}  wait mean {r.wait_mean:6.2f} s  KV blocks mean {r.mean_blocks:6.0f}/{r.capacity_blocks}"
            )
            print(lines[-1], flush=True)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
