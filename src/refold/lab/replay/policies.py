"""The policies a replay compares: refold configurations and faithful models of the peers.

Each policy is a *projector*: given a recorded ``History`` it yields, for every model call, the
prompt that would have been sent (``Prompt``: messages + provenance). Sources of the peer models
are in ``../shared/reference/peers.md`` and ``docs/results.md``:

* ``base``: the history as the client sent it: as recorded, no refold protocol, nothing removed,
  except where the client itself cut it before sending (``replay.client``: CodeR's Reproducer).
* ``refold``: the seed, k=3, dedup + STALE folding + chunked boundary.
* ``refold-best``: ``refold`` plus reversible automatic masking (``Policy.mask_after``).
* ``masking`` / ``masking-polling``: SWE-agent ``LastNObservations(n=5)`` (also the "Complexity
  Trap" masking baseline), and the same with ``polling=3``.
* ``clear-tool-uses``: Anthropic ``clear_tool_uses_20250919`` defaults (trigger 100k input tokens,
  keep 3, clear_at_least 0), as mirrored by LangChain's ``ClearToolUsesEdit``.
* ``compact`` / ``compact+refold``: summarize whenever the prompt passes 75% of a budget. There is
  no LLM in a replay: the summary has a modeled size and is labeled SIMULATED.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ...chat_tokens import count_messages, message_tokens
from ...config import CACHE_PROFILES, BoundaryConfig, Config
from ...config import DEFAULT as DEFAULT_CONFIG
from ...history import History
from ...integrations.cache_control import breakpoints
from ...mechanisms.pins import protected_parts
from ...messages import clean
from ...policy import Policy
from ...prompt_tokens import PromptTokens
from ...protocol import CM
from ...render import Renderer
from ...tokens import Tokenizer
from ...types import Message, Origin, RenderStats, Shown, content_text
from .client import client_history
from .compact_view import CompactView, prefix_len

__all__ = [
    "BEST_MASK_AFTER",
    "POLICIES",
    "Compaction",
    "Options",
    "Projector",
    "Prompt",
    "make_projector",
]

BEST_MASK_AFTER = 2
"""``refold-best``'s ``mask_after``: chosen from the sweep in docs/results.md."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """A (simulated) summary call made before a model call."""

    input_messages: list[Message]
    summary_tokens: int
    covers: tuple[int, int]  # first and last step summarized


@dataclass(frozen=True, slots=True)
class Prompt:
    """The prompt of model call ``t + 1`` (rendered after ``t`` steps)."""

    t: int
    messages: list[Message]
    origins: list[Origin]
    render_ms: float
    stats: RenderStats | None = None
    compaction: Compaction | None = None
    lost_upto: int = 0
    """Steps 1..lost_upto were summarized away: what of them is not shown is lost for good."""
    reversible: bool = False
    """Whether what this policy removes (apart from summaries) can be restored."""
    breakpoints: tuple[int, ...] | None = None
    """Messages carrying an Anthropic cache breakpoint (None: the client's one, at the end)."""


class Projector(Protocol):
    name: str

    def prompts(self, history: History) -> Iterator[Prompt]: ...


@dataclass(frozen=True, slots=True)
class Options:
    """Knobs shared by the policy factories (defaults = the peers' documented defaults)."""

    tokenizer: Tokenizer
    mask_n: int = 5
    polling: int = 3
    clear_trigger: int = 100_000
    clear_keep: int = 3
    clear_at_least: int = 0
    budget: int = 32_768
    compact_fraction: float = 0.75
    summary_ratio: float = 0.10
    summary_min: int = 256
    summary_max: int = 2_048
    mask_after: int = BEST_MASK_AFTER
    policy_overrides: dict[str, object] = field(default_factory=dict)
    cache: str = "vllm"
    """The cache profile replayed: the ``default`` policy's cost rule uses its prices."""


# ---- refold renderer -------------------------------------------------------------------------


class RendererProjector:
    """A configuration of refold's own renderer."""

    def __init__(self, name: str, policy: Policy, config: Config | None = None) -> None:
        self.name = name
        self.policy = policy
        self.config = config or Config(policy=policy, boundary=BoundaryConfig(rule="fixed"))
        """Named policies other than ``default`` reproduce the seed: the fixed boundary rule."""

    def prompts(self, history: History) -> Iterator[Prompt]:
        r = self._renderer(history)
        reversible = self.policy.reversible and (
            self.policy.dedup or self.policy.fold or bool(self.policy.mask_after)
        )
        for t in range(len(history)):
            out = r.render(history, t)
            yield Prompt(
                t,
                list(out.messages),
                list(out.origins),
                out.stats.render_ms,
                out.stats,
                reversible=reversible,
                breakpoints=tuple(breakpoints(out)) if reversible else None,
            )


    def _renderer(self, history: History) -> Renderer:
        """A refold run saved how it rendered (spans, ledger, where the format lines were): keep
        that, so replaying it shows what its model saw; the named policy decides the rest."""
        saved = history.meta.get("refold_config")
        if not isinstance(saved, dict) or not (self.policy.protocol or self.policy.dedup):
            return Renderer(self.config)
        kept = {k: saved[k] for k in ("spans", "ledger", "prompt", "format_in_system") if saved.get(k) is not None}
        return Renderer(Config.from_saved(kept).replace(policy=self.policy, boundary=self.config.boundary, cache=self.config.cache))


BASE_POLICY = Policy(dedup=False, fold=False, chunk=False, protocol=False, reminders=False, mask_after=None)


