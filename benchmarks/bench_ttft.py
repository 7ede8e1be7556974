"""Time to first token through ``refold serve`` vs. directly, in the same run, on loopback.

A fake upstream (separate process) streams each reply (the PROGRESS/STALE head, a line of
reasoning, a command) in 7-character deltas with a fixed delay before each one (``DELAY:<ms>``:
a model generating tokens). Each scenario runs agent sessions
that resend their whole conversation every turn, as real clients do, directly and through the
proxy interleaved turn by turn (so both see the same machine load), and measures from the
client's side the time from sending a request to the first text or tool-call delta, and to the
end of the stream. Scenarios: with a shell
tool (a round that may be an internal context-command round), without tools (text mode: the
reply's text is relayed up to its command block), and with ``--strip-protocol`` (the first token
the client sees comes after the PROGRESS/STALE head, which the proxy holds back), and a shell
tool call with no text before it (``QUIET``: the first token is the call itself, which the proxy
relays as soon as its command's first word shows it is no context command).

    python benchmarks/bench_ttft.py [--sessions 10] [--turns 8] [--delay-ms 20]
        [--src OTHER/src] [--out benchmarks/results/ttft.txt]

``--src`` runs the proxy from another checkout's ``src`` (e.g. main before this change).

    python benchmarks/bench_ttft.py --commands RUN_OR_FOLDER... [--out benchmarks/results/ttft_commands.txt]

reads the shell commands of recorded runs instead (any format ``refold replay`` reads) and reports
how many of each command's first characters the proxy must see before it relays the call (as a
chat ``bash`` call and as Codex's ``["bash", "-lc", cmd]``), and that no context command among
them is ever decided to be none early.
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

from refold.context.recognize import Recognizer
from refold.proxy.early import call_verdict
from refold.proxy.stream import HeadStripper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fake_upstream import FakeUpstream, free_port, wait_http  # noqa: E402

BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


class QuietUpstream(FakeUpstream):
    """The tests' fake upstream; ``QUIET`` in the last message: the reply is its tool call alone
    (``COMPOUND``: ``cd /testbed && python reproduce.py``)."""

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        message = super().reply(body)
        last = body["messages"][-1].get("content")
        if isinstance(last, str) and "QUIET" in last and message.get("tool_calls"):
            message["content"] = ""
            if "COMPOUND" in last:  # mini-swe-agent's usual form: held a few characters at '&&'
                n = len(body["messages"])
                cmd = f"cd /testbed && python reproduce.py --turn {n}"
                message["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": cmd})
        return message


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Ready:
    """When a proxy that never relays a possible context command could send a stream's first
    token: its first text (after the PROGRESS/STALE head with ``strip``), or the piece of its
    first tool call after which the command's first word says it is none (``early.call_verdict``)."""

    def __init__(self, strip: bool) -> None:
        self.stripper = HeadStripper() if strip else None
        self.rec = Recognizer(text=False)
        self.name, self.args = "", ""

    def feed(self, delta: dict[str, Any]) -> bool:
        text = delta.get("content") or ""
        if text and (self.stripper.feed(text) if self.stripper else text):
            return True
        for tc in delta.get("tool_calls") or []:
            if tc.get("index", 0) == 0:
                self.name += (tc.get("function") or {}).get("name") or ""
                self.args += (tc.get("function") or {}).get("arguments") or ""
        return bool(self.args) and call_verdict(self.name, self.args, self.rec) is False


