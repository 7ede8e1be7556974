"""Compare two folders of ``refold replay --json`` outputs (same file names), ignoring timing fields.

Run:  python benchmarks/compare_replay_json.py BEFORE_DIR AFTER_DIR   (exit 1 if any file differs)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

TIMING = re.compile(r"render_ms|^seconds$")  # render_ms_median / _p99 / ..., the run's wall seconds


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if not TIMING.search(k)}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if type(a) is not type(b):
        out.append(f"{path}: {a!r} != {b!r}")
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only on one side")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and len(a) != len(b):
        out.append(f"{path}: {len(a)} items != {len(b)}")
    elif isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")


def main() -> int:
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    bad = 0
    for f in sorted(before.glob("*.json")):
        out: list[str] = []
        _diff(_strip(json.loads(f.read_text())), _strip(json.loads((after / f.name).read_text())), "", out)
        print(f"{f.name}: {'identical' if not out else f'{len(out)} differences'}")
        for line in out[:5]:
            print("   ", line)
        bad += bool(out)
    print(f"files differing: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
