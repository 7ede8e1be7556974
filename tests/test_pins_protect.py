"""Policy.protect: outputs of the commands a rule names are never hidden, and protecting costs no move."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold import Config, Renderer
from refold.errors import PolicyError, SettingError
from refold.history import History
from refold.mechanisms.pins import protected_parts
from refold.policy import Policy
from refold.types import Shown

from builders import reply, text_history, tool_history
from conftest import run_cli

PLAN = "\n".join(f"- [ ] item {i}: check module_{i}.py and write down what it returns" for i in range(40))


def _code(i: int) -> str:
    return "\n".join(f"def helper_{i}_{j}(x):\n    return x + {j}" for j in range(30))


def _run(n: int = 24) -> History:
    """Step 1 reads the plan; every later step reads a new file (large enough to be masked)."""
    steps = [(reply(None, None, "cat PLAN.md"), PLAN)]
    steps += [(reply(None, None, f"cat src/mod_{i}.py"), _code(i)) for i in range(2, n + 1)]
    return text_history(steps)


def _shown_outputs(h: History, config: Config) -> list[dict[int, Shown]]:
    """Per call, how each step's output is shown (steps without an output message: absent)."""
    r = Renderer(config)
    calls = []
    for t in range(1, len(h) + 1):
        out = r.render(h, t)
        calls.append({o.step: o.shown for o in out.origins if o.part == "output" and o.step is not None})
    return calls


def test_rules_name_a_tool_a_path_read_or_the_command() -> None:
    h = tool_history([
        ("a", [("cat docs/PLAN.md", "plan")]),
        ("b", [("ls", "x"), ("nl -ba src/app.py | sed -n 1,40p", "code")]),
        ("c", [("restore 1", "again")]),
    ])
    s1, s2, s3 = h.steps
    assert protected_parts(s1, ("path:PLAN.md",)) == ((1, 0),)  # by file name
    assert protected_parts(s1, ("path:docs/*.md",)) == ((1, 0),)  # by path
    assert protected_parts(s2, ("path:*.md",)) == ()
    assert protected_parts(s2, ("path:*.py",)) == ((2, 1),)  # only the call that read it
    assert protected_parts(s2, ("ls",)) == ((2, 0),)  # a glob on the whole command
    assert protected_parts(s2, ("l",)) == ()
    assert protected_parts(s2, ("tool:bash",)) == ((2, 0), (2, 1))
    assert protected_parts(s2, ("tool:read_*",)) == ()
    assert protected_parts(s3, ("restore*", "tool:*")) == ()  # a context command is answered, never kept


def test_parallel_calls_results_in_another_order_protect_the_matching_one() -> None:
    """Results answer calls by id, not position: the plan's own output is protected, not ``ls``'s."""
    h = History([{"role": "system", "content": "s"}, {"role": "user", "content": "t"}])
    calls = [{"id": i, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": c})}}
             for i, c in (("a", "cat PLAN.md"), ("b", "ls"))]
    h.append({"role": "assistant", "content": "x", "tool_calls": calls},
             [{"role": "tool", "tool_call_id": "b", "content": "files"}, {"role": "tool", "tool_call_id": "a", "content": PLAN}])
    assert protected_parts(h.steps[0], ("path:PLAN.md",)) == ((1, 1),)
    assert protected_parts(h.steps[0], ("ls",)) == ((1, 0),)


def test_a_protected_output_is_never_hidden_and_the_rest_still_is() -> None:
    h = _run()
    plain = _shown_outputs(h, Config())
    kept = _shown_outputs(h, Config.parse(policy={"protect": ["path:PLAN.md"]}))
    assert any(c.get(1) not in (Shown.RECEIVED, None) for c in plain)  # the default does hide it
    assert all(c.get(1) in (Shown.RECEIVED, Shown.PINNED) for c in kept)
    assert sum(s is not Shown.RECEIVED for c in kept for k, s in c.items() if k != 1) > 0  # others still hidden
    r = Renderer(Config.parse(policy={"protect": ["cat PLAN.md"]}))
    last = r.render(h, len(h))
    assert sum(PLAN in str(m.get("content")) for m in last.messages) == 1  # verbatim, once


def test_the_agents_unpin_releases_a_protected_output() -> None:
    """A protected output is a pin: ``unpin 1`` lets it be hidden again, as it would any pin."""
    h = _run(24)
    h2 = text_history([(reply(None, None, "cat PLAN.md"), PLAN), *[(reply(None, None, f"cat src/mod_{i}.py"), _code(i)) for i in range(2, 5)],
                       (reply(None, None, "unpin 1"), "[context-manager] 1 unpinned"),
                       *[(reply(None, None, f"cat src/mod_{i}.py"), _code(i)) for i in range(6, 25)]])
    config = Config.parse(policy={"protect": ["cat PLAN.md"]})
    kept = _shown_outputs(h, config)
    released = _shown_outputs(h2, config)
    assert all(c.get(1) in (Shown.RECEIVED, Shown.PINNED) for c in kept)
    assert released[-1].get(1) not in (Shown.RECEIVED, Shown.PINNED)


def test_protecting_moves_the_boundary_no_more_often() -> None:
    """Protected outputs count from the boundary on, so their arrival is no edit that forces a move."""
    h = _run(30)

    def moves(config: Config) -> int:
        r = Renderer(config)
        seen = [r.render(h, t).stats.boundary for t in range(1, len(h) + 1)]
        return sum(a != b for a, b in zip(seen, seen[1:], strict=False))

    every = Config.parse(policy={"protect": ["cat *"]})  # every output protected: nothing to hide
    assert moves(every) <= moves(Config())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["PLAN.md", "a.py", "b.py", "notes.txt"]), min_size=3, max_size=18), st.sampled_from(["path:*.md", "path:*.py", "cat b.py"]))
