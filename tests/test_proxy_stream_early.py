"""A round that may be internal is decided as early as its first tool call (or its first command
block) allows: a call that cannot be a context command reaches the client while the upstream is
still generating it; one that is stays held and is answered in a round the client never sees."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.context.recognize import Recognizer
from refold.protocol import COMMAND_NAMES, MAX_CDS, parse_command
from refold.proxy import ProxyConfig, create_app
from refold.proxy.commands import call_action
from refold.proxy.deferred import Deferred, LaterCalls
from refold.proxy.early import CallGate, CommandGate, call_verdict, command_prefix, may_be_command
from refold.reply_command import bash_block

from fake_upstream import PAUSE, Scripted, ServerThread, call

SYSTEM = {"role": "system", "content": "You are a careful engineer."}
BASH = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
}


# ---- the decision on its own ----------------------------------------------------------------------

COMMANDS = st.one_of(
    st.sampled_from(
        [
            "ls -la",
            "restore 3",
            "  restore 3-5",
            "restored",
            "fold_span \"found it\"",
            "fold -w 80 f",
            "fold 3 4",
            "expand -t 4 f",
            "expand 7",
            "begin_span x",
            "fold_spans",
            "rest",
            "\n\trestore 1",
            "pin 2",
            "pinch",
            "echo restore 3",
            "drop\u00e9 1",
            "cd /testbed && restore 3",  # a leading cd changes nothing for a context command
            "cd /testbed && ls",
            "cd '/a b'; fold 3 4",
            "cd /t && cd x && expand 7",
            "cd /x | restore 3",
            "cdx && restore 3",
            "cd a; " * 8 + "restore 3",  # MAX_CDS prefixes are read past, no more
            "cd a; " * 9 + "restore 3",
            "cd " + "a" * 4096 + " && restore 3",  # a directory name up to PATH_MAX
            "cd " + "a" * 4097 + " && restore 3",
        ]
    ),
    st.text(alphabet="restoflda_pinxbgc&;/' 0123\n\t\"\\é", max_size=24),
)


@given(COMMANDS, st.one_of(st.integers(0, 80), st.integers(0, 4200)), st.sampled_from(["command", "cmd"]), st.booleans())
@settings(max_examples=400, deadline=None)
def test_an_early_no_is_the_final_no(command: str, cut: int, key: str, argv: bool) -> None:
    """Whatever the arguments' prefix: when the verdict says no, the whole call is not a context
    command (the proxy relays it at once, so it must never be one)."""
    rec = Recognizer()
    value: Any = command.split(" ") if argv else command
    args = json.dumps({key: value}, ensure_ascii=not argv)
    whole = call_action({"id": "c", "function": {"name": "bash", "arguments": args}}, rec).context
    verdict = call_verdict("bash", args[:cut], rec)
    if verdict is False:
        assert whole is None, (command, args[:cut])
    if whole is not None and cut >= len(args) and not argv:
        assert verdict is True


@given(COMMANDS, st.integers(0, 4200))
@settings(max_examples=300, deadline=None)
def test_a_command_gate_releases_only_what_is_no_context_command(command: str, cut: int) -> None:
    text = f"I will check.\n```bash\n{command}\n```\nrest"
    g = CommandGate(COMMAND_NAMES)
    out = g.feed(text[:cut]) + g.feed(text[cut:])
    cmd = bash_block(text)
    if g.released:
        assert out == text
        assert cmd is None or Recognizer().command("bash", cmd) is None
    else:
        assert "```" not in out
        assert out + g.end(drop=False) == text


def test_a_long_run_of_cd_prefixes_is_decided_early_and_in_linear_time() -> None:
    """A model repeating ``cd a;`` (or naming an impossible directory) kept the gate undecided to
    the reply's end and re-read all of it at every chunk: 48 KB took 20 s of the event loop."""
    assert parse_command("cd a; " * MAX_CDS + "restore 3") is not None
    assert parse_command("cd a; " * (MAX_CDS + 1) + "restore 3") is None
    assert parse_command("cd " + "a" * 4097 + " && restore 3") is None
    for command in ("cd a; " * 8000 + "ls", "cd " + "a" * 48000 + " && ls"):
        text = f"I will check.\n```bash\n{command}\n```\n"
        g = CommandGate(COMMAND_NAMES)
        start = time.perf_counter()
        out = "".join(g.feed(text[i : i + 7]) for i in range(0, len(text), 7))
        assert g.released and out == text
        assert time.perf_counter() - start < 2.0  # was 20.7 s and 4.8 s


