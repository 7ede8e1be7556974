"""The proxy's Prometheus metrics, on prometheus-client (one private registry per app).

Counters only go up: ``inc`` refuses a negative amount (a quantity that can shrink is a gauge).
Metrics are created on first use, so a caller may add a new name without touching this module;
a name ending in ``_total`` is a counter, one ending in ``_ms`` a histogram of milliseconds.
"""

from __future__ import annotations

import threading

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST

_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

_HELP = {
    "refold_requests_total": "Chat completions, Messages and Responses requests answered, by HTTP status.",
    "refold_upstream_calls_total": "Calls made to the upstream server (including internal rounds).",
    "refold_internal_rounds_total": "Upstream calls answered by the proxy itself (context commands).",
    "refold_restores_total": "Steps restored for the model by the proxy.",
    "refold_turns_recorded_total": "Steps written to the session store.",
    "refold_branches_total": "Times a client rewrote earlier turns and a new branch was started.",
    "refold_prompt_tokens_full_total": "Prompt tokens the full history would have cost (refold tokenizer).",
    "refold_prompt_tokens_rendered_total": "Prompt tokens of the rendered prompts sent (refold tokenizer).",
    "refold_tokens_saved_total": "Prompt tokens removed, summed over requests whose rendered prompt was shorter.",
    "refold_tokens_added_total": "Prompt tokens added (protocol text), summed over requests whose rendered prompt was longer.",
    "refold_upstream_prompt_tokens_total": "Prompt tokens reported by the upstream.",
    "refold_upstream_cached_tokens_total": "Cached prompt tokens reported by the upstream.",
    "refold_upstream_completion_tokens_total": "Completion tokens reported by the upstream.",
    "refold_store_errors_total": "Store operations that failed (answered 503), by operation.",
    "refold_views_total": "Session HTML views, by outcome (built, cached, busy).",
    "refold_render_ms": "Time to render a prompt, milliseconds.",
    "refold_added_latency_ms": "Proxy time per request outside upstream calls, milliseconds.",
    "refold_view_build_ms": "Time to build a session's HTML view off the chat path, milliseconds.",
    "refold_sessions_loaded": "Sessions held in memory.",
    "refold_views_in_flight": "Session views being built or waiting for the view worker.",
    "refold_store_up": "1 when the last store operation succeeded, 0 after a store fault.",
}

_ALWAYS = (  # exported as 0 from the start, so rate() has a first sample
    "refold_tokens_saved_total",
    "refold_tokens_added_total",
    "refold_upstream_calls_total",
    "refold_turns_recorded_total",
)


class Metrics:
    """``inc`` / ``observe`` / ``gauge`` by name and labels; ``render`` is the exposition text."""

    def __init__(self) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: they double the exposition and nobody graphs them
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._counters: dict[str, tuple[Counter, tuple[str, ...]]] = {}
        self._hists: dict[str, Histogram] = {}
        self._gauges: dict[str, tuple[Gauge, tuple[str, ...]]] = {}
        for name in _ALWAYS:
            self._counter(name, ())
        self._counter("refold_requests_total", ("status",))

    def _counter(self, name: str, labels: tuple[str, ...]) -> Counter:
        with self._lock:
            found = self._counters.get(name)
            if found is None:
                if name in self._hists or name in self._gauges or not name.endswith("_total"):
                    raise ValueError(f"metric {name}: a counter's name ends in _total and is not reused")
                c = Counter(name.removesuffix("_total"), _HELP.get(name, name), labels, registry=self.registry)
                found = self._counters[name] = (c, labels)
        if found[1] != labels:
            raise ValueError(f"metric {name}: labels {labels} differ from {found[1]}")
        return found[0]

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        if value < 0:
            raise ValueError(f"counter {name} cannot go down (inc by {value}); use a gauge")
        c = self._counter(name, tuple(sorted(labels)))
        if value:
            (c.labels(**labels) if labels else c).inc(value)
        elif labels:
            c.labels(**labels)  # the series exists from its first mention

    def observe(self, name: str, value_ms: float) -> None:
        with self._lock:
            h = self._hists.get(name)
            if h is None:
                if name in self._counters or name in self._gauges:
                    raise ValueError(f"metric {name} already exists with another type")
                h = self._hists[name] = Histogram(
                    name, _HELP.get(name, name), buckets=_BUCKETS_MS, registry=self.registry
                )
        h.observe(value_ms)

    def gauge(self, name: str, value: float, **labels: str) -> None:
        key = tuple(sorted(labels))
        with self._lock:
            found = self._gauges.get(name)
            if found is None:
                if name in self._counters or name in self._hists:
                    raise ValueError(f"metric {name} already exists with another type")
                g = Gauge(name, _HELP.get(name, name), key, registry=self.registry)
                found = self._gauges[name] = (g, key)
        if found[1] != key:
            raise ValueError(f"metric {name}: labels {key} differ from {found[1]}")
        (found[0].labels(**labels) if labels else found[0]).set(value)

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's current value (0 when never set)."""
        got = self.registry.get_sample_value(name, labels or None)
        return float(got) if got is not None else 0.0

    def render(self) -> str:
        return generate_latest(self.registry).decode()
