"""Prometheus text exposition for the proxy, without a client library."""

from __future__ import annotations

import threading
from collections import defaultdict

_BUCKETS_MS = (0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)

_HELP = {
    "refold_requests_total": ("counter", "Chat completion requests answered, by HTTP status."),
    "refold_upstream_calls_total": (
        "counter",
        "Calls made to the upstream server (including internal rounds).",
    ),
    "refold_internal_rounds_total": (
        "counter",
        "Upstream calls answered by the proxy itself (context commands).",
    ),
    "refold_restores_total": ("counter", "Steps restored for the model by the proxy."),
    "refold_turns_recorded_total": ("counter", "Steps written to the session store."),
    "refold_branches_total": (
        "counter",
        "Times a client rewrote earlier turns and a new branch was started.",
    ),
    "refold_prompt_tokens_full_total": (
        "counter",
        "Prompt tokens the full history would have cost (refold tokenizer).",
    ),
    "refold_prompt_tokens_rendered_total": (
        "counter",
        "Prompt tokens of the rendered prompts sent (refold tokenizer).",
    ),
    "refold_tokens_saved_total": ("counter", "Full minus rendered prompt tokens."),
    "refold_upstream_prompt_tokens_total": ("counter", "Prompt tokens reported by the upstream."),
    "refold_upstream_cached_tokens_total": ("counter", "Cached prompt tokens reported by the upstream."),
    "refold_upstream_completion_tokens_total": ("counter", "Completion tokens reported by the upstream."),
    "refold_render_ms": ("histogram", "Time to render a prompt, milliseconds."),
    "refold_added_latency_ms": ("histogram", "Proxy time per request outside upstream calls, milliseconds."),
    "refold_sessions_loaded": ("gauge", "Sessions held in memory."),
}


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._hist: dict[str, list[float]] = {}
        self._gauges: dict[str, float] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        if value:
            with self._lock:
                self._counters[(name, tuple(sorted(labels.items())))] += value

    def observe(self, name: str, value_ms: float) -> None:
        with self._lock:
            h = self._hist.setdefault(name, [0.0] * (len(_BUCKETS_MS) + 2))  # buckets.., +Inf count, sum
            for i, b in enumerate(_BUCKETS_MS):
                if value_ms <= b:
                    h[i] += 1
            h[-2] += 1
            h[-1] += value_ms

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self._gauges[name] = value

    def value(self, name: str, **labels: str) -> float:
        return self._counters.get((name, tuple(sorted(labels.items()))), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            by_name: dict[str, list[str]] = defaultdict(list)
            for (name, labels), v in sorted(self._counters.items()):
                lab = "{" + ",".join(f'{k}="{val}"' for k, val in labels) + "}" if labels else ""
                by_name[name].append(f"{name}{lab} {_num(v)}")
            for name, h in sorted(self._hist.items()):
                for b, c in zip(_BUCKETS_MS, h, strict=False):
                    by_name[name].append(f'{name}_bucket{{le="{b:g}"}} {_num(c)}')
                by_name[name].append(f'{name}_bucket{{le="+Inf"}} {_num(h[-2])}')
                by_name[name].append(f"{name}_count {_num(h[-2])}")
                by_name[name].append(f"{name}_sum {h[-1]:.3f}")
            for name, v in sorted(self._gauges.items()):
                by_name[name].append(f"{name} {_num(v)}")
        for name in sorted(set(by_name) | {n for n, (kind, _) in _HELP.items() if kind == "counter"}):
            kind, text = _HELP.get(name, ("untyped", name))
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(by_name.get(name) or ([f"{name} 0"] if kind == "counter" else []))
        return "\n".join(lines) + "\n"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"
