"""Load benchmark for ``refold serve``: concurrent agent sessions against a scripted fake upstream.

Everything runs on loopback in separate processes (fake upstream, proxy, this client). Each
session is a tool-calling agent loop that resends its whole conversation every turn, as real
clients do. The same load runs once directly against the upstream (baseline) and once through the
proxy per store; reported: the proxy's own added latency per request (``X-Refold-Added-Ms``: time
in the proxy outside upstream calls, including the durable write), the end-to-end latency
difference against the baseline, and a turn-by-turn check of every stored session (lost turns).

    python benchmarks/bench_proxy.py [--sessions 50] [--turns 30] [--out benchmarks/results/proxy.txt]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_upstream import free_port, redis_server, wait_http  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]
RETRIES: list[int] = []
FILE = "".join(f"    line {i}: value = compute({i}, flag=True)  # some source text\n" for i in range(60))


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


async def session(
    client: httpx.AsyncClient, url: str, sid: int, turns: int, lat: list[float], added: list[float]
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": f"Task {sid}: fix the failing test in module_{sid}.py"},
    ]
    headers = {"Authorization": "Bearer bench", "X-Refold-Session": f"bench-{sid}"}
    for turn in range(1, turns + 1):
        t0 = time.perf_counter()
        for attempt in range(3):  # a dropped keep-alive connection is retried (the proxy dedups resent turns)
            try:
                r = await client.post(
                    f"{url}/chat/completions",
                    json={"model": "m", "messages": messages, "tools": TOOLS},
                    headers=headers,
                )
                break
            except httpx.TransportError:
                RETRIES.append(sid)
                if attempt == 2:
                    raise
        lat.append((time.perf_counter() - t0) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"session {sid} turn {turn}: HTTP {r.status_code}: {r.text[:300]}")
        if "x-refold-added-ms" in r.headers:
            added.append(float(r.headers["x-refold-added-ms"]))
        msg = r.json()["choices"][0]["message"]
        messages.append(msg)
        body = FILE if turn % 3 == 0 else f"ran turn {turn} of session {sid}\n" + FILE[: 400 + 37 * turn]
        messages.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": body})
    return messages


async def load(
    url: str, sessions: int, turns: int
) -> tuple[list[float], list[float], list[list[dict[str, Any]]], float]:
    lat: list[float] = []
    added: list[float] = []
    limits = httpx.Limits(max_connections=sessions * 2, max_keepalive_connections=sessions * 2)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        t0 = time.perf_counter()
        convs = await asyncio.gather(*(session(client, url, i, turns, lat, added) for i in range(sessions)))
        wall = time.perf_counter() - t0
    return lat, added, list(convs), wall


def verify(url: str, convs: list[list[dict[str, Any]]], turns: int) -> tuple[int, int]:
    """(turns expected, turns found intact) over all sessions; the last reply has no outputs yet."""
    expected = found = 0
    with httpx.Client(timeout=60) as c:
        for i, conv in enumerate(convs):
            view = c.get(f"{url}/sessions/bench-{i}", headers={"Authorization": "Bearer bench"}).json()
            steps = view["steps"]
            expected += turns - 1
            for k in range(turns - 1):
                sent_obs = conv[3 + 2 * k]["content"]
                if (
                    k < len(steps)
                    and steps[k]["actions"] == [f"echo turn-{k + 1}"]
                    and steps[k]["observations"][0]["content"] == sent_obs
                ):
                    found += 1
    return expected, found


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--tokenizer", default="qwen3.6", help="proxy --tokenizer for the tokens-saved metric")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/proxy.txt"))
    a = ap.parse_args()
    up_port = free_port()
    up = spawn(
        [
            f"import sys, uvicorn; sys.path.insert(0, {str(ROOT / 'tests')!r}); from fake_upstream import FakeUpstream; "
            f"uvicorn.run(FakeUpstream().app, host='127.0.0.1', port={up_port}, log_level='warning', timeout_keep_alive=75)"
        ]
    )
    lines = [
        f"refold proxy load benchmark: {a.sessions} concurrent sessions x {a.turns} turns, loopback, fake upstream",
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}",
        "",
        f"{'run':<26}{'requests':>9}{'wall s':>8}{'e2e p50':>9}{'e2e p99':>9}{'added p50':>11}{'added p99':>11}{'lost turns':>12}",
    ]
    try:
        wait_http(f"http://127.0.0.1:{up_port}/v1/models")
        base_lat, _, _, wall = asyncio.run(load(f"http://127.0.0.1:{up_port}/v1", a.sessions, a.turns))
        lines.append(
            f"{'direct (baseline)':<26}{len(base_lat):>9}{wall:>8.1f}{pct(base_lat, 50):>9.2f}{pct(base_lat, 99):>9.2f}{'-':>11}{'-':>11}{'-':>12}"
        )
        stores: list[tuple[str, str]] = []
        with tempfile.TemporaryDirectory() as tmp:
            stores.append(("proxy, sqlite WAL", f"sqlite:///{tmp}/bench.db"))
            stores.append(("proxy, sqlite WAL sync=full", f"sqlite:///{tmp}/bench-full.db?sync=full"))
            runs = [(name, url) for name, url in stores]
            if shutil.which("redis-server"):
                with redis_server() as rurl:
                    runs.append(("proxy, redis", rurl))
                    results = [run_proxy(name, url, up_port, a, base_lat) for name, url in runs]
            else:
                results = [run_proxy(name, url, up_port, a, base_lat) for name, url in runs]
                results.append("proxy, redis: skipped (redis-server not installed)")
        lines += results
    finally:
        up.terminate()
        up.wait(timeout=20)
    lines += [
        "",
        "e2e = client-measured request latency (ms); added = proxy time outside upstream calls (ms,",
        "X-Refold-Added-Ms: session mapping, durable write, render; excludes body parsing/serialization).",
        f"Proxy runs use the default policy and the {a.tokenizer} tokenizer for the tokens-saved metric (off the",
        "request path). Lost turns = recorded steps missing or differing from what the client sent.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.out).write_text(text)


def run_proxy(name: str, store: str, up_port: int, a: argparse.Namespace, base_lat: list[float]) -> str:
    port = free_port()
    code = "import sys; from refold.cli import main; sys.exit(main())"
    px = spawn(
        [
            code,
            "serve",
            "--upstream",
            f"http://127.0.0.1:{up_port}/v1",
            "--store",
            store,
            "--port",
            str(port),
            "--tokenizer",
            a.tokenizer,
        ]
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/healthz")
        RETRIES.clear()
        lat, added, convs, wall = asyncio.run(load(f"{url}/v1", a.sessions, a.turns))
        expected, found = verify(url, convs, a.turns)
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer bench"}).text
        vals = {
            ln.split()[0]: float(ln.split()[1])
            for ln in metrics.splitlines()
            if ln and not ln.startswith("#")
        }
        full, rendered = (
            vals.get("refold_prompt_tokens_full_total", 0),
            vals.get("refold_prompt_tokens_rendered_total", 0),
        )
        row = (
            f"{name:<26}{len(lat):>9}{wall:>8.1f}{pct(lat, 50):>9.2f}{pct(lat, 99):>9.2f}"
            f"{pct(added, 50):>11.2f}{pct(added, 99):>11.2f}{expected - found:>12}"
        )
        extra = (
            f"{'':<26}turns checked {found}/{expected}; client retries {len(RETRIES)}; e2e p50 vs direct {pct(lat, 50) - pct(base_lat, 50):+.2f} ms; "
            f"added mean {statistics.fmean(added):.2f} ms; prompt tokens {rendered:,.0f} sent vs {full:,.0f} full "
            f"({(1 - rendered / full) * 100 if full else 0:.1f}% saved)"
        )
        return row + "\n" + extra
    finally:
        px.terminate()
        px.wait(timeout=30)


if __name__ == "__main__":
    main()
