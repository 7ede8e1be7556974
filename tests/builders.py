"""Build histories for tests: scripted steps with PROGRESS/STALE heads, text or tool-call style."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from refold.config import BoundaryConfig, Config
from refold.history import History
from refold.policy import Policy

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Fix the bug in calc.py."}


def reply(progress: str | None, stale: str | None, command: str, *, thought: str = "Thinking.") -> str:
    head = ""
    if progress is not None:
        head += f"PROGRESS: {progress}\n"
    if stale is not None:
        head += f"STALE: {stale}\n"
    return f"{head}{thought}\n\n```bash\n{command}\n```"


def text_history(steps: list[tuple[str, str]]) -> History:
    """steps: (assistant content, observation content)."""
    h = History([SYSTEM, TASK])
    for content, output in steps:
        h.append({"role": "assistant", "content": content}, [{"role": "user", "content": output}])
    return h


def tool_history(steps: list[tuple[str, list[tuple[str, str]]]]) -> History:
    """steps: (assistant text, [(command, output), ...]) with one tool call per command."""
    h = History([SYSTEM, TASK])
    for i, (text, calls) in enumerate(steps, start=1):
        tool_calls: list[dict[str, Any]] = [
            {
                "id": f"call_{i}_{j}",
                "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": cmd})},
            }
            for j, (cmd, _) in enumerate(calls)
        ]
        obs = [
            {"role": "tool", "tool_call_id": f"call_{i}_{j}", "content": out} for j, (_, out) in enumerate(calls)
        ]
        h.append({"role": "assistant", "content": text, "tool_calls": tool_calls}, obs)
    return h


def numbered(path_lines: list[str], start: int = 1) -> str:
    """Lines as `nl -ba` prints them."""
    return "\n".join(f"{n:6d}\t{line}" for n, line in enumerate(path_lines, start=start))


def file_lines(n: int, seed: str = "f") -> list[str]:
    out = []
    for i in range(n):
        if i % 10 == 0:
            out.append(f"def {seed}_func_{i}(arg_{i}, other=None):")
        else:
            out.append(f"    value_{i} = compute_{seed}({i}, 'some text to make the line longer')")
    return out


def seed_config(policy: Policy | None = None, **sections: Any) -> Config:
    """The seed's rendering (fixed boundary, masking only when asked for): what most mechanism
    tests pin down. The library's defaults (cost rule, masking) are tested on their own."""
    policy = policy or Policy()
    if "mask_after" not in policy.model_fields_set:
        policy = policy.model_copy(update={"mask_after": None})
    return Config(policy=policy, boundary=BoundaryConfig(rule="fixed"), **sections)


def cuts(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at drawn points into the non-empty pieces a stream may deliver it in."""
    points = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=8))))
    out, last = [], 0
    for p in [*points, len(text)]:
        out.append(text[last:p])
        last = p
    return [p for p in out if p] or [""]
