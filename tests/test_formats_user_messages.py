"""Claude Code logs and Codex rollouts with a person's instruction typed mid-session: loaded as a
user message of the step it follows (``Step.user_messages``), and shown whole in every later prompt
of refold's default rendering, however much of the session is masked or folded around it."""

from __future__ import annotations

from pathlib import Path

import pytest

from claude_code_log import Log, call, text
from codex_rollouts import Lines, freeform
from refold import Config, Renderer
from refold.history import History
from refold.lab.replay.policies import make_projector
from refold.lab.replay.projectors import Options
from refold.loaders import load
from refold.tokens import get_tokenizer
from refold.types import content_text

INSTRUCTION = "\n".join(f"{i}. Stop: use the v2 client in api/v2.py instead of the v1 endpoint, keep the signature." for i in range(1, 40))[:2000]
REMINDER = "<system-reminder>\nThe user opened the file api/v2.py in the IDE.\n</system-reminder>"
NEXT = "Now also add a changelog entry for the switch to v2."


def _listing(i: int) -> str:
    return "\n".join(f"{n:>6}\u2192    value_{i}_{n} = compute({n}, 'a line long enough to be worth masking')" for n in range(1, 41))


def claude_code_log(path: Path) -> Path:
    """Reads, a rejected Bash call the user interrupts with a typed instruction (Claude Code writes
    the rejection as the call's result, the text as a user line after it), a meta reminder, more
    reads, the turn's answer, the person's next message, more reads."""
    log = Log()
    log.user("The client in api/ fails on large uploads; fix it.")
    for i in range(1, 4):
        ids = log.reply(f"msg_{i}", [call(f"toolu_{i}", "Read", file_path=f"/home/dev/calc/api/mod_{i}.py")])
        log.results((f"toolu_{i}", _listing(i)), parent=ids[-1])
    ids = log.reply("msg_4", [text("Patching the v1 call."), call("toolu_4", "Bash", command="sed -i s/v2/v1/ api/client.py")])
    log.results(("toolu_4", "The user doesn't want to proceed with this tool use. The tool use was rejected."), parent=ids[-1], error=True)
    log.user([text("[Request interrupted by user for tool use]")])
    log.user(INSTRUCTION)
    log.user(REMINDER, isMeta=True)
    for i in range(5, 16):
        ids = log.reply(f"msg_{i}", [call(f"toolu_{i}", "Read", file_path=f"/home/dev/calc/api/v2_{i}.py")])
        log.results((f"toolu_{i}", _listing(i)), parent=ids[-1])
    log.reply("msg_16", [text("Switched the upload path to the v2 client; tests pass.")])
    log.user(NEXT)
    for i in range(17, 30):
        ids = log.reply(f"msg_{i}", [call(f"toolu_{i}", "Read", file_path=f"/home/dev/calc/docs/page_{i}.md")])
        log.results((f"toolu_{i}", _listing(i)), parent=ids[-1])
    return log.write(path)


def codex_rollout(path: Path) -> Path:
    """A Codex session: reads, then the person types an instruction while the agent works (it goes
    in after the running call's output) and the environment changes, more reads, the turn's answer,
    the next message, more reads."""
    r = Lines().meta().turn()
    r.user("<environment_context>\n  <cwd>/work/demo</cwd>\n</environment_context>")
    r.user("The client in api/ fails on large uploads; fix it.")
    for i in range(1, 30):
        r.shell(f"call_{i}", ["bash", "-lc", f"cat api/mod_{i}.py"]).usage(5000 + 300 * i, 4800 + 300 * i, 40, 0)
        r.output(f"call_{i}", freeform(_listing(i)))
        if i == 4:
            r.user(INSTRUCTION)
            r.user("<environment_context>\n  <cwd>/work/demo/api</cwd>\n</environment_context>")
        if i == 16:
            r.say("Switched the upload path to the v2 client.").usage(10000, 9800, 20, 0)
            r.user(NEXT)
    path.write_text(r.text(), encoding="utf-8")
    return path


def _check(h: History, *messages: str) -> None:
    """Each message is shown whole in every prompt from its arrival on (library default and replay's
    default, refold-best and masking)."""
    arrived = {m: next(s.index for s in h.steps if any(m in content_text(o.get("content")) for o in s.observations)) for m in messages}
    r = Renderer(Config())
    prompts = {"library": [(t, r.render(h, t).messages) for t in range(len(h) + 1)]}
    opts = Options(tokenizer=get_tokenizer("chars4"))
    for name in ("default", "refold-best", "masking"):
        prompts[name] = [(p.t, p.messages) for p in make_projector(name, opts).prompts(h)]
    hidden = 0
    for name, calls in prompts.items():
        for t, msgs in calls:
            joined = "\n".join(content_text(m.get("content")) for m in msgs)
            hidden += joined.count("Output hidden") + joined.count("omitted")
            for m, at in arrived.items():
                assert joined.count(m) == (1 if t >= at else 0), (name, t, m[:30])
    assert hidden  # the outputs around them are hidden


def test_claude_code_typed_instruction_and_meta_lines_are_user_messages(tmp_path: Path) -> None:
    h = load(claude_code_log(tmp_path / "s.jsonl"))
    step4 = h.step(4)
    roles = [o["role"] for o in step4.observations]
    assert roles == ["tool", "user"]  # the rejection is the call's result; the rest was said, in one API turn
    assert step4.user_messages == (1,)
    assert h.step(16).user_messages == (0,)  # after the turn's answer: the person's next message
    assert sum(len(s.user_messages) for s in h.steps) == 2
    _check(h, INSTRUCTION, REMINDER, NEXT)


def test_codex_typed_instruction_and_environment_context_are_user_messages(tmp_path: Path) -> None:
    h = load(codex_rollout(tmp_path / "rollout.jsonl"))
    said = {s.index: [content_text(s.observations[j].get("content"))[:20] for j in s.user_messages] for s in h.steps if s.user_messages}
    assert said == {4: [INSTRUCTION[:20], "<environment_context"], 17: [NEXT[:20]]}
    _check(h, INSTRUCTION, NEXT)


@pytest.mark.parametrize("build", [claude_code_log, codex_rollout])
def test_replay_counts_them_as_never_hidden(tmp_path: Path, build: object) -> None:
    """``refold replay`` of such a file: the default sends fewer tokens than base all the same."""
    from refold.lab.replay.runner import replay_sessions
    from refold.lab.replay.settings import Settings

    assert callable(build)
    path = build(tmp_path / "f.jsonl")
    (res,) = replay_sessions(str(path), Settings(policies=("base", "default"), tokenizer="chars4"))
    assert res.error is None
    assert res.policies["default"]["prompt_tokens"] < res.policies["base"]["prompt_tokens"]
