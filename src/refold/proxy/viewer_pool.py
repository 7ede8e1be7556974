"""Session HTML views off the chat path: a bounded, low-priority worker pool and a cache.

A view re-renders the session under every policy variant (seconds at a few hundred steps), so it
runs in its own worker processes (by default one; CPU-bound Python in a thread would still take the
GIL from the event loop), never in the thread pool store calls or token counting use. The workers
run at the lowest CPU priority (``nice 19``): on a box where chat needs the CPUs, a view waits,
chat does not. The event loop only takes a ``Snapshot`` of the stored steps
(references, no replay); the worker rebuilds the history, the page and its gzip form.

Workers are spawned, not forked (the proxy has threads); like any spawn pool, a script that starts
the app itself needs an ``if __name__ == "__main__":`` guard (``refold serve`` has one). At most
``max_pending`` sessions' views build or wait at once; one more is a 503 to retry. A built page is
cached as bytes by (session, head digest, pins, tokenizer) with an ETag. A session builds one page
at a time: requests for it meanwhile share that build, or, when the session has moved on since
(an agent writing it), get its last page at once, and a session's page is rebuilt for new turns at
most every ``min_rebuild_s``: a live view lags by at most one build or that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import multiprocessing
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..errors import ProxyError, RefoldError
from ..history import History
from ..types import Message
from .metrics import Metrics


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a view shows, as plain data a worker process receives: the prefix, each stored step
    (reply, outputs, stored meta), the session's pin records and the page's live controls."""

    prefix: Sequence[Message]
    steps: Sequence[tuple[Message, Sequence[Message], dict[str, Any]]]
    pins: Sequence[dict[str, Any]]
    live: dict[str, Any]
    source: str
    config: dict[str, Any] | None = None
    """The proxy's Config (``model_dump``): the page shows the prompts it rendered as ``sent``."""

    def history(self) -> History:
        from ..wire import read_stored

        h = History(list(self.prefix), source=self.source, meta={"live": self.live})
        for reply, obs, stored in self.steps:
            facts, meta = read_stored(reply, obs, stored)
            h.append(reply, obs, facts=facts, meta=meta)
        h.load_pins(self.pins)
        return h


@dataclass(frozen=True, slots=True)
class Page:
    """A built page: the HTML as UTF-8, the same gzip-compressed, and its ETag."""

    html: bytes
    gz: bytes
    etag: str
    built: float = 0.0  # time.monotonic() when built

    @property
    def size(self) -> int:
        return len(self.html) + len(self.gz)


Built = tuple[bytes, bytes]
Builder = Callable[[Snapshot, str, str], Built]


def build_page(snap: Snapshot, title: str, tokenizer: str) -> Built:
    """The viewer's report and its gzip form (runs in a worker process); a RefoldError comes back
    as its text. ``snap.live`` (the session's name, URL and pins) adds its expand and pin controls."""
    from ..lab.viewer import build_report

    history = snap.history()
    if not len(history):  # the first call's reply becomes a step with the request carrying its outcome
        raise RefoldError("it has no step yet: its page opens with the agent's second request")
    from ..config import Config

    served = Config.model_validate(snap.config) if snap.config is not None else None
    html = build_report(history, title=title, tokenizer=tokenizer, live=snap.live, served=served).encode()
    return html, gzip.compress(html, 6)


def lower_priority() -> None:
    """Worker initializer: the lowest CPU priority (``nice 19``). The kernel then runs a waking
    proxy, upstream or client before it, so a build only takes CPU that chat leaves; unlike
    ``SCHED_IDLE`` it still advances (slowly) on a box that is never idle."""
    with contextlib.suppress(AttributeError, OSError):  # no os.nice (Windows): the default priority
        os.nice(19 - os.nice(0))


class Lane:
    """At most ``rate`` views a second are served, each in its own time slot; at most
    ``max_waiting`` wait for one (more are a 503 to retry). Even a cached page costs the event loop
    a little, so a client reloading in a tight loop takes a bounded share of it, never chat's."""

    def __init__(self, rate: float, max_waiting: int) -> None:
        self.interval = 1.0 / rate if rate > 0 else 0.0
        self.max_waiting = max_waiting
        self.waiting = 0
        self._next = 0.0

    async def wait(self, metrics: Metrics) -> None:
        if self.interval == 0.0:
            return
        if self.waiting >= self.max_waiting:
            metrics.inc("refold_views_total", outcome="busy")
            raise ProxyError(
                503, "too many session views are being requested; retry shortly", type="server_error", code="views_busy"
            )
        now = asyncio.get_running_loop().time()
        slot = max(now, self._next)
        self._next = slot + self.interval
        if slot > now:
            self.waiting += 1
            try:
                await asyncio.sleep(slot - now)
            finally:
                self.waiting -= 1


