"""Token usage of a request the proxy answered in several upstream rounds.

A context command the proxy answers costs an upstream call the client never sees; the usage the
client is told (``usage`` of a chat completion, a Messages answer or a Response, and of their
final stream events) is the sum over all of the request's rounds, as the APIs report a response
whose server-side tool calls took several model calls. ``figures`` reads each surface's shape for
the ``refold_upstream_*_tokens_total`` counters.
"""

from __future__ import annotations

from typing import Any

from .metrics import Metrics


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def add(total: dict[str, Any] | None, usage: Any) -> dict[str, Any] | None:
    """``total`` and ``usage`` summed field by field (nested objects too); a field that is not a
    number takes the later value. Neither argument is changed."""
    if not isinstance(usage, dict):
        return total
    if total is None:
        return usage
    out = dict(total)
    for k, v in usage.items():
        old = out.get(k)
        if _number(v) and _number(old):
            out[k] = old + v
        elif isinstance(v, dict) and isinstance(old, dict):
            out[k] = add(old, v)
        elif v is not None or k not in out:
            out[k] = v
    return out


def _get(u: dict[str, Any], *path: str) -> float | None:
    v: Any = u
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    return float(v) if _number(v) and v >= 0 else None


def figures(surface: str, usage: Any) -> tuple[float | None, float | None, float | None]:
    """(prompt, cached prompt, completion) tokens of one upstream answer's ``usage`` on ``surface``
    (``chat``, ``anthropic``, ``responses``); None where the answer does not say."""
    if not isinstance(usage, dict):
        return None, None, None
    if surface == "anthropic":  # input_tokens leaves out the tokens read from and written to the cache
        parts = [_get(usage, k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
        prompt = sum(p for p in parts if p is not None) if any(p is not None for p in parts) else None
        return prompt, _get(usage, "cache_read_input_tokens"), _get(usage, "output_tokens")
    if surface == "responses":
        return (
            _get(usage, "input_tokens"),
            _get(usage, "input_tokens_details", "cached_tokens"),
            _get(usage, "output_tokens"),
        )
    return (
        _get(usage, "prompt_tokens"),
        _get(usage, "prompt_tokens_details", "cached_tokens"),
        _get(usage, "completion_tokens"),
    )


def count(metrics: Metrics, surface: str, usage: Any, *, call: bool = True) -> None:
    """One upstream call and the tokens its answer reports. A stream's call is counted when it is
    open (``count(m, s, None)``: a client that drops mid-stream leaves it counted) and its tokens
    when it ends (``call=False``)."""
    if call:
        metrics.inc("refold_upstream_calls_total")
    for name, value in zip(("prompt", "cached", "completion"), figures(surface, usage), strict=True):
        if value is not None:
            metrics.inc(f"refold_upstream_{name}_tokens_total", value)
