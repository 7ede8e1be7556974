"""``Policy.mask_by = "edit"``: a file's latest read stays shown while recent replies write that
file, is masked once they stop or a later read supersedes it, and every renderer invariant holds."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.config import Config
from refold.history import History
from refold.mechanisms.edits import read_paths
from refold.render import Renderer
from test_properties import check_invariants, histories

SYSTEM = {"role": "system", "content": "You are an agent."}
TASK = {"role": "user", "content": "Fix the bug."}
CODE = "\n".join(f"def handler_{n}(request):\n    return render(request, 'page_{n}.html')" for n in range(20))


def _call(h: History, i: int, tool: str, args: dict[str, object], output: str) -> None:
    call = {"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
    h.append({"role": "assistant", "content": f"Step {i}.", "tool_calls": [call]},
             [{"role": "tool", "tool_call_id": f"c{i}", "content": output}])  # fmt: skip


def _read(h: History, i: int, path: str, code: str = CODE) -> None:
    _call(h, i, "Read", {"file_path": path}, f"{path}\n{code}")


def _edit(h: History, i: int, path: str) -> None:
    _call(h, i, "Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, f"The file {path} has been updated.")


def _other(h: History, i: int) -> None:
    _call(h, i, "Bash", {"command": f"pytest tests/test_{i}.py"}, "\n".join(f"test_{i}_{n} PASSED with padding text" for n in range(12)))


def _masked(h: History, mode: str, t: int | None = None) -> set[int]:
    r = Renderer(Config.parse(mask_by=mode))
    r.render(h, len(h) if t is None else t)
    return set(r._behind.masked)


def test_a_read_stays_while_its_file_is_edited() -> None:
    h = History([SYSTEM, TASK])
    _read(h, 1, "app/views.py")
    _other(h, 2)
    for i in range(3, 16):
        _edit(h, i, "app/views.py")
    assert 1 in _masked(h, "arrival")
    assert 1 not in _masked(h, "edit")
    assert 2 in _masked(h, "edit")  # no file read: masked by arrival


def test_a_read_goes_once_its_file_is_no_longer_edited() -> None:
    h = History([SYSTEM, TASK])
    _read(h, 1, "app/views.py")
    _edit(h, 2, "app/views.py")
    for i in range(3, 16):
        _other(h, i)
    assert 1 in _masked(h, "edit")


def test_an_edit_of_another_file_holds_nothing() -> None:
    h = History([SYSTEM, TASK])
    _read(h, 1, "app/views.py")
    for i in range(2, 16):
        _edit(h, i, "app/models.py")
    assert 1 in _masked(h, "edit")


def test_a_later_read_of_the_file_releases_the_earlier_one() -> None:
    h = History([SYSTEM, TASK])
    _read(h, 1, "app/views.py")
    _other(h, 2)
    _read(h, 3, "app/views.py", CODE.replace("render", "respond"))  # changed since: no stub of step 1
    for i in range(4, 16):
        _edit(h, i, "app/views.py")
    masked = _masked(h, "edit")
    assert 1 in masked
    assert 3 not in masked


def test_a_shell_read_and_write_count_too() -> None:
    # the rule reads the actions' facts, not tool names: `cat` reads, `sed -i` writes
    h = History([SYSTEM, TASK])
    h.append({"role": "assistant", "content": "```bash\ncat app/views.py\n```"}, [{"role": "user", "content": CODE}])
    for i in range(2, 16):
        h.append({"role": "assistant", "content": f"```bash\nsed -i 's/page_{i}/view_{i}/' app/views.py\n```"}, [{"role": "user", "content": ""}])
    assert read_paths(h.step(1)) == {"app/views.py"}
    assert 1 not in _masked(h, "edit")


def test_an_edit_only_the_next_reply_makes_does_not_hold_it_now() -> None:
    # no hindsight: at a call, only the replies already given count
    h = History([SYSTEM, TASK])
    _read(h, 1, "app/views.py")
    for i in range(2, 12):
        _other(h, i)
    _edit(h, 12, "app/views.py")
    assert 1 in _masked(h, "edit", t=11)


EDIT = [Config.parse(mask_by="edit"), Config.parse(mask_by="edit", k=1, mask_min_chars=50), Config.parse(mask_by="edit", cache="anthropic")]


@st.composite
def edit_histories(draw: st.DrawFn) -> History:
    """Reads, edits and other commands over a few files, in random order."""
    h = History([SYSTEM, TASK])
    files = ["a.py", "b.py", "c.py"]
    for i in range(1, draw(st.integers(3, 24)) + 1):
        what, f = draw(st.sampled_from(["read", "edit", "other"])), draw(st.sampled_from(files))
        (_read if what == "read" else _edit if what == "edit" else lambda h, i, f: _other(h, i))(h, i, f)
    return h


@pytest.mark.parametrize("config", EDIT, ids=["edit", "edit-k1", "edit-anthropic"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.one_of(edit_histories(), histories()), fresh_at=st.sets(st.integers(0, 24), max_size=3))
def test_invariants_hold_when_masking_by_edit(config: Config, h: History, fresh_at: set[int]) -> None:
    check_invariants(h, config, fresh_at)