class ViewPool:
    def __init__(
        self,
        metrics: Metrics,
        *,
        workers: int = 1,
        max_pending: int = 8,
        cache_bytes: int = 64 * 1024 * 1024,
        rate: float = 100.0,
        max_waiting: int = 16,
        min_rebuild_s: float = 5.0,
        build: Builder = build_page,
        executor: Executor | None = None,
    ) -> None:
        self.metrics = metrics
        self.lane = Lane(rate, max_waiting)
        self.min_rebuild_s = min_rebuild_s
        self.workers = workers
        self.max_pending = max_pending
        self.cache_bytes = cache_bytes
        self.build = build
        self._executor = executor
        self._own = executor is None
        self._cache: OrderedDict[tuple[str, ...], Page] = OrderedDict()
        self._size = 0
        self._inflight: dict[str, tuple[tuple[str, ...], asyncio.Future[Page]]] = {}  # by session
        self._latest: dict[str, tuple[str, ...]] = {}  # each session's last built page
        self._nonce = os.urandom(8).hex()  # an ETag from before a restart never matches
        self.builds = 0

    def executor(self) -> Executor:
        if self._executor is None:  # started on the first view: most proxies never build one
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=lower_priority
            )
        return self._executor

    def etag(self, key: tuple[str, ...]) -> str:
        return '"' + hashlib.sha256("\0".join((self._nonce, *key)).encode()).hexdigest()[:32] + '"'

    def cached(self, key: tuple[str, ...]) -> Page | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self.metrics.inc("refold_views_total", outcome="cached")
        return hit

    async def page(self, key: tuple[str, ...], snapshot: Callable[[], Snapshot], title: str, tokenizer: str) -> Page:
        """The page for ``key``; ``snapshot`` (called only on a miss) gives what to show."""
        hit = self.cached(key)
        if hit is not None:
            return hit
        sid = key[0]
        last_key = self._latest.get(sid, ())
        recent = self._cache.get(last_key)
        if recent is not None and last_key[2:] == key[2:] and time.monotonic() - recent.built < self.min_rebuild_s:
            self.metrics.inc("refold_views_total", outcome="stale")  # a session being written: one page per
            return recent  # min_rebuild_s at most (a pin, which changes key[2], builds at once)
        running = self._inflight.get(sid)
        if running is not None:  # one build per session at a time: a session written meanwhile
            if running[0] != key:  # shows its last page until the build under way is done
                last = self._cache.get(self._latest.get(sid, ()))
                if last is not None:
                    self.metrics.inc("refold_views_total", outcome="stale")
                    return last
            return await asyncio.shield(running[1])
        if len(self._inflight) >= self.max_pending:
            self.metrics.inc("refold_views_total", outcome="busy")
            raise ProxyError(
                503,
                f"{self.max_pending} session views are already being built; retry shortly",
                type="server_error",
                code="views_busy",
            )
        fut: asyncio.Future[Page] = asyncio.get_running_loop().create_future()
        self._inflight[sid] = (key, fut)
        self.metrics.gauge("refold_views_in_flight", len(self._inflight))
        try:
            t0 = time.perf_counter()
            snap = snapshot()
            loop = asyncio.get_running_loop()
            try:
                html, gz = await loop.run_in_executor(self.executor(), self.build, snap, title, tokenizer)
            except RefoldError as e:
                raise ProxyError(409, f"cannot show {title}: {e}", code="session_not_viewable") from None
            except BrokenExecutor as e:  # a worker died (killed, out of memory): start afresh next time
                self.close()
                raise ProxyError(
                    503, f"the view worker stopped ({type(e).__name__}); retry", type="server_error", code="views_busy"
                ) from None
            page = Page(html, gz, self.etag(key), time.monotonic())
            self.builds += 1
            self.metrics.observe("refold_view_build_ms", (time.perf_counter() - t0) * 1000)
            self.metrics.inc("refold_views_total", outcome="built")
            self._store(key, page)
            fut.set_result(page)
            return page
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: a view nobody else waited for must not log a warning
            raise
        finally:
            del self._inflight[sid]
            self.metrics.gauge("refold_views_in_flight", len(self._inflight))

    def _store(self, key: tuple[str, ...], page: Page) -> None:
        if page.size > self.cache_bytes:
            return
        old = self._latest.get(key[0])
        if old is not None and old != key and old in self._cache:  # superseded: one page per session
            self._size -= self._cache.pop(old).size
        self._latest[key[0]] = key
        self._cache[key] = page
        self._size += page.size
        while self._size > self.cache_bytes:
            gone, evicted = self._cache.popitem(last=False)
            self._size -= evicted.size
            if self._latest.get(gone[0]) == gone:
                del self._latest[gone[0]]

    def close(self) -> None:
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
