"""A boundary move that reshapes only the steps its mechanisms changed gives exactly the layout a
rebuild from the first change gives (the path every mechanism without ``dirty_steps`` takes)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golden import CONFIGS, generated, prompt_digest
from refold.config import Config
from refold.history import History
from refold.render import Renderer
from refold.render.layout import Layout
from refold.render.mechanism import BUILTIN, LayoutView, Mechanism, StepPlan, resolve
from refold.types import Shown


class _Rebuild:
    """A built-in mechanism without ``dirty_steps``: the layout rebuilds from its first change."""

    inner: Mechanism

    def shape(self, plan: StepPlan, view: LayoutView) -> None:
        self.inner.shape(plan, view)

    def dirty_from(self, prev: Layout, view: LayoutView) -> int | None:
        return self.inner.dirty_from(prev, view)


for _name in BUILTIN:
    _inner = resolve([_name])[0]
    _attrs: dict[str, object] = {"inner": _inner}
    if hasattr(_inner, "behind"):  # the same work as steps cross the boundary
        _attrs["behind"] = staticmethod(_inner.behind)
    globals()[f"Rebuild_{_name}"] = type(f"Rebuild_{_name}", (_Rebuild,), _attrs)


def rebuilding(config: Config) -> Config:
    return config.replace(mechanisms=[f"{__name__}.Rebuild_{m}" for m in config.mechanisms])


def test_every_builtin_names_its_changed_steps_and_the_wrappers_do_not() -> None:
    assert all(callable(getattr(m, "dirty_steps", None)) for m in resolve(list(BUILTIN)))
    assert not any(hasattr(m, "dirty_steps") for m in resolve(rebuilding(Config()).mechanisms))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(CONFIGS)), st.integers(0, 50), st.lists(st.integers(0, 140), max_size=12))
def test_splicing_equals_rebuilding(cname: str, seed: int, jumps: list[int]) -> None:
    h = generated(seed, steps=140)
    config = CONFIGS[cname]
    spliced, rebuilt = Renderer(config), Renderer(rebuilding(config))
    for t in [*range(len(h) + 1), *jumps]:  # call by call, then any order
        a, b = spliced.render(h, t), rebuilt.render(h, t)
        assert prompt_digest(a.messages) == prompt_digest(b.messages), f"{cname} seed {seed} t={t}"
        assert a.origins == b.origins
        assert (a.stats.boundary, a.stats.stubs, a.stats.trimmed, a.stats.folded_steps, a.stats.notes, a.stats.stable) == (
            b.stats.boundary, b.stats.stubs, b.stats.trimmed, b.stats.folded_steps, b.stats.notes, b.stats.stable)


def test_a_fold_of_a_cited_output_shows_its_citer_as_received_on_both_paths() -> None:
    h = History([{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix calc.py."}])
    body = "\n".join(f"{n:6d}\ty = x + {n}  # calc" for n in range(1, 120))

    def step(cmd: str, out: str) -> None:
        h.append({"role": "assistant", "content": f"PROGRESS: working\nSTALE: -\n\n```bash\n{cmd}\n```"}, [{"role": "user", "content": out}])

    step("nl -ba calc.py | sed -n '1,119p'", body)
    step("nl -ba calc.py | sed -n '1,119p'", body)  # a stub citing step 1
    for _ in range(8):
        step("ls", "calc.py")
    step("fold 1", "ok")
    for _ in range(10):
        step("ls", "calc.py")
    config = Config.parse(mask_after=None, boundary={"rule": "fixed"})
    spliced, rebuilt = Renderer(config), Renderer(rebuilding(config))
    shown_of_2 = []
    for t in range(len(h) + 1):
        a, b = spliced.render(h, t), rebuilt.render(h, t)
        assert a.messages == b.messages and a.origins == b.origins, f"t={t}"
        shown_of_2.append(next((o.shown for o in a.origins if o.step == 2 and o.part == "output" and o.shown is not Shown.RECEIVED), None))
    assert Shown.STUB in shown_of_2 and shown_of_2[-1] is None  # stubbed while step 1 showed, then as received
