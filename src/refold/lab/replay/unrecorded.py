"""Calls a file counts but does not hold: SWE-agent 0.x's requeries after a format error.

SWE-agent 0.x (CodeR) answers an unparsable reply by querying again with the agent's history, the
bad reply and its format-error template (``check_format_and_requery``); only the final reply is
kept in ``history``, but ``info.model_stats`` counts both calls (``api_calls``, ``tokens_sent``,
``tokens_received``). Where in the run a requery happened is not recorded, so its prompt is
ESTIMATED: the file's mean call prompt under the policy, plus the bad reply (the output
``tokens_received`` holds beyond the stored replies) and the template, both as messages. The
estimate is added to the per-file totals only, labeled ``estimated``; sessions keep what the
file holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...chat_tokens import count_messages
from ...tokens import Tokenizer

__all__ = ["FORMAT_ERROR_TEMPLATE", "unrecorded_calls"]

FORMAT_ERROR_TEMPLATE = (
    "Your output was not formatted correctly. You must always include one discussion and one "
    "command as part of your response. Make sure you do not have multiple discussion/command tags.\n"
    "Please make sure your output precisely matches the following format:\n"
    "DISCUSSION\n"
    "Discuss here with yourself about what your planning and what you're going to do in this step.\n"
    "\n"
    "```\n"
    "command(s) that you're going to run\n"
    "```\n"
)
"""SWE-agent 0.x ``ThoughtActionParser``'s format-error message (dedented), the requery's last turn."""


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def unrecorded_calls(
    stats: dict[str, Any],
    sessions: Sequence[dict[str, dict[str, Any]]],
    tok: Tokenizer,
    price_of: Any,
) -> dict[str, Any] | None:
    """The ESTIMATED calls ``stats`` (a file's ``info.model_stats``) counts beyond the replayed
    ``sessions`` (each a policy -> metrics dict), or None when the counts agree.

    ``price_of(prompt, cached, output) -> usd`` prices one call."""
    api_calls = _int(stats.get("api_calls"))
    if api_calls is None or not sessions:
        return None
    replayed = sum(int(s[next(iter(s))]["calls"]) for s in sessions if s)
    missing = api_calls - replayed
    if missing <= 0:
        return None
    base_out = sum(int(s["base"]["output_tokens"]) for s in sessions if "base" in s)
    received = _int(stats.get("tokens_received"))
    bad_out = max(0, received - base_out) // missing if received is not None else 0
    priming = count_messages([], tok)
    template = count_messages([{"role": "user", "content": FORMAT_ERROR_TEMPLATE}], tok) - priming
    frame = count_messages([{"role": "assistant", "content": ""}], tok) - priming
    out: dict[str, Any] = {"calls": missing, "output_tokens_per_call": bad_out, "policies": {}}
    for name in sessions[0]:
        rows = [s[name] for s in sessions if name in s]
        calls = sum(int(r["calls"]) for r in rows)
        if not calls:
            continue
        prompt = sum(int(r["prompt_tokens"]) for r in rows) / calls + bad_out + frame + template
        share = sum(int(r["cached_tokens"]) for r in rows) / max(1, sum(int(r["prompt_tokens"]) for r in rows))
        p = round(prompt)
        cached = round(share * p)
        out["policies"][name] = {
            "calls": missing,
            "prompt_tokens": missing * p,
            "cached_tokens": missing * cached,
            "output_tokens": missing * bad_out,
            "cost_usd": missing * float(price_of(p, cached, bad_out)),
        }
    return out
