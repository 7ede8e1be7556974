"""Sessions: named, per-owner sets of branches over one content-addressed step store.

A request's messages are matched against the session's branch tips (the best-agreeing one wins);
new turns are appended to it, and a client that rewrote an earlier turn gets a new branch that
shares everything before the fork. Nothing is ever deleted. Every change is committed to the store
(compare-and-set on the session head) before the proxy calls upstream; another replica's write
makes the commit fail, the session is reloaded and the commit retried onto the same base digest.

The user's pins (``refold sessions pin``, the session page) belong to the session, not to one
branch: each is checked against the current branch when set and applies to any branch that has
the steps it names (``History.pin`` semantics: from the call after the step count it was set at).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import pinning
from ..errors import ItemError, ProxyError, StoreConflict
from ..history import History
from ..pinning import Item, resolve
from ..render import Renderer
from ..types import Message, message_digest
from ..wire import read_stored
from .mapping import INTERNAL, ClientStep, Delivered, Match, Norm, match, normalize, split
from .records import Commit, SessionData, Store, StoredStep, held_key

_NAME = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
_MAX_VIEWS = 4
_RETRIES = 8
_INLINE_STEPS = 32
"""Up to this many new steps are copied and hashed on the event loop; more go to a worker thread."""


def _stored_steps(
    base: str, new: Sequence[tuple[Message, Sequence[Message], dict[str, Any]]], now: float
) -> list[StoredStep]:
    stored: list[StoredStep] = []
    parent = base
    for reply, obs, meta in new:
        meta = {"time": now, **meta}
        r, o = copy.deepcopy(reply), tuple(copy.deepcopy(list(obs)))
        d = message_digest([r, *o], parent=parent)
        stored.append(StoredStep(d, parent, r, o, dict(meta)))
        parent = d
    return stored


def owner_of(api_key: str | None) -> str:
    return hashlib.sha256(f"refold-owner\0{api_key or ''}".encode()).hexdigest()[:20]


def session_name(header: str | None, messages: Sequence[Message], owner: str) -> str:
    """The explicit ``X-Refold-Session`` name, or one derived from system + first user message + key."""
    if header is not None:
        if not _NAME.match(header):
            raise ProxyError(
                400,
                "X-Refold-Session must be 1-128 characters of A-Z a-z 0-9 . _ : @ -",
                code="invalid_session",
            )
        return header
    system = next((m for m in messages if m.get("role") in ("system", "developer")), {})
    user = next((m for m in messages if m.get("role") == "user"), {})
    h = hashlib.sha256(
        repr((owner, normalize(system) if system else None, normalize(user) if user else None)).encode()
    )
    return "auto-" + h.hexdigest()[:20]


def session_id(owner: str, name: str) -> str:
    return hashlib.sha256(f"{owner}\0{name}".encode()).hexdigest()[:32]


def pin_record(history: History, item: str, *, on: bool, where: str, config: Any = None) -> dict[str, Any]:
    """``pinning.pin_record`` with a bad item as a 400 (one line naming ``where`` and the item)."""
    try:
        return pinning.pin_record(history, item, on=on, where=where, config=config)
    except ItemError as e:
        raise ProxyError(400, str(e), code="invalid_item") from None


@dataclass
class View:
    history: History
    renderer: Renderer


@dataclass
class Session:
    sid: str
    name: str
    owner: str
    head: str | None = None
    prefixes: dict[str, list[Message]] = field(default_factory=dict)
    steps: dict[str, StoredStep] = field(default_factory=dict)
    tips: list[str] = field(default_factory=list)  # most recently used last
    views: OrderedDict[str, View] = field(default_factory=OrderedDict)
    norms: dict[str, tuple[Norm, tuple[Norm, ...]]] = field(default_factory=dict)
    pins: list[dict[str, Any]] = field(default_factory=list)  # the user's pins, as stored
    held: dict[str, Any] | None = None  # context calls left out of the reply the client holds (``Deferred``)
    held_key: str = ""
    delivered: dict[str, list[Delivered]] = field(default_factory=dict)  # per internal tip (``mapping.match``)
    sent: int = 0  # delivered records, as the store counts them
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    checked: float = -1e9  # time.monotonic() when head and pins last agreed with the store

    def load(self, data: SessionData) -> None:
        self.head = data.record.head
        self.prefixes = data.prefixes
        self.steps = data.steps
        self.held, self.held_key = data.held, held_key(data.held)
        self.delivered = {
            tip: [d for d in (Delivered.read(r) for r in records) if d is not None]
            for tip, records in data.delivered.items()
        }
        self.sent = sum(len(records) for records in data.delivered.values())
        if data.pins != self.pins:  # a view's history holds the pins it was built with
            self.pins = list(data.pins)
            self.views.clear()
        heads = [*data.heads, data.record.head]
        ancestors: set[str] = set()
        for h in heads:
            ancestors.update(s.parent for s in self.chain(h)[1])
        # every branch tip, however many: dropping one would let its internal rounds vanish
        self.tips = list(dict.fromkeys(h for h in heads if h not in ancestors))

    def reset(self) -> None:
        """Forget everything (the store no longer has this session: pruned)."""
        self.head = None
        self.prefixes, self.steps, self.tips = {}, {}, []
        self.pins = []
        self.held, self.held_key = None, ""
        self.delivered, self.sent = {}, 0
        self.views.clear()
        self.norms.clear()

    def chain(self, digest: str) -> tuple[str, list[StoredStep]]:
        """(prefix digest, steps from first to ``digest``)."""
        out: list[StoredStep] = []
        cur = digest
        while cur not in self.prefixes:
            step = self.steps.get(cur)
            if step is None:
                raise ProxyError(
                    500, f"session {self.name}: stored step {cur} is missing", type="server_error"
                )
            out.append(step)
            cur = step.parent
        out.reverse()
        return cur, out

    def norm(self, s: StoredStep) -> tuple[Norm, tuple[Norm, ...]]:
        n = self.norms.get(s.digest)
        if n is None:
            n = self.norms[s.digest] = (normalize(s.reply), tuple(normalize(o) for o in s.observations))
        return n

    def view(self, digest: str, renderer: Callable[[], Renderer]) -> View:
        """The history up to ``digest`` (replayed with each step's stored meta) and its renderer."""
        v = self.views.get(digest)
        if v is None:
            v = self._keep(digest, self.build(digest, renderer))
        self.views.move_to_end(digest)
        return v

    async def aview(self, digest: str, renderer: Callable[[], Renderer]) -> View:
        """``view``, a new history built in a worker thread (replaying thousands of steps takes
        seconds: no stalling other sessions); the caller holds ``lock`` (no step is added meanwhile)."""
        v = self.views.get(digest)
        if v is None:
            built = await asyncio.to_thread(self.build, digest, renderer)
            v = self.views.get(digest) or self._keep(digest, built)
        self.views.move_to_end(digest)
        return v

    def _keep(self, digest: str, v: View) -> View:
        self.views[digest] = v
        while len(self.views) > _MAX_VIEWS:
            self.views.popitem(last=False)
        return v

    def build(self, digest: str, renderer: Callable[[], Renderer]) -> View:
        """A new view of ``digest`` (touches no shared state but reads: safe in a worker thread)."""
        p, steps = self.chain(digest)
        h = History(self.prefixes[p], source=f"session:{self.name}")
        for s in steps:
            facts, meta = read_stored(s.reply, s.observations, s.meta)
            h.append(s.reply, s.observations, facts=facts, meta=meta)
            if h.digest != s.digest:
                raise ProxyError(
                    500, f"session {self.name}: step {s.digest} fails verification", type="server_error"
                )
        try:
            h.load_pins(self.pins)
        except ValueError as e:
            raise ProxyError(500, f"session {self.name}: {e}", type="server_error") from None
        return View(h, renderer())

    def best(self, prefix: list[Message], steps: list[ClientStep]) -> Match | None:
        found: Match | None = None
        for tip in reversed(self.tips):
            p, chain = self.chain(tip)
            m = match(prefix, steps, p, self.prefixes[p], chain, self.norm, self.delivered)
            if m is not None and (found is None or (m.full, m.matched) > (found.full, found.matched)):
                found = m
        return found


@dataclass(frozen=True)
class Turn:
    """A session positioned for the next upstream call."""

    session: Session
    view: View
    added: int
    branched: bool
    tail: Message | None  # a trailing assistant message without outputs (rendered, not stored)


class SessionManager:
    def __init__(self, store: Store, renderer: Callable[[], Renderer], *, max_sessions: int = 2000) -> None:
        self.store = store
        self.renderer = renderer
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._max = max_sessions
        self.branches = 0

    async def get(self, owner: str, name: str) -> Session:
        sid = session_id(owner, name)
        s = self._sessions.get(sid)
        if s is None:
            s = self._sessions[sid] = Session(sid, name, owner)
            while len(self._sessions) > self._max:
                old_sid, old = next(iter(self._sessions.items()))
                if old.lock.locked():
                    break
                del self._sessions[old_sid]
        self._sessions.move_to_end(sid)
        return s

    async def find(self, owner: str, name: str, *, max_age: float = 0.0) -> Session | None:
        """The session, checked against the store unless it was less than ``max_age`` seconds
        ago (a view may be that stale: a page reload then costs no store round trip)."""
        s = await self.get(owner, name)
        if s.head is not None and time.monotonic() - s.checked < max_age:
            return s
        async with s.lock:
            await self._refresh(s)
        return s if s.head is not None else None

    async def _refresh(self, s: Session, force: bool = False) -> None:
        checked = time.monotonic()
        state = await self.store.state(s.sid)
        if state is None:
            if s.head is not None:
                s.reset()
            return
        if state == (s.head, len(s.pins), s.held_key, s.sent) and not force:  # a pin set elsewhere (the CLI, a replica) reloads
            s.checked = checked
            return
        data = await self.store.load(s.sid)
        if data is not None:
            if data.record.owner != s.owner:  # an id collision across owners cannot happen by construction
                raise ProxyError(404, "no such session", code="session_not_found")
            s.load(data)
            s.checked = checked

    async def pin(self, s: Session, item: str, *, on: bool = True) -> tuple[Item, dict[str, Any]]:
        """Pin (or unpin) ``item`` of the session's current branch for its next prompts; the record
        is stored before it takes effect. A bad item is a 400 naming the session and the item."""
        async with s.lock:
            await self._refresh(s)
            if s.head is None:
                raise ProxyError(404, f"no session '{s.name}'", code="session_not_found")
            view = await s.aview(s.head, self.renderer)
            record = pin_record(view.history, item, on=on, where=f"session {s.name}", config=view.renderer.config)
            if not await self.store.add_pin(s.sid, record):
                raise ProxyError(404, f"session '{s.name}' was deleted meanwhile", code="session_not_found")
            s.pins.append(record)
            for v in s.views.values():
                v.history.load_pins([record])
            return resolve(view.history, item, view.renderer.config), record

    async def hold(self, s: Session, record: dict[str, Any] | None) -> None:
        """Store (None: forget) the context calls held for the session's next request."""
        if record is None and s.held is None:
            return
        if await self.store.put_held(s.sid, record):
            s.held, s.held_key = record, held_key(record)

    async def deliver(self, s: Session, tip: str, reply: Message) -> None:
        """``reply`` reached the client after internal step ``tip``: a resend is a new attempt (``match``)."""
        step = s.steps.get(tip)
        d = Delivered.of(reply)
        if step is None or not step.meta.get(INTERNAL) or d in s.delivered.get(tip, ()):
            return
        async with s.lock:
            with contextlib.suppress(ProxyError):  # unrecorded, a resend reuses the rounds (as a retry)
                if await self.store.put_delivered(s.sid, tip, d.record()):
                    s.delivered.setdefault(tip, []).append(d)
                    s.sent += 1

    async def turn(
        self, s: Session, messages: list[Message], prepare: Callable[[list[Message]], list[Message]] | None = None
    ) -> Turn:
        """Record the client's messages into the session (caller holds ``s.lock``); ``prepare``
        rewrites them once the session is read from the store (replies the client holds in
        another form than the model wrote)."""
        await self._refresh(s)
        if prepare is not None:
            messages = prepare(messages)
        prefix, steps = split(messages)
        tail: Message | None = None
        if steps and not steps[-1][1]:
            tail = copy.deepcopy(steps.pop()[0])
        # matching, hashing and replaying a long request is CPU work: off the event loop (see aview)
        m = await asyncio.to_thread(s.best, prefix, steps) if s.head is not None else None
        if m is None:
            base, new, branched = message_digest(prefix), steps, s.head is not None
            s.prefixes.setdefault(base, copy.deepcopy(prefix))
            new_prefix: tuple[str, list[Message]] | None = (base, prefix)
        elif not m.new:  # a retry, or an earlier point of a branch resent: nothing new to record
            return Turn(s, await s.aview(m.base, self.renderer), 0, False, tail)
        else:
            base, new, branched, new_prefix = m.base, m.new, not m.full, None
        digest = await self.commit(s, base, [(r, o, {}) for r, o in new], new_prefix)
        self.branches += int(branched)
        return Turn(s, await s.aview(digest, self.renderer), len(new), branched, tail)

    async def commit(
        self,
        s: Session,
        base: str,
        new: Sequence[tuple[Message, Sequence[Message], dict[str, Any]]],
        prefix: tuple[str, list[Message]] | None = None,
        *,
        settle: bool = False,
    ) -> str:
        """Append ``new`` steps onto ``base`` durably; returns the new tip digest. ``settle``:
        they answer the session's held context calls, forgotten in the same write."""
        now = round(time.time(), 3)  # when the call these steps lead to is made: idle gaps tell a cold cache
        if len(new) > _INLINE_STEPS:  # thousands of steps take a second to copy and hash
            stored = await asyncio.to_thread(_stored_steps, base, new, now)
        else:
            stored = _stored_steps(base, new, now)
        tip = stored[-1].digest if stored else base
        for _ in range(_RETRIES):
            if tip == s.head:
                break
            old = s.head
            retire = None
            if old is not None and old != base and old not in {st.parent for st in stored}:
                _, chain = s.chain(base) if base not in s.prefixes else (base, [])
                if old not in {c.digest for c in chain}:
                    retire = old
            try:
                await self.store.commit(
                    Commit(s.sid, s.name, s.owner, old, tip, prefix, tuple(stored), retire, settle)
                )
            except StoreConflict:
                await self._refresh(s, force=True)
                if prefix is not None:
                    s.prefixes.setdefault(*prefix)
                continue
            s.head = tip
            if settle:
                s.held, s.held_key = None, ""
            break
        else:
            raise ProxyError(
                503, f"session {s.name} is being written by another client; retry", type="server_error"
            )
        self._apply(s, base, stored)
        return tip

    def _apply(self, s: Session, base: str, stored: list[StoredStep]) -> None:
        for st in stored:
            s.steps[st.digest] = st
        tip = stored[-1].digest if stored else base
        v = s.views.pop(base, None) if stored else None
        if v is not None:
            for st in stored:
                facts, meta = read_stored(st.reply, st.observations, st.meta)
                v.history.append(st.reply, st.observations, facts=facts, meta=meta)
            s.views[tip] = v
        if base in s.tips and stored:
            s.tips.remove(base)
        if tip in s.tips:
            s.tips.remove(tip)
        s.tips.append(tip)