class Agent:
    """One session: sends its whole conversation each turn, streams the reply, appends it."""

    def __init__(
        self, client: httpx.Client, url: str, tools: bool, delay: float, name: str, quiet: bool | str = False, strip: bool = False
    ) -> None:
        self.client, self.url, self.tools, self.delay, self.name, self.strip = client, url, tools, delay, name, strip
        self.mode = ("QUIET COMPOUND" if quiet == "compound" else "QUIET") if quiet else "TALK"
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Task {name}: fix the failing test. DELAY:{delay:g} {self.mode}"},
        ]

    def turn(self) -> tuple[float, float, float]:
        """(ms to the first text or tool-call delta, to when a proxy could send it, to the end)."""
        body: dict[str, Any] = {"model": "m", "messages": self.messages, "stream": True}
        if self.tools:
            body["tools"] = [BASH]
        first = ready = None
        gate = Ready(self.strip)
        content, calls = "", {}
        t0 = time.perf_counter()
        with self.client.stream(
            "POST", f"{self.url}/chat/completions", json=body, headers={"X-Refold-Session": self.name}
        ) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{self.name}: HTTP {r.status_code}: {r.read()[:300]!r}")
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                for c in json.loads(line[6:]).get("choices") or []:
                    d = c.get("delta") or {}
                    if first is None and (d.get("content") or d.get("tool_calls")):
                        first = time.perf_counter()
                    if ready is None and gate.feed(d):
                        ready = time.perf_counter()
                    content += d.get("content") or ""
                    for tc in d.get("tool_calls") or []:
                        slot = calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                        slot["id"] = tc.get("id") or slot["id"]
                        slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                        slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
        end = time.perf_counter()
        if first is None:
            raise RuntimeError(f"{self.name}: an empty reply")
        out = f"output {len(self.messages)} DELAY:{self.delay:g} {self.mode}"
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = [calls[k] for k in sorted(calls)]
            self.messages += [msg, {"role": "tool", "tool_call_id": calls[0]["id"], "content": out}]
        else:
            self.messages += [msg, {"role": "user", "content": out}]
        return (first - t0) * 1000, ((ready or end) - t0) * 1000, (end - t0) * 1000


def run_pair(
    direct: str, proxy: str, tools: bool, sessions: int, turns: int, delay: float, tag: str, quiet: bool | str = False,
    strip: bool = False,
) -> dict[str, list[float]]:
    """Direct and proxy sessions interleaved turn by turn (alternating which goes first), so both
    see the same load on a shared machine; the paired difference is the figure."""
    keys = ("direct", "ready", "proxy", "diff", "over", "direct_total", "proxy_total")
    r: dict[str, list[float]] = {k: [] for k in keys}
    with httpx.Client(timeout=120) as client:
        for sid in range(sessions):
            a = Agent(client, direct, tools, delay, f"{tag}-d{sid}", quiet, strip)
            b = Agent(client, proxy, tools, delay, f"{tag}-p{sid}", quiet, strip)
            for turn in range(turns):
                if (sid + turn) % 2:
                    (pt, _, ptot), (dt, rt, dtot) = b.turn(), a.turn()
                else:
                    (dt, rt, dtot), (pt, _, ptot) = a.turn(), b.turn()
                r["direct"].append(dt)
                r["ready"].append(rt)
                r["proxy"].append(pt)
                r["diff"].append(pt - dt)
                r["over"].append(pt - rt)
                r["direct_total"].append(dtot)
                r["proxy_total"].append(ptot)
    return r


def first_no(args: str, head: int, verdict: Any) -> int | None:
    """How many characters of the command (after ``head`` characters of arguments) the earliest
    prefix of ``args`` that ``verdict`` says is no context command holds; None: only at the end."""
    for cut in range(head, len(args) + 1):
        if verdict(args[:cut]) is False:
            return cut - head if cut < len(args) else None
    return None


