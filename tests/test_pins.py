"""PinBook.pinned: its memo and fast paths answer what the plain definition says, asked in any order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.mechanisms.pins import Part, Pin, PinBook, check_target, parts
from refold.protocol import ContextCommand


def reference(book: PinBook, limit: int, user: tuple[Pin, ...], plans_limit: int | None) -> frozenset[Part]:
    """The definition: pins and unpins in effect by ``limit`` in step order, the latest plan by ``plans_limit``."""
    plans_limit = limit if plans_limit is None else plans_limit
    events = [(at, on, ps) for at, on, ps in book.events if at <= limit]
    for p in user:
        if p.at <= limit:
            ids, error = check_target(p.target, book.outputs, p.at)
            if error is None:
                events.append((p.at, p.on, tuple(parts(ids, book.outputs))))
    state: set[Part] = set()
    for _, on, ps in sorted(events, key=lambda e: e[0]):
        if on:
            state.update(ps)
        else:
            state.difference_update(ps)
    plans = [s for s in book.plan_steps if s <= plans_limit]
    if plans:
        state.add((plans[-1], -1))
    return frozenset(state)


N = 12
target = st.builds(
    lambda step, sub: f"{step}" if sub is None else (f"r{step}" if sub == -1 else f"{step}.{sub + 1}"),
    st.integers(1, N),
    st.none() | st.integers(-1, 2),
)
op = st.tuples(st.integers(2, N), st.booleans(), target)  # (issued at, pin?, target)


@settings(max_examples=150, deadline=None)
@given(
    outputs=st.lists(st.integers(0, 3), min_size=N, max_size=N),
    ops=st.lists(op, max_size=6),
    user=st.lists(st.builds(Pin, target, st.integers(0, N), st.booleans()), max_size=4),
    plan_steps=st.lists(st.integers(1, N), max_size=5, unique=True),
    asks=st.lists(st.tuples(st.integers(0, N), st.none() | st.integers(0, N), st.booleans()), min_size=1, max_size=12),
)
def test_pinned_is_the_definition_in_any_order(
    outputs: list[int],
    ops: list[tuple[int, bool, str]],
    user: list[Pin],
    plan_steps: list[int],
    asks: list[tuple[int, int | None, bool]],
) -> None:
    book = PinBook(plans=True)
    book.outputs = outputs
    for at, on, name in sorted(ops):  # as issued: in step order
        book.apply(ContextCommand("pin" if on else "unpin", name), at)
    book.plan_steps = sorted(plan_steps)
    pins = tuple(user)
    for limit, plans_limit, with_user in asks:  # repeated and out-of-order limits exercise the memo
        given_pins = pins if with_user else ()
        assert book.pinned(limit, given_pins, plans_limit=plans_limit) == reference(book, limit, given_pins, plans_limit)


def test_nothing_pinned_and_a_plan_released_by_a_newer_one() -> None:
    book = PinBook(plans=True)
    book.outputs = [1] * 6
    assert book.pinned(6) == frozenset()
    book.plan_steps = [2, 5]
    assert book.pinned(6, plans_limit=4) == {(2, -1)}  # the older plan until the boundary passes 5
    assert book.pinned(6) == {(5, -1)}
    book.apply(ContextCommand("pin", "3"), 4)
    assert book.pinned(3) == {(2, -1)} and book.pinned(4) == {(3, 0), (2, -1)}
