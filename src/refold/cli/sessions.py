"""``refold sessions list|show|expand|pin|unpin|prune``: the proxy's sessions and saved mini runs.

``--store`` is what ``refold serve --store`` was given (a SQLite path or ``redis://...``). Listing
covers every owner; owners appear as their key's hash, never as the key. ``show`` re-renders the
session's current branch with the proxy's default config (``-c policy.k=4`` for others) and says
how the next prompt shows each step. ``prune`` is safe next to a running proxy.

``show``, ``expand``, ``pin`` and ``unpin`` also take a saved mini run (a trajectory file) in place
of a session. ``expand`` prints a step (``7``, ``7.2``, ``r7``, ``3-5``) or span (``S1``) as the
model first saw it, read from the history; ``pin`` stores a pin so the agent's next prompt shows
the item as first shown (a running proxy picks it up at its next turn; a live mini run reads its
``refold_pins`` file), and ``unpin`` releases it.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ..config import Config
from ..errors import PolicyError, RefoldError
from ..history import History
from ..mechanisms.spans import SpanBook
from ..mechanisms.summary_wrap import command_line
from ..pinning import expand_messages, expand_text, pin_record, pinned_items, resolve
from ..render import Renderer
from ..types import Shown
from ._output import plural
from .run_files import file_header, is_run_file, load_run, pin_file

if TYPE_CHECKING:  # the proxy loads on first use: listing a saved mini run needs none of it
    from ..proxy.records import SessionData, Store
    from ..proxy.sessions import Session, View

T = TypeVar("T")

sessions_app = typer.Typer(
    help="The proxy's sessions and saved mini runs: list, show, expand, pin, unpin, prune.",
    no_args_is_help=True,
    add_completion=False,
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


_MAX_AGE = 1000 * 365 * 86400.0


def parse_age(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` (or a plain number of days) -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if m is None:
        raise PolicyError(f"--older-than '{text}': expected a number with s, m, h, d or w (e.g. 30d)")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "d"]
    if seconds > _MAX_AGE:  # older than the clock can name (time_t overflows past year ~292 billion)
        raise PolicyError(f"--older-than '{text}': at most {int(_MAX_AGE // 86400 // 365)} years")
    return seconds


def _with_store(url: str, fn: Callable[[Store], Awaitable[T]]) -> T:
    from ..proxy.store import check_store_url, open_store

    check_store_url(url)
    if not url.startswith(("redis://", "rediss://", "unix://")):
        path = url.removeprefix("sqlite:///").removeprefix("sqlite://").partition("?")[0]
        where = Path(path).expanduser()
        if path != ":memory:" and not where.is_file():
            what = " (a folder)" if where.is_dir() else ""
            raise PolicyError(f"no session store at {path}{what} (the path refold serve --store was given)")
        if path != ":memory:" and where.stat().st_size == 0:  # opening it would write a store into it
            raise PolicyError(f"no session store at {path}: an empty file (the path refold serve --store was given)")

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
    limit = min(limit, 1 << 62)  # more than any store holds: all of them (SQLite takes 64-bit integers)
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
    for r in records:
        typer.echo(f"{r.sid:<34}{str(r.name)[:32]:<34}{r.owner:<22}{_when(r.updated):<21}")


@sessions_app.command("show")
def show(
    session: Annotated[str, typer.Argument(help="A session id (from 'list') or its name.")],
    store: StoreOpt = "refold-sessions.db",
    config: Annotated[
        list[str] | None, typer.Option("-c", "--config", help="Config override section.field=value (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document instead of text.")] = False,
) -> None:
    """A session's current branch or a saved mini run: steps, spans, folds, pins, what is hidden."""
    cfg = Config().override(config or [])
    if is_run_file(session):
        history, run_cfg, data = load_run(session, config)
        info = _describe_history(history, Renderer(run_cfg), run_cfg, file_header(session, data))
    else:
        info = _with_store(store, lambda st: _describe(st, session, cfg))
    if as_json:
        typer.echo(json.dumps(info, indent=1, ensure_ascii=False))
        return
    if info.get("path"):
        typer.echo(f"run {info['path']}: {plural(len(info['steps']), 'step')}")
    else:
        typer.echo(
            f"session {info['name']} (id {info['id']}, owner {info['owner']}): {plural(len(info['steps']), 'step')}, "
            f"{plural(info['branches'], 'branch', 'branches')}, updated {_when(info['updated'])}"
        )
    r = info["render"]
    typer.echo(
        f"next prompt: {plural(r['messages'], 'message')}, boundary at step {r['boundary']}, {plural(r['stubs'], 'stub')}, "
        f"{r['trimmed']} trimmed, {plural(r['folded_steps'], 'folded step')}, {plural(r['notes'], 'note')}"
    )
    for st in info["steps"]:
        mark = " (answered by the proxy)" if st["internal"] else ""
        typer.echo(f"  [{st['index']:>3}] {st['shown']:<28} {st['line']}{mark}")
    for sp in info["spans"]:
        state = f"folded at step {sp['end']}: {sp['conclusion'][:60]}" if sp["end"] else "open"
        typer.echo(f"  span {sp['id']} steps {sp['begin']}-{sp['end'] or '...'} {sp['question'][:50]!r}: {state}")
    hidden = info["hidden"]
    typer.echo(f"hidden in the next prompt: {_ranges(hidden) if hidden else 'none'} (all restorable with restore <step>)")
    typer.echo(f"pinned by you: {', '.join(info['pins']) if info['pins'] else 'nothing'} (refold sessions pin|unpin)")


