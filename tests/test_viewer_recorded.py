"""The viewer records each policy's prompts as deltas (``lab/viewer/recorded.py``): replayed, they
are the projector's prompts (equal messages, the same origins and stats), and every call's piece
list, rebuilt from the deltas, names those messages."""

from __future__ import annotations

import dataclasses

import pytest

from refold.history import History
from refold.lab.replay import Options, with_stale
from refold.lab.viewer.data import _Tables
from refold.lab.viewer.recorded import Canon, Recorded, content_key, same_prefix
from refold.lab.viewer.variants import build_variants
from refold.tokens import get_tokenizer
from refold.types import RenderStats
from test_viewer import synthetic_run


def _untimed(stats: RenderStats | None) -> RenderStats | None:
    return dataclasses.replace(stats, render_ms=0.0) if stats is not None else None


@pytest.fixture(scope="module")
def run() -> History:
    return with_stale(synthetic_run(30), "recorded")


@pytest.mark.parametrize(
    "vid", ["base", "refold", "masking", "clear-tool-uses", "self-gc", "compact", "m1100"]
)
def test_replayed_prompts_are_the_projectors(run: History, vid: str) -> None:
    tok = get_tokenizer("chars4")
    variant = next(v for v in build_variants(None, Options(tokenizer=tok)) if v.id == vid)
    tables = _Tables(tok, run.steps)
    recorded = Recorded(variant.projector, run, Canon(tables.piece))
    fresh = list(variant.projector.prompts(run))
    replayed = list(recorded.prompts(run))
    assert len(replayed) == len(fresh) == len(recorded.calls) == len(run)
    ids: list[int] = []
    for a, b, (keep, add) in zip(fresh, replayed, recorded.calls, strict=True):
        assert (a.t, _untimed(a.stats), a.compaction, a.breakpoints) == (
            b.t,
            _untimed(b.stats),
            b.compaction,
            b.breakpoints,
        )
        assert list(a.origins) == list(b.origins)
        assert [content_key(m) for m in a.messages] == [content_key(m) for m in b.messages]
        ids = ids[:keep] + add
        assert ids == [tables.piece(m, o) for m, o in zip(a.messages, a.origins, strict=True)]


def test_same_prefix_is_by_identity() -> None:
    x, y, z = {"a": 1}, {"a": 1}, {"b": 2}
    assert same_prefix([x, z], [x, z], [1, 2], [1, 2]) == 2
    assert same_prefix([x, z], [y, z], [1, 2], [1, 2]) == 0  # equal, not the same object
    assert same_prefix([x, z], [x, z, x], [1, 2], [1, 3]) == 1  # the second lists decide too
    assert same_prefix([], [x], [], [1]) == 0
