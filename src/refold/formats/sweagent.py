"""SWE-agent ``.traj`` files (CodeR's too): the chat messages of one agent's conversation, from
``history`` (each entry may name its ``agent``) or, where a file keeps only ``trajectory``, rebuilt
from its entries (the first ``query`` is the prompt before the first call)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import TrajectoryError
from ..types import Message

__all__ = ["sweagent_messages"]


def sweagent_messages(data: dict[str, Any], name: str, agent: str | None = None) -> list[Message]:
    history = data.get("history")
    if history is None and isinstance(data.get("trajectory"), list):
        return _from_trajectory(data["trajectory"], name)
    if not isinstance(history, list):
        raise TrajectoryError(name, "field 'history' is not a list")
    out: list[Message] = []
    for i, m in enumerate(history):
        if agent is not None and isinstance(m, dict) and m.get("agent") != agent:
            continue  # another agent's conversation: never part of this one's prompts (nor its faults)
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise TrajectoryError(name, f"history[{i}] has no 'role'")
        msg: Message = {"role": m["role"], "content": m.get("content", "")}
        if m.get("is_demo"):
            msg["is_demo"] = True  # a demonstration: prompt prefix, not a model call
        if m.get("tool_calls"):
            msg["tool_calls"] = m["tool_calls"]
        if m["role"] == "tool":
            ids = m.get("tool_call_ids")
            ids = ids if isinstance(ids, list) else [ids] if ids else []
            msg["tool_call_id"] = m.get("tool_call_id") or (ids[0] if ids else None)
        if m["role"] == "assistant" and isinstance(m.get("action"), str) and not m.get("tool_calls"):
            msg["action"] = m["action"]
        out.append(msg)
    return out


def _from_trajectory(trajectory: list[Any], name: str) -> list[Message]:
    """A .traj without ``history``: the prompt before the first call (``query``) and one step per entry."""
    out: list[Message] = []
    for i, entry in enumerate(trajectory):
        if not isinstance(entry, dict):
            raise TrajectoryError(name, f"trajectory[{i}] is not an object")
        query = entry.get("query")
        if i == 0 and isinstance(query, list):
            for m in query:
                if not isinstance(m, dict) or m.get("role") == "assistant":
                    break
                out.append({"role": m.get("role"), "content": m.get("content", "")})
        response = entry.get("response")
        action = entry.get("action")
        if not isinstance(response, str) or not response.strip():
            thought = entry.get("thought") if isinstance(entry.get("thought"), str) else ""
            response = (
                f"{thought}\n\n```\n{action}\n```" if isinstance(action, str) and action.strip() else thought
            )
        reply: Message = {"role": "assistant", "content": response}
        if isinstance(action, str) and action.strip():
            reply["action"] = action
        out.append(reply)
        observation = entry.get("observation")
        if observation is not None:
            out.append(
                {
                    "role": "user",
                    "content": observation
                    if isinstance(observation, str)
                    else json.dumps(observation, default=str),
                }
            )
    return out
