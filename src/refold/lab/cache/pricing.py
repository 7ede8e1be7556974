"""Token prices and per-request cost.

Prices change often: the defaults below are configuration, not facts.  Multipliers follow
cache_spec.md §3.1 (OpenAI GPT-5.x reads 0.1x, free writes; Anthropic reads 0.1x, 5-minute writes
1.25x; DeepSeek V4-Flash reads ~0.02x, free writes); base prices are public list prices as
remembered, or placeholders where marked.  Load your own table with :func:`load_prices`.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COUNT_CALIBRATIONS",
    "DEFAULT_PRICES",
    "MODEL_ALIASES",
    "CountCalibration",
    "Price",
    "cost_usd",
    "count_calibration",
    "load_prices",
    "price_for_model",
]


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens. ``cache_write_per_mtok=None``: writes bill as ordinary input."""

    input_per_mtok: float
    cached_input_per_mtok: float
    cache_write_per_mtok: float | None
    output_per_mtok: float


DEFAULT_PRICES: dict[str, Price] = {
    # PLACEHOLDER for a self-hosted vLLM Qwen3.6-27B: a GPU-hour amortised guess, cached tokens ~free.
    "qwen3.6-27b-vllm": Price(0.20, 0.02, None, 0.80),
    "gpt-5-mini": Price(0.25, 0.025, None, 2.00),  # reads 0.1x, writes free
    "claude-sonnet-4.5": Price(3.00, 0.30, 3.75, 15.00),  # reads 0.1x, 5m writes 1.25x
    # Anthropic's list prices as its pricing page gives them (platform.claude.com/docs/en/about-claude/pricing,
    # read 2026-12-05; not checked against a bill): input, cache hit, 5-minute cache write, output
    "claude-opus-4.5": Price(5.00, 0.50, 6.25, 25.00),
    "claude-opus-4.6": Price(5.00, 0.50, 6.25, 25.00),
    "claude-opus-4.7": Price(5.00, 0.50, 6.25, 25.00),
    "claude-opus-4.8": Price(5.00, 0.50, 6.25, 25.00),
    "claude-opus-5": Price(5.00, 0.50, 6.25, 25.00),
    "claude-opus-5.5": Price(4.00, 0.20, 5.00, 20.00),  # cache hits 0.05x
    "claude-sonnet-5": Price(2.00, 0.20, 2.50, 10.00),
    "claude-sonnet-5.5": Price(2.00, 0.10, 2.50, 10.00),  # cache hits 0.05x
    "claude-haiku-4.5": Price(1.00, 0.10, 1.25, 5.00),
    # [UNVERIFIED] base prices are placeholders; read ratio ~0.02x (V4-Flash), writes free.
    "deepseek-v4": Price(0.30, 0.006, None, 0.50),
    # Checked against recorded per-call costs: OpenRouter's usage.cost on every dev run is
    # 2.00/M uncached + 0.20/M cached + 12.00/M output (reasoning included), no write charge.
    # Prompts over 200k tokens bill 4.00/0.40/18.00: not modeled (no dev prompt comes close).
    "gemini-3-pro": Price(2.00, 0.20, None, 12.00),
    # GPT-4-Turbo had no prompt caching; CodeR's instance_cost is exactly 10/M sent + 30/M received.
    "gpt-4-turbo": Price(10.00, 10.00, None, 30.00),
}

MODEL_ALIASES: dict[str, str] = {
    "gpt-4-1106-preview": "gpt-4-turbo",
    "gpt-4-0125-preview": "gpt-4-turbo",
    "gpt-4-turbo-preview": "gpt-4-turbo",
}
"""Model names whose price row has another name."""


def price_for_model(model: str | None, table: dict[str, Price] | None = None) -> str | None:
    """The price row of a recorded model name (``openai/gpt-5-mini``, ``google/gemini-3-pro-preview``):
    an alias, else the longest row name the model's name contains; None when there is none."""
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    for alias, row in MODEL_ALIASES.items():
        if alias in name:
            return row
    # a dot or a dash between version digits: Anthropic's ids say claude-sonnet-4-5-20250929
    bare = name.replace(".", "-")
    rows = [r for r in (table or DEFAULT_PRICES) if r.lower() in name or r.lower().replace(".", "-") in bare]
    return max(rows, key=len) if rows else None