def test_the_pieces() -> None:
    names = COMMAND_NAMES
    assert may_be_command("", names) is None and may_be_command("  ", names) is None
    assert may_be_command("re", names) is None and may_be_command("restore", names) is None
    assert may_be_command("restore ", names) is True and may_be_command("fold_span(", names) is True
    assert may_be_command("restored", names) is False and may_be_command("ls", names) is False
    assert may_be_command("x", names) is False and may_be_command("fold_", names) is None
    assert may_be_command("cd /testbed &", names) is None and may_be_command("cd /testbed && re", names) is None
    assert may_be_command("cd /testbed && restore ", names) is True and may_be_command("cd /t && ls", names) is False
    assert may_be_command("ca", names) is False and may_be_command("cd /x | r", names) is False
    assert command_prefix('{"command": "ls -') == "ls -"
    assert command_prefix('{"cmd":"a\\nb\\u00e9\\') == "a\nb\u00e9"
    assert command_prefix('{"command": ["rest') == "rest"
    assert command_prefix('{"command": ["rest', argv=None) is None
    assert command_prefix('{"timeout": 3, "command": "ls"}') is None and command_prefix('{"comm') is None
    rec = Recognizer(functions=frozenset({"restore"}))
    assert call_verdict("restore", "", rec) is True
    assert call_verdict("str_replace_editor", "", rec) is False
    assert call_verdict("bash", '{"command": "ls"}', Recognizer(shell=frozenset())) is False


# ---- through the proxy ------------------------------------------------------------------------------


def text(t: str, pause_at: int | None = None) -> list[Any]:
    out: list[Any] = []
    for j in range(0, len(t), 5):
        if pause_at is not None and j == pause_at:
            out.append(PAUSE)
        out.append({"content": t[j : j + 5]})
    return out


