"""The curated public API (``refold.__all__``), both ways: every name in it is importable and
documented, and every public name the package exports is in it."""

from __future__ import annotations

import inspect
import types

import pytest

import refold


@pytest.mark.parametrize("name", refold.__all__)
def test_every_name_in_all_is_importable_and_documented(name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from refold import {name}", namespace)  # the import a user would write
    obj = namespace[name]
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"refold.{name} has no docstring"
    assert not doc.startswith(f"{name}("), f"refold.{name} has only the generated dataclass docstring"


def test_every_public_name_exported_is_in_all() -> None:
    for name in refold.__all__:  # names load on first use: resolve them all, then nothing else may show
        getattr(refold, name)
    public = {n for n, v in vars(refold).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(refold.__all__)
    assert {n for n in dir(refold) if not n.startswith("_")} >= set(refold.__all__)


def test_all_is_sorted_and_short() -> None:
    assert refold.__all__ == sorted(refold.__all__)
    assert len(refold.__all__) == len(set(refold.__all__)) <= 30


def _readme() -> str:
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_readme_library_section_runs_as_written(tmp_path: object) -> None:
    """The README's library block, run as a user would (on the shipped run instead of run.traj.json)."""
    import re
    from pathlib import Path

    section = _readme().split("## Library", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    shipped = Path(refold.__file__).parent / "data" / "django__django-11477.traj.json.gz"
    code = code.replace('"run.traj.json"', repr(str(shipped)))
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert len(namespace["prompt"].messages) > 0  # type: ignore[attr-defined]
    # Config is frozen: the block's override line did nothing until it kept what override returns
    assert namespace["config"].policy.mask_after == 4  # type: ignore[attr-defined]
    # the spans / ledger configuration the README names is the API's
    said = re.search(r"\(`(Renderer\(Config\(spans=.*?\)\)\))`", _readme(), re.S)
    assert said is not None
    from refold import Config, LedgerPolicy, Renderer, SpanPolicy  # noqa: F401

    renderer = eval(" ".join(said.group(1).split()))
    assert renderer.config.spans.prompt and renderer.config.ledger.budget_tokens == 128000


def test_restore_text_takes_a_step_number_a_list_or_the_config() -> None:
    """``restore_text(h, 7)`` was "'int' object is not iterable", ``restore_text(h, ["7"])`` a
    comparison TypeError from inside, and the run's Config an AttributeError ('reversible')."""
    from refold import Config, History, restore_text

    h = History.from_messages(
        [{"role": "user", "content": "task"}, {"role": "assistant", "content": "ls"}, {"role": "user", "content": "a.py"}]
    )
    assert restore_text(h, 1) == restore_text(h, [1]) == restore_text(h, (1,), Config())
    assert "a.py" in restore_text(h, 1)
    for bad in (["1"], [1.0], [True]):
        with pytest.raises(TypeError, match="restore_text: steps must be step numbers"):
            restore_text(h, bad)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="no step 2"):
        restore_text(h, 2)
    assert "switched off" in restore_text(h, 1, Config.parse(reversible=False))


def test_a_restore_answered_in_a_library_loop_stays_shown_when_recorded() -> None:
    """An answer appended as a plain message was masked like any output a few calls later (the
    history never learned the step restored); ``observation`` records it, so it is held shown."""
    from refold import Config, History, Renderer, Shown, parse_command
    from refold.context.answers import answer
    from refold.wire import observation

    config = Config.parse(boundary={"rule": "fixed"})
    body = "".join(f"def f{j}(x):\n    return x + {j}\n" for j in range(60))
    shown = {}
    for recorded in (False, True):
        h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "task"}])

        def step(command: str, out: dict[str, object], h: History = h) -> None:
            h.append({"role": "assistant", "content": f"PROGRESS: p\nSTALE: -\n\n```bash\n{command}\n```"}, [out])

        step("cat a.py", {"role": "user", "content": body})
        for i in range(8):
            step(f"echo {i}", {"role": "user", "content": str(i)})
        cmd = parse_command("restore 1")
        assert cmd is not None
        a = answer(h, cmd, config)
        step("restore 1", observation(cmd.name, a) if recorded else {"role": "user", "content": a.text})
        for i in range(8):
            step(f"echo x{i}", {"role": "user", "content": "x"})
        prompt = Renderer(config).render(h)
        shown[recorded] = {o.shown for o in prompt.origins if o.step == 10 and o.part != "reply"}
        assert h.step(10).restore_of == ((1,) if recorded else ())
    assert shown == {False: {Shown.NOTE}, True: {Shown.RESTORED}}
    tool = observation("restore", a, "call_9")
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_9" and tool["extra"]["restore_of"] == [1]


def test_parse_command_reads_a_command_as_the_harness_does() -> None:
    # README's library loop answers what parse_command returns: coreutils `fold -w 80 f` and
    # `expand -t 4 f` were context commands there (answered from the history, never run)
    from refold import parse_command

    assert parse_command("fold -w 80 f") is None and parse_command("expand -t 4 f") is None
    for line, name in [("restore 3-5", "restore"), ("fold 7", "fold"), ("expand S1", "expand"), ("cd x && restore 3", "restore")]:
        cmd = parse_command(line)
        assert cmd is not None and cmd.name == name, line


@pytest.mark.parametrize(
    ("arg", "hint"),
    [("policy", "Config(policy=...)"), (None, "Config() or Config.parse(k=3)"), ({"k": 3}, "Config.parse({...})")],
)
def test_a_renderer_given_something_else_than_a_config_says_how_to_make_one(arg: object, hint: str) -> None:
    from refold import Policy, Renderer

    value = Policy(k=3) if arg == "policy" else arg
    with pytest.raises(TypeError, match=r"Renderer takes a refold\.Config, got \w+: use ") as e:
        Renderer(value)  # type: ignore[arg-type]
    assert str(e.value).endswith(hint)  # it was "'Policy' object has no attribute 'mechanisms'"


def test_render_given_messages_or_a_path_says_how_to_build_a_history() -> None:
    from refold import Config, Renderer
    from refold.render import render

    with pytest.raises(TypeError, match=r"got list: build one with History\.from_messages\(messages\)"):
        Renderer().render([{"role": "user", "content": "x"}])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got str: build one with refold\.load\(path\)"):
        render("run.traj.json", Config())  # type: ignore[arg-type]
