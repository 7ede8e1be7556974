"""A restore after another command in a streamed shell call (``ls; restore 1``): the relay holds
the command from a separator that may lead to ``restore`` (``proxy.compound``), so the restore
never reaches the client's shell; the client runs the part before it, refold answers the rest
before the next upstream call. A plain ``cd DIR && python x.py`` is held only a few characters."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from refold.context.recognize import Recognizer, split_restore
from refold.proxy import ProxyConfig
from refold.proxy.compound import CompoundHold, derived_id, release_limit
from test_proxy_held_restart import _sse_message, _two_requests
from test_proxy_resend import BASH, SYSTEM
from test_proxy_stream_early import Reader, _proxy

from fake_upstream import Scripted, ServerThread, call


@pytest.mark.parametrize(
    ("text", "limit", "held"),
    [
        ("ls -la", 6, None),
        ("ls; ", 2, False),  # what follows may still be a restore
        ("ls; r", 2, False),
        ("ls; rm x", 8, None),
        ("ls; restore", 2, False),
        ("ls; restore 3", 2, True),
        ("ls && restore 3", 3, True),
        ("ls\nrestore 3", 2, True),
        ("ls | restore 3", 3, True),
        ("cd /x && python y.py", 20, None),
        ("cd /x && ", 6, False),
        ("ls; restored.sh", 15, None),
        ('echo "a; restore 3"', 19, None),  # quoted: data
        ("cat <<EOF\nrestore 3\n", 20, None),  # a heredoc body: data until its delimiter line
        ("ls &&\nrestore 3", 3, True),
        ("ls # note\nrestore 3", 9, True),
        ("(cd /x && ls) ; restore 3", 14, True),  # after the group's end
        ("ls; # a note\nrestore 3", 12, True),  # the comment goes out
        ("ls; # a note", 12, False),  # a comment goes out; the line after it may be a restore
    ],
)
def test_the_release_limit(text: str, limit: int, held: bool | None) -> None:
    assert release_limit(text)[:2] == (limit, held)


COMMANDS = st.lists(
    st.sampled_from(["ls", "ls -la", "restore 3", "restore", "cd /x", "python y.py", "r", "res", "echo 'a; restore 1'",
                     'echo "x; y"', "cat <<EOF\nrestore 2\nEOF", "cat <<'E'\nx\nE", "restored", "git restore f",
                     "x=1 restore 2", "(restore 4)", "(cd /x && ls)", "{ ls; restore 5; }", "# a note\n", "echo {a,b}",
                     "echo $(ls; restore 1)", "echo `ls`", "for i in 1; do restore 2; done", "if true; then ls; fi",
                     "python -c 'a=1; b=2'", "ls 2>&1", "ls &>/dev/null", "echo \\; restore", "echo \U0001F600"]),
    min_size=1, max_size=4,
)
SEPS = st.sampled_from(["; ", " && ", " || ", "\n", " | ", " & ", ";\n", "\n\n", " ;; ", "&"])


@settings(max_examples=200, deadline=None)
@given(COMMANDS, st.lists(SEPS, min_size=3, max_size=3), st.lists(st.integers(1, 6), min_size=1, max_size=30))
def test_no_restore_after_another_command_ever_goes_out(parts: list[str], seps: list[str], cuts: list[int]) -> None:
    """However the arguments are split, what may go out never reaches the separator before the
    restore the whole command is split at, and all of a command with none goes out at its end."""
    command = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=False))
    args = json.dumps({"command": command})
    start = len('{"command": "')
    hold = CompoundHold(start)
    found = split_restore(command)
    pos, i = 0, 0
    while pos < len(args):
        pos = min(len(args), pos + cuts[i % len(cuts)])
        i += 1
        allowed = hold.allowed(args[:pos])
        if found is not None:
            assert allowed <= hold.cmd.offset(len(found[0])) or hold.cmd.offset(len(found[0])) < start
        # read on from where all before is decided, as a read of the whole prefix says
        assert hold.held is True or hold.limit <= release_limit(hold.cmd.value).limit
    assert hold.cmd.value == command
    if found is not None and _bash_ok(command):  # what the client runs is a whole command line
        assert _bash_ok(found[0]), found[0]
    if found is None and release_limit(command).held is None:
        assert hold.allowed(args) == args.index('"', start + len(json.dumps(command)) - 2)


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_a_character_outside_the_bmp_escaped_as_a_surrogate_pair_is_one_character(ensure_ascii: bool) -> None:
    """``\\ud83d\\ude00`` is one character to ``json.loads``: read as two, the command never
    matched the session's and ``echo 😀; restore 3`` reached the client's shell whole."""
    command = "echo \U0001F600 done; restore 3"
    args = json.dumps({"command": command}, ensure_ascii=ensure_ascii)
    hold = CompoundHold(len('{"command": "'))
    for i in range(1, len(args) + 1):  # the pair cut at every point
        hold.allowed(args[:i])
    assert hold.cmd.value == command
    assert hold.split(command, Recognizer(compound=True), 0) == (args.index(";"), "restore 3")


def _bash_ok(command: str) -> bool:
    return subprocess.run(["bash", "-n"], input=command, text=True, capture_output=True).returncode == 0


def _stream(c: httpx.Client, url: str, msgs: list[dict[str, Any]], sid: str) -> Reader:
    body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
    with c.stream("POST", f"{url}/v1/chat/completions", json=body, headers={"X-Refold-Session": sid}) as r:
        rd = Reader(r)
        rd.rest()
    return rd


@contextmanager
def _call_then_next(
    scripted: tuple[Scripted, str], tmp_path: Path, command: str
) -> Iterator[tuple[Scripted, str, httpx.Client, list[dict[str, Any]]]]:
    """The upstream answers a bash call of ``command``, then one of ``echo next``: yields it, the
    proxy's URL, a client and the first request's messages."""
    s, url = scripted
    s.release.set()
    s.replies.append(call(0, "bash", json.dumps({"command": command}), "c1"))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo next"}), "c2"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        yield s, px.url, c, [SYSTEM, {"role": "user", "content": "task"}]


@pytest.mark.parametrize(
    ("command", "runs", "rest"),
    [
        ("ls; restore 1", "ls", "restore 1"),
        ("ls && restore 1", "ls ", "restore 1"),
        ("ls\nrestore 1", "ls", "restore 1"),
        ("cd /x && ls -la | head; restore 1", "cd /x && ls -la | head", "restore 1"),
    ],
)
def test_a_streamed_restore_after_a_command_is_split(
    scripted: tuple[Scripted, str], tmp_path: Path, command: str, runs: str, rest: str
) -> None:
    """The client runs the part before the restore (the call closed after it); the restore never
    reaches it and is answered before the next upstream call, after that part's output."""
    with _call_then_next(scripted, tmp_path, command) as (s, url, c, msgs):
        rd = _stream(c, url, msgs, "split")
        msg = rd.message()
        assert [json.loads(t["function"]["arguments"]) for t in msg["tool_calls"]] == [{"command": runs}]
        assert len(s.requests) == 1
        msgs += [msg, {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"}]
        rd2 = _stream(c, url, msgs, "split")
        assert json.loads(rd2.message()["tool_calls"][0]["function"]["arguments"]) == {"command": "echo next"}
        sent = s.requests[1]["messages"]
        calls = [(tc["id"], json.loads(tc["function"]["arguments"])["command"]) for m in sent for tc in m.get("tool_calls") or []]
        assert calls == [("c1", runs), (derived_id("c1"), rest)]
        answers = [m for m in sent if m.get("role") == "tool"]
        assert [m["tool_call_id"] for m in answers] == ["c1", derived_id("c1")]
        assert "a.py\nb.py" in answers[0]["content"] and "Step 1 restored" in answers[1]["content"]
        sess = c.get(f"{url}/sessions/split").json()
        assert len(sess["branches"]) == 1 and [st["internal"] for st in sess["steps"]] == [False, True]


def test_commands_after_the_restore_are_not_run_and_named(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    with _call_then_next(scripted, tmp_path, "ls; restore 1; cat f.py") as (s, url, c, msgs):
        msg = _stream(c, url, msgs, "after").message()
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"command": "ls"}
        msgs += [msg, {"role": "tool", "tool_call_id": "c1", "content": "f.py"}]
        _stream(c, url, msgs, "after")
        answer = s.requests[1]["messages"][-1]
        assert answer["tool_call_id"] == derived_id("c1")
        assert "Not run" in answer["content"] and "cat f.py" in answer["content"]


def test_a_plain_compound_command_goes_out_while_it_is_generated(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    """``cd /x && python y.py``: past ``&& py`` the client has the command while the upstream is
    still inside the call; it gets all of it unchanged, and nothing is answered."""
    s, url = scripted
    command = "cd /testbed && python reproduce.py --verbose"
    args = json.dumps({"command": command})
    s.replies.append(call(0, "bash", args, "c1", pause_at=36))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "t"}], "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "plain"}) as r:
            rd = Reader(r)
            rd.until(lambda: rd.calls and "&& py" in rd.calls[0]["function"]["arguments"])
            assert not s.release.is_set() and not rd.done
            s.release.set()
            rd.rest()
        assert rd.message()["tool_calls"][0]["function"]["arguments"] == args
        assert len(s.requests) == 1


def test_a_restore_the_client_is_sent_nothing_of_is_held_at_its_separator(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    """Paused inside ``restore``: the client has ``ls`` and not the separator after it."""
    s, url = scripted
    args = json.dumps({"command": "ls -la; restore 1"})
    s.replies.append(call(0, "bash", args, "c1", pause_at=28))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo next"}), "c2"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "t"}], "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "paused"}) as r:
            rd = Reader(r)
            rd.until(lambda: rd.calls and "-la" in rd.calls[0]["function"]["arguments"])
            assert rd.calls[0]["function"]["arguments"] == '{"command": "ls -la'
            s.release.set()
            rd.rest()
        assert json.loads(rd.message()["tool_calls"][0]["function"]["arguments"]) == {"command": "ls -la"}


