"""A demonstration in the prefix (SWE-agent's ``is_demo`` messages, ``prompt.hide_demos``): the plain
history shows it; the protocol's prompt shows a one-line note in its place, the switch is priced as
recomputing from the demonstration on, and ``restore demo`` brings it back byte-exact."""

from __future__ import annotations

from typing import Any

from refold.config import Config
from refold.context.answers import Answerer
from refold.history import History
from refold.mechanisms.boundary import recorded_config
from refold.protocol import parse_command
from refold.render import Renderer
from refold.types import content_text

VLLM = Config.parse(cache="vllm")
OPENAI = Config.parse(cache="openai")
DEMO = "Here is a demonstration of how to work.\n" + "\n".join(
    f"demo line {j}: open file_{j}.py and read what it defines before editing it" for j in range(300)
)


def run(n: int = 8, demo: bool = True) -> History:
    """A system prompt, a long demonstration, the task, then steps with mid-sized outputs."""
    prefix: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs with the commands below."}]
    if demo:
        prefix.append({"role": "user", "content": DEMO, "is_demo": True})
    prefix.append({"role": "user", "content": "Fix the bug in calc.py."})
    h = History(prefix)
    for i in range(1, n + 1):
        body = "\n".join(f"{i}:{j} def helper_{j}(x): return x * {j}" for j in range(20))
        reply: dict[str, Any] = {"role": "assistant", "content": f"Looking at file {i}.\n```bash\ncat f{i}.py\n```"}
        h.append(reply, [{"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>"}])
    return h


def prompts(config: Config, h: History) -> list[list[dict[str, Any]]]:
    r = Renderer(config)
    return [list(r.render(h, t).messages) for t in range(len(h) + 1)]


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [content_text(m.get("content")) for m in messages]


def test_the_first_call_shows_the_demonstration_and_the_protocol_prompt_a_note() -> None:
    h = run()
    plain = prompts(recorded_config(VLLM), h)
    r = Renderer(VLLM)
    first = r.render(h, 0)
    assert r.sent_plain and list(first.messages) == plain[0]  # call 1: the plain history, demonstration and all
    sent = [r.render(h, t) for t in range(1, len(h) + 1)]
    switch = next(i + 1 for i, p in enumerate(sent) if list(p.messages) != plain[i + 1])
    shown = texts(list(sent[switch - 1].messages))
    assert DEMO not in shown
    assert shown[0] == texts(plain[switch])[0]  # the system message stays cached
    assert shown[1].startswith("[context-manager] A demonstration (301 lines)") and "`restore demo`" in shown[1]
    assert shown[2] == "Fix the bug in calc.py."
    assert sent[switch - 1].stats.stable == 1  # from the demonstration on, the prompt is recomputed
    assert all(DEMO not in texts(list(p.messages)) for p in sent[switch - 1 :])


def test_hiding_the_demonstration_makes_the_switch_pay_sooner() -> None:
    def switch(config: Config, h: History) -> int:
        r = Renderer(config)
        return next((t for t in range(len(h) + 1) if (r.render(h, t), not r.sent_plain)[1]), len(h) + 1)

    h = run()
    for config in (VLLM, OPENAI):
        assert switch(config, h) < switch(config.override(["prompt.hide_demos=false"]), h)
        assert switch(config, h) >= 1  # never before the agent has seen it once
        assert switch(config.override(["prompt.demo_calls=4"]), h) >= 4
    bare = run(demo=False)  # without a demonstration the setting changes nothing
    assert prompts(VLLM, bare) == prompts(VLLM.override(["prompt.hide_demos=false"]), bare)


def test_the_demonstration_stays_where_the_prompt_is_not_deferred_or_hiding_is_off() -> None:
    h = run()
    for config in (VLLM.override(["boundary.rule=fixed"]), VLLM.override(["prompt.deferred=false"]),
                   VLLM.override(["prompt.hide_demos=false"]), VLLM.override(["policy.reversible=false"])):
        assert all(DEMO in texts(p) for p in prompts(config, h))


def test_restore_demo_answers_with_the_demonstration_byte_exact() -> None:
    h = run()
    answer = Answerer(h, VLLM, 3).answer(parse_command("restore demo"))
    assert answer.ok and answer.outcome is not None and answer.outcome.target == "demo"
    assert answer.text.split("\n", 1)[1] == DEMO and answer.text.startswith("[context-manager]")
    missing = Answerer(run(demo=False), VLLM, 3).answer(parse_command("restore demonstration"))
    assert not missing.ok and "no demonstration" in missing.text


