"""Sessions for the server simulator: recorded runs re-rendered under a policy, as token ids.

A :class:`Trace` is one recorded run under one policy: for every model call, the full token
sequence the engine will hold (prompt ids through the chat template, then the output) and the
chained block hashes of that sequence.  Output of call ``t``:

* length ``out_len`` = the recorded ``Step.meta["usage"]["completion_tokens"]`` when present
  (it includes hidden reasoning for thinking models), else the reply's length under the
  tokenizer, or a fixed ``output_tokens`` when given;
* ids: when ``out_len`` <= the reply's length, the first ``out_len`` reply ids as the next prompt
  shows them (so the next turn can hit them in the prefix cache, as with a full-attention model);
  otherwise ``out_len - len(reply)`` unique placeholder ids (reasoning the template drops from
  the next prompt) followed by the reply, so the next turn's hit stops at that reply.

A compaction (``compact`` policies) is one extra request before the call: the summarization prompt
and ``summary_tokens`` placeholder output, sent with no tool delay before the call after it.

Every model call is a request: a call whose reply was not stored (mini's format errors, a Claude
Code / Codex compaction's summarization call, ``History.meta["unreplied"]``) sends its rebuilt
prompt (cut from the prompt after the last step when it was made after the last stored reply)
with the output the log recorded for it, else the run's mean recorded output (an estimate). Prompts include the tool schemas the request carried (``request_tools``) and, for a
Claude Code / Codex session, the ESTIMATED request prefix its log leaves out (``request_prefix``:
system prompt, tool schemas; distinct per session, so no two sessions are assumed to share it).
With ``prompt_only_hashes`` (hybrid models, cache_spec.md §1.9) only blocks within the prompt's
checkpoint ``(P - 1) // B`` are hashable: decode-time states are not retained, so the next turn
hits at most this prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...chat_tokens import message_tokens, prompt_token_ids
from ...history import History
from ...messages import clean
from ...prompt_tokens import PromptTokens
from ...tokens import Tokenizer, get_tokenizer
from ..replay import iter_prompts
from ..replay.prefix import request_prefix
from ..replay.recorded_calls import unreplied_calls_by_step, unreplied_output_estimate, unreplied_prompt
from ..replay.settings import request_tools

__all__ = ["Trace", "Turn", "block_hashes", "build_trace", "salted", "set_shared_prefixes"]

_ROOT = 0x766C6C6D2D6E6F6E  # stands in for vLLM's NONE_HASH
_COPY = 0x636F7079  # salt tag (an int: str hashes vary between processes)


@dataclass(frozen=True, slots=True)
class Turn:
    prompt_len: int
    out_len: int
    hashes: list[int]  # chained hashes of the full blocks of prompt + output
    after_tool: bool = True  # False: sent right after the previous request (a compaction's call)


@dataclass(slots=True)
class Trace:
    source: str
    policy: str
    turns: list[Turn]
    first_prompt: list[int]
    system_tokens: int = 0  # tokens of the first prompt's system message (0 if none), prefix included
    shared_blocks: int = 0  # leading blocks other runs may share (system prompt etc.)
    prefix_tokens: int = 0  # of each prompt: the ESTIMATED unrecorded request prefix (request_prefix)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_len for t in self.turns)

    @property
    def max_kv_tokens(self) -> int:
        return max((t.prompt_len + t.out_len - 1 for t in self.turns), default=0)


def block_hashes(
    ids: Sequence[int], block_size: int, prev: tuple[list[int], list[int]] | None = None
) -> list[int]:
    """Chained hashes ``h_i = H(h_{i-1}, block_i)`` of the full blocks of ``ids``.

    ``prev`` = (ids, hashes) of an earlier sequence: blocks of the common prefix are reused.
    """
    ids = list(ids)
    n_full = len(ids) // block_size
    out: list[int] = []
    if prev is not None:
        pids, phash = prev
        same = 0
        n = min(len(pids), len(ids))
        step = 4096
        while same + step <= n and pids[same : same + step] == ids[same : same + step]:
            same += step
        while same < n and pids[same] == ids[same]:
            same += 1
        out = phash[: min(same // block_size, n_full)]
    parent = out[-1] if out else _ROOT
    for i in range(len(out), n_full):
        parent = hash((parent, tuple(ids[i * block_size : (i + 1) * block_size])))
        out.append(parent)
    return out


def salted(hashes: list[int], start: int, salt: int) -> list[int]:
    """Hashes from block ``start`` on made distinct for another copy of the same run."""
    if salt == 0:
        return hashes
    return hashes[:start] + [hash((h, _COPY, salt)) for h in hashes[start:]]


def _completion_tokens(history: History, t: int) -> int | None:
    usage = history.step(t + 1).meta.get("usage") or {}
    v = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return v if isinstance(v, int) and 0 < v <= MAX_REPLY_TOKENS else None


MAX_REPLY_TOKENS = 1 << 18
"""A recorded reply longer than any model writes in one call (a mangled count) is read as unknown;
each of its tokens would be a placeholder id held in memory."""


def build_trace(
    history: History,
    policy: str,
    *,
    stale: str = "recorded",
    tokenizer: str = "qwen3.6",
    block_size: int = 16,
    output_tokens: int | None = None,
    mask_after: int | None = None,
    prompt_only_hashes: bool = False,
    prefix_estimate: bool = True,
) -> Trace:
    """Render every call of ``history`` under ``policy`` and hash it (see the module docstring)."""
    tok: Tokenizer = get_tokenizer(tokenizer)
    priming = prompt_token_ids([], tok)
    turns: list[Turn] = []
    prev: tuple[list[int], list[int]] | None = None
    first: list[int] = []
    system_tokens = 0
    placeholder = 0
    tools = request_tools(history, policy)
    prompt_ids = PromptTokens(tok, tools=tools)  # only what changed since the last call is tokenized
    head, est = request_prefix(history, tok, request_tools(history, "base")) if prefix_estimate else ([], None)
    unreplied = unreplied_calls_by_step(history, tok)
    lost_out = max(1, output_tokens or unreplied_output_estimate(history)) if unreplied else 0
    final = bool(unreplied.get(len(history)))  # calls after the last stored reply

    def add(prompt: list[int], out_ids: list[int], after_tool: bool) -> None:
        nonlocal prev
        if head:
            prompt = head + prompt
        seq = prompt + out_ids
        hashes = block_hashes(seq, block_size, prev)
        prev = (seq, hashes)
        if prompt_only_hashes:
            hashes = hashes[: (len(prompt) - 1) // block_size]
        turns.append(Turn(len(prompt), len(out_ids), hashes, after_tool))

    def placeholders(n: int) -> list[int]:
        nonlocal placeholder
        out = list(range(-placeholder - 1, -placeholder - n - 1, -1))
        placeholder += n
        return out

    unrecorded = est.provider_tokens if est is not None else 0  # a budget line counts it
    for p in iter_prompts(
        history, policy, stale, tokenizer=tokenizer, mask_after=mask_after, final=final, unrecorded_tokens=unrecorded
    ):
        compacted = p.compaction is not None
        if p.compaction is not None:
            cids = prompt_ids.ids(p.compaction.input_messages)
            add(cids, placeholders(max(1, p.compaction.summary_tokens)), True)
        for seen, recorded_out in unreplied.get(p.t, ()):
            cut = unreplied_prompt(history, p, seen)
            n = lost_out if output_tokens or not recorded_out else recorded_out
            add(prompt_ids.ids(cut), placeholders(n), not compacted)
        if p.t == len(history):  # the final prompt: no stored call
            break
        ids = prompt_ids.ids(p.messages)
        if not first:
            first = head + ids
            system_tokens = len(head)  # a harness's own prefix: shared by copies of the run, like a system message
            if p.messages and p.messages[0].get("role") == "system":
                system_tokens += len(message_tokens(p.messages[0], tok))
        reply = message_tokens(clean(history.step(p.t + 1).reply), tok)
        if reply[: len(priming)] == priming:
            reply = reply[len(priming) :]
        n_out = output_tokens or _completion_tokens(history, p.t) or max(1, len(reply))
        out_ids = reply[:n_out] if n_out <= len(reply) else placeholders(n_out - len(reply)) + reply
        add(ids, out_ids, not compacted)
    return Trace(history.source, policy, turns, first, system_tokens, prefix_tokens=len(head))


def set_shared_prefixes(traces: Sequence[Trace], block_size: int) -> None:
    """Set each trace's ``shared_blocks``: its longest first-prompt prefix common with another run.

    Copies of one run (when sessions outnumber files) are salted from there on, so they share
    with each other exactly what different runs share.  With a single distinct run, its system
    message is taken as the shared part.
    """
    firsts = [t.first_prompt for t in traces]
    for i, t in enumerate(traces):
        best = 0
        others = [f for j, f in enumerate(firsts) if j != i and f != firsts[i]]
        for f in others:
            n = min(len(f), len(t.first_prompt))
            k = 0
            while k < n and f[k] == t.first_prompt[k]:
                k += 1
            best = max(best, k)
        t.shared_blocks = (best if others else t.system_tokens) // block_size
