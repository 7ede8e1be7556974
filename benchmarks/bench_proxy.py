"""Load benchmark for ``refold serve``, measured from the client's side.

Three processes on loopback: a scripted upstream (this file, ``--serve-upstream``), the proxy
(``refold serve``), and this client. Each session is an agent loop that resends its whole
conversation every turn. The same load runs directly against the upstream and through the proxy
(SQLite, SQLite ``sync=full``, Redis on a private ``redis-server``) in one invocation; reported per
run: client-visible latency p50/p99, the added latency against direct (p50 - p50, p99 - p99) and
the ratio to direct, and lost turns (every stored session checked turn by turn).

Loads:

* ``agents`` (the targets): the upstream takes ``--upstream-ms`` per call, like a model
  generating, and each agent spends ``--tool-ms`` running its tool between calls.
* ``agents + 8 views``: the same, while 8 clients of another tenant keep loading the HTML views
  of 8 finished 30-turn sessions in a tight loop (cached pages, served through the view lane).
* ``agents + 8 live views``: 8 clients keep loading the views of 8 of the agents' own sessions
  while they are written, so every new turn is a page to build (in the idle-priority worker).
* ``saturated``: no upstream time and no tool time, a closed loop that keeps both CPUs busy;
  here every millisecond of proxy CPU queues up, so it measures capacity, not per-request latency.
* ``recorded runs`` (``--runs DIR ...``): real trajectories replayed as clients, the upstream
  answering each call with the recorded reply; real output sizes, and the tokens the proxy saved.

    python benchmarks/bench_proxy.py [--sessions 50] [--turns 30] [--runs DIR ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
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
FILE = "".join(f"    line {i}: value = compute({i}, flag=True)  # some source text\n" for i in range(60))
AUTH = {"Authorization": "Bearer bench"}


# ---- the upstream --------------------------------------------------------------------------------


def upstream_app(delay_ms: float, runs: list[str]) -> Any:
    """A minimal OpenAI-style upstream (raw ASGI: its own CPU cost stays small). It answers
    ``echo turn-<n>`` tool calls, or, with ``x-bench-run``/``x-bench-turn``, a recorded reply."""
    replies: list[list[dict[str, Any]]] = [[dict(s.reply) for s in h.steps] for h in recorded(runs)]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if scope["path"].endswith("/models"):
            out: dict[str, Any] = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
        else:
            req = json.loads(body)
            wait = float(headers.get("x-bench-delay-ms", delay_ms))
            if wait:
                await asyncio.sleep(wait / 1000)
            if "x-bench-run" in headers:
                message = replies[int(headers["x-bench-run"])][int(headers["x-bench-turn"])]
            else:
                n = sum(1 for m in req["messages"] if m.get("role") == "assistant") + 1
                message = {
                    "role": "assistant",
                    "content": f"PROGRESS: step {n}\nSTALE: -",
                    "tool_calls": [
                        {
                            "id": f"call_{n}",
                            "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": f"echo turn-{n}"})},
                        }
                    ],
                }
            out = {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 1,
                "model": req.get("model"),
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 20, "total_tokens": len(body) // 4 + 20},
            }
        data = json.dumps(out).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": data})

    return app


def recorded(dirs: list[str]) -> list[Any]:
    from refold.loaders import load_all

    files = sorted(
        str(p) for d in dirs for p in (Path(d).rglob("*") if Path(d).is_dir() else [Path(d)])
        if p.is_file() and (p.name.endswith((".json", ".traj", ".json.gz", ".traj.gz")))
    )
    out = []
    for f in files:
        try:
            out.extend(h for h in load_all(f) if len(h) >= 2)
        except Exception:  # noqa: BLE001 - a file that does not parse is skipped (replay names it)
            continue
    return out


# ---- the clients ---------------------------------------------------------------------------------


class Load:
    def __init__(self) -> None:
        self.lat: list[float] = []
        self.added: list[float] = []
        self.retries = 0


async def post(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str], load: Load) -> Any:
    t0 = time.perf_counter()
    for attempt in range(3):  # a dropped keep-alive connection is retried (the proxy dedups resent turns)
        try:
            r = await client.post(f"{url}/chat/completions", json=body, headers=headers)
            break
        except httpx.TransportError:
            load.retries += 1
            if attempt == 2:
                raise
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
    data = r.json()
    load.lat.append((time.perf_counter() - t0) * 1000)
    if "x-refold-added-ms" in r.headers:
        load.added.append(float(r.headers["x-refold-added-ms"]))
    return data["choices"][0]["message"]


async def agent(
    client: httpx.AsyncClient, url: str, sid: int, turns: int, tool_ms: float, load: Load, extra: dict[str, str],
    tag: str = "bench",
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Use the bash tool."},
        {"role": "user", "content": f"Task {sid}: fix the failing test in module_{sid}.py"},
    ]
    headers = {**AUTH, "X-Refold-Session": f"{tag}-{sid}", **extra}
    for turn in range(1, turns + 1):
        msg = await post(client, url, {"model": "m", "messages": messages, "tools": TOOLS}, headers, load)
        messages.append(msg)
        body = FILE if turn % 3 == 0 else f"ran turn {turn} of session {sid}\n" + FILE[: 400 + 37 * turn]
        messages.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": body})
        if tool_ms:
            await asyncio.sleep(tool_ms / 1000)
    return messages


async def replay_run(
    client: httpx.AsyncClient, url: str, rid: int, history: Any, tool_ms: float, load: Load
) -> int:
    messages: list[dict[str, Any]] = [dict(m) for m in history.prefix]
    for i, st in enumerate(history.steps):
        headers = {**AUTH, "X-Refold-Session": f"run-{rid}", "X-Bench-Run": str(rid), "X-Bench-Turn": str(i)}
        body: dict[str, Any] = {"model": "m", "messages": messages}
        if any(m.get("tool_calls") for s in history.steps for m in [s.reply]):
            body["tools"] = TOOLS
        msg = await post(client, url, body, headers, load)
        messages.append(msg)
        messages.extend(dict(o) for o in st.observations)
        if tool_ms:
            await asyncio.sleep(tool_ms / 1000)
    return len(history.steps)


def client(n: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=n * 2 + 16, max_keepalive_connections=n * 2 + 16)
    return httpx.AsyncClient(timeout=300, limits=limits)


async def run_agents(
    url: str,
    a: argparse.Namespace,
    sessions: int,
    tool_ms: float,
    delay: float | None,
    viewers: str | None = None,
    control: str | None = None,
    viewed: str = "done",
) -> tuple[Load, list[list[dict[str, Any]]], float, Load, Load]:
    """``sessions`` agents against ``url`` and, at the same time, as many against ``control``
    (direct to the upstream): both see the same machine, whatever else it is running."""
    load, views, ctrl = Load(), Load(), Load()
    extra = {} if delay is None else {"X-Bench-Delay-Ms": str(delay)}
    stop = asyncio.Event()

    async def viewer(c: httpx.AsyncClient, i: int) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            name, auth = (f"done-{i}", "Bearer viewer") if viewed == "done" else (f"live-{i}", AUTH["Authorization"])
            r = await c.get(f"{viewers}/sessions/{name}/view", headers={"Authorization": auth})
            if r.status_code == 404:  # a live session before its first turn
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 200:
                views.lat.append((time.perf_counter() - t0) * 1000)
            else:
                views.retries += 1
                await asyncio.sleep(0.2)

    async with client(sessions) as c, client(sessions) as cc, client(8) as vc:
        watchers = [asyncio.create_task(viewer(vc, i)) for i in range(8)] if viewers else []
        t0 = time.perf_counter()
        # with viewers, new sessions (as in the first run): live views watch them being written
        tag = ("live" if viewed == "live" else "viewed") if viewers else "bench"
        runs = [agent(c, url, i, a.turns, tool_ms, load, extra, tag) for i in range(sessions)]
        if control:
            runs += [agent(cc, control, i, a.turns, tool_ms, ctrl, extra) for i in range(sessions)]
        convs = await asyncio.gather(*runs)
        wall = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*watchers)
    return load, list(convs[:sessions]), wall, views, ctrl


async def seed_viewed(url: str, turns: int) -> None:
    """8 finished sessions of another tenant, for the viewers to look at."""
    async with client(8) as c:
        load = Load()

        async def one(i: int) -> None:
            await agent(c, url, i, turns, 0, load, {"Authorization": "Bearer viewer", "X-Refold-Session": f"done-{i}",
                                                     "X-Bench-Delay-Ms": "0"})

        await asyncio.gather(*(one(i) for i in range(8)))


def verify(url: str, convs: list[list[dict[str, Any]]], turns: int) -> tuple[int, int]:
    """(turns expected, turns found intact) over all sessions; the last reply has no outputs yet."""
    expected = found = 0
    with httpx.Client(timeout=60) as c:
        for i, conv in enumerate(convs):
            steps = c.get(f"{url}/sessions/bench-{i}", headers=AUTH).json()["steps"]
            expected += turns - 1
            for k in range(turns - 1):
                sent = conv[3 + 2 * k]["content"]
                if k < len(steps) and steps[k]["actions"] == [f"echo turn-{k + 1}"] and steps[k]["observations"][0]["content"] == sent:
                    found += 1
    return expected, found


def verify_runs(url: str, histories: list[Any]) -> tuple[int, int]:
    expected = found = 0
    with httpx.Client(timeout=60) as c:
        for rid, h in enumerate(histories):
            steps = c.get(f"{url}/sessions/run-{rid}", headers=AUTH).json()["steps"]
            visible = [s for s in steps if not s["internal"]]
            expected += len(h) - 1
            for k, st in enumerate(h.steps[:-1]):
                if k < len(visible) and [o.get("content") for o in visible[k]["observations"]] == [
                    o.get("content") for o in st.observations
                ]:
                    found += 1
    return expected, found


# ---- processes -----------------------------------------------------------------------------------


def spawn(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def serving(proc: subprocess.Popen[bytes], url: str) -> Iterator[str]:
    try:
        wait_http(url + "/healthz" if "/v1" not in url else url + "/models", timeout=180)  # a busy box starts slowly
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def proxy(up_port: int, store: str, tokenizer: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    code = "import sys; from refold.cli import main; sys.exit(main())"
    args = ["-c", code, "serve", "--upstream", f"http://127.0.0.1:{up_port}/v1", "--store", store,
            "--port", str(port), "--tokenizer", tokenizer]
    return spawn(args), f"http://127.0.0.1:{port}"


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu(pid: int) -> float:
    """CPU seconds of a process's live children (the proxy's view workers)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    return sum(proc_cpu(int(k)) for k in kids)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))] if s else float("nan")


