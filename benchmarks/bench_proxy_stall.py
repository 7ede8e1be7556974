"""Does one tenant's long first request stall another tenant's chat? (issue 13)

A new session of ``--steps`` steps (10,000+ messages, about 2 MB at 5,000 steps) is sent with
key k2; ``--gap`` seconds later a one-message chat with key k9. Both go through ``refold serve``
(uvicorn on loopback, SQLite store) to a scripted fake upstream; wall-clock times as the clients
see them. Usage: ``python benchmarks/bench_proxy_stall.py [--steps 5000] [--gap 2]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from refold.proxy import ProxyConfig, create_app  # noqa: E402

from fake_upstream import FakeUpstream, ServerThread  # noqa: E402


def big_body(steps: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}]
    for i in range(steps):
        msgs.append({"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: -\n```bash\ncat file{i % 50}.py | head -n {i}\n```"})
        msgs.append({"role": "user", "content": f"output of step {i}:\n" + (f"line of output {i}\n" * 12)})
    return {"model": "m", "messages": msgs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--gap", type=float, default=2.0)
    a = ap.parse_args()
    body = big_body(a.steps)
    f = FakeUpstream()
    tmp = tempfile.mkdtemp()
    with ServerThread(f.app) as up:
        cfg = ProxyConfig(upstream=f"{up.url}/v1", store=f"{tmp}/s.db", tokenizer="off")
        with ServerThread(create_app(cfg)) as px:
            res: dict[str, tuple[int, float]] = {}

            def big() -> None:
                t = time.perf_counter()
                r = httpx.post(f"{px.url}/v1/chat/completions", json=body, timeout=600,
                               headers={"Authorization": "Bearer k2", "X-Refold-Session": "many4"})
                res["big"] = (r.status_code, time.perf_counter() - t)

            th = threading.Thread(target=big)
            th.start()
            time.sleep(a.gap)
            t = time.perf_counter()
            r = httpx.post(f"{px.url}/v1/chat/completions", timeout=600, headers={"Authorization": "Bearer k9"},
                           json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            res["small"] = (r.status_code, time.perf_counter() - t)
            th.join()
    print(f"big first request: {a.steps} steps, {len(json.dumps(body)) / 1e6:.2f} MB, "
          f"status {res['big'][0]}, {res['big'][1]:.2f} s")
    print(f"other tenant's one-message chat sent {a.gap:g} s later: status {res['small'][0]}, {res['small'][1]:.2f} s")


if __name__ == "__main__":
    main()
