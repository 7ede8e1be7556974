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

from collections.abc import Callable

from ...config import CACHE_PROFILES, Config
from ...config import DEFAULT as DEFAULT_CONFIG
from ...errors import PolicyError
from ...policy import Policy
from .peers import ClearToolUsesProjector, CompactProjector, MaskingProjector
from .projectors import BASE_POLICY, BaseProjector, Options, Projector, RendererProjector, refold_policy

__all__ = ["POLICIES", "STALE_POLICIES", "make_projector", "price_profile"]


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
    return RendererProjector("default", config.replace(policy=policy))


def _self_gc(o: Options) -> RendererProjector:
    """The documented ``self-gc`` preset (pinned plans, ledger view, budget line), reminders off."""
    config = Config.parse(preset="self-gc", reminders=False, **o.policy_overrides)
    if o.unrecorded_tokens:  # the budget line counts the prefix the log leaves out
        config = config.replace(ledger={**config.ledger.model_dump(), "unrecorded_tokens": o.unrecorded_tokens})
    return RendererProjector("self-gc", config)


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
        raise PolicyError(f"unknown policy {name!r}; valid choices: {', '.join(POLICIES)}") from None
    return factory(opts)
