"""How far ``/v1/messages/count_tokens``'s local count (no upstream count_tokens) is from Claude's.

Claude's current tokenizer is not public and this workplace cannot reach Anthropic, so two offline
references are used, each for what it can tell:

1. **Framing** (what the local count leaves out): the requests Anthropic's token-counting guide
   shows with their ``input_tokens`` (a system line and a user line: 14; one tool and a user line:
   403), counted by the proxy's local method (``anthropic.local_count``).
2. **Text**: the text the local method reads of whole agent runs (``anthropic.prompt_text`` of the
   request each run's last call would send), counted by the proxy's tokenizers and by Anthropic's
   own published tokenizer, ``@anthropic-ai/tokenizer`` (npm, the Claude 1/2 vocabulary; Anthropic
   says it is only a rough approximation for Claude 3 and later). So figure 2 says how the proxy's
   tokenizer compares with a Claude vocabulary on agent text, not with Claude 4's.

    npm install --prefix /tmp/claude-tok @anthropic-ai/tokenizer@0.0.4
    python benchmarks/bench_count_tokens.py /work/shared/data/trajectories/dev \\
        [--runs OTHER_DIR ...] --node-modules /tmp/claude-tok/node_modules \\
        [--out benchmarks/results/count_tokens.txt]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from refold.loaders import load_all
from refold.proxy.anthropic import local_count, prompt_text
from refold.tokens import get_tokenizer
from refold.types import content_text

# The requests of Anthropic's token-counting guide and the counts it shows for them.
DOCUMENTED: list[tuple[str, dict[str, Any], int]] = [
    (
        "system + user line",
        {"system": [{"type": "text", "text": "You are a scientist"}],
         "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, Claude"}]}]},
        14,
    ),
    (
        "one tool + user line",
        {
            "tools": [{
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
                    "required": ["location"],
                },
            }],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What's the weather like in San Francisco?"}]}],
        },
        403,
    ),
]


def request_of(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The Messages request a run's last call would send, as text blocks (what the count reads)."""
    system, out = [], []
    for m in messages:
        text = content_text(m.get("content"))
        calls = m.get("tool_calls") or []
        if m.get("role") == "system":
            system.append({"type": "text", "text": text})
            continue
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for c in calls if isinstance(calls, list) else []:
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict):
                blocks.append({"type": "tool_use", "name": fn.get("name"), "input": fn.get("arguments")})
        out.append({"role": "assistant" if m.get("role") == "assistant" else "user", "content": blocks})
    return {"system": system, "messages": out}


def claude_counts(texts: list[str], node_modules: Path) -> list[int]:
    script = (
        "const {countTokens}=require('@anthropic-ai/tokenizer');"
        "const texts=JSON.parse(require('fs').readFileSync(process.argv[1],'utf8'));"
        "console.log(JSON.stringify(texts.map(t=>countTokens(t))));"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(texts, f)
    out = subprocess.run(
        ["node", "-e", script, f.name], capture_output=True, text=True, check=True,
        env={"NODE_PATH": str(node_modules), "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    Path(f.name).unlink()
    return [int(n) for n in json.loads(out.stdout)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", type=Path, nargs="+", help="trajectory folders or files")
    ap.add_argument("--node-modules", type=Path, required=True, help="where @anthropic-ai/tokenizer is installed")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    lines = ["refold count_tokens local-count error, offline references (no call to Anthropic)", ""]
    lines.append("1. framing: the token-counting guide's requests, Anthropic's count vs the local count")
    lines.append(f"   {'request':24} {'Anthropic':>9} {'qwen3.6':>8} {'chars4':>7}")
    for name, req, documented in DOCUMENTED:
        q, _ = local_count("qwen3.6", req)
        c, _ = local_count("off", req)
        lines.append(f"   {name:24} {documented:>9} {q:>8} {c:>7}")

    texts: list[str] = []
    groups: list[str] = []
    for folder in a.runs:
        found = [p for p in sorted(folder.rglob("*")) if p.suffix in (".json", ".traj")] if folder.is_dir() else [folder]
        for path in found:
            try:
                histories = load_all(path)
            except Exception as e:  # noqa: BLE001 - a benchmark skips what it cannot read, and says so
                print(f"skipped {path.name}: {e}", file=sys.stderr)
                continue
            for h in histories:
                msgs: list[dict[str, Any]] = [dict(m) for m in h.prefix]
                for st in h.steps:
                    msgs += [dict(st.reply), *(dict(o) for o in st.observations)]
                texts.append(prompt_text(request_of(msgs)))
                groups.append(folder.name)
    claude = claude_counts(texts, a.node_modules)
    tok = get_tokenizer("qwen3.6")
    qwen = [tok.count(t) for t in texts]
    chars4 = [(len(t) + 3) // 4 for t in texts]
    lines += ["", "2. text: the text of each run's whole prompt, local count / legacy Claude tokenizer count",
              "   (@anthropic-ai/tokenizer 0.0.4)",
              f"   {'runs':24} {'n':>3} {'claude':>10} {'method':8} {'total':>10} {'ratio':>6} {'run p50':>8} {'min':>6} {'max':>6}"]
    for group in [*dict.fromkeys(groups), None]:
        idx = [i for i, g in enumerate(groups) if group is None or g == group]
        ref = [claude[i] for i in idx]
        for label, counts in (("qwen3.6", qwen), ("chars4", chars4)):
            mine = [counts[i] for i in idx]
            ratios = [x / c for x, c in zip(mine, ref, strict=True) if c]
            lines.append(
                f"   {group or 'all':24} {len(idx):>3} {sum(ref):>10,} {label:8} {sum(mine):>10,} {sum(mine) / sum(ref):>6.3f} "
                f"{statistics.median(ratios):>8.3f} {min(ratios):>6.3f} {max(ratios):>6.3f}"
            )
    lines += [
        "",
        "Framing: the local count reads only the text of system, messages and tool schemas; Anthropic adds",
        "its own framing (roles, message boundaries) and, with tools, a tool-use system prompt of a few hundred",
        "tokens, which is why 'one tool + user line' is counted ~5x low. Text: a ratio below 1 means the local",
        "count is lower than the legacy Claude vocabulary's; Claude 3+/4 tokenizers are not public, so the error",
        "against today's models is not measured here. In front of Anthropic the proxy asks the upstream's own",
        "/messages/count_tokens (X-Refold-Count: upstream), which is exact by construction.",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
