"""Session HTML views off the chat path: a bounded worker pool and a cache.

A view re-renders the session under every policy variant (seconds at a few hundred steps), so it
runs in its own worker processes (by default one; CPU-bound Python in a thread would still take the
GIL from the event loop), never in the thread pool store calls or token counting use. Workers
are spawned, not forked (the proxy has threads); like any spawn pool, a script that starts the app
itself needs an ``if __name__ == "__main__":`` guard (``refold serve`` has one). At most
``max_pending`` views build or wait at once; one more is a 503 to retry. A built page is cached by
(session, head digest), and concurrent requests for the same page share one build.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Executor, ProcessPoolExecutor

from ..errors import ProxyError, RefoldError
from ..history import History
from .metrics import Metrics

Builder = Callable[[History, str, str], str]


def build_page(history: History, title: str, tokenizer: str) -> str:
    """The viewer's report (runs in a worker process); a RefoldError comes back as its text.
    ``history.meta["live"]`` (the session's name, URL and pins) adds its expand and pin controls."""
    from ..lab.viewer import build_report

    live = history.meta.get("live")
    return build_report(history, title=title, tokenizer=tokenizer, live=live if isinstance(live, dict) else None)


class ViewPool:
    def __init__(
        self,
        metrics: Metrics,
        *,
        workers: int = 1,
        max_pending: int = 8,
        cache_bytes: int = 64 * 1024 * 1024,
        build: Builder = build_page,
        executor: Executor | None = None,
    ) -> None:
        self.metrics = metrics
        self.workers = workers
        self.max_pending = max_pending
        self.cache_bytes = cache_bytes
        self.build = build
        self._executor = executor
        self._own = executor is None
        self._cache: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self._size = 0
        self._inflight: dict[tuple[str, ...], asyncio.Future[str]] = {}
        self.builds = 0

    def executor(self) -> Executor:
        if self._executor is None:  # started on the first view: most proxies never build one
            self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._executor

    async def page(self, key: tuple[str, ...], snapshot: Callable[[], History], title: str, tokenizer: str) -> str:
        """The page for ``key``; ``snapshot`` (called only on a miss) gives the history to show."""
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            self.metrics.inc("refold_views_total", outcome="cached")
            return hit
        shared = self._inflight.get(key)
        if shared is not None:
            return await asyncio.shield(shared)
        if len(self._inflight) >= self.max_pending:
            self.metrics.inc("refold_views_total", outcome="busy")
            raise ProxyError(
                503,
                f"{self.max_pending} session views are already being built; retry shortly",
                type="server_error",
                code="views_busy",
            )
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        self.metrics.gauge("refold_views_in_flight", len(self._inflight))
        try:
            t0 = time.perf_counter()
            history = snapshot()
            loop = asyncio.get_running_loop()
            try:
                page = await loop.run_in_executor(self.executor(), self.build, history, title, tokenizer)
            except RefoldError as e:
                raise ProxyError(409, f"cannot show {title}: {e}", code="session_not_viewable") from None
            except BrokenExecutor as e:  # a worker died (killed, out of memory): start afresh next time
                self.close()
                raise ProxyError(
                    503, f"the view worker stopped ({type(e).__name__}); retry", type="server_error", code="views_busy"
                ) from None
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
            del self._inflight[key]
            self.metrics.gauge("refold_views_in_flight", len(self._inflight))

    def _store(self, key: tuple[str, ...], page: str) -> None:
        if len(page) > self.cache_bytes:
            return
        self._cache[key] = page
        self._size += len(page)
        while self._size > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._size -= len(old)

    def close(self) -> None:
        if self._own and self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
