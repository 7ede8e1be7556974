"""Codex CLI rollout lines for tests, written by hand in the shape Codex writes them (no user data):
``session_meta``/``turn_context``/``response_item``/``event_msg``/``compacted`` lines with
``{"timestamp", "type", "payload"}``. ``python tests/codex_rollouts.py`` rewrites the fixture file
tests/data/codex/rollout-fix-bug.jsonl the CLI tests replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "data" / "codex" / "rollout-fix-bug.jsonl"

APP = "\n".join(
    [
        "import sys",
        "",
        "",
        "def parse(argv):",
        "    out = {}",
        "    for arg in argv:",
        "        key, _, value = arg.partition('=')",
        "        out[key] = value",
        "    return out",
        "",
        "",
        "class Totals:",
        "    def __init__(self):",
        "        self.items = []",
        "",
        "    def add(self, n):",
        "        self.items.append(n)",
        "",
        "    def total(self):",
        "        return sum(self.items) + 1",
        "",
        "",
        "def main():",
        "    t = Totals()",
        "    for v in parse(sys.argv[1:]).values():",
        "        t.add(int(v))",
        "    print(t.total())",
    ]
)


class Lines:
    """A rollout being written: one method per kind of line, each stamped one second later."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.clock = 0
        self.totals = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "reasoning_output_tokens": 0}

    def add(self, kind: str, payload: dict[str, Any]) -> Lines:
        self.clock += 1
        stamp = f"2026-12-01T10:{self.clock // 60:02d}:{self.clock % 60:02d}.000Z"
        self.rows.append({"timestamp": stamp, "type": kind, "payload": payload})
        return self

    def meta(self, *, instructions: str | None = "You are Codex, a coding agent.") -> Lines:
        payload: dict[str, Any] = {
            "id": "0199aaaa-bbbb-7ccc-8ddd-eeeeffff0000", "timestamp": "2026-12-01T10:00:00.000Z",
            "cwd": "/work/demo", "originator": "codex_cli_rs", "cli_version": "0.63.0",
            "instructions": None, "source": "cli", "model_provider": "openai",
        }  # fmt: skip
        if instructions is not None:
            payload["base_instructions"] = {"text": instructions}
        return self.add("session_meta", payload)

    def turn(self, model: str = "gpt-5-codex") -> Lines:
        return self.add("turn_context", {"cwd": "/work/demo", "approval_policy": "on-request", "model": model, "effort": "medium", "summary": "auto"})

    def user(self, text: str, role: str = "user") -> Lines:
        self.add("response_item", {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]})
        if role == "user" and not text.startswith("<"):
            self.add("event_msg", {"type": "user_message", "message": text, "images": []})
        return self

    def reasoning(self, summary: str) -> Lines:
        return self.add("response_item", {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
            "content": None, "encrypted_content": "gAAAAB" + "x" * 40,
        })  # fmt: skip

    def say(self, text: str) -> Lines:
        return self.add("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})

    def shell(self, call_id: str, argv: list[str]) -> Lines:
        args = json.dumps({"command": argv, "workdir": "/work/demo", "timeout_ms": 120000})
        return self.add("response_item", {"type": "function_call", "name": "shell", "arguments": args, "call_id": call_id})

    def call(self, call_id: str, name: str, args: dict[str, Any]) -> Lines:
        return self.add("response_item", {"type": "function_call", "name": name, "arguments": json.dumps(args), "call_id": call_id})

    def exec(self, call_id: str, cmd: str) -> Lines:
        """Unified exec (Codex 0.12x): ``exec_command`` with a short yield."""
        return self.call(call_id, "exec_command", {"cmd": cmd, "workdir": "/work/demo", "yield_time_ms": 1000, "max_output_tokens": 12000})

    def poll(self, call_id: str, session: int, chars: str = "") -> Lines:
        return self.call(call_id, "write_stdin", {"session_id": session, "chars": chars, "yield_time_ms": 1000, "max_output_tokens": 12000})

    def patch(self, call_id: str, text: str) -> Lines:
        return self.add("response_item", {"type": "custom_tool_call", "status": "completed", "call_id": call_id, "name": "apply_patch", "input": text})

    def output(self, call_id: str, output: Any, kind: str = "function_call_output") -> Lines:
        return self.add("response_item", {"type": kind, "call_id": call_id, "output": output})

    def usage(self, prompt: int, cached: int, out: int, reasoning: int) -> Lines:
        last = {"input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": out, "reasoning_output_tokens": reasoning}
        for k, v in last.items():
            self.totals[k] += v
        total = {**self.totals, "total_tokens": self.totals["input_tokens"] + self.totals["output_tokens"]}
        info = {"total_token_usage": total, "last_token_usage": {**last, "total_tokens": prompt + out}, "model_context_window": 272000}
        return self.add("event_msg", {"type": "token_count", "info": info, "rate_limits": None})

    def text(self) -> str:
        return "".join(json.dumps(r) + "\n" for r in self.rows)


def unified_exec(output: str | None, *, session: int | None = None, code: int = 0) -> str:
    """An exec_command/write_stdin output: the command's (it exited), or that it still runs."""
    state = f"Process running with session ID {session}" if output is None else f"Process exited with code {code}"
    body = output or ""
    return f"Chunk ID: 4c1d2e\nWall time: 1.0021 seconds\n{state}\nOriginal token count: {len(body) // 4}\nOutput:\n{body}"


def structured(output: str, code: int = 0) -> str:
    """The ``shell`` tool's JSON output (``format_exec_output_for_model_structured``)."""
    return json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.1}})


