"""Faithful models of the peers' context policies, as projectors (sources in
``../shared/reference/peers.md`` and ``docs/results.md``):

* SWE-agent ``LastNObservations`` (``MaskingProjector``), also the "Complexity Trap" baseline;
* Anthropic context editing ``clear_tool_uses_20250919`` (``ClearToolUsesProjector``);
* compaction: summarize past a share of a budget (``CompactProjector``; no LLM runs in a replay,
  so the summary has a modeled size and is labeled SIMULATED).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator

from ...chat_tokens import count_messages, message_tokens
from ...history import History
from ...mechanisms.pins import protected_parts
from ...prompt_tokens import PromptTokens, same_prefix
from ...protocol import CM
from ...tokens import Tokenizer
from ...types import Message, Origin, Shown, content_text
from .compact_view import CompactView, prefix_len
from .projectors import BASE_POLICY, Compaction, Options, Projector, Prompt, RendererProjector

# ---- SWE-agent LastNObservations -----------------------------------------------------------


Notes = dict[int, tuple[Message, Origin, Message, Origin]]


def _noted(notes: Notes, m: Message, o: Origin, content: Callable[[Message], str]) -> tuple[Message, Origin]:
    """Output ``m`` shown as a note: one copy per output, reused at every call, so later calls
    repeat the same objects (token counting and the viewer skip unchanged messages by identity)."""
    hit = notes.get(id(m))
    if hit is None or hit[0] is not m or hit[1] is not o:
        shown = Origin(o.step, "output", Shown.NOTE, (o.step,) if o.step else ())
        hit = notes[id(m)] = (m, o, {**m, "content": content(m)}, shown)
    return hit[2], hit[3]


def _outputs(history: History, origins: list[Origin], said: bool) -> list[int]:
    """The prompt's tool outputs, by message index: without the messages to the agent
    (``Step.user_messages``; ``said``: the history has some), which neither peer counts as output
    (SWE-agent masks ``observation`` entries only, Anthropic clears ``tool_result`` blocks only)."""
    outputs = [i for i, o in enumerate(origins) if o.part == "output"]
    if not said:
        return outputs
    out: list[int] = []
    step, j = None, 0
    for i in outputs:
        s = origins[i].step
        j = j + 1 if s == step else 0
        step = s
        if s is None or not 1 <= s <= len(history) or j not in history.step(s).user_messages:
            out.append(i)
    return out


class _Masked:
    """The prompts of one session with their first ``count`` tool outputs (``_outputs``) shown as
    notes, at a cost proportional to what changed: the leading messages a prompt shares with the
    last one (the very same objects) keep their output indices and their notes."""

    def __init__(self, history: History, content: Callable[[Message], str]) -> None:
        self.history, self.content = history, content
        self.said = any(s.user_messages for s in history.steps)
        self.notes: Notes = {}
        self._msgs: list[Message] = []  # the last prompt as received
        self._origins: list[Origin] = []
        self._out_msgs: list[Message] = []  # ... and as shown
        self._out_origins: list[Origin] = []
        self._count = 0  # outputs shown as notes in it
        self._all: list[tuple[int, int | None, int]] = []  # each output: index, step, rank in its step
        self.outputs: list[int] = []  # what ``_outputs`` gives for the last prompt

    def update(self, msgs: list[Message], origins: list[Origin]) -> int:
        """Take the next prompt; return how many of its leading messages the last one shares."""
        k = min(same_prefix(self._msgs, msgs), same_prefix(self._origins, origins))
        history, all_, outputs = self.history, self._all, self.outputs
        del all_[bisect_left(all_, (k,)) :]
        del outputs[bisect_left(outputs, k) :]
        step, j = (all_[-1][1], all_[-1][2]) if all_ else (None, 0)
        for i in range(k, len(origins)):
            o = origins[i]
            if o.part != "output":
                continue
            s = o.step
            j = j + 1 if s == step else 0  # as ``_outputs`` counts
            step = s
            all_.append((i, s, j))
            if not self.said or s is None or not 1 <= s <= len(history) or j not in history.step(s).user_messages:
                outputs.append(i)
        return k

    def shown(self, msgs: list[Message], origins: list[Origin], k: int, count: int) -> tuple[list[Message], list[Origin]]:
        """The prompt given to ``update`` with ``outputs[:count]`` shown as notes."""
        out_msgs = self._out_msgs[:k] + msgs[k:]
        out_origins = self._out_origins[:k] + origins[k:]
        outputs = self.outputs
        done = min(self._count, bisect_left(outputs, k))  # noted already, in the shared part
        for idx in outputs[count:done]:  # a cut moved back: shown again as received
            out_msgs[idx], out_origins[idx] = msgs[idx], origins[idx]
        for idx in outputs[done:count]:
            out_msgs[idx], out_origins[idx] = _noted(self.notes, msgs[idx], origins[idx], self.content)
        self._msgs, self._origins = list(msgs), list(origins)  # the caller may change its lists
        self._out_msgs, self._out_origins, self._count = out_msgs, out_origins, count
        return list(out_msgs), list(out_origins)


def _omitted(m: Message) -> str:
    return f"Old environment output: ({len(content_text(m.get('content')).splitlines())} lines omitted)"


def _cleared(m: Message) -> str:
    return CLEARED


class MaskingProjector:
    """SWE-agent ``LastNObservations(n, polling)`` (sweagent/agent/history_processors.py).

    Observations are the task (never elided) followed by every tool output; all but the last
    ``n`` are replaced by ``Old environment output: (N lines omitted)``, and with ``polling`` the
    cut only moves every ``polling`` observations. Not reversible: the agent cannot ask for them.
    """

    def __init__(self, name: str, n: int, polling: int = 1) -> None:
        self.name, self.n, self.polling = name, n, polling

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        masked = _Masked(history, _omitted)
        for p in RendererProjector("base", BASE_POLICY).prompts(history, final):
            start = time.perf_counter()
            k = masked.update(p.messages, p.origins)
            count = 1 + len(masked.outputs)  # the instance template is observation 0
            last_removed = max(0, (count // self.polling) * self.polling - self.n)
            cut = min(len(masked.outputs), max(0, last_removed - 1))
            msgs, origins = masked.shown(p.messages, p.origins, k, cut)
            ms = p.render_ms + (time.perf_counter() - start) * 1000
            yield Prompt(p.t, msgs, origins, ms)


# ---- Anthropic clear_tool_uses ---------------------------------------------------------------

CLEARED = "[cleared]"


class ClearToolUsesProjector:
    """Anthropic context editing ``clear_tool_uses_20250919`` on the full client history.

    Per request (server side, so the client's history is never changed): when the input passes
    ``trigger`` tokens, tool results are cleared oldest first, keeping the last ``keep``; with
    ``clear_at_least`` > 0 clearing stops once that many tokens were reclaimed (LangChain's
    ``ClearToolUsesEdit``, which mirrors Anthropic's strategy; placeholder ``[cleared]``).
    """

    def __init__(self, name: str, tok: Tokenizer, trigger: int, keep: int, clear_at_least: int) -> None:
        self.name, self.tok = name, tok
        self.trigger, self.keep, self.clear_at_least = trigger, keep, clear_at_least

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        counter = PromptTokens(self.tok)  # counts only what changed since the last call
        cleared_ = _Masked(history, _cleared)
        notes = cleared_.notes
        saved: dict[int, int] = {}  # id(cleared copy) -> tokens clearing saves
        for p in RendererProjector("base", BASE_POLICY).prompts(history, final):
            start = time.perf_counter()
            k = cleared_.update(p.messages, p.origins)
            total = counter.count(p.messages)
            count = 0
            if total > self.trigger:
                outputs = cleared_.outputs
                candidates = outputs[: -self.keep] if self.keep > 0 else outputs
                count = len(candidates)
                if self.clear_at_least > 0:  # stops once enough was reclaimed
                    cleared, count = 0, 0
                    for idx in candidates:
                        count += 1
                        m = p.messages[idx]
                        note, _ = _noted(notes, m, p.origins[idx], _cleared)
                        n = saved.get(id(note))
                        if n is None:
                            n = saved[id(note)] = len(message_tokens(m, self.tok)) - len(message_tokens(note, self.tok))
                        cleared += n
                        if self.clear_at_least <= cleared:
                            break
            msgs, origins = cleared_.shown(p.messages, p.origins, k, count)
            ms = p.render_ms + (time.perf_counter() - start) * 1000
            yield Prompt(p.t, msgs, origins, ms)


# ---- compaction ------------------------------------------------------------------------------

SUMMARY_INSTRUCTION: Message = {
    "role": "user",
    "content": (
        "Summarize the conversation so far for your own continuation: the task, what was tried, "
        "what was learned, the current state of the code and what remains to do."
    ),
}


class CompactProjector:
    """Summarize whenever the prompt passes ``fraction`` of ``budget`` (seed 000's compact baseline).

    The prompt after a compaction is the prefix (system, task), the summary, and the steps after
    it, rendered by ``inner``. No LLM runs in a replay: the summary is filler text of a modeled
    size (``summary_ratio`` of the summarized tokens, clamped to ``[summary_min, summary_max]``),
    so every figure that depends on it is SIMULATED. The summary call itself is reported as a
    ``Compaction`` (its input is the prompt that crossed the threshold plus an instruction).
    """

    def __init__(self, name: str, inner: Projector, opts: Options) -> None:
        self.name, self.inner, self.opts = name, inner, opts

    def _summary(self, first: int, last: int, size: int) -> Message:
        head = f"{CM} Summary of steps {first}-{last} (SIMULATED compaction: a real summary of ~{size} tokens stands here)."
        tok = self.opts.tokenizer
        filler_n = max(0, size - tok.count(head))
        return {"role": "user", "content": head + " summary" * filler_n}

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        o = self.opts
        limit = o.compact_fraction * o.budget
        upto = 0
        summary: Message | None = None
        counter = PromptTokens(o.tokenizer)  # counts only what changed since the last call
        # a protected output (a user message) is pinned once the boundary passes it; the summary keeps it from arrival
        rules = self.inner.config.policy.protect if isinstance(self.inner, RendererProjector) else ()
        kept: set[tuple[int, int]] = set()
        seen = 0
        view = CompactView()  # reads only the inner messages that changed since the last call
        for p in self.inner.prompts(history, final):
            start = time.perf_counter()
            for s in history.steps_between(seen, p.t) if p.t > seen else ():
                kept.update(protected_parts(s, rules) if rules else ())
                kept.update((s.index, j) for j in s.user_messages)
            seen = max(seen, p.t)
            msgs, origins = view(p.messages, p.origins, upto, summary, kept)
            event: Compaction | None = None
            total = counter.count(msgs)
            if total > limit and p.t > upto:
                n_prefix = prefix_len(p.origins)
                summarized = total - count_messages(msgs[:n_prefix], o.tokenizer)
                size = int(min(o.summary_max, max(o.summary_min, round(o.summary_ratio * summarized))))
                event = Compaction([*msgs, SUMMARY_INSTRUCTION], size, (upto + 1, p.t))
                summary = self._summary(1, p.t, size)
                upto = p.t
                msgs, origins = view(p.messages, p.origins, upto, summary, kept)
            ms = p.render_ms + (time.perf_counter() - start) * 1000
            yield Prompt(p.t, msgs, origins, ms, p.stats, event, upto, p.reversible)