def commands_report(paths: list[Path]) -> str:
    from refold.loaders import load_all
    from refold.proxy.held import decide

    rec = Recognizer(text=False)
    files: list[Path] = []
    for p in paths:
        files += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".json", ".traj", ".jsonl")) if p.is_dir() else [p]
    cmds: list[str] = []
    skipped = 0
    for f in files:
        try:
            histories = load_all(f)
        except Exception:  # noqa: BLE001 - a file that is no run is counted, not fatal
            skipped += 1
            continue
        for h in histories:
            cmds += [a.command for st in h.steps for a in st.actions if a.command.strip()]
    rows = []
    unsafe = 0
    n_context = 0
    for form, head_of, verdict_of in (
        ("chat bash {\"command\": cmd}", lambda c: json.dumps({"command": c}), lambda a: call_verdict("bash", a, rec)),
        ("Codex shell [bash, -lc, cmd]", lambda c: json.dumps({"command": ["bash", "-lc", c]}), lambda a: decide("shell", a, rec)),
    ):
        needed: list[int] = []
        at_end = 0
        for c in cmds:
            args = head_of(c)
            head = len(head_of("")) - 2 if form.startswith("chat") else len(head_of("")) - 3
            k = first_no(args, head, verdict_of)
            is_context = rec.command("bash", c) is not None
            n_context += is_context and form.startswith("chat")
            if is_context:
                unsafe += k is not None
                continue
            if k is None:
                at_end += 1
            else:
                needed.append(k)
        plain = len(needed) + at_end
        share = [sum(1 for k in needed if k <= n) / plain * 100 if plain else 0.0 for n in (1, 2, 3, 4)]
        rows.append(
            f"{form:30} {plain:>7} {statistics.median(needed) if needed else float('nan'):>10.0f} {pct(needed, 90) if needed else float('nan'):>8.0f} "
            + " ".join(f"{x:>6.1f}%" for x in share)
            + f" {at_end / plain * 100 if plain else 0.0:>8.1f}%"
        )
    held_rows = separator_holds(cmds)
    lines = [
        f"refold early relay on recorded runs: {len(cmds)} shell commands from {len(files) - skipped} files"
        + (f" ({skipped} unreadable skipped)" if skipped else "") + f"; {n_context} of them context commands",
        "",
        f"{'form':30} {'plain':>7} {'chars p50':>10} {'p90':>8} {'<=1':>7} {'<=2':>7} {'<=3':>7} {'<=4':>7} {'at end':>9}",
        *rows,
        "",
        f"context commands decided 'no' before their end (relayed to the client): {unsafe} (must be 0)",
        "chars = characters of the command the proxy has seen when it relays the call (the first piece that",
        "decides it); <=n = share of plain commands relayed within their first n characters; at end = decided",
        "only by the whole command (it begins like a context command: 'fold -w 80 f', 'restored').",
        "",
        *held_rows,
    ]
    return "\n".join(lines) + "\n"