def test_a_run_saved_before_hide_demos_keeps_its_demonstration() -> None:
    saved = VLLM.saved()
    del saved["prompt"]["hide_demos"]
    assert not Config.from_saved(saved).prompt.hide_demos
    assert Config.from_saved(VLLM.saved()).prompt.hide_demos


def history_demo_run(n: int = 8) -> History:
    """A demonstration put in the history (SWE-agent ``put_demos_in_history``): user and assistant
    messages of a worked example, each ``is_demo``, before the task."""
    prefix: list[dict[str, Any]] = [{"role": "system", "content": "You fix bugs with the commands below."}]
    for k in range(4):
        prefix.append({"role": "user", "content": f"demo observation {k}\n" + DEMO, "is_demo": True})
        prefix.append({"role": "assistant", "content": f"demo thought {k}\n```\nls\n```", "is_demo": True})
    prefix.append({"role": "user", "content": "Fix the bug in calc.py."})
    h = History.from_messages(prefix)
    for i in range(1, n + 1):
        body = "\n".join(f"{i}:{j} def helper_{j}(x): return x * {j}" for j in range(20))
        reply: dict[str, Any] = {"role": "assistant", "content": f"Looking at file {i}.\n```bash\ncat f{i}.py\n```"}
        h.append(reply, [{"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{body}\n</output>"}])
    return h


def test_a_demonstration_of_several_messages_is_one_note_in_the_users_voice() -> None:
    h = history_demo_run()
    assert len(h.prefix) == 10
    r = Renderer(VLLM)
    sent = [r.render(h, t) for t in range(len(h) + 1)]
    hidden = [p for p in sent if not any(DEMO in s for s in texts(list(p.messages)))]
    assert hidden, "the demonstration is never hidden"
    for p in hidden:
        msgs = list(p.messages)
        notes = [m for m in msgs if "A demonstration" in content_text(m.get("content"))]
        assert len(notes) == 1 and notes[0]["role"] == "user"  # was one note per message, four as the assistant
        lines = sum(len(content_text(m.get("content")).splitlines()) for m in h.prefix if m.get("is_demo"))
        assert f"(8 messages, {lines} lines)" in content_text(notes[0].get("content"))
        assert [m["role"] for m in msgs[:3]] == ["system", "user", "user"]
        assert content_text(msgs[2].get("content")) == "Fix the bug in calc.py."
        assert len(p.origins) == len(msgs)
    for t in (len(h), 3, 0, len(h) - 1, 5):  # the memo equals rendering from scratch in any order
        got, fresh = r.render(h, t), Renderer(VLLM).render(h, t)
        assert list(got.messages) == list(fresh.messages) and got.origins == fresh.origins
    answer = Answerer(h, VLLM, 3).answer(parse_command("restore demo"))
    assert answer.ok and all(content_text(m.get("content")) in answer.text for m in h.prefix if m.get("is_demo"))


def test_a_restored_demonstration_is_held_like_any_restore() -> None:
    """``restore demo``'s answer is a restore: never masked before ``restore_hold`` steps pass (it
    was an ordinary output, masked a few calls later while the agent worked from it)."""
    from refold.wire import answer_record

    h = run(n=4)
    answer = Answerer(h, VLLM, 4).answer(parse_command("restore demo"))
    call = {"role": "assistant", "content": "I need the demonstration.\n```bash\nrestore demo\n```"}
    h.append(call, [{"role": "user", "content": answer.text, "extra": answer_record("restore", answer)}])
    assert h.steps[-1].restores and not h.steps[-1].restore_of
    body = "\n".join(f"def later_{j}(x): return x - {j}" for j in range(30))
    for i in range(20):
        h.append({"role": "assistant", "content": f"Next.\n```bash\ncat g{i}.py\n```"}, [{"role": "user", "content": body + str(i)}])
    config = Config.parse(cache="vllm", policy={"restore_hold": 10}, boundary={"rule": "fixed"}, prompt={"deferred": False})
    r = Renderer(config)
    for t in range(5, 5 + 11):  # the restore (step 5) stays as answered through its hold
        out = r.render(h, t)
        shown = [o.shown for o in out.origins if o.step == 5 and o.part == "output"]
        assert shown and shown[0].value == "restored", (t, shown)
    later = [o.shown.value for o in Renderer(config).render(h, len(h)).origins if o.step == 5 and o.part == "output"]
    assert later == ["note"]  # and then masked like any restore (restorable again)
