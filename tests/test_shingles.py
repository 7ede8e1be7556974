"""The shingle table of dedup (refold.mechanisms.shingles): its bulk adds keep exactly the table that
appending each window's position in turn (and keeping the last few) keeps, and the kept windows of a
trimmed output are the ones inside one contiguous kept segment."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.mechanisms.shingles import MAX_CANDIDATES, Shingles, W, kept_windows, window_hashes


def reference(outputs: list[list[int]]) -> dict[int, list[tuple[int, int]]]:
    """Window -> (source, line) of its positions, most recent first: one append per window."""
    table: dict[int, list[tuple[int, int]]] = {}
    for si, hashes in enumerate(outputs):
        for q, h in enumerate(hashes):
            lst = table.setdefault(h, [])
            lst.append((si, q))
            if len(lst) > MAX_CANDIDATES:
                del lst[0]
    return {h: lst[::-1] for h, lst in table.items()}


# few distinct windows, so that windows repeat inside one output and across many
_OUTPUTS = st.lists(st.lists(st.integers(0, 6), max_size=40), max_size=14)


@settings(max_examples=400)
@given(_OUTPUTS)
def test_bulk_adds_equal_one_append_per_window(outputs: list[list[int]]) -> None:
    table = Shingles()
    for si, hashes in enumerate(outputs):
        table.add(si, hashes, range(len(hashes)))
    want = reference(outputs)
    assert {h: table.recent(h) for h in want} == want
    probe = list(range(-2, 9))
    assert list(table.known(probe)) == [i for i, h in enumerate(probe) if h in want]


def test_a_window_seen_many_times_keeps_its_last_positions() -> None:
    table = Shingles()
    table.add(0, [5] * 20, range(20))
    table.add(1, [5, 6], [3, 7])
    assert table.recent(5) == [(1, 3), *((0, q) for q in range(19, 12, -1))]
    assert table.recent(6) == [(1, 7)]


@settings(max_examples=300)
@given(st.lists(st.sampled_from("abc"), min_size=0, max_size=30), st.data())
def test_kept_windows_are_the_windows_of_contiguous_kept_lines(lines: list[str], data: st.DataObject) -> None:
    kept = sorted(data.draw(st.sets(st.integers(1, max(1, len(lines))), max_size=len(lines))) if lines else [])
    hashes = window_hashes(lines)
    got_hashes, at = kept_windows(hashes, kept)
    want = [q for q in range(len(kept) - W + 1) if kept[q + W - 1] - kept[q] == W - 1]
    assert list(at) == want
    rows = [lines[n - 1] for n in kept]
    assert got_hashes == [hash(tuple(rows[q : q + W])) for q in want]


def test_window_hashes_hash_each_run_of_w_lines() -> None:
    lines = ["a", "b", "c", "d"]
    assert window_hashes(lines) == [hash(("a", "b", "c")), hash(("b", "c", "d"))]
    assert window_hashes(lines[:2]) == []
