"""cProfile of ``refold replay`` (default Settings: every policy, vLLM cache) on a synthetic run.

Run:  PYTHONPATH=src python benchmarks/profile_replay.py [STEPS=2000] [OUT=/tmp/replay.prof]
Prints the top entries by own time and by cumulative time.
"""

from __future__ import annotations

import cProfile
import json
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import synthetic_messages  # noqa: E402

from refold.lab.replay import Settings, replay_paths  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    out = sys.argv[2] if len(sys.argv) > 2 else "/tmp/replay.prof"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"synthetic-{steps}.json"
        run = {"trajectory_format": "mini-swe-agent-1", "instance_id": f"synthetic-{steps}", "messages": synthetic_messages(steps)}
        path.write_text(json.dumps(run), encoding="utf-8")
        prof = cProfile.Profile()
        prof.enable()
        (r,) = replay_paths([str(path)], Settings())
        prof.disable()
    assert r.error is None, r.error
    prof.dump_stats(out)
    stats = pstats.Stats(out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(45)


if __name__ == "__main__":
    main()
