"""The rendered value a Renderer returns: lists and stats built on first read, and its memo keyed by content."""

from __future__ import annotations

import copy
import pickle
from typing import Any

from refold.config import Config
from refold.history import History
from refold.render import Renderer, render
from refold.types import Rendered, RenderStats
from refold.wire import step_time

T0 = 1_760_000_000.0
CONFIG = Config.parse(cache="openai", boundary={"min_remaining": 1, "remaining": 1})  # moves rarely pay


def run(n: int = 24, gap_at: int = 0) -> History:
    h = History([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}])
    at = T0
    for i in range(1, n + 1):
        at += 5 + (400 if i == gap_at else 0)
        body = "\n".join(f"{i}:{j} some output line that is long enough to count" for j in range(40))
        reply: dict[str, Any] = {"role": "assistant", "content": f"PROGRESS: step {i}\nSTALE: -\n```bash\ncat f{i}.py\n```"}
        obs = {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>", "extra": {"timestamp": at}}
        h.append(reply, [obs], meta={"time": step_time(reply, [obs])})
    return h


def test_stats_and_lists_read_late_equal_a_plain_rendered() -> None:
    h = run()
    r = Renderer(CONFIG)
    for t in range(len(h) + 1):
        got = r.render(h, t)
        assert isinstance(got.stats, RenderStats) and got.stats is got.stats
        assert got.stats.t == t and got.stats.boundary <= CONFIG.policy.boundary(t)
        plain = Rendered(list(got.messages), list(got.origins), got.stats)
        assert got == plain and pickle.loads(pickle.dumps(got)) == plain and copy.copy(got) == plain
        again = r.render(h, t)  # asked again: the same answer
        assert again == got and again.stats == got.stats


def test_a_time_changed_in_place_is_seen() -> None:
    """The memo knows the last step it saw by identity; a recorded time edited in place still counts."""
    h = run()
    t = next(t for t in range(len(h) + 1) if render(h, CONFIG, t).stats.boundary < CONFIG.policy.boundary(t))
    warm = render(h, CONFIG, t)
    r = Renderer(CONFIG)
    r.render(h, t - 1)
    for i in range(1, t):  # steps 1..t-1 now 400 s earlier: the cache is cold at call t
        h.step(i).meta["time"] -= 400
    got, pure = r.render(h, t), render(h, CONFIG, t)
    assert (got.messages, got.origins, got.stats.boundary) == (pure.messages, pure.origins, pure.stats.boundary)
    assert got.messages != warm.messages


def test_the_reminder_is_one_short_line() -> None:
    # it rides on every output of an agent that skips the protocol lines, so each character is paid
    # many times; the system section carries the details
    from refold.prompts import reminder

    text = reminder()
    assert "\n" not in text and len(text) <= 80
    assert text.startswith("[context-manager] ") and "`PROGRESS:`" in text and "`STALE:`" in text


def test_the_protocol_promises_a_cadence_only_under_the_fixed_rule() -> None:
    # under the cost rule a move that did not pay at one multiple of k may pay a call later: the
    # shown forms can change two calls in a row, so "at most every k steps" would be untrue
    from refold.render.received import prefix_messages

    h = History([{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}])
    cost = "\n".join(str(m["content"]) for m in prefix_messages(h, Config())[0])
    fixed = "\n".join(str(m["content"]) for m in prefix_messages(h, Config.parse(boundary={"rule": "fixed"}))[0])
    assert "## Context management" in cost and "at most every" not in cost
    assert "(this changes at most every 3 steps)" in fixed
