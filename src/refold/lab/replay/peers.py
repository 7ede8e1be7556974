"""Faithful models of the peers' context policies, as projectors (sources in
``../shared/reference/peers.md`` and ``docs/results.md``):

* SWE-agent ``LastNObservations`` (``MaskingProjector``), also the "Complexity Trap" baseline;
* Anthropic context editing ``clear_tool_uses_20250919`` (``ClearToolUsesProjector``);
* compaction: summarize past a share of a budget (``CompactProjector``; no LLM runs in a replay,
  so the summary has a modeled size and is labeled SIMULATED).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ...chat_tokens import count_messages, message_tokens
from ...history import History
from ...mechanisms.pins import protected_parts
from ...prompt_tokens import PromptTokens
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
        masked: Notes = {}
        said = any(s.user_messages for s in history.steps)
        for p in RendererProjector("base", BASE_POLICY).prompts(history, final):
            start = time.perf_counter()
            outputs = _outputs(history, p.origins, said)
            count = 1 + len(outputs)  # the instance template is observation 0
            last_removed = max(0, (count // self.polling) * self.polling - self.n)
            msgs, origins = list(p.messages), list(p.origins)
            for idx in outputs[: max(0, last_removed - 1)]:
                msgs[idx], origins[idx] = _noted(masked, msgs[idx], origins[idx], _omitted)
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
        notes: Notes = {}
        saved: dict[int, int] = {}  # id(cleared copy) -> tokens clearing saves
        said = any(s.user_messages for s in history.steps)
        for p in RendererProjector("base", BASE_POLICY).prompts(history, final):
            start = time.perf_counter()
            msgs, origins = list(p.messages), list(p.origins)
            total = counter.count(msgs)
            if total > self.trigger:
                outputs = _outputs(history, origins, said)
                candidates = outputs[: -self.keep] if self.keep > 0 else outputs
                cleared = 0
                for idx in candidates:
                    m = msgs[idx]
                    msgs[idx], origins[idx] = note, _ = _noted(notes, m, origins[idx], _cleared)
                    n = saved.get(id(note))
                    if n is None:
                        n = saved[id(note)] = len(message_tokens(m, self.tok)) - len(message_tokens(note, self.tok))
                    cleared += n
                    if 0 < self.clear_at_least <= cleared:
                        break
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
