"""Time to first token through ``refold serve`` vs. directly, in the same run, on loopback.

A fake upstream (separate process) streams each reply in 7-character deltas with a fixed delay
before each one (``DELAY:<ms>``: a model generating tokens). Each scenario runs sequential agent
sessions that resend their whole conversation every turn, as real clients do, and measures, from
the client's side, the time from sending a request to the first non-empty text delta, and to the
end of the stream. Scenarios: directly against the upstream, and through the proxy with a shell
tool (a round that may be an internal context-command round), without tools (text mode: the
reply's text is relayed up to its command block), and with ``--strip-protocol`` (the first token
the client sees comes after the PROGRESS/STALE head, which the proxy holds back).

    python benchmarks/bench_ttft.py [--sessions 8] [--turns 6] [--delay-ms 20]
        [--src OTHER/src] [--out benchmarks/results/ttft.txt]

``--src`` runs the proxy from another checkout's ``src`` (e.g. main before this change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
from fake_upstream import free_port, wait_http  # noqa: E402

BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_sessions(url: str, tools: bool, sessions: int, turns: int, delay: float, tag: str) -> dict[str, list[float]]:
    ttft: list[float] = []
    total: list[float] = []
    with httpx.Client(timeout=120) as client:
        for sid in range(sessions):
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": f"Task {tag}-{sid}: fix the failing test. DELAY:{delay:g}"},
            ]
            headers = {"X-Refold-Session": f"ttft-{tag}-{sid}"}
            for turn in range(turns):
                body: dict[str, Any] = {"model": "m", "messages": messages, "stream": True}
                if tools:
                    body["tools"] = [BASH]
                first = None
                content, calls = "", {}
                t0 = time.perf_counter()
                with client.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as r:
                    if r.status_code != 200:
                        raise RuntimeError(f"{tag}: HTTP {r.status_code}: {r.read()[:300]!r}")
                    for line in r.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        ch = json.loads(line[6:])
                        for c in ch.get("choices") or []:
                            d = c.get("delta") or {}
                            if first is None and (d.get("content") or d.get("tool_calls")):
                                first = time.perf_counter()
                            content += d.get("content") or ""
                            for tc in d.get("tool_calls") or []:
                                slot = calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                                slot["id"] = tc.get("id") or slot["id"]
                                slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                                slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
                end = time.perf_counter()
                if first is None:
                    raise RuntimeError(f"{tag}: an empty reply")
                ttft.append((first - t0) * 1000)
                total.append((end - t0) * 1000)
                msg: dict[str, Any] = {"role": "assistant", "content": content}
                if calls:
                    msg["tool_calls"] = [calls[k] for k in sorted(calls)]
                    messages += [msg, {"role": "tool", "tool_call_id": calls[0]["id"], "content": f"output {turn} DELAY:{delay:g}"}]
                else:
                    messages += [msg, {"role": "user", "content": f"output {turn} DELAY:{delay:g}"}]
    return {"ttft": ttft, "total": total}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--src", type=Path, help="run the proxy from this src directory instead")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    up_port = free_port()
    procs = [
        spawn(
            [
                sys.executable,
                "-c",
                f"import sys, uvicorn; sys.path.insert(0, {str(ROOT / 'tests')!r}); from fake_upstream import FakeUpstream; "
                f"uvicorn.run(FakeUpstream().app, host='127.0.0.1', port={up_port}, log_level='warning')",
            ]
        )
    ]
    upstream = f"http://127.0.0.1:{up_port}/v1"
    env = dict(os.environ)
    if a.src:
        env["PYTHONPATH"] = str(a.src.resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    rows: list[tuple[str, dict[str, list[float]]]] = []
    try:
        wait_http(f"{upstream}/models")
        with tempfile.TemporaryDirectory() as tmp:
            proxies: dict[str, str] = {}
            for name, flags in (("plain", []), ("strip", ["--strip-protocol"])):
                if name == "strip" and a.src:
                    continue  # the other checkout may not have the flag
                port = free_port()
                procs.append(
                    spawn(
                        [sys.executable, "-m", "refold", "serve", "--upstream", upstream, "--port", str(port),
                         "--store", f"{tmp}/{name}.db", "--tokenizer", "off", *flags],
                        env,
                    )
                )
                proxies[name] = f"http://127.0.0.1:{port}/v1"
            for url in proxies.values():
                wait_http(f"{url}/models")
            # warm up every path once (imports, first connections)
            for url in (upstream, *proxies.values()):
                run_sessions(url, True, 1, 2, a.delay_ms, f"warm{free_port()}")
            scenarios = [
                ("direct, shell tool", upstream, True),
                ("proxy, shell tool", proxies["plain"], True),
                ("direct, no tools", upstream, False),
                ("proxy, no tools (text mode)", proxies["plain"], False),
            ]
            if "strip" in proxies:
                scenarios.append(("proxy --strip-protocol, shell tool", proxies["strip"], True))
                scenarios.append(("proxy --strip-protocol, no tools", proxies["strip"], False))
            for name, url, tools in scenarios:
                rows.append((name, run_sessions(url, tools, a.sessions, a.turns, a.delay_ms, name.split(",")[0].replace(" ", "")[:8] + str(len(rows)))))
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)

    n = a.sessions * a.turns
    lines = [
        f"refold time-to-first-token benchmark: {a.sessions} sequential sessions x {a.turns} turns per scenario, loopback",
        f"fake upstream streams 7-char deltas, {a.delay_ms:g} ms before each (a simulated model); python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}" + (f"; proxy from {a.src}" if a.src else ""),
        "",
        f"{'scenario':38} {'requests':>8} {'TTFT p50':>9} {'TTFT p90':>9} {'total p50':>10} {'TTFT p50 vs direct':>19}",
    ]
    direct = {True: statistics.median(rows[0][1]["ttft"]), False: statistics.median(rows[2][1]["ttft"])}
    for name, r in rows:
        tools = "no tools" not in name
        d = statistics.median(r["ttft"]) - direct[tools]
        vs = "-" if name.startswith("direct") else f"{d:+.1f} ms"
        lines.append(
            f"{name:38} {len(r['ttft']):>8} {statistics.median(r['ttft']):>9.1f} {pct(r['ttft'], 90):>9.1f} "
            f"{statistics.median(r['total']):>10.1f} {vs:>19}"
        )
    lines += [
        "",
        f"TTFT = client-measured ms from sending the request to the first non-empty text or tool-call delta ({n} requests each).",
        "total = ms to the end of the stream. Each proxy request renders the prompt and commits the turn",
        "durably (SQLite WAL) before calling upstream. --strip-protocol holds the PROGRESS/STALE head",
        "back; the fake's tool-call replies are only that head and a tool call, and a shell tool call is",
        "held to the round's end (it may be a context command), so there the first token is the end of",
        "the round, by design.",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)


if __name__ == "__main__":
    main()
