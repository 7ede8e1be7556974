"""``refold sessions list|show|prune``: the proxy's session store, read (and pruned) by an operator.

``--store`` is what ``refold serve --store`` was given (a SQLite path or ``redis://...``). Listing
covers every owner; owners appear as their key's hash, never as the key. ``show`` re-renders the
session's current branch with the proxy's default config (``-c policy.k=4`` for others) and says
how the next prompt shows each step. ``prune`` is safe next to a running proxy.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from ..config import Config
from ..errors import PolicyError, RefoldError
from ..mechanisms.spans import SpanBook
from ..render import Renderer
from ..types import Shown

T = TypeVar("T")

sessions_app = typer.Typer(
    help="The proxy's sessions: list, show one, prune old ones.", no_args_is_help=True, add_completion=False
)

StoreOpt = Annotated[
    str, typer.Option("--store", help="The proxy's store: a SQLite path / sqlite:///path, or redis://host:port/db.")
]
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def register(app: typer.Typer) -> None:
    """``app`` becomes the ``sessions`` group (the CLI loads each command module into its own app)."""
    app.info.help = sessions_app.info.help
    app.info.no_args_is_help = True
    for cmd in sessions_app.registered_commands:
        app.registered_commands.append(cmd)


def parse_age(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` (or a plain number of days) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if m is None:
        raise PolicyError(f"--older-than '{text}': expected a number with s, m, h, d or w (e.g. 30d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "d"]


def _with_store(url: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    from ..proxy.store import open_store

    if not url.startswith(("redis://", "rediss://", "unix://")):
        path = url.removeprefix("sqlite:///").removeprefix("sqlite://").partition("?")[0]
        if path != ":memory:" and not Path(path).expanduser().is_file():
            raise PolicyError(f"no session store at {path} (the path refold serve --store was given)")

    async def run() -> T:
        st = open_store(url)
        try:
            return await fn(st)
        finally:
            await st.close()

    return asyncio.run(run())


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


@sessions_app.command("list")
def list_sessions(
    store: StoreOpt = "refold-sessions.db",
    limit: Annotated[int, typer.Option(help="Most recently updated first, at most this many.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of a table.")] = False,
) -> None:
    """Every owner's sessions, most recently updated first."""
    if limit < 1:
        raise PolicyError("--limit must be at least 1")
    records = _with_store(store, lambda st: st.all_sessions(limit))
    rows = [
        {"id": r.sid, "name": r.name, "owner": r.owner, "head": r.head, "created": r.created, "updated": r.updated}
        for r in records
    ]
    if as_json:
        typer.echo(json.dumps({"format": "refold-sessions-1", "sessions": rows}, indent=1))
        return
    if not rows:
        typer.echo("no sessions")
        return
    typer.echo(f"{'id':<34}{'name':<34}{'owner':<22}{'updated':<21}")
    for r in rows:
        typer.echo(f"{r['id']:<34}{str(r['name'])[:32]:<34}{r['owner']:<22}{_when(float(r['updated'])):<21}")


@sessions_app.command("show")
def show(
    session: Annotated[str, typer.Argument(help="A session id (from 'list') or its name.")],
    store: StoreOpt = "refold-sessions.db",
    config: Annotated[
        list[str] | None, typer.Option("-c", "--config", help="Config override section.field=value (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of text.")] = False,
) -> None:
    """A session's current branch: steps, spans, folds, and which steps the next prompt hides."""
    cfg = Config().override(config or [])
    info = _with_store(store, lambda st: _describe(st, session, cfg))
    if as_json:
        typer.echo(json.dumps(info, indent=1, ensure_ascii=False))
        return
    typer.echo(
        f"session {info['name']} (id {info['id']}, owner {info['owner']}): {len(info['steps'])} steps, "
        f"{info['branches']} branch(es), updated {_when(info['updated'])}"
    )
    r = info["render"]
    typer.echo(
        f"next prompt: {r['messages']} messages, boundary at step {r['boundary']}, {r['stubs']} stubs, "
        f"{r['trimmed']} trimmed, {r['folded_steps']} folded steps, {r['notes']} notes"
    )
    for st in info["steps"]:
        mark = " (answered by the proxy)" if st["internal"] else ""
        typer.echo(f"  [{st['index']:>3}] {st['shown']:<28} {st['action'][:60]}{mark}")
    for sp in info["spans"]:
        state = f"folded at step {sp['end']}: {sp['conclusion'][:60]}" if sp["end"] else "open"
        typer.echo(f"  span {sp['id']} steps {sp['begin']}-{sp['end'] or '...'} {sp['question'][:50]!r}: {state}")
    hidden = info["hidden"]
    typer.echo(f"hidden in the next prompt: {_ranges(hidden) if hidden else 'none'} (all restorable with restore <step>)")


