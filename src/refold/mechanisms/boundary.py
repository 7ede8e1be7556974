"""When the boundary moves: the seed's fixed rule, or only when the move pays (the cost rule).

A boundary move condenses everything that crossed it at once, so the provider's prefix cache
misses from the first changed message on: the move costs a recomputation now and saves the
removed tokens at every later call. The cost rule compares, at a call where the seed's boundary
would move, the prompt that keeps the old boundary with the one that moves it:

    J(P, l) = c*l + w*(|P| - l) + c*R*|P|

with ``l`` the longest common prefix of P with what the cache holds (the previous prompt and the
reply it produced), ``c`` the price of a cached token, ``w`` the price of a recomputed (or cache
written) token, and R = max(min_remaining, t) the calls still expected (a run that has gone t
calls is expected to go about as many more). The move happens when J(moved) <= J(kept). Sizes
are in characters: both sides scale alike, so no tokenizer is needed in the render loop.

Where the boundary may move to (``boundary.position``): ``seed`` (the default), the seed's b_t, so
the gated rule never hides more than the fixed rule at the same call; ``window``, at any call t - k,
the window the fixed rule keeps right after its own moves (the k + ``mask_after`` latest outputs
shown as received), which may hide up to k - 1 steps more than the fixed rule between its moves. A
move beyond b_t saves tokens only until the seed's next move would hide the same, so its token term
counts those calls; a peak it keeps from growing stays kept (the peak term is unchanged). On short
self-hosted sessions it lowers the peak the seed's lag leaves between moves (SIMULATED,
benchmarks/results/boundary_position_eval.txt: median peak KV 0.717x -> 0.637x, cost 0.811x -> 0.821x).

Until a move first pays, the prompt can be the plain history (``prompt.deferred``): the protocol's
section changes the system message, so the first move is priced as recomputing the whole prompt
with the section and labels, against keeping the plain one (all cached). A session in which
hiding never pays is sent exactly its history.

Where KV memory is what the user pays for (a self-hosted server), each side also pays for raising
the session's largest prompt so far: ``q*(t + R)*max(0, |P| - peak)``, memory sized for the peak
being held at every call of the run at ``q``, a cached token's price. Keeping the boundary when a
large output arrives raises the peak by that output; moving may not. On hosted APIs q = 0.
q is at most c: a cached token's price already pays for its memory and its attention at a call,
so pricing memory held for the peak above c would charge a token more for being remembered than
for being read. Where the rule misjudges (SIMULATED, benchmarks/results/default.txt: sessions
costing more than base) it is mostly R: a move pays only if the session goes on for about R
more calls, and a short session (a CodeR agent of 3-5 calls) may end before it does.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Config
from ..history import History
from ..policy import Policy
from ..types import Step


@dataclass(frozen=True, slots=True)
class Prices:
    """Relative per-token prices of a cache profile (an uncached input token = 1)."""

    cached: float
    recompute: float
    ttl_s: float | None  # idle seconds after which the cache is cold (None: no lifetime modeled)
    peak: float = 0.0
    """Per call of the run, the price of a token of the session's largest prompt: a self-hosted
    server holds KV memory for the peak (the price of a cached token, which is its memory); a
    hosted API bills tokens, not memory (0)."""


# Read multipliers and write surcharges as in reference cache_spec.md §3.1 and refold.lab.cache.pricing:
# OpenAI and Gemini read at 0.1x with free writes; Anthropic reads 0.1x and writes 1.25x (5-minute
# cache); DeepSeek reads ~0.02x. A self-hosted server pays compute: a cached token still costs its
# attention and KV memory, about a tenth of recomputing it (the vllm price row).
PRICES: dict[str, Prices] = {
    "vllm": Prices(0.1, 1.0, None, peak=0.1),
    "sglang": Prices(0.1, 1.0, None, peak=0.1),
    "openai": Prices(0.1, 1.0, 300.0),
    "anthropic": Prices(0.1, 1.25, 300.0),
    "deepseek": Prices(0.02, 1.0, None),
    "gemini": Prices(0.1, 1.0, 300.0),
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A prompt the call could send: its size and what of it the cache already holds (characters)."""

    size: int
    common: int


def cost(p: Candidate, prices: Prices, remaining: int) -> float:
    """J(P, l): this call's input plus carrying P through the calls still expected."""
    return prices.cached * p.common + prices.recompute * (p.size - p.common) + prices.cached * remaining * p.size


def peak_cost(p: Candidate, weight: float, t: int, remaining: int, peak: int) -> float:
    """What raising the session's peak prompt to |P| costs: KV memory sized for the peak is held at
    every call of the run (the t made and the ``remaining`` expected), each at ``weight``."""
    return weight * (t + remaining) * max(0, p.size - peak)


