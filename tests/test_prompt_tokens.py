"""PromptTokens / MessageBounds: a session's incremental ids equal a fresh full tokenization."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.chat_tokens import MINI_BASH_TOOL, clear_message_cache, message_tokens, prompt_token_ids
from refold.prompt_tokens import MessageBounds, PromptTokens, same_prefix
from refold.tokens import get_tokenizer

TOKENIZERS = {name: get_tokenizer(name) for name in ("qwen3.6", "o200k", "chars4")}

Message = dict[str, Any]

_texts = st.sampled_from(["", "ok", "a b c", "Traceback:\n  x", "ls -la\nREADME.md", "é ∑ 😀"])
_roles = st.sampled_from(["system", "user", "assistant", "tool", "tool", "developer"])


@st.composite
def _message(draw: st.DrawFn) -> Message:
    role = draw(_roles)
    m: Message = {"role": role, "content": draw(_texts)}
    if role == "assistant" and draw(st.booleans()):
        m["tool_calls"] = [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
    if role == "tool":
        m["tool_call_id"] = "c1"
    return m


# an edit of the last prompt: append new messages, cut the tail, replace one message (a new
# object, sometimes with equal content), or send the same list again
_edit = st.tuples(st.sampled_from(["append", "cut", "replace", "same", "copy"]), st.integers(0, 30), st.lists(_message(), max_size=4))

Edit = tuple[str, int, list[Message]]
_Case = tuple[Any, list[dict[str, Any]] | None, list[Message], list[Edit]]


@st.composite
def _session(draw: st.DrawFn) -> _Case:
    """A tokenizer, tools or none, the first prompt and the edits that make the next ones."""
    tok = TOKENIZERS[draw(st.sampled_from(sorted(TOKENIZERS)))]
    tools = [MINI_BASH_TOOL] if draw(st.booleans()) else None
    return tok, tools, draw(st.lists(_message(), max_size=6)), draw(st.lists(_edit, min_size=1, max_size=8))


def _apply(prev: list[Message], edit: Edit) -> list[Message]:
    kind, at, new = edit
    msgs = list(prev)
    if kind == "append" or not msgs:
        msgs += new
    elif kind == "cut":
        del msgs[at % len(msgs) :]
    elif kind == "replace":
        i = at % len(msgs)
        msgs[i] = new[0] if new else dict(msgs[i])  # a new object, equal or not
        msgs += new[1:]
    elif kind == "copy":  # equal messages, none of them the same object
        msgs = [dict(m) for m in msgs]
    return msgs


def _fresh(msgs: list[Message], tok: Any, tools: list[dict[str, Any]] | None) -> list[int]:
    clear_message_cache()  # nothing memoized: every message tokenized again
    return prompt_token_ids(msgs, tok, tools=tools)


@settings(max_examples=60)
@given(_session())
def test_each_prompt_of_a_session_equals_a_fresh_tokenization(case: _Case) -> None:
    tok, tools, first, edits = case
    session = PromptTokens(tok, tools=tools)
    counter = PromptTokens(tok, tools=tools)
    lender = PromptTokens(tok, tools=tools)
    bounds = MessageBounds(tok)
    msgs = first
    for edit in [("same", 0, []), *edits]:
        msgs = _apply(msgs, edit)
        want = _fresh(msgs, tok, tools)
        assert session.ids(msgs) == want
        assert session.lent(msgs) == want  # asked again, lent: the same ids
        assert session.count(msgs) == len(want)  # no priming left over from the lent list
        assert counter.count(msgs) == len(want)
        assert lender.lent(msgs) == want
        clear_message_cache()
        ends, pos = [], 0
        for m in msgs:
            pos += len(message_tokens(m, tok))
            ends.append(min(pos, len(want)))
        assert bounds(msgs, len(want)) == ends


def test_a_tool_result_joins_the_next_one_in_one_qwen_turn_when_it_arrives() -> None:
    """The last shared message's turn flags change when a tool result follows it (Qwen)."""
    tok = TOKENIZERS["qwen3.6"]
    session = PromptTokens(tok)
    a = {"role": "user", "content": "task"}
    t1 = {"role": "tool", "content": "one", "tool_call_id": "c1"}
    t2 = {"role": "tool", "content": "two", "tool_call_id": "c2"}
    assert session.ids([a, t1]) == prompt_token_ids([a, t1], tok)
    joined = session.ids([a, t1, t2])
    assert joined == prompt_token_ids([a, t1, t2], tok)
    assert len(joined) < len(prompt_token_ids([a, t1], tok)) + len(message_tokens(t2, tok))


def test_the_caller_owns_each_list() -> None:
    tok = TOKENIZERS["chars4"]
    session = PromptTokens(tok)
    msgs: list[Message] = [{"role": "user", "content": "a"}]
    first = session.ids(msgs)
    kept = list(first)
    first.append(-1)  # the caller changes its copy
    msgs.append({"role": "assistant", "content": "b"})  # and its message list
    assert session.ids(msgs[:1]) == kept


def test_lent_ids_are_the_sessions_own_list_until_the_next_call() -> None:
    tok = TOKENIZERS["chars4"]
    session = PromptTokens(tok)
    a: list[Message] = [{"role": "user", "content": "a"}]
    lent = session.lent(a)
    assert lent == prompt_token_ids(a, tok)
    assert session.lent([*a, {"role": "assistant", "content": "b"}]) is lent  # reused, not copied
    assert session.ids(a) == prompt_token_ids(a, tok) and session.ids(a) is not lent


def test_a_replay_measures_the_same_with_ids_lent_or_kept() -> None:
    from refold.lab.replay.metrics import measure
    from refold.lab.replay.policies import Options, make_projector
    from test_objects import run

    h = run(30).h  # long enough for compact to compact at this budget
    tok = TOKENIZERS["qwen3.6"]
    opts = Options(tokenizer=tok, budget=3000, summary_min=16, summary_max=64)
    for name in ("default", "compact", "self-gc"):
        kept: list[Any] = []
        lent = measure(h, make_projector(name, opts), tok)
        copied = measure(h, make_projector(name, opts), tok, keep_ids=kept)
        assert len(kept) == lent.calls > 0 and (lent.compactions > 0 or name != "compact")
        assert (lent.prompt_tokens, lent.cached_tokens, lent.written_tokens, lent.compactions, lent.per_call) == (
            copied.prompt_tokens, copied.cached_tokens, copied.written_tokens, copied.compactions, copied.per_call
        )


@pytest.mark.parametrize(
    ("a", "b", "n"), [([], [], 0), ([1], [], 0), ("xyz", "xyq", 2), ("xy", "xyz", 2)]
)
def test_same_prefix_counts_identical_leading_objects(a: Any, b: Any, n: int) -> None:
    assert same_prefix(list(a), list(b)) == n
    shared = [object(), object()]
    assert same_prefix(shared, [shared[0], object()]) == 1


@settings(max_examples=60)
@given(_session())
def test_stable_is_a_lower_bound_of_the_ids_shared_with_the_last_prompt(case: _Case) -> None:
    # the vLLM simulator trusts it: it compares only the ids after it with its copy
    tok, tools, first, edits = case
    session = PromptTokens(tok, tools=tools)
    msgs = first
    before = session.ids(msgs)
    for edit in edits:
        msgs = _apply(msgs, edit)
        now = session.ids(msgs)
        s = session.stable
        assert s <= len(before) - len(session._priming)  # never into the priming or generated part
        assert now[:s] == before[:s]
        before = now
