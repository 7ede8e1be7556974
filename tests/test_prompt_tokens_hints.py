"""Incremental paths against the from-scratch computation they replace: the vLLM simulator's
``same`` hint, the backward scans of ``cache_control.breakpoints`` and the peers' masked outputs
kept across calls."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.integrations.cache_control import breakpoints
from refold.lab.cache import VllmPrefixCache
from refold.lab.replay.peers import Notes, _Masked, _noted, _omitted, _outputs
from refold.types import Origin, Rendered, RenderStats, Shown

# ---- vLLM: a hint that is a lower bound of the shared prefix changes nothing


_tokens = st.lists(st.integers(0, 3), max_size=80)  # few values: long shared prefixes and repeats


@st.composite
def _calls(draw: st.DrawFn) -> list[tuple[list[int], list[int] | int, str, int]]:
    """Prompts of two interleaved sessions, each mostly its last prompt (+ reply) with a changed
    tail, with what each generated and how much of the hint to give up (any lower bound is valid)."""
    last: dict[str, list[int]] = {}
    out = []
    for _ in range(draw(st.integers(1, 12))):
        s = draw(st.sampled_from(["a", "b"]))
        prev = last.get(s, [])
        keep = draw(st.integers(0, len(prev)))
        toks = prev[:keep] + draw(_tokens)
        gen: list[int] | int = draw(st.one_of(st.integers(0, 20), st.lists(st.integers(0, 3), max_size=20)))
        out.append((toks, gen, s, draw(st.integers(0, 40))))
        last[s] = toks + (gen if isinstance(gen, list) else [])
    return out


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@settings(max_examples=200)
@given(_calls(), st.sampled_from([1, 4, 16]), st.sampled_from([None, 12, 40]))
def test_a_lower_bound_hint_gives_the_same_results_as_a_full_comparison(
    calls: list[tuple[list[int], list[int] | int, str, int]], block: int, capacity: int | None
) -> None:
    plain, hinted = VllmPrefixCache(block, capacity), VllmPrefixCache(block, capacity)
    prompts: dict[str, list[int]] = {}  # each session's previous prompt (without what it generated)
    for toks, gen, s, slack in calls:
        hint = max(0, _shared(prompts.get(s, []), toks) - slack)
        try:
            want = plain.request(toks, generated=gen, session=s)
        except Exception as e:  # capacity: both must refuse alike
            try:
                hinted.request(toks, generated=gen, session=s, same=hint)
            except type(e):
                return
            raise AssertionError("the hinted cache accepted a request the plain one refused") from e
        assert hinted.request(toks, generated=gen, session=s, same=hint) == want
        assert hinted._memo.keys() == plain._memo.keys()
        for k, v in plain._memo.items():
            assert hinted._memo[k] == v
        prompts[s] = toks


# ---- cache_control.breakpoints: the backward scans against the forward ones they replace


def _reference(rendered: Rendered, limit: int = 4) -> list[int]:
    n = len(rendered.messages)
    if n == 0 or limit <= 0:
        return []
    origins = rendered.origins
    b = rendered.stats.boundary
    prefix_end = max((i for i, o in enumerate(origins) if o.step is None), default=-1)
    behind_end = max((i for i, o in enumerate(origins) if o.step is None or o.step <= b), default=-1)
    last_step = origins[-1].step
    previous_end = -1
    if last_step is not None:
        previous_end = max((i for i, o in enumerate(origins) if o.step is None or o.step < last_step), default=-1)
    stable_end = rendered.stats.stable - 1
    chosen = sorted({i for i in (prefix_end, stable_end, behind_end, previous_end, n - 1) if i >= 0})
    if len(chosen) > limit and prefix_end in chosen and stable_end > prefix_end:
        chosen.remove(prefix_end)
    return chosen[-limit:]


@settings(max_examples=300)
@given(
    st.lists(st.one_of(st.none(), st.integers(1, 12)), max_size=30),
    st.integers(0, 12),
    st.integers(0, 31),
    st.integers(0, 5),
)
def test_breakpoints_equal_the_forward_scans(steps: list[int | None], boundary: int, stable: int, limit: int) -> None:
    origins = [Origin(s, "task" if s is None else "output", Shown.RECEIVED) for s in steps]
    msgs = [{"role": "user", "content": str(i)} for i in range(len(steps))]
    stats = RenderStats(t=max([s or 0 for s in steps], default=0), boundary=boundary, stable=min(stable, len(steps)))
    rendered = Rendered(msgs, origins, stats)
    assert breakpoints(rendered, limit) == _reference(rendered, limit)


# ---- peers: masking / clear-tool-uses notes kept across calls against a fresh pass per prompt


class _Step:
    def __init__(self, user_messages: tuple[int, ...]) -> None:
        self.user_messages = user_messages


class _History:
    def __init__(self, said: list[tuple[int, ...]]) -> None:
        self.steps = tuple(_Step(u) for u in said)

    def __len__(self) -> int:
        return len(self.steps)

    def step(self, index: int) -> _Step:
        return self.steps[index - 1]


_item = st.tuples(st.one_of(st.none(), st.integers(0, 7)), st.sampled_from(["task", "reply", "output", "output"]))
_prompt_edit = st.tuples(st.sampled_from(["append", "cut", "replace", "same"]), st.integers(0, 40), st.lists(_item, max_size=6))


def _made(item: tuple[int | None, str]) -> tuple[dict[str, str], Origin]:
    step, part = item
    return {"role": "user", "content": f"{part} {step}\nline"}, Origin(step, part, Shown.RECEIVED)


@settings(max_examples=200)
@given(
    st.lists(st.lists(st.integers(0, 3), max_size=2).map(tuple), max_size=6),
    st.lists(_item, max_size=10),
    st.lists(st.tuples(_prompt_edit, st.integers(0, 12)), min_size=1, max_size=8),
)
def test_masked_outputs_equal_a_fresh_pass_over_each_prompt(
    said: list[tuple[int, ...]],
    first: list[tuple[int | None, str]],
    edits: list[tuple[tuple[str, int, list[tuple[int | None, str]]], int]],
) -> None:
    history: Any = _History(said)
    masked = _Masked(history, _omitted)
    ref_notes: Notes = {}
    pairs = [_made(i) for i in first]
    for (kind, at, new), count in edits:
        if kind == "append" or not pairs:
            pairs = pairs + [_made(i) for i in new]
        elif kind == "cut":
            pairs = pairs[: at % len(pairs)]
        elif kind == "replace":
            i = at % len(pairs)
            pairs = pairs[:i] + [_made(new[0]) if new else (dict(pairs[i][0]), pairs[i][1])] + pairs[i + 1 :]
        msgs, origins = [m for m, _ in pairs], [o for _, o in pairs]
        k = masked.update(msgs, origins)
        want = _outputs(history, origins, any(said))
        assert masked.outputs == want
        cut = min(count, len(want))
        got_msgs, got_origins = masked.shown(msgs, origins, k, cut)
        want_msgs, want_origins = list(msgs), list(origins)
        for idx in want[:cut]:
            want_msgs[idx], want_origins[idx] = _noted(ref_notes, msgs[idx], origins[idx], _omitted)
        assert got_msgs == want_msgs
        assert got_origins == want_origins