def refold_policy(**extra: object) -> Policy:
    """The seed's configuration for replay: k=3, dedup + fold + chunk.

    Reminders are off: in a replay the replies are fixed, so a reminder could only add tokens,
    never change what the agent writes.
    """
    values: dict[str, object] = {"k": 3, "reminders": False, "mask_after": None}
    values.update(extra)
    return Policy.parse(**values)


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

    def prompts(self, history: History) -> Iterator[Prompt]:
        masked: Notes = {}
        said = any(s.user_messages for s in history.steps)
        for p in RendererProjector("base", BASE_POLICY).prompts(history):
            start = time.perf_counter()
            outputs = _outputs(history, p.origins, said)
            count = 1 + len(outputs)  # the instance template is observation 0
            last_removed = max(0, (count // self.polling) * self.polling - self.n)
            msgs, origins = list(p.messages), list(p.origins)
            for idx in outputs[: max(0, last_removed - 1)]:
                msgs[idx], origins[idx] = _noted(masked, msgs[idx], origins[idx], _omitted)
            ms = p.render_ms + (time.perf_counter() - start) * 1000
            yield Prompt(p.t, msgs, origins, ms)


# ---- what the client itself sent ------------------------------------------------------------


class BaseProjector:
    """``base``: what the client sent. Mostly the recorded history itself; an agent whose client
    cut old observations (``replay.client.CLIENT_HISTORY``) is replayed with that cut, so ``base``
    counts what the provider billed (CodeR's ``tokens_sent``). What the cut hid is lost for good."""

    name = "base"

    def prompts(self, history: History) -> Iterator[Prompt]:
        cut = client_history(history)
        inner = RendererProjector("base", BASE_POLICY).prompts(history)
        if cut is None:
            yield from inner
            return
        for p in inner:
            start = time.perf_counter()
            msgs, origins = cut.apply(p.messages, p.origins)
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

    def prompts(self, history: History) -> Iterator[Prompt]:
        counter = PromptTokens(self.tok)  # counts only what changed since the last call
        notes: Notes = {}
        saved: dict[int, int] = {}  # id(cleared copy) -> tokens clearing saves
        said = any(s.user_messages for s in history.steps)
        for p in RendererProjector("base", BASE_POLICY).prompts(history):
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

    def prompts(self, history: History) -> Iterator[Prompt]:
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
        for p in self.inner.prompts(history):
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


# ---- registry --------------------------------------------------------------------------------

Factory = Callable[[Options], Projector]


def _refold(o: Options, **extra: object) -> Policy:
    values = dict(extra)
    values.update(o.policy_overrides)
    return refold_policy(**values)


def price_profile(cache: str) -> str | None:
    """The render cache profile (``Config.cache``) whose prices a simulated cache bills, if any."""
    name = cache.removesuffix("-replayed").removesuffix("-expected").removesuffix("-exact")
    name = {"gemini-openrouter": "gemini"}.get(name, name)
    return name if name in CACHE_PROFILES else None


def _default(o: Options) -> RendererProjector:
    """The library's default Config (reminders off: a replay's replies cannot react to them)."""
    profile = price_profile(o.cache)
    config = DEFAULT_CONFIG.replace(cache=profile or DEFAULT_CONFIG.cache)
    policy = Policy.parse(**{**config.policy.model_dump(), "reminders": False, **o.policy_overrides})
    return RendererProjector("default", policy, config.replace(policy=policy))


def _self_gc(o: Options) -> RendererProjector:
    """The documented ``self-gc`` preset (pinned plans, ledger view, budget line), reminders off."""
    config = Config.parse(preset="self-gc", reminders=False, **o.policy_overrides)
    return RendererProjector("self-gc", config.policy, config)


POLICIES: dict[str, Factory] = {
    "base": lambda o: BaseProjector(),
    "default": _default,
    "refold": lambda o: RendererProjector("refold", _refold(o)),
    "refold-best": lambda o: RendererProjector("refold-best", _refold(o, mask_after=o.mask_after)),
    "masking": lambda o: MaskingProjector("masking", o.mask_n, 1),
    "masking-polling": lambda o: MaskingProjector("masking-polling", o.mask_n, o.polling),
    "clear-tool-uses": lambda o: ClearToolUsesProjector(
        "clear-tool-uses", o.tokenizer, o.clear_trigger, o.clear_keep, o.clear_at_least
    ),
    "compact": lambda o: CompactProjector("compact", RendererProjector("base", BASE_POLICY), o),
    "compact+refold": lambda o: CompactProjector(
        "compact+refold", RendererProjector("refold", _refold(o)), o
    ),
    "self-gc": lambda o: _self_gc(o),
    "compact+self-gc": lambda o: CompactProjector("compact+self-gc", _self_gc(o), o),
}
"""Policy name -> factory(Options) -> Projector."""

STALE_POLICIES = frozenset({"default", "refold", "refold-best", "compact+refold", "self-gc", "compact+self-gc"})
"""Policies whose prompts depend on STALE marks (and so on the ``--stale`` source)."""


def make_projector(name: str, opts: Options) -> Projector:
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; valid choices: {', '.join(POLICIES)}") from None
    return factory(opts)


def received_messages(history: History) -> list[list[Message]]:
    """Each step's messages as recorded (API fields only), for 'removed tokens' accounting."""
    return [[clean(s.reply), *(clean(o) for o in s.observations)] for s in history.steps]
