"""Which renderings the viewer precomputes: the named policies of ``refold replay`` and every
combination of the four mechanism switches (dedup, fold, chunk, reversible) on top of refold.

Each variant is a replay ``Projector``, so the viewer's prompts and token figures are exactly the
ones ``refold replay`` reports for the same run, tokenizer and cache simulator.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...config import Config
from ...errors import PolicyError
from ..replay import POLICIES, STALE_POLICIES, Options, Projector, make_projector
from ..replay.projectors import RendererProjector, refold_policy

SWITCHES: tuple[str, ...] = ("dedup", "fold", "chunk", "reversible")
MECHANISMS = "mechanisms"
"""Pseudo policy name: the 16 switch combinations (refold with some mechanisms off)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One precomputed rendering of the run."""

    id: str
    label: str
    kind: str  # "policy" (named in refold replay) or "mechanism" (a switch combination)
    projector: Projector
    uses_stale: bool  # renders from the history with STALE marks (recorded or simulated)
    switches: dict[str, bool] | None  # the four switches, when the variant is refold's renderer
    settings: dict[str, Any]  # what to show as "policy settings"


SENT = "sent"
"""The variant rendered with the Config the agent was actually served with (a proxy session's, or
the one a refold mini run saved): what was sent."""


def sent_variant(config: Config, label: str = "sent (this proxy's settings)") -> Variant:
    """The prompts ``config`` renders, reminders and all: what the agent was sent (on a proxy's
    session page its renderer is the session's, fed the same stored steps; for a saved refold
    run, the run's own Config)."""
    policy = config.policy
    switches = {s: bool(getattr(policy, s)) for s in SWITCHES}
    projector = RendererProjector(SENT, config, exact=True)
    return Variant(SENT, label, "policy", projector, True, switches, policy.model_dump())


def mechanism_id(switches: dict[str, bool]) -> str:
    """``m`` and one digit per switch in ``SWITCHES`` order, e.g. ``m1011`` = refold without fold."""
    return "m" + "".join("1" if switches[s] else "0" for s in SWITCHES)


def _named(name: str, opts: Options) -> Variant:
    projector = make_projector(name, opts)
    policy = getattr(projector, "policy", None)
    inner_projector = getattr(projector, "inner", None)  # a compaction wraps another projector
    inner = getattr(inner_projector, "policy", None)
    switches = {s: bool(getattr(policy, s)) for s in SWITCHES} if policy is not None else None
    if policy is not None:
        settings: dict[str, Any] = policy.model_dump()
    else:
        settings = {
            k: v
            for k, v in vars(projector).items()
            if k not in ("name", "tok", "opts", "inner") and isinstance(v, int | float | str | bool)
        }
        if inner is not None:
            settings["inner"] = getattr(inner_projector, "name", "")
            settings.update(budget=opts.budget, compact_fraction=opts.compact_fraction)
    return Variant(name, name, "policy", projector, name in STALE_POLICIES, switches, settings)


def build_variants(names: Sequence[str] | None, opts: Options, *, mechanisms: bool = True) -> list[Variant]:
    """Variants for the named policies (default: all of ``refold replay``'s), base always included.

    ``mechanisms`` adds the 16 switch combinations; ``names`` may also contain ``"mechanisms"``.
    """
    wanted = list(POLICIES) if names is None else list(names)
    if MECHANISMS in wanted:
        mechanisms = True
        wanted.remove(MECHANISMS)
    unknown = [n for n in wanted if n not in POLICIES]
    if unknown:
        raise PolicyError(
            f"unknown policy '{unknown[0]}'; valid choices: {', '.join(POLICIES)}, {MECHANISMS}"
        )
    wanted = list(dict.fromkeys(["base", *wanted]))
    out = [_named(n, opts) for n in wanted]
    if mechanisms:
        for bits in itertools.product((True, False), repeat=len(SWITCHES)):
            switches = dict(zip(SWITCHES, bits, strict=True))
            off = [s for s, on in switches.items() if not on]
            label = "refold" if not off else "refold without " + ", ".join(off)
            policy = refold_policy(**{**switches, **opts.policy_overrides})
            vid = mechanism_id(switches)
            out.append(
                Variant(
                    vid,
                    label,
                    "mechanism",
                    RendererProjector(vid, policy),
                    True,
                    switches,
                    policy.model_dump(),
                )
            )
    return out