def separator_holds(cmds: list[str]) -> list[str]:
    """Once a chat ``bash`` call is relayed, its command is held from a top-level separator while
    what follows may be ``restore`` (``proxy.compound``): how many characters of each command the
    client is behind the upstream at most, its arguments fed one character at a time."""
    from refold.context.recognize import split_restore
    from refold.proxy.compound import CompoundHold

    behind: list[int] = []
    at_end = splits = 0
    for c in cmds:
        args = json.dumps({"command": c})
        start = len('{"command": "')
        hold = CompoundHold(start)
        worst = 0
        for cut in range(start, len(args) + 1):
            hold.allowed(args[:cut])
            worst = max(worst, len(hold.cmd.value) - hold.limit)
        behind.append(worst)
        at_end += hold.limit < len(c)
        splits += split_restore(c) is not None
    held = [b for b in behind if b]
    n = len(behind) or 1
    return [
        "held from a separator (chat bash, after the call is relayed):",
        f"  commands held at some point: {len(held)} of {len(behind)} ({len(held) / n * 100:.1f}%); "
        f"characters behind, of those: p50 {statistics.median(held) if held else 0:.0f}, "
        f"p90 {pct(held, 90) if held else 0:.0f}, max {max(held) if held else 0}",
        f"  still held at the command's end (released or split only by the whole call): {at_end}; "
        f"split (a restore after another command): {splits}",
        "  behind = characters of the command the upstream has sent and the client not yet, at most, while",
        "  the text after a ';', '&&', '||', '|', '&' or line break may still begin 'restore'.",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--src", type=Path, help="run the proxy from this src directory instead")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--commands", type=Path, nargs="+", help="report on the shell commands of these runs instead")
    a = ap.parse_args()
    if a.commands:
        missing = [p for p in a.commands if not p.exists()]
        if missing:
            sys.exit(f"bench_ttft: no such file or folder: {missing[0]}")
        report = f"$ python {' '.join(sys.argv)}\n" + commands_report(a.commands)
        print(report, end="")
        if a.out:
            a.out.write_text(report)
        return

    up_port = free_port()
    procs = [
        spawn(
            [
                sys.executable,
                "-c",
                f"import sys, uvicorn; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); from bench_ttft import QuietUpstream; "
                f"uvicorn.run(QuietUpstream().app, host='127.0.0.1', port={up_port}, log_level='warning')",
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
            with httpx.Client(timeout=120) as client:  # warm up every path once (imports, connections)
                for url in (upstream, *proxies.values()):
                    for tools in (True, False):
                        Agent(client, url, tools, a.delay_ms, f"warm-{free_port()}").turn()
            scenarios: list[tuple[str, str, bool, bool | str]] = [
                ("shell tool", "plain", True, False),
                ("shell tool call, no text", "plain", True, True),
                ("cd && python call, no text", "plain", True, "compound"),
                ("no tools (text mode)", "plain", False, False),
            ]
            if "strip" in proxies:
                scenarios += [
                    ("--strip-protocol, shell tool", "strip", True, False),
                    ("--strip-protocol, no tools", "strip", False, False),
                ]
            for name, which, tools, quiet in scenarios:
                r = run_pair(
                    upstream, proxies[which], tools, a.sessions, a.turns, a.delay_ms, f"s{len(rows)}", quiet, which == "strip"
                )
                rows.append((name, r))
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=20)

    n = a.sessions * a.turns
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"$ python {' '.join(sys.argv)}",
        f"refold time-to-first-token benchmark: {a.sessions} sessions x {a.turns} turns per scenario, loopback",
        f"fake upstream streams 7-char deltas, {a.delay_ms:g} ms before each (a simulated model); python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at the end; {time.strftime('%Y-%m-%d')}" + (f"; proxy from {a.src}" if a.src else ""),
        "",
        f"{'scenario':30} {'pairs':>5} {'direct p50':>10} {'ready p50':>10} {'proxy p50':>10} {'proxy p90':>10} "
        f"{'added p50':>10} {'added p90':>10} {'over ready':>10} {'total p50 d/p':>15}",
    ]
    for name, r in rows:
        lines.append(
            f"{name:30} {len(r['diff']):>5} {statistics.median(r['direct']):>10.1f} {statistics.median(r['ready']):>10.1f} "
            f"{statistics.median(r['proxy']):>10.1f} {pct(r['proxy'], 90):>10.1f} {statistics.median(r['diff']):>+10.1f} "
            f"{pct(r['diff'], 90):>+10.1f} {statistics.median(r['over']):>+10.1f} "
            f"{statistics.median(r['direct_total']):>7.0f}/{statistics.median(r['proxy_total']):<7.0f}"
        )
    lines += [
        "",
        "TTFT in ms, client-measured from sending the request to the first non-empty text or tool-call delta;",
        f"each of the {n} pairs is one direct and one proxied turn of sessions at the same depth, run back to back",
        "(alternating which goes first), and added = proxy TTFT - direct TTFT of the pair. total = ms to the",
        "end of the stream. Each proxy request maps the session, commits the turn durably (SQLite WAL) and",
        "renders the prompt before calling upstream. ready = when the direct stream shows what a proxy that",
        "never relays a possible context command may send first: its first text (with --strip-protocol the",
        "first text after the PROGRESS/STALE head, which the client is not shown), or the piece of its first",
        "tool call after which the command's first word says it is no context command; over ready = proxy",
        "TTFT - direct ready of the pair, what the proxy adds beyond what it must wait for.",
        "'shell tool call, no text': the reply is only the call (bash 'echo turn-n'), its arguments in 5-char",
        "pieces 20 ms apart: '{\"com' 'mand\"' ': \"ec' decides it (an 'e' may still be 'expand'), 3 pieces in.",
        "'cd && python call, no text': the same with 'cd /testbed && python reproduce.py --turn n': decided at",
        "the 'p' after '&&' ('cd DIR && restore 3' is one); total = when the client has all of it.",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text)


if __name__ == "__main__":
    main()
