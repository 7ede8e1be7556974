"""``refold sessions list|show|prune`` on a store written by the proxy's session manager."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from refold.cli import main
from refold.cli.sessions import parse_age
from refold.config import Config
from refold.proxy.mapping import INTERNAL
from refold.proxy.sessions import SessionManager
from refold.proxy.sqlite_store import SQLiteStore
from refold.render import Renderer


def call(i: int, command: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"PROGRESS: step {i}\nSTALE: -",
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        ],
    }


def build(path: Path) -> None:
    """Two owners with a session named 'run' each, one with 12 steps (big outputs, so the next prompt
    masks the old ones) and an internal restore round."""

    async def go() -> None:
        store = SQLiteStore(str(path))
        m = SessionManager(store, lambda: Renderer(Config()))
        msgs: list[Any] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix the bug"}]
        for i in range(1, 13):
            msgs += [call(i, f"cat file{i}.py"), {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}\n" * 300}]
        s = await m.get("owner-a", "run")
        async with s.lock:
            t = await m.turn(s, msgs)
            restore = call(13, "restore 2")
            await m.commit(
                s,
                t.view.history.digest,
                [(restore, [{"role": "tool", "tool_call_id": "c13", "content": "[context-manager] Step 2 restored"}], {INTERNAL: True})],
            )
        s2 = await m.get("owner-b", "run")
        async with s2.lock:
            await m.turn(s2, msgs[:4])
        await store.close()

    asyncio.run(go())


def test_list_show_prune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    build(db)
    assert main(["sessions", "list", "--store", str(db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["sessions"]
    assert [r["name"] for r in listed] == ["run", "run"] and len({r["owner"] for r in listed}) == 2

    assert main(["sessions", "show", "run", "--store", str(db)]) == 2  # two owners' 'run'
    err = capsys.readouterr().err
    assert err.startswith("refold: error: 'run' names 2 sessions") and err.count("\n") == 1

    big = next(r["id"] for r in listed if r["owner"] == "owner-a")
    assert main(["sessions", "show", big[:10], "--store", str(db), "--json"]) == 0  # an id prefix will do
    info = json.loads(capsys.readouterr().out)
    assert len(info["steps"]) == 13 and info["steps"][12]["internal"] and info["steps"][12]["action"] == "restore 2"
    assert info["hidden"] and 12 not in info["hidden"] and all(i < 12 for i in info["hidden"])
    assert info["render"]["boundary"] >= max(info["hidden"])
    assert info["render"]["notes"] >= len(info["hidden"])  # every hidden output is a note in the prompt

    assert main(["sessions", "show", info["id"], "--store", str(db)]) == 0
    text = capsys.readouterr().out
    assert "(answered by the proxy)" in text and "hidden in the next prompt: " in text and "restore <step>" in text
    assert ": 13 steps, 1 branch, updated " in text and "1 branchs" not in text  # it said "1 branch(es)"

    assert main(["sessions", "prune", "--older-than", "1h", "--store", str(db)]) == 0
    assert "deleted 0 session(s)" in capsys.readouterr().out
    con = sqlite3.connect(db)
    con.execute("UPDATE sessions SET updated = ? WHERE sid = ?", (time.time() - 3 * 86400, info["id"]))
    con.commit()
    con.close()
    assert main(["sessions", "prune", "--older-than", "2d", "--store", str(db), "--dry-run"]) == 0
    assert "would delete 1 session(s)" in capsys.readouterr().out
    assert main(["sessions", "prune", "--older-than", "2d", "--store", f"sqlite:///{db}"]) == 0
    assert "deleted 1 session(s)" in capsys.readouterr().out
    assert main(["sessions", "list", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert info["id"] not in out and out.count("run") == 1


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in [
        (["sessions", "list", "--store", str(tmp_path / "none.db")], "no session store at"),
        (["sessions", "prune", "--older-than", "soon", "--store", str(tmp_path / "x.db")], "--older-than 'soon'"),
        (["sessions", "list", "--store", str(tmp_path / "x.db"), "--limit", "0"], "--limit"),
        (["sessions", "list", "--store", "postgres://u:pw@db/x"], "store URL 'postgres://u:***@db/x': unknown kind"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    build(tmp_path / "s.db")
    assert main(["sessions", "show", "nope", "--store", str(tmp_path / "s.db")]) == 2
    assert "no session 'nope'" in capsys.readouterr().err
    # a limit past SQLite's integers was an OverflowError traceback: it lists every session
    assert main(["sessions", "list", "--store", str(tmp_path / "s.db"), "--limit", "99999999999999999999"]) == 0
    assert "owner-a" in capsys.readouterr().out


def test_parse_age() -> None:
    assert parse_age("30d") == 30 * 86400 and parse_age("12h") == 43200 and parse_age("90s") == 90
    assert parse_age("2w") == 14 * 86400 and parse_age("1.5") == 1.5 * 86400


def test_the_proxy_and_the_cli_count_the_same_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from refold.proxy.views import describe

    db = tmp_path / "s.db"
    build(db)
    assert main(["sessions", "list", "--store", str(db), "--json"]) == 0
    sid = next(r["id"] for r in json.loads(capsys.readouterr().out)["sessions"] if r["owner"] == "owner-a")
    assert main(["sessions", "show", sid, "--store", str(db), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["render"]

    async def go() -> dict[str, Any]:
        store = SQLiteStore(str(db))
        try:
            m = SessionManager(store, lambda: Renderer(Config()))
            s = await m.find("owner-a", "run")
            assert s is not None and s.head is not None
            return describe(s, await s.aview(s.head, m.renderer))["render"]
        finally:
            await store.close()

    proxy = asyncio.run(go())
    assert cli["notes"] >= 5 and proxy["notes"] == cli["notes"]  # masked outputs are notes too


def test_show_is_one_row_per_step_and_names_function_tools_like_notes(capsys: pytest.CaptureFixture[str]) -> None:
    from refold.cli.demo import demo_path

    demo = demo_path()
    assert main(["sessions", "show", str(demo)]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  [")]
    assert len(rows) == 33  # a heredoc no longer spills over several rows
    assert "cat <<'EOF' > reproduce_issue.py …" in rows[7]
    assert main(["sessions", "show", str(demo), "--json"]) == 0
    step8 = json.loads(capsys.readouterr().out)["steps"][7]
    assert step8["action"].startswith("cat <<'EOF' > reproduce_issue.py\n") and step8["line"].endswith("…")


def test_a_read_never_turns_an_empty_file_or_another_database_into_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "notes.json"
    empty.write_text("")
    other = tmp_path / "app.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (name)")
    con.commit()
    con.close()
    for store, said in [(empty, "an empty file"), (other, "refold did not write (tables users)"), (tmp_path, "(a folder)")]:
        assert main(["sessions", "list", "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    assert empty.read_bytes() == b""  # it was made a 100 KB SQLite store
    assert [n for (n,) in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")] == ["users"]


def test_an_empty_session_id_is_named_not_matched_against_every_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    build(db)
    assert main(["sessions", "show", "", "--store", str(db)]) == 2  # was "'' names 2 sessions (owners ...)"
    assert capsys.readouterr().err.startswith("refold: error: no session named: give a session id")
    assert main(["sessions", "show", "run", "--store", str(db)]) == 2
    assert "(2 owners: owner-a, owner-b)" in capsys.readouterr().err