@sessions_app.command("prune")
def prune(
    older_than: Annotated[str, typer.Option("--older-than", help="Age of the last update: 30d, 12h, 90m, 2w.")],
    store: StoreOpt = "refold-sessions.db",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")] = False,
) -> None:
    """Delete sessions not updated for the given time (all their branches and steps)."""
    age = parse_age(older_than)
    before = time.time() - age

    async def run(st: Any) -> int:
        if dry_run:
            return sum(1 for r in await st.all_sessions(10**9) if r.updated < before)
        return int(await st.prune(before))

    n = _with_store(store, run)
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{verb} {n} session(s) not updated since {_when(before)}")


async def _describe(st: Any, ident: str, cfg: Config) -> dict[str, Any]:
    from ..proxy.sessions import Session

    data = await st.load(ident)
    if data is None:
        found = [r for r in await st.all_sessions(10**9) if r.name == ident or r.sid.startswith(ident)]
        if not found:
            raise PolicyError(f"no session '{ident}' in the store (see 'refold sessions list')")
        if len({r.sid for r in found}) > 1:
            raise PolicyError(
                f"'{ident}' names {len(found)} sessions (owners {', '.join(sorted(r.owner for r in found))}); "
                "pass the id"
            )
        data = await st.load(found[0].sid)
        if data is None:
            raise PolicyError(f"session '{ident}' was deleted meanwhile")
    rec = data.record
    s = Session(rec.sid, rec.name, rec.owner)
    s.load(data)
    try:
        view = s.view(rec.head, lambda: Renderer(cfg))
    except RefoldError as e:
        raise PolicyError(f"session '{ident}' cannot be rebuilt: {e}") from None
    h = view.history
    rendered = view.renderer.render(h)
    shown: dict[int, dict[str, str]] = {}
    covered: dict[int, int] = {}
    for o in rendered.origins:
        if o.step is not None:
            shown.setdefault(o.step, {})[o.part] = str(o.shown)
        for c in o.covers:
            if c != o.step:
                covered.setdefault(c, o.step if o.step is not None else 0)
    steps, hidden = [], []
    for step in h.steps:
        parts = shown.get(step.index, {})
        out = parts.get("output")
        visible = out in (Shown.RECEIVED, Shown.RESTORED) or (not step.observations and "reply" in parts)
        if not visible:
            hidden.append(step.index)
        if not parts:
            how = f"folded (note at {covered[step.index]})" if step.index in covered else "hidden"
        else:
            how = ", ".join(f"{k} {v}" for k, v in sorted(parts.items()))
        steps.append(
            {
                "index": step.index,
                "digest": step.digest,
                "internal": bool(step.meta.get("internal")),
                "action": "; ".join(
                    a.command if a.context is None else f"{a.context.name} {a.context.argument}".strip()
                    for a in step.actions
                )
                or (step.progress or ""),
                "progress": step.progress,
                "stale": list(step.stale),
                "restore_of": list(step.restore_of),
                "shown": how,
            }
        )
    book = SpanBook.replay(list(h.steps), cfg.spans)
    spans = [
        {"id": sp.id, "question": sp.question, "begin": sp.begin, "end": sp.end, "conclusion": sp.conclusion or ""}
        for sp in sorted(book.spans.values(), key=lambda x: x.begin)
    ]
    stats = rendered.stats
    return {
        "format": "refold-session-1",
        "id": rec.sid,
        "name": rec.name,
        "owner": rec.owner,
        "head": rec.head,
        "created": rec.created,
        "updated": rec.updated,
        "branches": len(s.tips),
        "steps": steps,
        "spans": spans,
        "folded": sorted({i for st in h.steps for i in st.stale}),
        "hidden": hidden,
        "render": {
            "messages": len(rendered.messages),
            "boundary": stats.boundary,
            "stubs": stats.stubs,
            "trimmed": stats.trimmed,
            "folded_steps": stats.folded_steps,
            "notes": stats.notes,
        },
    }


def _ranges(xs: list[int]) -> str:
    out: list[str] = []
    start = prev = xs[0]
    for x in [*xs[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ", ".join(out)
