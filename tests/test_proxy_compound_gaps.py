"""Three gaps of the streamed compound hold (``proxy.compound``), through the real app: a restore
after ``time`` or ``!`` (no clean cut: the client runs the whole command, refold's answer says
"Not run", never a restore that succeeded, also with no other command to name); a command that never becomes whole (``\\``-continued
lines) stops being re-read past a budget and is decided whole at the call's end; and the call
refold answers of a split gets an id in the original's format (Mistral: 9 of ``[a-zA-Z0-9]``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from refold.context.recognize import Recognizer, split_restore
from refold.protocol import parse_restore_args
from refold.proxy import ProxyConfig, anthropic_wire
from refold.proxy import responses_wire as rwire
from refold.proxy.compound import CompoundHold, derived_id, release_limit
from test_proxy_held_restart import _sse_message, _two_requests
from test_proxy_resend import BASH, SYSTEM
from test_proxy_stream_early import Reader, _proxy
from test_proxy_surface_compound import FORMS, _command, _splice
from test_proxy_surface_guard import _client_args

from fake_upstream import Scripted, ServerThread, call


@pytest.fixture()
def scripted() -> Iterator[tuple[Scripted, str]]:
    s = Scripted()
    s.release.set()
    with ServerThread(s.app) as srv:
        yield s, f"{srv.url}/v1"


def _stream(c: httpx.Client, url: str, msgs: list[dict[str, Any]], sid: str) -> dict[str, Any]:
    body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
    with c.stream("POST", f"{url}/v1/chat/completions", json=body, headers={"X-Refold-Session": sid}) as r:
        rd = Reader(r)
        rd.rest()
    return rd.message()


def _two_rounds(s: Scripted, url: str, tmp_path: Path, command: str, cid: str, output: str) -> tuple[str, list[Any]]:
    """The first call's command as the client got it, and the second upstream request's messages."""
    s.replies.append(call(0, "bash", json.dumps({"command": command}), cid))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo next"}), "zZ9yY8xX7"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=60) as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        msg = _stream(c, px.url, msgs, "gap")
        got = str(json.loads(msg["tool_calls"][0]["function"]["arguments"])["command"])
        msgs += [msg, {"role": "tool", "tool_call_id": cid, "content": output}]
        _stream(c, px.url, msgs, "gap")
    assert len(s.requests) == 2
    return got, list(s.requests[1]["messages"])


@pytest.mark.parametrize(
    "command", ["time restore 1", "! restore 1", "time restore 1  # again", "ls; time restore 1", "ls; ! restore 1", "ls && ! time restore 1"]
)
def test_a_restore_after_time_or_bang_runs_whole_and_is_answered_not_run(
    scripted: tuple[Scripted, str], tmp_path: Path, command: str
) -> None:
    """No clean cut before ``time restore``: the client's shell gets all of it (and says ``restore:
    command not found``); refold's answer must agree with that, never restore the step."""
    s, url = scripted
    got, sent = _two_rounds(s, url, tmp_path, command, "c1", "bash: restore: command not found")
    assert got == command
    answers = [m for m in sent if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["c1", derived_id("c1")]
    assert "Not run" in answers[1]["content"] and "restored" not in answers[1]["content"]
    assert "Run `restore 1` alone" in answers[1]["content"] and "``" not in answers[1]["content"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("command", ["time restore 3", "! restore 3", "ls; time restore 3"])
def test_on_messages_and_responses_too(form: Any, command: str) -> None:
    """``time restore 3`` alone was answered as a restore that succeeded while the client's shell
    said ``command not found``."""
    surface, name, make = form
    args = json.dumps(make(command))
    sp, sent, data = _splice(surface, name, args, [args[j : j + 5] for j in range(0, len(args), 5)])
    assert _client_args(surface, sent) == [args]  # the client runs it whole
    note = sp.split_answer(data)
    reply = (anthropic_wire if surface == "messages" else rwire).reply(note[0])
    assert reply is not None
    answered = {c["id"]: _command(name, c["function"]["arguments"]) for c in reply["tool_calls"]}[note[1]]
    steps, error = parse_restore_args(answered.split(None, 1)[1], 5)
    assert not steps and error is not None and "Not run" in error and "`restore 3` alone" in error


def test_a_split_calls_answered_part_has_an_id_in_the_originals_format(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    """Mistral refuses a call id that is not 9 of ``[a-zA-Z0-9]``: ``aB3dE5fG7_restore`` went back
    upstream in the history."""
    s, url = scripted
    got, sent = _two_rounds(s, url, tmp_path, "ls; restore 1", "aB3dE5fG7", "a.py")
    assert got == "ls"
    ids = [tc["id"] for m in sent for tc in m.get("tool_calls") or []] + [m["tool_call_id"] for m in sent if m.get("role") == "tool"]
    assert len(ids) == 4 and len(set(ids)) == 2 and all(re.fullmatch(r"[a-zA-Z0-9]{9}", i) for i in ids)
    assert "restored" in sent[-1]["content"]


@pytest.mark.parametrize(
    ("cid", "pattern"),
    [("aB3dE5fG7", r"[a-zA-Z0-9]{9}"), ("call_1", r"call_[0-9]{8}"), ("toolu_01AbC", r"toolu_[0-9a-zA-Z]{8}"),
     ("fc_0a1b", r"fc_[0-9a-f]{8}"), ("c1", r"[a-z0-9]{2}")],
)
def test_a_derived_id_keeps_the_format_differs_and_is_deterministic(cid: str, pattern: str) -> None:
    made = derived_id(cid)
    assert re.fullmatch(pattern, made) and made != cid and derived_id(cid) == made
    assert derived_id(cid, frozenset({made})) not in (made, cid)


LONG = "echo a \\\n" * 400 + "  b; restore 3"


def test_a_command_that_never_becomes_whole_stops_being_re_read_and_nothing_leaks() -> None:
    """``\\``-continued lines were re-read from the start at every line break (35 KB: ~14 s of
    CPU); past the budget the hold keeps what it let out and the whole call decides."""
    args = json.dumps({"command": LONG})
    start = len('{"command": "')
    found = split_restore(LONG)
    assert found is not None
    hold = CompoundHold(start)
    for pos in range(7, len(args) + 7, 7):
        allowed = hold.allowed(args[:pos])
        assert allowed <= hold.cmd.offset(len(found[0]))
    assert hold.frozen
    assert hold.split(LONG, Recognizer(compound=True), 0)[1] == found[1]


def test_a_frozen_hold_still_splits_through_the_app(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    s, url = scripted
    got, sent = _two_rounds(s, url, tmp_path, LONG, "c1", "a")
    assert (got, "restore 3") == split_restore(LONG)
    assert derived_id("c1") in [m.get("tool_call_id") for m in sent]


@pytest.mark.parametrize("text", ["ls; # a note \\\nrestore 3", "ls # a note \\\nrestore 3"])
def test_a_comment_ending_in_a_backslash_does_not_continue_the_line(text: str) -> None:
    """Inside a comment ``\\`` escapes nothing: the next line is a command of its own."""
    assert release_limit(text).held is True
    assert split_restore(text) is not None


def test_a_session_stored_with_the_old_suffixed_id_still_loads_and_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A split stored by an older proxy (``c1_restore``), answered after a restart by this one:
    the stored id goes on as it was, and the session renders."""
    import refold.proxy.relay as relay

    s = Scripted()
    s.replies.append(call(0, "bash", json.dumps({"command": "ls; restore 1"}), "c1"))
    s.replies.append([{"content": "done"}])
    with ServerThread(s.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=str(tmp_path / "s.db"), tokenizer="off")
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        h = {"X-Refold-Session": "old-ids"}

        def first(c: TestClient) -> dict[str, Any]:
            with monkeypatch.context() as m:
                m.setattr(relay, "derived_id", lambda cid, taken=frozenset(): f"{cid}_restore")
                return _sse_message(c.post("/v1/chat/completions", json=body, headers=h).text)

        def second(c: TestClient, msg: dict[str, Any]) -> None:
            more = [*msgs, msg, {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
            r = c.post("/v1/chat/completions", json={**body, "messages": more}, headers=h)
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
            steps = c.get("/sessions/old-ids").json()["steps"]
            assert [st["internal"] for st in steps] == [False, True]
            view = c.get("/sessions/old-ids/view")
            assert view.status_code == 200 and "restored" in view.text

        _two_requests(cfg, True, first, second)
    sent = s.requests[1]["messages"]
    assert [tc["id"] for m in sent for tc in m.get("tool_calls") or []] == ["c1", "c1_restore"]
    assert sent[-1]["tool_call_id"] == "c1_restore" and "restored" in sent[-1]["content"]


def _feed(command: str, step: int = 7) -> tuple[CompoundHold, int]:
    """The hold fed ``command``'s arguments ``step`` characters at a time, and the most it allowed."""
    args = json.dumps({"command": command})
    hold, most = CompoundHold(len('{"command": "')), 0
    for pos in range(step, len(args) + step, step):
        most = max(most, hold.allowed(args[:pos]))
        assert hold.held is True or hold.limit <= release_limit(hold.cmd.value).limit
    return hold, most


@pytest.mark.parametrize("delim", ["EOF", "'EOF'", '"E O"', "-EOF"])
def test_a_heredoc_body_is_read_only_at_its_delimiter_lines(delim: str) -> None:
    """A heredoc body was re-read from its start at every line; now only a line that may be its
    delimiter is read, so the hold never runs out of budget and the restore after it stays held."""
    word = delim.lstrip("-").strip("'\"")
    tab = "\t" if delim.startswith("-") else ""
    body = "".join(f"{tab}line {i} = {i * 7}; {word}x\n" for i in range(2500))
    command = f"cat <<{delim} > f.py\n{body}{word}\nls; restore 3"
    found = split_restore(command)
    assert found is not None
    hold, most = _feed(command)
    assert not hold.frozen and hold._work < 2 * len(command) and most <= hold.cmd.offset(len(found[0]))
    assert hold.cmd.offset(len(found[0])) > len(body)  # all of the body went out as it streamed


@pytest.mark.parametrize("command", ["ls\rrestore 3", "ls\u00a0restore 3", "echo \\\n#restore 3", "echo a\"b\"#; restore 3"])
def test_what_the_lexer_reads_as_a_separator_holds_the_stream(command: str) -> None:
    """``shell_lex`` ends a command at ``\\r``, any space but a blank or tab, and a ``#`` inside a
    word: the hold re-reads on those too, so it never lets out more than a whole read does."""
    hold, most = _feed(command, 1)
    found = split_restore(command)
    if found is not None:
        assert most <= hold.cmd.offset(len(found[0]))
