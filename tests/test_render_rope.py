"""The rope the layout is built of behaves as the list it stands for, however it was pieced together."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.render.prompt import Joined
from refold.render.rope import CHUNK, Builder, Rope

# a build: items appended, or a run a..b of an earlier rope copied
Op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3 * CHUNK)),
    st.tuples(st.just("copy"), st.integers(0, 5), st.floats(0, 1), st.floats(0, 1)),
)


def build(ops: list[tuple[object, ...]], ropes: list[tuple[Rope[int], list[int]]]) -> tuple[Rope[int], list[int]]:
    b: Builder[int] = Builder(numeric=True)
    model: list[int] = []
    for op in ops:
        if op[0] == "add":
            n = int(op[1])  # type: ignore[call-overload]
            for x in range(n):
                b.append(len(model) + x)
            model += range(len(model), len(model) + n)
        else:
            rope, items = ropes[int(op[1]) % len(ropes)]  # type: ignore[call-overload]
            lo, hi = sorted((int(float(op[2]) * len(items)), int(float(op[3]) * len(items))))  # type: ignore[arg-type]
            b.copy(rope, lo, hi)
            model += items[lo:hi]
    return b.build(), model


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(Op, max_size=6), min_size=1, max_size=5), st.data())
def test_a_rope_reads_as_its_list(builds: list[list[tuple[object, ...]]], data: st.DataObject) -> None:
    ropes: list[tuple[Rope[int], list[int]]] = [(Builder[int](numeric=True).build(), [])]
    for ops in builds:
        ropes.append(build(ops, ropes))
    for rope, model in ropes:
        assert rope.to_list() == model and list(rope) == model and len(rope) == len(model)
        assert rope.total == sum(model)
        assert len(rope.chunks) <= 2 * len(model) // (CHUNK // 2) + 2 * len(builds) * 6 + 1  # no dust of tiny chunks
        if model:
            i = data.draw(st.integers(0, len(model)))
            assert rope.sum_to(i) == sum(model[:i])
            assert rope.since(i) == model[i:]
            if i < len(model):
                assert rope[i] == model[i]
    (a, ma), (b, mb) = ropes[-1], ropes[data.draw(st.integers(0, len(ropes) - 1))]
    stop = min(len(ma), len(mb))
    start = data.draw(st.integers(0, stop))
    first = next((k for k in range(start, stop) if ma[k] != mb[k]), stop)
    assert a.common(b, start, stop) == first


def test_a_copied_run_shares_the_chunks_inside_it() -> None:
    b: Builder[int] = Builder()
    for x in range(10 * CHUNK):
        b.append(x)
    rope = b.build()
    c: Builder[int] = Builder()
    c.copy(rope, 5, 9 * CHUNK + 3)
    copy = c.build()
    assert copy.to_list() == list(range(5, 9 * CHUNK + 3))
    assert sum(any(x is y for y in rope.chunks) for x in copy.chunks) >= 7


def test_joined_indexes_and_slices_as_the_concatenation() -> None:
    b: Builder[int] = Builder()
    for x in range(300):
        b.append(x)
    j = Joined([-2, -1], b.build(), [300, 301])
    whole = [-2, -1, *range(302)]
    assert j.to_list() == whole and len(j) == len(whole) and list(j) == whole
    assert all(j[i] == whole[i] for i in (0, 1, 2, 150, 301, 302, 303, -1))
    assert all(j.since(i) == whole[i:] for i in (0, 1, 2, 200, 302, 303, 304))