class Reader:
    """Reads a streamed chat completion event by event, adding it up."""

    def __init__(self, r: httpx.Response) -> None:
        self.lines = r.iter_lines()
        self.content = ""
        self.calls: dict[int, dict[str, Any]] = {}
        self.done = False

    def step(self) -> None:
        for line in self.lines:
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                self.done = True
                return
            for c in json.loads(line[6:]).get("choices") or []:
                d = c.get("delta") or {}
                self.content += d.get("content") or ""
                for tc in d.get("tool_calls") or []:
                    slot = self.calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                    slot["id"] = tc.get("id") or slot["id"]
                    slot["function"]["name"] += (tc.get("function") or {}).get("name") or ""
                    slot["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            return
        self.done = True

    def until(self, pred: Any) -> None:
        while not pred() and not self.done:
            self.step()

    def rest(self) -> None:
        while not self.done:
            self.step()

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            msg["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        return msg


def _proxy(url: str, tmp_path: Path) -> Any:
    return create_app(ProxyConfig(context_tools_beside_shell=True, upstream=url, store=str(tmp_path / "s.db"), tokenizer="off"))


def test_a_shell_call_is_relayed_while_it_is_generated(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    s, url = scripted
    args = json.dumps({"command": "ls -la /tmp && cat README.md"})
    s.replies.append(text("PROGRESS: look\nSTALE: -\n") + call(0, "bash", args, "call_1", pause_at=16))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo 2"}), "call_2"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "live"}) as r:
            rd = Reader(r)
            rd.until(lambda: rd.calls and rd.calls[0]["function"]["arguments"])
            assert not s.release.is_set() and not rd.done  # the upstream is still inside the call
            assert rd.calls[0]["function"]["name"] == "bash" and rd.calls[0]["id"] == "call_1"
            assert args.startswith(rd.calls[0]["function"]["arguments"])
            s.release.set()
            rd.rest()
        msg = rd.message()
        assert msg["tool_calls"][0]["function"]["arguments"] == args
        assert msg["content"] == "PROGRESS: look\nSTALE: -\n"
        assert len(s.requests) == 1  # no internal round
        msgs += [msg, {"role": "tool", "tool_call_id": "call_1", "content": "README"}]
        r2 = c.post(f"{px.url}/v1/chat/completions", json={**body, "messages": msgs}, headers={"X-Refold-Session": "live"})
        assert r2.status_code == 200
        sess = c.get(f"{px.url}/sessions/live").json()
        assert len(sess["branches"]) == 1
        metrics = c.get(f"{px.url}/metrics").text
        assert "refold_rounds_released_early_total 1.0" in metrics or "refold_rounds_released_early_total 2.0" in metrics


def test_a_context_call_is_held_and_answered_inside(scripted: tuple[Scripted, str], tmp_path: Path) -> None:
    s, url = scripted
    s.replies.append(call(0, "bash", json.dumps({"command": "restore 1"}), "call_r", pause_at=16))
    s.replies.append(call(0, "bash", json.dumps({"command": "echo after"}), "call_2"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "held"}) as r:
            rd = Reader(r)
            rd.step()  # the role chunk
            threading.Timer(0.5, s.release.set).start()
            rd.rest()
        msg = rd.message()
        assert [t["function"]["arguments"] for t in msg["tool_calls"]] == [json.dumps({"command": "echo after"})]
        assert len(s.requests) == 2
        answered = s.requests[1]["messages"]
        assert any(m.get("role") == "tool" and m.get("tool_call_id") == "call_r" for m in answered)


@pytest.mark.parametrize("second", [("restore", {"steps": "1"}), ("bash", {"command": "restore 1"})])
def test_a_later_context_call_of_a_relayed_round_is_left_out_and_answered_next_request(
    scripted: tuple[Scripted, str], tmp_path: Path, second: tuple[str, dict[str, Any]]
) -> None:
    """In a round relayed early, a later context command (the offered tool, or typed into the
    shell) never reaches the client (the calls after it renumbered); it is answered before the
    next upstream call, after the outputs of the calls the client ran."""
    s, url = scripted
    s.replies.append(
        call(0, "bash", json.dumps({"command": "ls"}), "c0")
        + call(1, second[0], json.dumps(second[1]), "c1")
        + call(2, "bash", json.dumps({"command": "pwd"}), "c2")
    )
    s.replies.append(text("done"))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        body = {"model": "m", "messages": msgs, "tools": [BASH], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers={"X-Refold-Session": "w"}) as r:
            rd = Reader(r)
            rd.rest()
        msg = rd.message()
        assert [(t["id"], t["function"]["name"]) for t in msg["tool_calls"]] == [("c0", "bash"), ("c2", "bash")]
        assert sorted(rd.calls) == [0, 1]
        assert "restore" in {t["function"]["name"] for t in s.requests[0]["tools"]}
        msgs += [
            msg,
            {"role": "tool", "tool_call_id": "c0", "content": "a"},
            {"role": "tool", "tool_call_id": "c2", "content": "/"},
        ]
        r2 = c.post(f"{px.url}/v1/chat/completions", json={**body, "messages": msgs}, headers={"X-Refold-Session": "w"})
        assert r2.status_code == 200
        sent = s.requests[1]["messages"]
        # the reply as the client holds it, then the left-out call and its answer: no call unanswered
        calls = [tc["id"] for m in sent for tc in m.get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in sent if m.get("role") == "tool"]
        assert calls == answered == ["c0", "c2", "c1"]
        assert "Step 1 restored" in sent[-1]["content"]
        sess = c.get(f"{px.url}/sessions/w").json()
        assert len(sess["branches"]) == 1 and [st["internal"] for st in sess["steps"]] == [False, True]


def test_a_text_command_block_is_relayed_once_it_is_no_context_command(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    s, url = scripted
    reply = "PROGRESS: x\nSTALE: -\nChecking.\n```bash\ngrep -rn foo src\n```"
    s.replies.append(text(reply, pause_at=45))
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:
        body = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "task"}], "stream": True}
        with c.stream("POST", f"{px.url}/v1/chat/completions", json=body) as r:
            rd = Reader(r)
            rd.until(lambda: "```bash\ngrep" in rd.content)
            assert not s.release.is_set() and not rd.done
            s.release.set()
            rd.rest()
        assert rd.content == reply and len(s.requests) == 1


def test_a_text_round_that_turns_internal_keeps_the_text_around_its_command(
    scripted: tuple[Scripted, str], tmp_path: Path
) -> None:
    s, url = scripted
    first = "PROGRESS: x\nSTALE: -\nI need step 1.\n```bash\nrestore 1\n```\nThen the fix."
    s.replies.append(text("PROGRESS: a\nSTALE: -\n```bash\ncat a.py\n```"))
    s.replies.append(text(first))
    s.replies.append(text("PROGRESS: y\nSTALE: -\n```bash\necho ok\n```"))
    s.replies.append(text("done"))
    h = {"X-Refold-Session": "tx"}
    with ServerThread(_proxy(url, tmp_path)) as px, httpx.Client(timeout=30) as c:

        def ask(msgs: list[dict[str, Any]]) -> dict[str, Any]:
            body = {"model": "m", "messages": msgs, "stream": True}
            with c.stream("POST", f"{px.url}/v1/chat/completions", json=body, headers=h) as r:
                rd = Reader(r)
                rd.rest()
            return rd.message()

        msgs: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "task"}]
        msgs += [ask(msgs), {"role": "user", "content": "x = 1"}]
        got = ask(msgs)
        want = "PROGRESS: x\nSTALE: -\nI need step 1.\n\nThen the fix.\n\nPROGRESS: y\nSTALE: -\n```bash\necho ok\n```"
        assert got["content"] == want  # everything the model wrote but the command block
        ask([*msgs, got, {"role": "user", "content": "ok"}])
        sess = c.get(f"{px.url}/sessions/tx").json()
    assert len(sess["branches"]) == 1
    assert [st["reply"]["content"] for st in sess["steps"]][1] == first