@dataclass(frozen=True, slots=True)
class CountCalibration:
    """ESTIMATED provider token counts for a provider whose tokenizer is not available offline,
    from the replay tokenizer's count of the same request (a fit, not a tokenizer):
    ``prompt = per_token * tokens + per_char * characters + per_call`` and visible
    ``output = output_per_token * tokens`` (reasoning tokens are recorded in the provider's own
    units and are not scaled). Cached and written tokens scale with the prompt."""

    price: str
    tokenizer: str
    per_token: float
    per_char: float
    per_call: float
    output_per_token: float
    source: str

    def prompt(self, tokens: int, chars: int) -> int:
        return max(0, round(self.per_token * tokens + self.per_char * chars + self.per_call))

    def output(self, tokens: int) -> int:
        return max(0, round(self.output_per_token * tokens))

    @property
    def label(self) -> str:
        return f"ESTIMATED {self.price} counts (calibrated from {self.tokenizer})"


COUNT_CALIBRATIONS: dict[tuple[str, str], CountCalibration] = {
    # Gemini 3 Pro counts prompts with the Gemma 3 tokenizer (google-genai maps gemini-3-pro-preview
    # to it), which is downloaded at run time, not shipped by any package: fitted instead by
    # benchmarks/bench_bill.py on the even half of the dev runs' reported prompt_tokens and
    # completion_tokens (relative least squares per call), tested on the odd half
    # (benchmarks/results/bill.txt).
    ("gemini-3-pro", "qwen3.6"): CountCalibration(
        price="gemini-3-pro",
        tokenizer="qwen3.6",
        per_token=0.826,
        per_char=0.06965,
        per_call=-114.4,
        output_per_token=1.0759,
        source="benchmarks/bench_bill.py (dev runs, fit on the even half)",
    ),
}


def count_calibration(price: str | None, tokenizer: str) -> CountCalibration | None:
    """The count calibration for a price row under the replay tokenizer, if one was fitted."""
    return COUNT_CALIBRATIONS.get((price or "", tokenizer))


def cost_usd(
    price: Price, prompt_tokens: int, cached_tokens: int, written_tokens: int, output_tokens: int
) -> float:
    """Cost of one request; ``prompt_tokens`` includes cached and written tokens."""
    if min(prompt_tokens, cached_tokens, written_tokens, output_tokens) < 0:
        raise ValueError("token counts must be >= 0")
    if cached_tokens + written_tokens > prompt_tokens:
        raise ValueError(
            f"cached ({cached_tokens}) + written ({written_tokens}) exceeds prompt ({prompt_tokens})"
        )
    if price.cache_write_per_mtok is None:
        written_cost = written_tokens * price.input_per_mtok
    else:
        written_cost = written_tokens * price.cache_write_per_mtok
    plain = prompt_tokens - cached_tokens - written_tokens
    total = (
        plain * price.input_per_mtok
        + cached_tokens * price.cached_input_per_mtok
        + written_cost
        + output_tokens * price.output_per_mtok
    )
    return total / 1_000_000


_REQUIRED = ("input_per_mtok", "cached_input_per_mtok", "output_per_mtok")


def _number(path: Path, name: str, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"{path}: price {name!r} field {field!r} must be a non-negative number, got {value!r}"
        )
    return float(value)


def load_prices(path: str | Path) -> dict[str, Price]:
    """Read ``{name: {input_per_mtok, cached_input_per_mtok, output_per_mtok, [cache_write_per_mtok]}}``
    from a ``.json`` or ``.toml`` file (TOML: ``[name]`` tables; omit ``cache_write_per_mtok`` for
    free writes).  Errors are one-line ValueErrors naming the file and the bad field.
    """
    p = Path(path)
    try:
        if p.suffix.lower() == ".toml":
            data: object = tomllib.loads(p.read_text(encoding="utf-8"))
        else:
            data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        # any other name is read as JSON: a YAML table said only "Expecting value"
        kind = "" if p.suffix.lower() in (".json", ".toml") or isinstance(e, OSError) else " (read as JSON: give a .json or .toml file)"
        raise ValueError(f"{p}: cannot read price table{kind}: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: price table must map names to price objects")
    out: dict[str, Price] = {}
    for name, fields in data.items():
        if not isinstance(fields, dict):
            raise ValueError(f"{p}: price {name!r} must be an object with {', '.join(_REQUIRED)}")
        unknown = set(fields) - {*_REQUIRED, "cache_write_per_mtok"}
        if unknown:
            raise ValueError(f"{p}: price {name!r} has unknown field {sorted(unknown)[0]!r}")
        for f in _REQUIRED:
            if f not in fields:
                raise ValueError(f"{p}: price {name!r} is missing field {f!r}")
        write = fields.get("cache_write_per_mtok")
        out[str(name)] = Price(
            _number(p, name, "input_per_mtok", fields["input_per_mtok"]),
            _number(p, name, "cached_input_per_mtok", fields["cached_input_per_mtok"]),
            None if write is None else _number(p, name, "cache_write_per_mtok", write),
            _number(p, name, "output_per_mtok", fields["output_per_mtok"]),
        )
    return out
