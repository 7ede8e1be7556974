"""``boundary.position=window``: the cost rule may move at any call to t - k, the window the fixed
rule keeps right after its own moves; an off-grid move's savings count only until the seed's next move."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.mechanisms.boundary import Candidate, should_move, target, until_seed
from refold.render import Renderer
from refold.types import Shown
from test_boundary_cost import BIG, peak, run  # small outputs and three large file reads

SEED = Config.parse(cache="vllm")
WINDOW = SEED.override(["boundary.position=window"])


def test_the_seeds_position_is_the_default() -> None:
    """Issue 11: the gated rule never hides more than the fixed rule at the same call; ``window`` may."""
    assert Config().boundary.position == "seed"


def test_the_window_position_is_t_minus_k_and_the_seeds_at_its_own_moves() -> None:
    k = WINDOW.policy.k
    assert [target(WINDOW, t) for t in range(9)] == [0, 0, 0, 0, 1, 2, 3, 4, 5]
    assert [target(SEED, t) for t in range(9)] == [WINDOW.policy.boundary(t) for t in range(9)] == [0, 0, 0, 0, 0, 0, 3, 3, 3]
    assert all(target(WINDOW, t) == WINDOW.policy.boundary(t) for t in range(0, 30, k))
    assert target(WINDOW, 8, plain=True) == 3  # the protocol's first move is the seed's
    assert target(WINDOW.override(["boundary.rule=fixed"]), 8) == 3  # the fixed rule is the seed's
    assert target(WINDOW.override(["policy.chunk=false"]), 8) == 8


def test_only_an_off_grid_move_counts_its_savings_until_the_seeds_next_move() -> None:
    assert until_seed(WINDOW, 7, kept=3, moved=4) == 2  # the seed moves to 6 at call 9
    assert until_seed(WINDOW, 8, kept=4, moved=5) == 1
    assert until_seed(WINDOW, 7, kept=0, moved=4) is None  # catching up with the seed's b_t = 3 as well
    assert until_seed(WINDOW, 9, kept=3, moved=6) is None  # the seed's own move


def test_fewer_calls_of_savings_decline_a_move_that_pays_only_over_r() -> None:
    # removes 4,000 characters, recomputes 2,000: pays over R = 10 calls, not over 1 (no peak raised)
    kept, moved = Candidate(20_000, 20_000), Candidate(16_000, 14_000)
    assert should_move(WINDOW, 10, kept, moved, peak=30_000)
    assert not should_move(WINDOW, 10, kept, moved, peak=30_000, until=1)
    # a peak it avoids stays avoided: the peak term keeps its (t + R) calls
    assert should_move(WINDOW, 10, kept, moved, peak=18_000, until=1)  # kept raises it by 2,000


def test_the_window_position_lowers_the_peak() -> None:
    h = run(22)
    assert peak(WINDOW, h) < peak(SEED, h)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 24))
def test_the_latest_outputs_stay_as_received_and_the_boundary_never_passes_the_window(n: int) -> None:
    h = run(n)
    r = Renderer(WINDOW)
    p = WINDOW.policy
    for t in range(n + 1):
        out = r.render(h, t)
        assert out.stats.boundary <= target(WINDOW, t)
        latest = range(max(1, t - p.k - (p.mask_after or 0) + 1), t + 1)  # the k + mask_after latest steps
        shown = {o.step: o.shown for o in out.origins if o.part == "output"}
        assert all(shown[i] is Shown.RECEIVED for i in latest), (t, shown)


def test_a_run_saved_before_the_setting_replays_with_the_seeds_position() -> None:
    saved = WINDOW.saved()
    assert Config.from_saved(saved) == WINDOW
    del saved["boundary"]["position"]
    assert Config.from_saved(saved).boundary.position == "seed"



def _as_of(h: History, t: int) -> History:
    g = History(h.prefix)
    for s in h.steps[:t]:
        g.append(s.reply, s.observations)
    return g


def test_a_window_move_reads_no_reply_given_after_the_call() -> None:
    """``mask_by=use`` keeps an output a later reply names: a settle at an off-grid position read
    the replies up to the seed's next move, so a replay (which holds the whole run) rendered call 17
    unlike a live run could (reply 18, naming every earlier file, kept their outputs)."""
    config = WINDOW.override(["policy.mask_by=use"])
    h = History([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix the bug."}])
    for i in range(1, 25):
        body = "\n".join(f"{i}:{j} def helper_{i}_{j}(x): return x * {j}  # file_{i}.py" for j in range(150 if i in BIG else 12))
        names = " ".join(f"helper_{j}_3 file_{j}.py" for j in range(1, i)) if i == 18 else ""
        reply = {"role": "assistant", "content": f"PROGRESS: step {i} {names}\nSTALE: -\n```bash\ncat file_{i}.py\n```"}
        h.append(reply, [{"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>"}])
    whole, live = Renderer(config), Renderer(config)
    for t in range(len(h) + 1):
        assert whole.render(h, t).serialized() == live.render(_as_of(h, t), t).serialized(), t
