"""What a replay policy is: a projector from a recorded ``History`` to the prompt of every model
call (``Prompt``: messages + provenance), and refold's own renderer as one.

``RendererProjector`` renders with a refold ``Config``; ``BaseProjector`` is the history as the
client sent it. The peers' context policies, modeled on top of these, are in ``peers``; the named
policies a replay compares are in ``policies``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ...config import BoundaryConfig, Config
from ...history import History
from ...integrations.cache_control import breakpoints
from ...policy import Policy
from ...render import Renderer
from ...tokens import Tokenizer
from ...types import Message, Origin, RenderStats
from .client import client_history

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

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        """The prompt of every stored call (``t`` = 0..len-1); with ``final``, then the prompt
        after the last step (``t == len(history)``: what the next call is sent, the prompt of
        calls made after the last stored reply; no other prompt changes)."""
        ...


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
    unrecorded_tokens: int = 0
    """The ESTIMATED request prefix the log leaves out (``prefix.request_prefix``, provider
    tokens): a policy's budget line counts it, as the agent's model read it."""


# ---- refold renderer -------------------------------------------------------------------------


class RendererProjector:
    """A configuration of refold's own renderer."""

    def __init__(self, name: str, settings: Policy | Config, *, exact: bool = False) -> None:
        self.name = name
        self.config = (
            settings if isinstance(settings, Config) else Config(policy=settings, boundary=BoundaryConfig(rule="fixed"))
        )
        """A ``Policy`` alone reproduces the seed (the fixed boundary rule); a ``Config`` is taken whole."""
        self.policy = self.config.policy
        self.exact = exact
        """Render with ``config`` as given, never with a saved run's sections (the ``sent`` variant:
        ``config`` is already the one the run or the proxy rendered with)."""

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        r = self._renderer(history)
        reversible = self.policy.reversible and (
            self.policy.dedup or self.policy.fold or bool(self.policy.mask_after)
        )
        for t in range(len(history) + final):  # t == len: the render the proxy makes before a call
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
        if self.exact or not isinstance(saved, dict) or not (self.policy.protocol or self.policy.dedup):
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


# ---- what the client itself sent ------------------------------------------------------------


class BaseProjector:
    """``base``: what the client sent. Mostly the recorded history itself; an agent whose client
    cut old observations (``replay.client.CLIENT_HISTORY``) is replayed with that cut, so ``base``
    counts what the provider billed (CodeR's ``tokens_sent``). What the cut hid is lost for good."""

    name = "base"

    def prompts(self, history: History, final: bool = False) -> Iterator[Prompt]:
        cut = client_history(history)
        inner = RendererProjector("base", BASE_POLICY).prompts(history, final)
        if cut is None:
            yield from inner
            return
        for p in inner:
            start = time.perf_counter()
            msgs, origins = cut.apply(p.messages, p.origins)
            ms = p.render_ms + (time.perf_counter() - start) * 1000
            yield Prompt(p.t, msgs, origins, ms)
