"""Automatic reversible masking (``Policy.mask_after``) for agents that never write STALE.

Behind the boundary, an output more than ``n`` steps older than the boundary becomes a restorable
one-line note. Keyed to the boundary, not to t, so the prompt still changes only when the boundary
moves. A step whose stubs point at a masked step is masked too: nothing may point at hidden content.
"""

from __future__ import annotations

from collections.abc import Callable


def newly_masked(
    *,
    b: int,
    n: int,
    scanned: int,
    masked: set[int],
    size_of: Callable[[int], int | None],
    sources_of: Callable[[int], set[int] | None],
    min_chars: int,
) -> list[int]:
    """Steps to mask now that the boundary is at ``b``; ``scanned`` steps were considered before.

    ``size_of(i)`` is the shown size of step i's outputs (None: folded, nothing to mask);
    ``sources_of(j)`` the steps step j's stubs cite (None: folded).
    """
    queue = [
        i
        for i in range(scanned + 1, max(0, b - n) + 1)
        if i not in masked and (size := size_of(i)) is not None and size >= min_chars
    ]
    out: list[int] = []
    seen = set(masked)
    while queue:
        i = queue.pop()
        if i in seen:
            continue
        seen.add(i)
        out.append(i)
        for j in range(i + 1, b + 1):
            sources = sources_of(j)
            if sources is not None and i in sources and j not in seen:
                queue.append(j)
    return out
