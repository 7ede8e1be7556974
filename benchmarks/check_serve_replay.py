"""Check that ``refold replay`` of Claude Code logs / Codex rollouts measures what ``refold serve`` sends.

    PYTHONPATH=src python benchmarks/check_serve_replay.py DIR... [--out FILE]

For every ``*.jsonl`` under each DIR that refold reads as a Claude Code log or a Codex rollout
(Claude Code's ``subagents/agent-acompact-*.jsonl`` skipped: its call is its session's
compaction), every session's requests are rebuilt from the log's lines and driven through the
proxy app (serve_replay.py); prints per session the calls compared and the calls whose upstream
request equals replay's ``default`` prompt, then the first difference of each kind.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from refold.errors import RefoldError
from refold.formats.codex import KEY as CODEX_KEY
from refold.json_file import read_json
from refold.loaders import detect_format, load
from refold.tokens import get_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_replay import compare, sessions, text_of  # noqa: E402


def argument_tokens(source: str) -> tuple[int, int, int]:
    """Tokens (qwen3.6) of a Codex session's call items as sent (``name`` + ``arguments``, a custom
    call's ``input``) and of the chat tool calls replay counts for them (a shell call read as
    ``bash {"command"}``): the part of every prompt replay sizes differently from the wire; and
    the tokens of the session's messages' text and calls (its last prompt, roughly)."""
    tok = get_tokenizer("qwen3.6")
    wire = counted = 0
    h = load(source)
    whole = sum(len(tok.encode(text_of(m.get("content")))) for m in h.messages())
    for s in h.steps:
        native = (s.reply.get("extra") or {}).get(CODEX_KEY)
        for item in native if isinstance(native, list) else []:
            if item.get("type") in ("function_call", "custom_tool_call", "local_shell_call"):
                raw = item.get("arguments") or item.get("input") or json.dumps(item.get("action") or {})
                wire += len(tok.encode(str(item.get("name") or "") + str(raw)))
        for c in s.reply.get("tool_calls") or []:
            counted += len(tok.encode(c["function"]["name"] + c["function"]["arguments"]))
    return wire, counted, whole + counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    args = ap.parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    files = sorted(p for d in args.dirs for p in (d.rglob("*.jsonl") if d.is_dir() else [d]) if "agent-acompact-" not in p.name)
    total = equal = reordered = 0
    wire_args = [0, 0, 0]
    first: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            try:
                fmt = detect_format(read_json(f))
                found = sessions(f) if fmt in ("claude-code", "codex") else []
            except RefoldError as e:
                print(f"{f}: skipped ({e})")
                continue
            for n, (source, calls) in enumerate(found):
                try:
                    r = compare(source, calls, str(Path(tmp) / f"{f.stem}-{n}.db"))
                except RefoldError as e:
                    print(f"{source}: skipped ({e})")
                    continue
                name = source.removeprefix(str(f.parent) + "/")
                note = f" (not compared: {r.skipped})" if r.skipped else ""
                more = f", {r.reordered} more but for the order of tool results" if r.reordered else ""
                if r.equal + r.reordered < r.compared:
                    more += f"; the others {r.sizes[0]:,} tokens served, {r.sizes[1]:,} replayed"
                items = ""
                if calls.surface == "responses":
                    sent, counted, whole = argument_tokens(source)
                    wire_args[0] += sent
                    wire_args[1] += counted
                    wire_args[2] += whole
                    items = f"; call items {sent:,} tokens as sent, {counted:,} as replay counts them (of {whole:,} in its messages)"
                print(f"{f.parent.name}/{name}: {r.equal}/{r.compared} calls equal{more}{note}{items}")
                total += r.compared
                equal += r.equal
                reordered += r.reordered
                for k, v in r.first.items():
                    first.setdefault(k, f"{f.parent.name}/{name} {v}")
    print(f"\nall: {equal}/{total} calls equal, {reordered} more but for the order of tool results")
    print(f"Codex call items: {wire_args[0]:,} tokens as sent, {wire_args[1]:,} as replay counts them (of {wire_args[2]:,} in the sessions' messages)")
    print("first difference of each kind:")
    for k, v in first.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