CHAT_CALLS = st.lists(
    st.one_of(
        st.builds(lambda c: ("bash", {"command": c}), st.sampled_from(["ls -la", "restore 1", " restore 2", "restored", "pwd"])),
        st.just(("restore", {"steps": "1"})),
        st.just(("edit", {"path": "a"})),
    ),
    min_size=1,
    max_size=4,
)


@given(CHAT_CALLS, st.lists(st.integers(1, 30), max_size=5))
@settings(max_examples=300, deadline=None)
def test_a_relayed_round_never_sends_a_later_context_call_wherever_the_deltas_split(
    calls: list[tuple[str, dict[str, Any]]], cuts: list[int]
) -> None:
    """A chat round's calls through ``CallGate`` and ``LaterCalls`` as ``chat._rounds`` feeds them:
    once the round is released, no context call reaches the client, and every other call does,
    with its arguments as the upstream sent them (renumbered after a call left out)."""
    rec = Recognizer()
    gate = CallGate(rec)
    later = LaterCalls(gate)
    chunks: list[dict[str, Any]] = []
    for i, (name, args) in enumerate(calls):
        raw = json.dumps(args)
        at = sorted({c % len(raw) for c in cuts} | {0, len(raw)})
        pieces = [raw[a:b] for a, b in zip(at, at[1:], strict=False) if b > a]
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": f"c{i}", "type": "function", "function": {"name": name, "arguments": ""}}]}}]})
        chunks += [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": p}}]}}]}
                   for p in pieces]
    sent: list[dict[str, Any]] = []
    held: list[dict[str, Any]] = []
    released = False
    for ch in chunks:
        gate.add(ch)
        if not released and gate.verdict() is False:
            released = True
            sent += [o for h in held for o in later.relay(h)]
            held = []
        if released:
            sent += later.relay(ch)
        else:
            held.append(ch)
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, (n, a) in enumerate(calls)]}
    if not released:
        return  # decided at the round's end, as a whole (internal or relayed as it came)
    deferred = Deferred()
    sent += later.settle(message, deferred, "s")
    kept = deferred._pending.get("s")
    left = kept[1]["tool_calls"] if kept else []
    got: dict[int, dict[str, str]] = {}
    for ch in sent:
        for tc in ch["choices"][0]["delta"].get("tool_calls") or []:
            slot = got.setdefault(tc["index"], {"id": "", "args": ""})
            slot["id"] = tc.get("id") or slot["id"]
            slot["args"] += (tc.get("function") or {}).get("arguments") or ""
    context = {c["id"] for c in message["tool_calls"] if call_action(c, rec).context is not None}
    assert {c["id"] for c in left} == context
    want = [(c["id"], c["function"]["arguments"]) for c in message["tool_calls"] if c["id"] not in context]
    assert [(got[k]["id"], got[k]["args"]) for k in sorted(got)] == want
    assert sorted(got) == list(range(len(want)))