def should_move(
    config: Config, t: int, kept: Candidate, moved: Candidate, idle_s: float | None = None, peak: int = 0,
    until: int | None = None,
) -> bool:
    """Whether the boundary moves at call t (``idle_s``: seconds since the previous call, if known;
    ``peak``: the largest prompt sent so far, characters; ``until``: the calls the tokens a move
    removes are counted over, if fewer than R: an off-grid move's, until the seed's next move)."""
    if config.boundary.rule == "fixed":
        return True
    prices = PRICES[config.cache]
    if cold(config, idle_s):
        return True  # every prompt is recomputed, the smaller one is cheaper
    remaining = config.boundary.remaining or max(config.boundary.min_remaining, t)
    w = prices.peak if config.boundary.peak_weight is None else config.boundary.peak_weight
    h = remaining if until is None else min(until, remaining)  # a peak avoided stays avoided: (t + R) calls
    return (cost(moved, prices, h) + peak_cost(moved, w, t, remaining, peak)
            <= cost(kept, prices, h) + peak_cost(kept, w, t, remaining, peak))


def target(config: Config, t: int, plain: bool = False) -> int:
    """Where the boundary would move at call t: the seed's b_t, or under ``boundary.position=window``
    (cost rule, chunked, once the protocol is sent: ``plain`` is False) the latest position that keeps
    the window the fixed rule keeps right after its moves, t - k (b_t itself at multiples of k)."""
    p, b = config.policy, config.policy.boundary(t)
    if config.boundary.position == "window" and config.boundary.rule == "cost" and p.chunk and not plain:
        return max(b, t - p.k)
    return b


def until_seed(config: Config, t: int, kept: int, moved: int) -> int | None:
    """The calls an off-grid move's savings count over: a move from at or past the seed's b_t to
    beyond it saves only until the seed's next move would hide the same (None: a move the seed makes)."""
    p = config.policy
    if moved <= p.boundary(t) or kept < p.boundary(t):
        return None
    return p.k - t % p.k



def plain_first(config: Config) -> bool:
    """Whether calls are sent the plain history until the protocol's prompt pays (``prompt.deferred``).

    Not when the agent's own prompt teaches PROGRESS/STALE (``format_in_system`` off, as mini's
    templates do): it names ``[step N]`` labels from its first reply on."""
    c = config
    return (
        c.prompt.deferred and c.boundary.rule == "cost" and c.policy.protocol and c.prompt.format_in_system
        and not (c.spans.prompt or c.ledger.prompt or c.ledger.budget_tokens or c.ledger.view)
    )


def recorded_config(config: Config) -> Config:
    """The config whose prompt is the plain history: every step as recorded, nothing added.

    ``render/plain.py`` builds these prompts call by call; a Renderer of this config returns the
    same (the tests' reference). Chunked with the largest k, its boundary stays at 0 for 2,000
    steps, so each of its calls appends a step instead of laying one out."""
    return config.replace(
        policy=Policy(dedup=False, fold=False, chunk=True, k=1000, protocol=False, reminders=False, mask_after=None),
        boundary={"rule": "fixed"}, spans={"enabled": False}, ledger={"enabled": False},
    )


def cold(config: Config, idle_s: float | None) -> bool:
    """Whether the provider's cache has expired after ``idle_s`` seconds without a call."""
    ttl = config.boundary.cache_ttl_s or PRICES[config.cache].ttl_s
    return idle_s is not None and ttl is not None and idle_s > ttl


def defers_folds(config: Config) -> bool:
    """Whether an agent's fold may wait for a boundary move (``fold_pays``) rather than show at once."""
    return config.boundary.rule == "cost" and config.boundary.fold_wait > 0


def fold_pays(config: Config, t: int, size: int, recomputed: int, saved: int) -> bool:
    """Whether an agent's fold (a span block) applied at call t pays for itself under the cost rule.

    Judged on the last prompt (``size`` characters, all cached): folding now recomputes its last
    ``recomputed`` characters and removes ``saved`` of them; J(folded) <= J(kept) as in
    ``should_move``. The answer to the fold and the rendering both ask this, with the same numbers,
    before the step issuing the fold is known, so they agree."""
    if not defers_folds(config):
        return True
    remaining = config.boundary.remaining or max(config.boundary.min_remaining, t)
    kept = Candidate(size, size)
    folded = Candidate(size - saved, size - recomputed)
    return cost(folded, PRICES[config.cache], remaining) <= cost(kept, PRICES[config.cache], remaining)


def fold_deadline(config: Config, closed_at: int) -> int:
    """The call by which a deferred fold is applied whatever it costs: the ``fold_wait``-th move of
    the fixed rule's boundary after the call at which the fold was issued (at most k calls each)."""
    p, wait = config.policy, config.boundary.fold_wait
    last = closed_at + wait * p.k
    moves = [u for u in range(closed_at + 1, last + 1) if p.boundary(u) != p.boundary(u - 1)]
    return moves[wait - 1] if 0 < wait <= len(moves) else last


def step_time(step: Step) -> float | None:
    """When ``step`` was complete (unix seconds, ``refold.wire.step_time``), if recorded."""
    at = step.meta.get("time")
    return float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None  # a tuple: int | float is built per call


def idle_s(history: History, t: int) -> float | None:
    """Seconds between model call t (made when step t-1 was complete) and call t+1 (step t), if recorded."""
    if t < 2:
        return None
    now, before = step_time(history.step(t)), step_time(history.step(t - 1))
    return None if now is None or before is None else now - before