def scrape(url: str) -> dict[str, float]:
    """The proxy's metrics, one value per sample (labels joined into the name)."""
    from prometheus_client.parser import text_string_to_metric_families

    vals = {}
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics", headers=AUTH).text):
        for s in fam.samples:
            vals[s.name + "".join(f"|{v}" for _, v in sorted(s.labels.items()))] = s.value
    return vals


def tokens(url: str) -> tuple[float, float]:
    vals = scrape(url)
    return vals.get("refold_prompt_tokens_full_total", 0.0), vals.get("refold_prompt_tokens_rendered_total", 0.0)


def row(name: str, load: Load, base: Load | None, lost: str) -> str:
    p50, p99 = pct(load.lat, 50), pct(load.lat, 99)
    if base is None:
        return f"{name:<30}{len(load.lat):>7}{p50:>9.1f}{p99:>9.1f}{'-':>10}{'-':>10}{'-':>7}{'-':>11}{lost:>7}"
    b50, b99 = pct(base.lat, 50), pct(base.lat, 99)
    self_p50 = pct(load.added, 50) if load.added else float("nan")
    return (
        f"{name:<30}{len(load.lat):>7}{p50:>9.1f}{p99:>9.1f}{p50 - b50:>+10.1f}{p99 - b99:>+10.1f}"
        f"{p50 / b50:>7.2f}{self_p50:>11.1f}{lost:>7}"
    )