@sessions_app.command("prune")
def prune(
    older_than: Annotated[str, typer.Option("--older-than", help="Age of the last update: 30d, 12h, 90m, 2w.")],
    store: StoreOpt = "refold-sessions.db",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would go; delete nothing.")] = False,
) -> None:
    """Delete sessions not updated for the given time (all their branches and steps)."""
    age = parse_age(older_than)
    before = time.time() - age

    async def run(st: Store) -> int:
        if dry_run:
            return sum(1 for r in await st.all_sessions(10**9) if r.updated < before)
        return int(await st.prune(before))

    n = _with_store(store, run)
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{verb} {n} session(s) not updated since {_when(before)}")


async def _session_data(st: Store, ident: str) -> SessionData:
    """The stored session ``ident`` names (its id, an id prefix or its name)."""
    if not ident.strip():  # a prefix of every id
        raise PolicyError("no session named: give a session id, an id prefix or a name (see 'refold sessions list')")
    data = await st.load(ident)
    if data is None:
        found = [r for r in await st.all_sessions(10**9) if r.name == ident or r.sid.startswith(ident)]
        if not found:
            raise PolicyError(f"no session '{ident}' in the store (see 'refold sessions list')")
        if len({r.sid for r in found}) > 1:
            owners = sorted({r.owner for r in found})
            shown = ", ".join(owners[:4]) + (f" and {len(owners) - 4} more" if len(owners) > 4 else "")
            raise PolicyError(f"'{ident}' names {len(found)} sessions ({plural(len(owners), 'owner')}: {shown}); pass the id")
        data = await st.load(found[0].sid)
        if data is None:
            raise PolicyError(f"session '{ident}' was deleted meanwhile")
    return data


async def _session_view(st: Store, ident: str, cfg: Config) -> tuple[SessionData, Session, View]:
    """(data, Session, View of its current branch, pins loaded)."""
    from ..proxy.sessions import Session

    data = await _session_data(st, ident)
    rec = data.record
    s = Session(rec.sid, rec.name, rec.owner)
    s.load(data)
    try:
        view = s.view(rec.head, lambda: Renderer(cfg))
    except RefoldError as e:
        raise PolicyError(f"session '{ident}' cannot be rebuilt: {e}") from None
    return data, s, view


async def _describe(st: Store, ident: str, cfg: Config) -> dict[str, Any]:
    data, s, view = await _session_view(st, ident, cfg)
    rec = data.record
    header = {
        "format": "refold-session-1",
        "id": rec.sid,
        "name": rec.name,
        "owner": rec.owner,
        "head": rec.head,
        "created": rec.created,
        "updated": rec.updated,
        "branches": len(s.tips),
        "pins": pinned_items(s.pins),
    }
    return _describe_history(view.history, view.renderer, cfg, header)


