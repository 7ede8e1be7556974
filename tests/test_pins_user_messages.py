"""What a person (or the harness) tells the agent mid-session is never hidden: in a tool-call
conversation an observation that is no tool result (``Step.user_messages``) is shown whole in every
prompt, whatever masking, dedup, STALE marks and spans do with the outputs around it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold import Config, Renderer
from refold.history import History
from refold.lab.replay.policies import make_projector
from refold.lab.replay.projectors import Options
from refold.tokens import get_tokenizer
from refold.types import Answer, Message, Shown, content_text
from refold.wire import observation
from test_render_fresh import MINI, check_fresh

from builders import SYSTEM, TASK, reply, seed_config, text_history

INSTRUCTION = "\n".join(f"{i}. Stop: the v1 endpoint is being retired, use the v2 client in api/v2.py instead." for i in range(1, 40))
INSTRUCTION = INSTRUCTION[:2000]  # a typed instruction of 2,000 characters, lines enough for dedup to act on


def _output(i: int) -> str:
    return "\n".join(f"    value_{i}_{k} = compute({k}, 'a line long enough to be worth masking')" for k in range(40))


def _call(i: int, command: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def tool_run(n: int, at: int, *, stale: dict[int, int] | None = None, final: bool = False,
             said: Message | None = None, extra_steps: dict[int, list[tuple[str, str]]] | None = None) -> History:
    """``n`` steps, each reading a new file through a tool call; the instruction (``said``, by default
    a user message of 2,000 characters) comes after step ``at``'s result. ``stale``: step -> the
    step its reply marks STALE; ``final``: step ``at`` is a reply without calls (a turn's answer)."""
    stale = stale or {}
    h = History([SYSTEM, TASK])
    for i in range(1, n + 1):
        head = f"PROGRESS: step {i}\nSTALE: {stale.get(i, '')}\n"
        commands = (extra_steps or {}).get(i) or [(f"cat src/mod_{i}.py", _output(i))]
        if final and i == at:
            msg: Message = {"role": "assistant", "content": head + "Done: the module reads its config."}
            obs: list[Message] = []
        else:
            msg = {"role": "assistant", "content": head + "Reading.", "tool_calls": [_call(i * 10 + j, c) for j, (c, _) in enumerate(commands)]}
            obs = [{"role": "tool", "tool_call_id": f"call_{i * 10 + j}", "content": out} for j, (_, out) in enumerate(commands)]
        if i == at:
            obs.append(said or {"role": "user", "content": INSTRUCTION})
        h.append(msg, obs)
    return h


def _text(messages: list[Message]) -> str:
    return "\n".join(content_text(m.get("content")) for m in messages)


# ---- which observations are messages to the agent -------------------------------------------


def test_a_user_message_after_tool_results_is_one_and_tool_results_are_not() -> None:
    h = tool_run(4, 2)
    assert [s.user_messages for s in h.steps] == [(), (1,), (), ()]


def test_text_based_runs_have_none() -> None:
    """Every output of a ```bash run is a user message: none is told apart (and nothing changes)."""
    h = text_history([(reply("a", None, "ls"), "x"), (reply("b", None, "cat a"), INSTRUCTION)])
    assert all(s.user_messages == () for s in h.steps)


def test_a_turns_answer_then_a_new_instruction_counts_once_calls_were_made() -> None:
    """A reply without calls ends a turn: what follows is the person's next message. Before any
    call the conversation may be a text-based one, so nothing is told apart there."""
    h = tool_run(5, 3, final=True)
    assert h.step(3).user_messages == (0,)
    h2 = History([SYSTEM, TASK])
    h2.append({"role": "assistant", "content": "Hello, what should I do?"}, [{"role": "user", "content": "fix it"}])
    assert h2.step(1).user_messages == ()


def test_harness_notes_of_other_roles_are_kept_and_refold_and_format_errors_are_outputs() -> None:
    def one(m: Message) -> tuple[int, ...]:
        return tool_run(3, 2, said=m).step(2).user_messages

    assert one({"role": "developer", "content": "<permissions instructions>sandbox: read-only</permissions instructions>"}) == (1,)
    assert one({"role": "user", "content": "Interrupted by user: use v2", "extra": {"interrupt_type": "UserInterruption"}}) == (1,)
    # mini 2.x's answer to a reply without tool calls (the reply is not stored): that call's output
    assert one({"role": "user", "content": "No tool calls found.", "extra": {"interrupt_type": "FormatError"}}) == ()
    assert one(observation("restore", Answer("[context-manager] step 1 ..."))) == ()  # refold's own answer


# ---- never hidden ------------------------------------------------------------------------------


def _prompts(h: History, policy: str) -> list[tuple[int, list[Message]]]:
    if policy == "library-default":
        r = Renderer(Config())
        return [(t, list(r.render(h, t).messages)) for t in range(len(h) + 1)]
    opts = Options(tokenizer=get_tokenizer("chars4"))
    return [(p.t, p.messages) for p in make_projector(policy, opts).prompts(h)]


@settings(max_examples=30, deadline=None)
@given(
    st.integers(8, 30).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))),
    st.sampled_from(["library-default", "default", "refold-best", "masking", "clear-tool-uses", "compact+refold"]),
    st.booleans(),
    st.booleans(),
)
def test_the_instruction_is_byte_exact_in_every_later_prompt(na: tuple[int, int], policy: str, marked: bool, final: bool) -> None:
    n, at = na
    stale = {at + 1: at} if marked and at < n else {}  # the next reply marks the instruction's step STALE
    h = tool_run(n, at, stale=stale, final=final and at > 1)
    for t, messages in _prompts(h, policy):
        text = _text(messages)
        if t >= at:
            assert text.count(INSTRUCTION) == 1, (policy, t)
        else:
            assert INSTRUCTION not in text