@pytest.mark.parametrize(
    "command",
    ["for f in a b; do restore 1; done", "if true; then restore 1; fi", "for f in a; do ls; restore 1; done",
     "{ ls; restore 1; }", "ls; (restore 1)", "ls && { restore 1; }"],
)
def test_a_streamed_restore_inside_a_loop_or_group_reaches_the_client_whole_with_a_note(
    scripted: tuple[Scripted, str], tmp_path: Path, command: str
) -> None:
    """No clean cut before it (the client would get an unclosed loop, ``if`` or group) and the
    client has the start of the call: it gets the whole command, as the model wrote it (its shell
    answers the restore), and refold adds, after its output, a restore answered "Not run" that
    says how to issue it (a request that is not streamed answers the whole call so)."""
    assert split_restore(command) is None
    with _call_then_next(scripted, tmp_path, command) as (s, url, c, msgs):
        msg = _stream(c, url, msgs, "loop").message()
        assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"command": command}
        assert len(s.requests) == 1
        msgs += [msg, {"role": "tool", "tool_call_id": "c1", "content": "bash: restore: command not found"}]
        _stream(c, url, msgs, "loop")
    sent = s.requests[1]["messages"]
    assert [tc["id"] for m in sent for tc in m.get("tool_calls") or []] == ["c1", derived_id("c1")]
    note = sent[-1]
    assert note["tool_call_id"] == derived_id("c1") and "Not run" in note["content"] and "`restore 1`" in note["content"]