def _describe_history(h: History, renderer: Renderer, cfg: Config, header: dict[str, Any]) -> dict[str, Any]:
    """How the next prompt shows each step of ``h`` (``header`` names the session or the run)."""
    rendered = renderer.render(h)
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
        visible = out in (Shown.RECEIVED, Shown.RESTORED, Shown.PINNED) or (not step.observations and "reply" in parts)
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
                # one row of the table per step (a heredoc too); a function tool as `tool arg ...`
                "line": "; ".join(
                    command_line(a.tool, a.command, 60) if a.context is None
                    else f"{a.context.name} {a.context.argument}".strip()[:60]
                    for a in step.actions
                )[:80] or (step.progress or "")[:60],
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
        **header,
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
            # every note in the prompt: masked outputs, condensed replies, folds (stats.notes counts folds)
            "notes": sum(1 for o in rendered.origins if o.shown == Shown.NOTE),
        },
    }


# ---- expand / pin / unpin: a stored session or a saved mini run --------------------------------

RunArg = Annotated[str, typer.Argument(help="A session id or name (see 'list'), or a saved mini run's trajectory file.")]
ItemArg = Annotated[str, typer.Argument(help="A step (7), an output (7.2), a reply (r7), steps 3-5, or a span (S1).")]
ConfigOpt = Annotated[
    list[str] | None, typer.Option("-c", "--config", help="Config override section.field=value (repeatable).")
]


@sessions_app.command("expand")
def expand(
    run: RunArg,
    item: ItemArg,
    store: StoreOpt = "refold-sessions.db",
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The messages as JSON instead of text.")] = False,
) -> None:
    """Print a step or span byte-exact as the model first saw it (read from the history; nothing runs)."""
    if is_run_file(run):
        history, cfg, _ = load_run(run, config)
        where = run
    else:
        cfg = Config().override(config or [])
        _, s, view = _with_store(store, lambda st: _session_view(st, run, cfg))
        history, cfg, where = view.history, view.renderer.config, f"session {s.name}"
    it = resolve(history, item, cfg, where=where)
    if as_json:
        msgs = [{"step": st, "part": part, "message": m} for st, part, m in expand_messages(history, it, cfg)]
        typer.echo(json.dumps({"format": "refold-expand-1", "item": it.label, "messages": msgs}, indent=1, ensure_ascii=False))
        return
    from ..proxy.sent_calls import any_call_lines  # a proxy session's calls as its client sent them

    typer.echo(expand_text(history, it, cfg, call_lines=any_call_lines))


@sessions_app.command("pin")
def pin(run: RunArg, item: ItemArg, store: StoreOpt = "refold-sessions.db", config: ConfigOpt = None) -> None:
    """Pin a step or span: the agent's next prompt shows it as first shown (never masked or folded)."""
    _set_pin(run, item, store, config, on=True)


@sessions_app.command("unpin")
def unpin(run: RunArg, item: ItemArg, store: StoreOpt = "refold-sessions.db", config: ConfigOpt = None) -> None:
    """Release a pin set with 'pin': the item may be shown shorter again from the next prompt."""
    _set_pin(run, item, store, config, on=False)


def _set_pin(run: str, item: str, store: str, overrides: list[str] | None, *, on: bool) -> None:
    if is_run_file(run):
        label, where, pins = pin_file(run, item, overrides, on=on)
    else:
        label, where, pins = _with_store(store, lambda st: _pin_stored(st, run, item, overrides, on=on))
    if on:
        typer.echo(f"{where}: pinned {label}; the agent's next prompt shows it as first shown")
    else:
        typer.echo(f"{where}: unpinned {label}; it may be shown shorter again from the agent's next prompt")
    typer.echo(f"pinned now: {', '.join(pins) if pins else 'nothing'}")


async def _pin_stored(st: Store, ident: str, item: str, overrides: list[str] | None, *, on: bool) -> tuple[str, str, list[str]]:
    cfg = Config().override(overrides or [])
    _, s, view = await _session_view(st, ident, cfg)
    where = f"session {s.name}"
    record = pin_record(view.history, item, on=on, where=where, config=cfg)
    if not await st.add_pin(s.sid, record):
        raise PolicyError(f"{where} was deleted meanwhile")
    return str(record["item"]), where, pinned_items([*s.pins, record])


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