def test_a_folded_step_keeps_its_message_after_the_note() -> None:
    """The STALE fold acts on the step; its message follows the note, whole."""
    h = tool_run(20, 4, stale={5: 4})
    last = Renderer(Config()).render(h, 20)
    step4 = [o for o in last.origins if o.step == 4]
    assert any(o.shown is Shown.NOTE for o in step4)  # the step is folded ...
    assert any(o.shown is Shown.PINNED and o.part == "pin" for o in step4)  # ... its message kept after the note
    note = next(content_text(m.get("content")) for m, o in zip(last.messages, last.origins, strict=True) if o.part == "pin")
    assert note.startswith("[context-manager] Message 4.2 of step 4 (to you, never hidden)")
    assert note.endswith("\n" + INSTRUCTION)


def test_masked_step_keeps_its_message_and_masks_its_output() -> None:
    h = tool_run(20, 4)
    last = Renderer(Config()).render(h, 20)
    shown = [o.shown for o in last.origins if o.step == 4 and o.part == "output"]
    assert shown == [Shown.NOTE, Shown.PINNED]


def test_a_repeated_instruction_is_never_a_stub() -> None:
    """The person says the same thing twice: both are shown whole (dedup neither stubs it nor points at it)."""
    h = tool_run(20, 4)
    h2 = History(h.prefix)
    for s in h.steps:
        obs = list(s.observations)
        if s.index == 9:
            obs.append({"role": "user", "content": INSTRUCTION})
        h2.append(s.reply, obs)
    for t in range(9, 21):
        assert _text(list(Renderer(seed_config()).render(h2, t).messages)).count(INSTRUCTION) == 2


def test_unpin_does_not_release_it() -> None:
    h = tool_run(20, 4, extra_steps={6: [("unpin 4.2", "[context-manager] 4.2 unpinned")]})
    r = Renderer(Config())
    for t in range(4, 21):
        assert INSTRUCTION in _text(list(r.render(h, t).messages))


def test_a_span_folded_in_the_tail_keeps_the_message() -> None:
    """A span closed before the boundary reaches it is one block at once: the message follows it."""
    conclusion = 'fold_span "mod_3 reads its config at src/mod_3.py:12 because load() is called there, so no fix is needed"'
    h = tool_run(8, 4, extra_steps={3: [('begin_span "where is the config read?"', "[context-manager] span S1 opened")],
                                   5: [(conclusion, "[context-manager] span S1 folded")]})
    r = Renderer(Config())
    folded = False
    for t in range(4, 9):
        out = r.render(h, t)
        assert _text(list(out.messages)).count(INSTRUCTION) == 1, t
        folded = folded or any(o.part == "span" for o in out.origins)
    assert folded


@settings(max_examples=25, deadline=None)
@given(
    st.integers(6, 24).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(1, n), min_size=1, max_size=4, unique=True))),
    st.sampled_from(["default", "mini", "anthropic"]),
    st.booleans(),
)
def test_a_fresh_renderer_equals_the_incremental_one_with_user_messages(na: tuple[int, list[int]], config: str, span: bool) -> None:
    """The messages count from the boundary (and a span's end): a restarted proxy renders the same."""
    n, ats = na
    conclusion = 'fold_span "mod_3 reads its config at src/mod_3.py:12 because load() is called there, so no fix is needed"'
    extra = {2: [('begin_span "where is the config read?"', "ok")], 5: [(conclusion, "ok")]} if span else {}
    h = tool_run(n, ats[0], stale={a + 1: a for a in ats if a < n}, extra_steps=extra)
    h2 = History(h.prefix)
    for s in h.steps:
        obs = list(s.observations)
        if s.index in ats[1:]:
            obs.append({"role": "user", "content": f"also: {s.index}\n" + INSTRUCTION[:300]})
        h2.append(s.reply, obs)
    configs = {"default": Config(), "mini": MINI, "anthropic": Config.parse(cache="anthropic")}
    check_fresh(h2, configs[config])


def test_the_agents_unpin_of_a_message_is_refused_with_why() -> None:
    from refold.mechanisms.pins import PinBook
    from refold.protocol import ContextCommand

    h = tool_run(6, 2)
    book = PinBook()
    for s in h.steps:
        book.observe(s)
    refused = book.apply(ContextCommand("unpin", "2.2"), 6)
    assert not refused.ok and "never hidden" in refused.text
    assert book.apply(ContextCommand("unpin", "2"), 6).ok  # the step's output is released, its message stays


def test_the_agents_fold_or_drop_of_a_message_is_refused_with_why() -> None:
    from refold.mechanisms.ledger import LedgerBook
    from refold.protocol import ContextCommand

    h = tool_run(6, 2)
    book = LedgerBook()
    for s in h.steps:
        book.observe(s)
    for name in ("fold", "drop"):
        refused = book.apply(ContextCommand(name, "2.2"), 6)
        assert not refused.ok and "never hidden" in refused.text
    assert book.apply(ContextCommand("drop", "2.1"), 6).ok  # the step's tool output may go
    assert book.apply(ContextCommand("fold", "2"), 6).ok  # the whole step: its output folds, its message stays