@pytest.mark.parametrize(
    "command", ["ls; (restore 3)", "ls | (restore 3)", "ls && { restore 3 || true; }", "ls; f() { restore 3; }"]
)
def test_no_split_where_a_group_or_function_body_opens_before_the_restore(command: str) -> None:
    """Cut there, the client would run ``ls; f`` (a function's name as a command) and refold
    would answer ``restore 3)``, a bad step number."""
    assert split_restore(command) is None
    assert split_restore("(cd /x; ls); restore 3") == ("(cd /x; ls)", "restore 3")


def _split_then_next(store: str, restart: bool, session: str) -> list[dict[str, Any]]:
    s = Scripted()
    s.replies.append(call(0, "bash", json.dumps({"command": "ls && restore 1"}), "c1"))
    s.replies.append([{"content": "done"}])
    with ServerThread(s.app) as srv:
        cfg = ProxyConfig(upstream=f"{srv.url}/v1", store=store, tokenizer="off")
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        h = {"X-Refold-Session": session}

        def first(c: TestClient) -> dict[str, Any]:
            r = c.post("/v1/chat/completions", json=body, headers=h)
            msg = _sse_message(r.text)
            assert json.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"command": "ls "}
            return msg

        def second(c: TestClient, msg: dict[str, Any]) -> None:
            more = [*msgs, msg, {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
            r = c.post("/v1/chat/completions", json={**body, "messages": more}, headers=h)
            assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")

        _two_requests(cfg, restart, first, second)
    assert len(s.requests) == 2
    return list(s.requests[1]["messages"])


def test_a_split_survives_a_restart_between_the_two_requests(store_url: str) -> None:
    """The part refold answers is stored with the session before the client has the answer's
    end: after a restart the next prompt is the one a proxy that never restarted sends."""
    tag = "sqlite" if "://" not in store_url else "redis"
    kept = _split_then_next(store_url, False, f"split-{tag}-kept")
    after = _split_then_next(store_url, True, f"split-{tag}-restarted")
    assert after == kept
    assert [tc["id"] for m in after for tc in m.get("tool_calls") or []] == ["c1", derived_id("c1")]
    assert "restored" in after[-1]["content"]
