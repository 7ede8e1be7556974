"""The compacted prompt kept between calls equals the one read from scratch at every call."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.lab.replay.compact_view import CompactView
from refold.types import Message, Origin, Shown

_POOL: list[Message] = [{"role": "user", "content": f"message {i}"} for i in range(12)]
_PREFIX: list[Message] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
_PREFIX_ORIGINS = [Origin(None, "system", Shown.PREFIX), Origin(None, "task", Shown.PREFIX)]
_ORIGIN = st.builds(
    Origin,
    st.sampled_from([None, 1, 2]),
    st.sampled_from(["reply", "output", "output", "note", "ledger", "pin"]),
    st.sampled_from([Shown.RECEIVED, Shown.RECEIVED, Shown.PINNED, Shown.NOTE]),
    st.lists(st.integers(1, 3), max_size=1).map(tuple),
)
_ITEM = st.tuples(st.sampled_from(range(len(_POOL))), _ORIGIN)
_SUMMARIES: list[Message | None] = [
    None,
    {"role": "user", "content": "summary a"},
    {"role": "user", "content": "b"},
]
# each call keeps a leading part of the previous inner prompt (the same objects) and appends items;
# the boundary, summary and protected parts change now and then
_CALL = st.tuples(
    st.integers(0, 10),
    st.lists(_ITEM, max_size=5),
    st.integers(0, 3),
    st.sampled_from(range(len(_SUMMARIES))),
    st.sets(st.tuples(st.integers(0, 2), st.integers(-1, 2)), max_size=3),
    st.booleans(),
)


@settings(max_examples=300)
@given(st.lists(_CALL, max_size=12))
def test_the_kept_view_equals_a_view_from_scratch(
    calls: list[tuple[int, list[tuple[int, Origin]], int, int, set[tuple[int, int]], bool]],
) -> None:
    view = CompactView()
    msgs: list[Message] = list(_PREFIX)
    origins: list[Origin] = list(_PREFIX_ORIGINS)
    for keep, new, upto, s, kept, rebuild in calls:
        msgs = msgs[: 2 + keep] + [_POOL[i] for i, _ in new]
        origins = origins[: 2 + keep] + [o for _, o in new]
        if rebuild:  # equal origins, new objects: still the same prompt
            origins = [Origin(o.step, o.part, o.shown, o.covers) for o in origins]
        got = view(msgs, origins, upto, _SUMMARIES[s], kept)
        assert got == CompactView()(msgs, origins, upto, _SUMMARIES[s], kept)


def test_a_protected_note_is_the_same_object_at_every_call() -> None:
    view = CompactView()
    origins = [*_PREFIX_ORIGINS, Origin(1, "output", Shown.RECEIVED), Origin(2, "reply", Shown.RECEIVED)]
    msgs = [*_PREFIX, _POOL[0], _POOL[1]]
    first, _ = view(msgs, origins, 1, _SUMMARIES[1], {(1, 0)})
    second, _ = view(
        [*msgs, _POOL[2]], [*origins, Origin(2, "output", Shown.RECEIVED)], 1, _SUMMARIES[1], {(1, 0)}
    )
    assert first[3] is second[3] and "Pinned output of step 1" in str(first[3]["content"])


def test_a_prompt_with_an_origin_missing_is_refused() -> None:
    with pytest.raises(ValueError, match="1 origins"):
        CompactView()(_PREFIX, _PREFIX_ORIGINS[:1], 0, None, set())


def test_a_replaced_output_is_numbered_as_if_read_from_scratch() -> None:
    # call 2 replaces step 1's output: it is output 0 again, the protected one
    view = CompactView()
    origins = [*_PREFIX_ORIGINS, Origin(1, "output", Shown.RECEIVED)]
    view([*_PREFIX, _POOL[0]], origins, 1, _SUMMARIES[1], {(1, 0)})
    got, _ = view([*_PREFIX, _POOL[1]], origins, 1, _SUMMARIES[1], {(1, 0)})
    assert got == CompactView()([*_PREFIX, _POOL[1]], origins, 1, _SUMMARIES[1], {(1, 0)})[0]
    assert "message 1" in str(got[-1]["content"])