def freeform(output: str, code: int = 0) -> str:
    """The freeform output (``format_exec_output_for_model_freeform``)."""
    return f"Exit code: {code}\nWall time: 0.2 seconds\nOutput:\n{output}"


def unified(output: str, code: int = 0) -> str:
    """``exec_command``'s output (unified exec)."""
    return f"Chunk ID: 3f2a1b\nWall time: 0.0512 seconds\nProcess exited with code {code}\nOriginal token count: 40\nOutput:\n{output}"


PATCH = """*** Begin Patch
*** Update File: src/app.py
@@ def total(self):
-        return sum(self.items) + 1
+        return sum(self.items)
*** End Patch"""


def fix_bug() -> Lines:
    """A short session: search, read (sed, cat), patch, test, answer; one call per response."""
    app = APP.split("\n")
    grep = "src/app.py:19:    def total(self):\nsrc/app.py:20:        return sum(self.items) + 1"
    r = Lines().meta().turn()
    r.user("<permissions instructions>\nApprovals: on-request.\n</permissions instructions>", role="developer")
    r.user("<environment_context>\n  <cwd>/work/demo</cwd>\n  <shell>bash</shell>\n</environment_context>")
    r.user("The total printed by src/app.py is one too high. Fix it.")
    r.reasoning("**Searching for total**").shell("call_1", ["bash", "-lc", "rg -n 'total' src"]).usage(5200, 0, 90, 64)
    r.output("call_1", structured(grep))
    r.reasoning("**Reading the class**").shell("call_2", ["bash", "-lc", "sed -n '1,27p' src/app.py"]).usage(5400, 5120, 60, 32)
    r.output("call_2", freeform("\n".join(app)))
    r.reasoning("**Reading it again**").call("call_3", "exec_command", {"cmd": "cat src/app.py", "yield_time_ms": 1000}).usage(5900, 5376, 40, 16)
    r.output("call_3", unified("\n".join(app)))
    r.say("The off-by-one is in `Totals.total`.").patch("call_4", PATCH).usage(6400, 5888, 120, 48)
    r.output("call_4", "Success. Updated the following files:\nM src/app.py\n", kind="custom_tool_call_output")
    r.call("call_5", "shell_command", {"command": "python -m pytest -q tests/test_app.py", "workdir": "/work/demo"}).usage(6600, 6400, 30, 0)
    r.output("call_5", freeform("F.\n=== FAILURES ===\nE   assert 6 == 7\n1 failed, 1 passed in 0.05s", code=1))
    r.shell("call_6", ["bash", "-lc", "sed -n '1,3p' tests/test_app.py"]).usage(6900, 6528, 30, 0)
    r.output("call_6", structured("from app import Totals\n\ndef test_total(): assert Totals().total() == 0"))
    r.say("Fixed: `Totals.total` no longer adds 1.").usage(7100, 6784, 25, 0)
    return r


if __name__ == "__main__":
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(fix_bug().text(), encoding="utf-8")
    print(f"wrote {FIXTURE}")