def test_protected_outputs_are_shown_whole_at_every_later_call(files: list[str], rule: str) -> None:
    steps = [(reply(None, "1" if i % 5 == 4 else None, f"cat {f}"), f"{f} {i}\n" + _code(i)) for i, f in enumerate(files)]
    h = text_history(steps)
    r = Renderer(Config.parse(policy={"protect": [rule]}))
    guarded = [s for s in h.steps if protected_parts(s, (rule,))]
    for t in range(1, len(h) + 1):
        text = "\n".join(str(m.get("content")) for m in r.render(h, t).messages)
        for s in guarded:
            if s.index <= t:
                assert str(s.observations[0]["content"]) in text, (t, s.index)


@pytest.mark.parametrize("rules", [["tool:"], ["path:  "], [""], [3]])
def test_a_rule_without_a_pattern_is_one_line_naming_the_field(rules: list[object]) -> None:
    with pytest.raises(SettingError, match="protect"):
        Policy(protect=rules)


def test_one_rule_may_be_given_alone() -> None:
    assert Policy(protect="path:*.md").protect == ("path:*.md",)  # a YAML scalar


@pytest.mark.parametrize("argv", [["serve", "--upstream", "http://127.0.0.1:9", "--protect", "tool:"], ["replay", "nothing.json", "--protect", "path:"]])
def test_serve_and_replay_name_a_bad_rule(argv: list[str]) -> None:
    r = run_cli(*argv)
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout
    assert r.stderr.strip().splitlines() == ["refold: error: --protect: a rule needs a pattern, e.g. 'tool:read_file', 'path:*.md' or 'cat PLAN.md'"]


def test_a_mini_config_takes_rules_and_names_a_bad_one() -> None:
    from refold.errors import PolicyError
    from refold.integrations.minisweagent import RefoldModel

    def model(**options: object) -> RefoldModel:
        return RefoldModel(
            inner_model_class="minisweagent.models.test_models.DeterministicModel",
            model_name="deterministic", outputs=[], refold_tokenizer=None, **options,
        )

    assert model(refold={"protect": ["path:*.md"]}).refold_config.policy.protect == ("path:*.md",)
    with pytest.raises(PolicyError, match="protect"):
        model(refold={"protect": ["tool:"]})


def test_serve_flags_carry_the_rules_into_the_config() -> None:
    from refold.cli.serve import from_flags

    assert from_flags(upstream="http://127.0.0.1:9", protect=("path:*.md", "tool:todo")).policy.protect == ("path:*.md", "tool:todo")
    assert from_flags(upstream="http://127.0.0.1:9").policy.protect == ()


@pytest.mark.parametrize("name", ["compact+refold", "compact+self-gc"])
def test_a_replayed_compaction_keeps_a_protected_output_before_the_boundary_passes_it(name: str) -> None:
    """The summary kept pins only: a compaction before the boundary passed the plan dropped it
    for the calls until then (the rule's outputs are in every prompt)."""
    from refold.lab.replay.policies import make_projector
    from refold.lab.replay.projectors import Options
    from refold.tokens import get_tokenizer

    h = _run(40)
    opts = Options(tokenizer=get_tokenizer("chars4"), budget=2048, policy_overrides={"protect": ("cat PLAN.md",)})
    prompts = list(make_projector(name, opts).prompts(h))
    assert any(p.compaction is not None and p.stats is not None and p.stats.boundary < 1 for p in prompts)
    assert all(PLAN in "\n".join(str(m.get("content")) for m in p.messages) for p in prompts if p.t)


def test_a_tool_rule_matches_in_any_case_and_a_shell_by_any_of_its_names() -> None:
    h = tool_history([("a", [("ls", "x")])])
    step = h.steps[0]  # recorded as the shell tool `bash`, whatever the client named it
    for rule in ("tool:Bash", "tool:BASH", "tool:shell", "tool:exec*"):
        assert protected_parts(step, (rule,)) == ((1, 0),), rule
    assert protected_parts(step, ("tool:Read",)) == ()


def test_the_viewer_renders_refolds_policies_with_the_rules() -> None:
    from refold.lab.viewer import build_report

    h = _run()
    def page(rule: str) -> str:  # timings and the rule's own text left out
        html = build_report(h, variants=["default"], mechanisms=False, tokenizer="chars4", protect=[rule])
        return re.sub(r'"\w*_ms":[0-9.e-]+', "", html).replace(rule, "RULE")

    assert page("cat PLAN.mx") != page("cat PLAN.md")
    assert page("cat PLAN.mx") == page("cat PLAN.my")
    with pytest.raises(PolicyError, match="protect"):
        build_report(h, variants=["default"], mechanisms=False, tokenizer="chars4", protect=["path:"])