HEADER = f"{'run':<30}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>10}{'+p99 ms':>10}{'ratio':>7}{'self p50':>11}{'lost':>7}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--upstream-ms", type=float, default=1000.0, help="upstream time per call (a model generating)")
    ap.add_argument("--tool-ms", type=float, default=300.0, help="agent time between calls (running its tool)")
    ap.add_argument("--runs", nargs="*", default=[], help="trajectory folders/files to replay as clients")
    ap.add_argument("--tokenizer", default="qwen3.6", help="proxy --tokenizer for the tokens-saved metric")
    ap.add_argument("--skip", default="", help="comma-separated loads to skip: saturated,views,full,redis")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/proxy.txt"))
    ap.add_argument("--serve-upstream", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_upstream:
        import uvicorn

        uvicorn.run(upstream_app(a.upstream_ms, a.runs), host="127.0.0.1", port=a.serve_upstream,
                    log_level="warning", timeout_keep_alive=75, lifespan="on")
        return
    skip = set(filter(None, a.skip.split(",")))
    up_port = free_port()
    up = spawn([__file__, "--serve-upstream", str(up_port), "--upstream-ms", str(a.upstream_ms), "--runs", *a.runs])
    lines = [
        "refold proxy load benchmark, client-side: every figure is what the client measured per call",
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs shared by client, "
        f"upstream and proxy; load average at start {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M')}",
        "",
    ]
    with serving(up, f"http://127.0.0.1:{up_port}/v1") as direct, tempfile.TemporaryDirectory() as tmp:
        stores = [("sqlite WAL", f"sqlite:///{tmp}/a.db")]
        if "full" not in skip:
            stores.append(("sqlite WAL sync=full", f"sqlite:///{tmp}/b.db?sync=full"))
        redis_cm = redis_server() if shutil.which("redis-server") and "redis" not in skip else None
        with redis_cm if redis_cm is not None else nullcontext(None) as rurl:
            if rurl:
                stores.append(("redis", rurl))
            lines += [
                f"agents: {a.sessions} concurrent sessions x {a.turns} turns; upstream {a.upstream_ms:g} ms per call, "
                f"{a.tool_ms:g} ms tool time between calls",
                HEADER,
            ]
            for i, (name, url) in enumerate(stores):
                proc, purl = proxy(up_port, url, a.tokenizer)
                with serving(proc, purl):
                    cpu0 = proc_cpu(proc.pid)
                    load, convs, wall, _, base = asyncio.run(
                        run_agents(purl + "/v1", a, a.sessions, a.tool_ms, None, control=direct)
                    )
                    cpu = (proc_cpu(proc.pid) - cpu0) * 1000 / max(1, len(load.lat))
                    exp, found = verify(purl, convs, a.turns)
                    full, sent = tokens(purl)
                    lines.append(row("direct (same time)", base, None, "-"))
                    lines.append(row(f"proxy, {name}", load, base, str(exp - found)) + f"   wall {wall:.1f} s")
                    lines.append(
                        f"{'':<30}turns checked {found}/{exp}; client retries {load.retries}; proxy CPU {cpu:.1f} ms per "
                        f"call; prompt tokens {sent:,.0f} sent vs {full:,.0f} full "
                        f"({(1 - sent / full) * 100 if full else 0:.1f}% saved)"
                    )
                    if i == 0 and "views" not in skip:
                        asyncio.run(seed_viewed(purl + "/v1", 30))
                        for label, viewed in (("8 views", "done"), ("8 live views", "live")):
                            before, cpu0, kids0 = scrape(purl), proc_cpu(proc.pid), children_cpu(proc.pid)
                            load2, _, wall2, views, base2 = asyncio.run(
                                run_agents(purl + "/v1", a, a.sessions, a.tool_ms, None, viewers=purl, control=direct,
                                           viewed=viewed)
                            )
                            after = scrape(purl)
                            cpu2 = (proc_cpu(proc.pid) - cpu0) * 1000 / max(1, len(load2.lat))
                            kids = children_cpu(proc.pid) - kids0
                            built = after.get("refold_views_total|built", 0) - before.get("refold_views_total|built", 0)
                            lines.append(row("direct (same time)", base2, None, "-"))
                            lines.append(
                                row(f"proxy, sqlite + {label}", load2, base2, "-")
                                + f"   wall {wall2:.1f} s; {len(views.lat)} views served ({built:.0f} built), "
                                f"p50 {pct(views.lat, 50):.1f} ms, {views.retries} told to retry"
                            )
                            lines.append(f"{'':<30}proxy CPU {cpu2:.1f} ms per call (with its views); view workers "
                                         f"{kids:.1f} CPU s")
            if "saturated" not in skip:
                lines += ["", f"saturated (capacity, not latency): {a.sessions} sessions x {a.turns} turns, no upstream "
                          "time, no tool time, a closed loop on 2 CPUs; direct and proxy run one after the other", HEADER]
                sbase, _, swall, _, _ = asyncio.run(run_agents(direct, a, a.sessions, 0, 0))
                lines.append(row("direct", sbase, None, "-") + f"   wall {swall:.1f} s")
                proc, purl = proxy(up_port, stores[0][1].replace("a.db", "s.db"), a.tokenizer)
                with serving(proc, purl):
                    sl, sconvs, sw, _, _ = asyncio.run(run_agents(purl + "/v1", a, a.sessions, 0, 0))
                    exp, found = verify(purl, sconvs, a.turns)
                    lines.append(row("proxy, sqlite WAL", sl, sbase, str(exp - found)) + f"   wall {sw:.1f} s "
                                 f"(throughput {swall / sw:.2f}x direct)")
        if a.runs:
            histories = recorded(a.runs)
            lines += ["", f"recorded runs: {len(histories)} trajectories from {', '.join(a.runs)} replayed "
                      f"concurrently (upstream {a.upstream_ms:g} ms, tool {a.tool_ms:g} ms)", HEADER]
            rbase, rl = Load(), Load()

            async def replay_all(url: str) -> None:
                async with client(len(histories)) as c, client(len(histories)) as cc:
                    await asyncio.gather(
                        *(replay_run(c, url, i, h, a.tool_ms, rl) for i, h in enumerate(histories)),
                        *(replay_run(cc, direct, i, h, a.tool_ms, rbase) for i, h in enumerate(histories)),
                    )

            proc, purl = proxy(up_port, f"sqlite:///{tmp}/runs.db", a.tokenizer)
            with serving(proc, purl):
                cpu0 = proc_cpu(proc.pid)
                asyncio.run(replay_all(purl + "/v1"))
                cpu = (proc_cpu(proc.pid) - cpu0) * 1000 / max(1, len(rl.lat))
                exp, found = verify_runs(purl, histories)
                full, sent = tokens(purl)
                lines.append(row("direct (same time)", rbase, None, "-"))
                lines.append(row("proxy, sqlite WAL", rl, rbase, str(exp - found)))
                lines.append(f"{'':<30}turns checked {found}/{exp}; proxy CPU {cpu:.1f} ms per call; prompt tokens "
                             f"{sent:,.0f} sent vs {full:,.0f} full ({(1 - sent / full) * 100 if full else 0:.1f}% saved)")
    lines += [
        "",
        "p50/p99: client-measured latency per call (ms), request sent to response read. +p50/+p99: the",
        "same percentile through the proxy minus the direct sessions run at the same time by the same client",
        "(so both see whatever else the machine runs); ratio: p50 / direct p50.",
        "self p50: the proxy's own X-Refold-Added-Ms (time outside upstream calls), for comparison only.",
        "proxy CPU per call: the proxy process's user+system CPU over the load / calls (includes the",
        "tokens-saved metric's tokenizer); unlike latency it does not depend on what else the machine runs.",
        "lost: recorded turns missing or differing from what the client sent. The upstream is a script",
        "(its latency is a fixed sleep), so nothing here is a model's speed.",
    ]
    lines.insert(2, f"load average at end {os.getloadavg()[0]:.1f} (above 2: other work shared the CPUs)")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
